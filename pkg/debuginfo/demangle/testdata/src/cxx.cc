// Exercises the C++ name shapes profiles show: templates, STL, lambdas, operators,
// constructors/destructors, qualifiers, ABI tags, anonymous namespaces and GCC clones.
#include <algorithm>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

namespace {
struct Hidden {
  int v;
  explicit Hidden(int x) : v(x) {}
  __attribute__((noinline)) int get() const { return v * 7; }
};
__attribute__((noinline)) int anonFree(const Hidden &h) { return h.get() + 1; }
}  // namespace

namespace app {
namespace geo {
template <typename T, int N>
struct Vec {
  T c[N];
  __attribute__((noinline)) Vec operator+(const Vec &o) const {
    Vec r;
    for (int i = 0; i < N; i++) r.c[i] = c[i] + o.c[i];
    return r;
  }
  __attribute__((noinline)) bool operator==(const Vec &o) const {
    for (int i = 0; i < N; i++)
      if (c[i] != o.c[i]) return false;
    return true;
  }
  __attribute__((noinline)) T &operator[](int i) & { return c[i]; }
  __attribute__((noinline)) T operator[](int i) const && { return c[i]; }
  __attribute__((noinline)) explicit operator bool() const { return c[0] != T(); }
};
}  // namespace geo

class Shape {
 public:
  virtual ~Shape();
  virtual double area() const = 0;
  virtual std::string name() const { return "shape"; }
};
Shape::~Shape() {}

class Circle : public Shape {
 public:
  explicit Circle(double r);
  ~Circle() override;
  double area() const override;
  std::string name() const override;

 private:
  double r_;
};
Circle::Circle(double r) : r_(r) {}
Circle::~Circle() {}
double Circle::area() const { return 3.14159 * r_ * r_; }
std::string Circle::name() const { return "circle" + std::to_string(r_); }

template <typename K, typename V>
class Registry {
 public:
  __attribute__((noinline)) void put(const K &k, V v) { m_[k] = std::move(v); }
  __attribute__((noinline)) const V *find(const K &k) const {
    auto it = m_.find(k);
    return it == m_.end() ? nullptr : &it->second;
  }
  template <typename F>
  __attribute__((noinline)) void each(F &&f) const {
    for (const auto &kv : m_) f(kv.first, kv.second);
  }

 private:
  std::map<K, V> m_;
};

__attribute__((noinline)) std::vector<std::unique_ptr<Shape>> makeShapes(int n) {
  std::vector<std::unique_ptr<Shape>> out;
  for (int i = 0; i < n; i++) out.push_back(std::make_unique<Circle>(i + 0.5));
  return out;
}

// Big enough that GCC splits out a cold part and specializes constant arguments.
static __attribute__((noinline)) int scaled(int x, int factor, const char *tag) {
  if (__builtin_expect(x < 0, 0)) {
    std::ostringstream os;
    os << "negative " << x << " in " << tag;
    throw std::runtime_error(os.str());
  }
  int acc = 0;
  for (int i = 0; i < x; i++) acc += (i * factor) ^ (acc >> 3);
  return acc;
}

__attribute__((noinline)) int useScaled(int x) { return scaled(x, 3, "a") + scaled(x + 1, 3, "b"); }

struct Big {
  long a, b, c, d;
  std::string s;
};
static __attribute__((noinline)) long sumBig(Big b) { return b.a + b.d + static_cast<long>(b.s.size()); }
__attribute__((noinline)) long callSumBig(int k) { return sumBig(Big{k, 2, 3, 4, "xx"}); }

inline namespace v2 {
__attribute__((noinline)) int versioned(int x) { return x ^ 0x55; }
}

__attribute__((noinline)) std::string __attribute__((abi_tag("mytag"))) tagged(int x) { return std::to_string(x); }
}  // namespace app

template <class... Ts>
__attribute__((noinline)) size_t countAll(Ts... ts) {
  return (sizeof(ts) + ... + 0);
}

extern "C" __attribute__((noinline)) int plain_c_function(int x) { return x + 41; }

int main(int argc, char **argv) {
  app::Registry<std::string, std::function<int(int)>> reg;
  int bias = argc;
  reg.put("double", [](int x) { return x * 2; });
  reg.put("bias", [bias](int x) { return x + bias; });
  reg.put("scaled", [&](int x) { return app::useScaled(x + bias); });
  int total = 0;
  reg.each([&total](const std::string &k, const std::function<int(int)> &f) { total += f(static_cast<int>(k.size())); });
  if (auto *f = reg.find("bias")) total += (*f)(3);

  app::geo::Vec<double, 3> a{{1, 2, 3}}, b{{4, 5, 6}};
  auto c = a + b;
  total += (a == b) ? 1 : 0;
  total += static_cast<int>(c[1]);
  total += static_cast<int>(app::geo::Vec<double, 3>{{7, 8, 9}}[2]);
  total += static_cast<bool>(c) ? 1 : 0;
  app::geo::Vec<int, 2> ia{{1, 2}}, ib{{3, 4}};
  total += (ia + ib)[0];

  auto shapes = app::makeShapes(argc + 2);
  std::sort(shapes.begin(), shapes.end(), [](const auto &x, const auto &y) { return x->area() > y->area(); });
  for (const auto &s : shapes) total += static_cast<int>(s->name().size());

  std::unordered_map<std::string, std::vector<int>> um;
  for (int i = 0; i < argc + 5; i++) um[std::to_string(i % 3)].push_back(i);
  for (auto &kv : um) total += static_cast<int>(kv.second.size());

  total += anonFree(Hidden(argc));
  total += static_cast<int>(app::callSumBig(argc));
  total += app::versioned(argc);
  total += static_cast<int>(app::tagged(argc).size());
  total += static_cast<int>(countAll(1, 2.0, 'c', argv));
  total += plain_c_function(argc);
  try {
    total += app::useScaled(argc > 5 ? -argc : argc);
  } catch (const std::exception &e) {
    std::cerr << e.what() << "\n";
  }
  std::cout << total << "\n";
  return 0;
}
