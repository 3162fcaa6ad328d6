// Name shapes of large template-heavy C++ code bases (abseil, re2, LLVM style): std::call_once
// with lambdas (libstdc++'s once_flag::_Prepare_execution nests call_once's closure in its own
// template arguments), std::function, variant visitors, optional, tuples and apply, generic and
// nested lambdas, CRTP, variadic and template-template parameters, fold expressions, function
// pointers and pointers to members as template arguments.
#include <array>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#define NOINLINE __attribute__((noinline))

namespace lib {
namespace internal {

template <typename T>
struct Arena {
  std::vector<std::unique_ptr<T>> items;
  template <typename... Args>
  NOINLINE T *make(Args &&...args) {
    items.push_back(std::make_unique<T>(std::forward<Args>(args)...));
    return items.back().get();
  }
};

template <typename Derived>
struct Visitor {
  NOINLINE int run(int x) { return static_cast<Derived *>(this)->step(x) + 1; }
};

struct Doubler : Visitor<Doubler> {
  NOINLINE int step(int x) { return 2 * x; }
};

template <template <typename...> class Container, typename T>
NOINLINE size_t fill(Container<T> &c, T v, int n) {
  for (int i = 0; i < n; i++) c.push_back(v);
  return c.size();
}

template <typename... Ts>
NOINLINE auto sum(Ts... ts) {
  return (ts + ... + 0);
}

template <int (*F)(int), int N>
NOINLINE int applyN(int x) {
  for (int i = 0; i < N; i++) x = F(x);
  return x;
}

NOINLINE int inc(int x) { return x + 1; }

struct Regexp {
  std::string pattern;
  int flags = 0;
  NOINLINE int size() const { return static_cast<int>(pattern.size()) + flags; }
};

template <typename C, int (C::*M)() const>
NOINLINE int callMember(const C &c) {
  return (c.*M)();
}

}  // namespace internal

using Value = std::variant<int, double, std::string>;

struct Printer {
  NOINLINE std::string operator()(int v) const { return std::to_string(v); }
  NOINLINE std::string operator()(double v) const { return std::to_string(v); }
  NOINLINE std::string operator()(const std::string &v) const { return v; }
};

NOINLINE std::string show(const Value &v) { return std::visit(Printer{}, v); }

NOINLINE std::optional<int> parse(std::string_view s) {
  if (s.empty()) return std::nullopt;
  int v = 0;
  for (char c : s) v = v * 10 + (c - '0');
  return v;
}

class Registry {
 public:
  NOINLINE static Registry &global() {
    static std::once_flag once;
    static Registry *r;
    std::call_once(once, [] { r = new Registry; });
    return *r;
  }
  NOINLINE void add(const std::string &k, std::function<int(int)> f) { fns_[k] = std::move(f); }
  template <typename F>
  NOINLINE void each(F &&f) const {
    for (const auto &kv : fns_) f(kv.first, kv.second);
  }

 private:
  std::map<std::string, std::function<int(int)>> fns_;
};

template <typename Tuple>
NOINLINE int tupleSum(const Tuple &t) {
  return std::apply([](auto... xs) { return (static_cast<int>(xs) + ... + 0); }, t);
}

}  // namespace lib

static std::once_flag initOnce;
static int initValue;

NOINLINE static void initWith(int a, const std::string &b) { initValue = a + static_cast<int>(b.size()); }

int main(int argc, char **argv) {
  std::call_once(initOnce, [&] { initValue = argc; });
  std::call_once(initOnce, [](int x) { initValue += x; }, 3);
  std::call_once(initOnce, initWith, argc, std::string(argv[0]));
  std::call_once(initOnce, &lib::internal::Regexp::size, lib::internal::Regexp{"a", 1});

  lib::internal::Arena<lib::internal::Regexp> arena;
  auto *re = arena.make(lib::internal::Regexp{"a+b", 2});
  lib::internal::Doubler d;
  std::vector<int> v;
  lib::internal::fill(v, 3, argc);
  int total = d.run(argc) + lib::internal::sum(1, 2L, 3.0) + lib::internal::applyN<lib::internal::inc, 3>(argc) +
              lib::internal::callMember<lib::internal::Regexp, &lib::internal::Regexp::size>(*re);

  auto &reg = lib::Registry::global();
  reg.add("twice", [](int x) { return 2 * x; });
  reg.add("plus", [k = argc](int x) { return x + k; });
  reg.each([&](const std::string &name, const std::function<int(int)> &f) {
    auto nested = [&](auto y) { return f(y) + static_cast<int>(name.size()); };
    total += nested(argc);
  });

  std::array<lib::Value, 3> vals{lib::Value{1}, lib::Value{2.5}, lib::Value{std::string("x")}};
  for (const auto &x : vals) total += static_cast<int>(lib::show(x).size());
  if (auto p = lib::parse(argc > 1 ? argv[1] : "12")) total += *p;
  total += lib::tupleSum(std::make_tuple(1, 2.0, 'c'));
  std::printf("%d %d\n", total, initValue);
  return 0;
}
