// C++ corpus program for profsym's symbolization tests: it derives all inputs from its
// arguments so the optimizer keeps every path.
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "shapes.h"

namespace {

template <typename F>
__attribute__((noinline)) auto timed(const char* label, F&& f) {
  auto r = f();
  std::fprintf(stderr, "%s done\n", label);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  unsigned n = argc > 1 ? static_cast<unsigned>(std::atoi(argv[1])) : 500;
  uint32_t seed = argc > 2 ? static_cast<uint32_t>(std::atoi(argv[2])) : 42;
  auto shapes = timed("shapes", [&] { return corpus::make_shapes(n, seed); });
  double area = timed("area", [&] { return corpus::total_area(shapes); });
  std::vector<int> ints(n);
  for (unsigned i = 0; i < n; i++) ints[i] = static_cast<int>((seed * (i + 1)) % 1000) - 500;
  long alg = timed("algorithms", [&] { return corpus::run_algorithms(ints); });
  double mat = timed("matrices", [&] { return corpus::run_matrices(seed); });
  long once = timed("once", [&] { return corpus::run_once(static_cast<int>(seed)); });
  std::string text = timed("text", [&] {
    return corpus::run_text(argc > 3 ? argv[3] : "The quick brown fox jumps over the lazy dog the end");
  });
  std::cout << shapes.front()->name() << ' ' << area << ' ' << alg << ' ' << mat << ' ' << once << ' ' << text << '\n';
  return 0;
}
