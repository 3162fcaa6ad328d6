// Class hierarchy with virtual calls, plus templates shared by the C++ corpus units.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <unordered_map>
#include <vector>

#define CORPUS_ALWAYS_INLINE inline __attribute__((always_inline))

namespace corpus {

namespace detail {
template <typename T>
CORPUS_ALWAYS_INLINE T square(T x) { return x * x; }

template <typename T>
CORPUS_ALWAYS_INLINE T cube(T x) { return square(x) * x; }

template <typename T>
CORPUS_ALWAYS_INLINE T poly(T x, T a) { return cube(x) + a * square(x) + a; }
}  // namespace detail

class Shape {
 public:
  virtual ~Shape() = default;
  virtual double area() const = 0;
  virtual double perimeter() const = 0;
  virtual std::string name() const = 0;
};

class Circle : public Shape {
 public:
  explicit Circle(double r) : r_(r) {}
  double area() const override;
  double perimeter() const override;
  std::string name() const override { return "circle"; }

 private:
  double r_;
};

class Rect : public Shape {
 public:
  Rect(double w, double h) : w_(w), h_(h) {}
  double area() const override;
  double perimeter() const override;
  std::string name() const override { return "rect"; }

 private:
  double w_, h_;
};

class Polygon : public Shape {
 public:
  explicit Polygon(std::vector<std::pair<double, double>> pts) : pts_(std::move(pts)) {}
  double area() const override;
  double perimeter() const override;
  std::string name() const override { return "polygon" + std::to_string(pts_.size()); }

 private:
  std::vector<std::pair<double, double>> pts_;
};

std::vector<std::unique_ptr<Shape>> make_shapes(unsigned n, uint32_t seed);
double total_area(const std::vector<std::unique_ptr<Shape>>& shapes);

template <typename T, int N>
struct Matrix {
  T m[N][N];

  CORPUS_ALWAYS_INLINE T at(int i, int j) const { return m[i][j]; }

  Matrix operator*(const Matrix& o) const {
    Matrix r{};
    for (int i = 0; i < N; i++)
      for (int j = 0; j < N; j++) {
        T s{};
        for (int k = 0; k < N; k++) s += at(i, k) * o.at(k, j);
        r.m[i][j] = s;
      }
    return r;
  }

  T trace() const {
    T s{};
    for (int i = 0; i < N; i++) s += detail::poly(at(i, i), T(1));
    return s;
  }
};

template <typename T, int N>
T matrix_power_trace(Matrix<T, N> a, unsigned p) {
  Matrix<T, N> r{};
  for (int i = 0; i < N; i++) r.m[i][i] = T(1);
  while (p) {
    if (p & 1) r = r * a;
    a = a * a;
    p >>= 1;
  }
  return r.trace();
}

double run_matrices(uint32_t seed);
long run_algorithms(const std::vector<int>& in);
long run_once(int seed);
std::string run_text(const std::string& text);

}  // namespace corpus
