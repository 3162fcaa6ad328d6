// Shape implementations and a factory: virtual dispatch and std::sort with lambdas.
#include <cmath>

#include "shapes.h"

namespace corpus {

double Circle::area() const { return M_PI * detail::square(r_); }
double Circle::perimeter() const { return 2 * M_PI * r_; }
double Rect::area() const { return w_ * h_; }
double Rect::perimeter() const { return 2 * (w_ + h_); }

double Polygon::area() const {
  double s = 0;
  for (size_t i = 0; i < pts_.size(); i++) {
    const auto& a = pts_[i];
    const auto& b = pts_[(i + 1) % pts_.size()];
    s += a.first * b.second - b.first * a.second;
  }
  return std::fabs(s) / 2;
}

double Polygon::perimeter() const {
  double s = 0;
  for (size_t i = 0; i < pts_.size(); i++) {
    const auto& a = pts_[i];
    const auto& b = pts_[(i + 1) % pts_.size()];
    s += std::hypot(a.first - b.first, a.second - b.second);
  }
  return s;
}

namespace {
uint32_t next(uint32_t& s) {
  s ^= s << 13;
  s ^= s >> 17;
  s ^= s << 5;
  return s;
}
}  // namespace

std::vector<std::unique_ptr<Shape>> make_shapes(unsigned n, uint32_t seed) {
  std::vector<std::unique_ptr<Shape>> out;
  out.reserve(n);
  for (unsigned i = 0; i < n; i++) {
    switch (next(seed) % 3) {
      case 0:
        out.push_back(std::make_unique<Circle>(next(seed) % 100 / 10.0));
        break;
      case 1:
        out.push_back(std::make_unique<Rect>(next(seed) % 50, next(seed) % 70));
        break;
      default: {
        std::vector<std::pair<double, double>> pts;
        unsigned k = 3 + next(seed) % 6;
        for (unsigned j = 0; j < k; j++) pts.emplace_back(next(seed) % 100, next(seed) % 100);
        out.push_back(std::make_unique<Polygon>(std::move(pts)));
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a->area() < b->area(); });
  return out;
}

double total_area(const std::vector<std::unique_ptr<Shape>>& shapes) {
  return std::accumulate(shapes.begin(), shapes.end(), 0.0,
                         [](double acc, const auto& s) { return acc + s->area() + s->perimeter() / 100; });
}

}  // namespace corpus
