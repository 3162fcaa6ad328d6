// STL-heavy code: algorithms, containers, lambdas and many template instantiations.
#include <cctype>
#include <mutex>
#include <set>
#include <sstream>

#include "shapes.h"

namespace corpus {

namespace {

template <typename T>
struct Stats {
  T min{}, max{}, sum{};
  size_t n = 0;
  void add(T x) {
    if (n == 0 || x < min) min = x;
    if (n == 0 || x > max) max = x;
    sum += x;
    n++;
  }
};

template <typename Container, typename Pred>
CORPUS_ALWAYS_INLINE size_t count_matching(const Container& c, Pred p) {
  return static_cast<size_t>(std::count_if(c.begin(), c.end(), p));
}

template <typename T>
CORPUS_ALWAYS_INLINE T clamp_mid(T x) { return std::clamp(x, T(-1000), T(1000)); }

template <typename T>
CORPUS_ALWAYS_INLINE T transform_one(T x) { return clamp_mid(static_cast<T>(detail::poly<T>(static_cast<T>(x % 97), T(3)))); }

template <typename T>
__attribute__((noinline)) Stats<T> summarize(const std::vector<T>& v) {
  Stats<T> s;
  std::for_each(v.begin(), v.end(), [&s](T x) { s.add(transform_one(x)); });
  return s;
}

template <typename T, int Shift>
__attribute__((noinline)) T fold_shifted(const std::vector<T>& v) {
  return std::accumulate(v.begin(), v.end(), T{}, [](T a, T b) { return (a << Shift) ^ (a >> 3) ^ transform_one(b); });
}

#define FOLD(T, S) + static_cast<long>(fold_shifted<T, S>(conv<T>(in)))

template <typename T>
std::vector<T> conv(const std::vector<int>& in) {
  std::vector<T> out(in.size());
  std::transform(in.begin(), in.end(), out.begin(), [](int x) { return static_cast<T>(x); });
  return out;
}

}  // namespace

long run_algorithms(const std::vector<int>& in) {
  std::vector<int> v = in;
  std::sort(v.begin(), v.end(), std::greater<int>());
  std::stable_sort(v.begin(), v.end(), [](int a, int b) { return (a & 15) < (b & 15); });
  auto last = std::unique(v.begin(), v.end());
  v.erase(last, v.end());
  std::map<int, std::vector<int>> buckets;
  for (int x : v) buckets[x % 17].push_back(x);
  std::unordered_map<int, long> sums;
  for (const auto& [k, b] : buckets) sums[k] = std::accumulate(b.begin(), b.end(), 0L);
  std::set<long> uniq;
  for (const auto& [k, s] : sums) uniq.insert(s * k);
  auto s32 = summarize(conv<int>(in));
  auto s64 = summarize(conv<long>(in));
  auto s16 = summarize(conv<short>(in));
  long folded = 0 FOLD(int, 1) FOLD(int, 2) FOLD(int, 3) FOLD(int, 4) FOLD(int, 5) FOLD(int, 6) FOLD(int, 7)
      FOLD(long, 1) FOLD(long, 2) FOLD(long, 3) FOLD(long, 4) FOLD(long, 5) FOLD(long, 6) FOLD(long, 7)
          FOLD(unsigned, 1) FOLD(unsigned, 2) FOLD(unsigned, 3) FOLD(unsigned, 4) FOLD(unsigned, 5)
              FOLD(unsigned long, 1) FOLD(unsigned long, 2) FOLD(unsigned long, 3) FOLD(unsigned long, 4);
  size_t odd = count_matching(v, [](int x) { return x & 1; });
  return folded + static_cast<long>(uniq.size()) + s32.sum + s64.max + s16.min + static_cast<long>(odd);
}

std::string run_text(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) {
    std::transform(w.begin(), w.end(), w.begin(), [](unsigned char c) { return std::tolower(c); });
    words.push_back(std::move(w));
  }
  std::sort(words.begin(), words.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  std::map<std::string, int> freq;
  for (const auto& w : words) freq[w]++;
  std::ostringstream out;
  for (const auto& [w, n] : freq) out << w << ':' << n << ' ';
  return out.str();
}

// std::call_once with lambdas: libstdc++ runs each through a closure nested in the template
// arguments of once_flag::_Prepare_execution's constructor, whose mangled names repeat
// call_once's template parameters by substitution.
struct Tally {
  long n = 0;
  __attribute__((noinline)) void bump(int by) { n += by; }
};

long run_once(int seed) {
  static std::once_flag plain, with_args, member;
  static long value;
  static Tally tally;
  std::call_once(plain, [&] { value = seed * 3L; });
  std::call_once(with_args, [](int a, long b) { value += a * b; }, seed, 7L);
  std::call_once(member, &Tally::bump, &tally, seed);
  return value + tally.n;
}

double run_matrices(uint32_t seed) {
  Matrix<double, 3> a{};
  Matrix<long, 4> b{};
  Matrix<float, 5> c{};
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) a.m[i][j] = ((seed >> (i + j)) & 7) / 8.0;
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) b.m[i][j] = (seed >> (2 * i + j)) & 3;
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 5; j++) c.m[i][j] = ((seed >> (i * j % 7)) & 1) * 0.5f;
  return matrix_power_trace(a, seed % 9) + static_cast<double>(matrix_power_trace(b, seed % 5)) +
         matrix_power_trace(c, seed % 7);
}

}  // namespace corpus
