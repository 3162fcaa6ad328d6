// C++20 constructs whose names the demangler must read (testdata/cxx20.sh builds this with
// g++ 12 and clang++ 14, -std=c++20 -O0 -g, and lists its function symbols): concepts and
// requires clauses, template lambdas, abbreviated function templates, coroutines (a minimal
// generator and task), ranges, class-type non-type template arguments made from a string
// literal, operator<=>, and std::variant visitors with generic lambdas.
#include <algorithm>
#include <compare>
#include <concepts>
#include <coroutine>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <ranges>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace probe {

// Concepts and requires clauses.
template <typename T>
concept Numeric = std::integral<T> || std::floating_point<T>;

template <typename T>
concept Sized = requires(const T& t) {
	{ t.size() } -> std::convertible_to<std::size_t>;
};

template <Numeric T>
__attribute__((noinline)) T twice(T v) { return v + v; }

template <typename T>
	requires Sized<T> && (!Numeric<T>)
__attribute__((noinline)) std::size_t measure(const T& t) { return t.size(); }

template <typename T>
__attribute__((noinline)) int pick(T) requires std::is_pointer_v<T> { return 1; }

template <typename T>
__attribute__((noinline)) int pick(T) requires(!std::is_pointer_v<T>) { return 2; }

// Abbreviated function templates.
__attribute__((noinline)) auto add(auto a, auto b) { return a + b; }
__attribute__((noinline)) auto scale(const Numeric auto& v, int k) { return v * k; }
__attribute__((noinline)) void each(std::ranges::range auto&& r, auto&& fn) {
	for (auto&& x : r) fn(x);
}

// Class-type non-type template arguments from string literals.
template <std::size_t N>
struct fixed {
	char s[N];
	constexpr fixed(const char (&str)[N]) { std::copy_n(str, N, s); }
	constexpr auto operator<=>(const fixed&) const = default;
};

template <fixed F>
struct tag {
	__attribute__((noinline)) static const char* name() { return F.s; }
};

template <fixed F>
__attribute__((noinline)) std::size_t tagged_length() { return sizeof(F.s) - 1; }

// operator<=>.
struct version {
	int major, minor;
	auto operator<=>(const version&) const = default;
	bool operator==(const version&) const = default;
};

struct weak {
	double v;
	__attribute__((noinline)) std::partial_ordering operator<=>(const weak& o) const { return v <=> o.v; }
	__attribute__((noinline)) bool operator==(const weak& o) const { return v == o.v; }
};

template <typename T>
__attribute__((noinline)) bool before(const T& a, const T& b) { return (a <=> b) < 0; }

// Coroutines: a generator and a task.
template <typename T>
struct generator {
	struct promise_type {
		T value{};
		generator get_return_object() { return generator{std::coroutine_handle<promise_type>::from_promise(*this)}; }
		std::suspend_always initial_suspend() noexcept { return {}; }
		std::suspend_always final_suspend() noexcept { return {}; }
		std::suspend_always yield_value(T v) noexcept {
			value = v;
			return {};
		}
		void return_void() noexcept {}
		void unhandled_exception() { std::terminate(); }
	};
	std::coroutine_handle<promise_type> h;
	explicit generator(std::coroutine_handle<promise_type> h) : h(h) {}
	generator(generator&& o) noexcept : h(std::exchange(o.h, {})) {}
	~generator() {
		if (h) h.destroy();
	}
	bool next() {
		h.resume();
		return !h.done();
	}
	T get() const { return h.promise().value; }
};

struct task {
	struct promise_type {
		int result = 0;
		task get_return_object() { return task{std::coroutine_handle<promise_type>::from_promise(*this)}; }
		std::suspend_never initial_suspend() noexcept { return {}; }
		std::suspend_always final_suspend() noexcept { return {}; }
		void return_value(int v) noexcept { result = v; }
		void unhandled_exception() { std::terminate(); }
	};
	std::coroutine_handle<promise_type> h;
	explicit task(std::coroutine_handle<promise_type> h) : h(h) {}
	task(task&& o) noexcept : h(std::exchange(o.h, {})) {}
	~task() {
		if (h) h.destroy();
	}
	int get() const { return h.promise().result; }
};

__attribute__((noinline)) generator<int> counter(int n) {
	for (int i = 0; i < n; i++) co_yield i;
}

template <typename T>
__attribute__((noinline)) generator<T> repeat(T v, int n) {
	for (int i = 0; i < n; i++) co_yield v;
}

__attribute__((noinline)) task sum(int n) {
	int s = 0;
	auto g = counter(n);
	while (g.next()) s += g.get();
	co_return s;
}

// Ranges.
// clang++ 14 cannot compile libstdc++ 12's range adaptors (views::filter's constraints fail
// in its ref_view); it gets the range algorithms only.
__attribute__((noinline)) int sum_even_squares(const std::vector<int>& v) {
	int s = 0;
#if defined(__clang__) && __clang_major__ < 15
	std::ranges::for_each(v, [&s](int i) {
		if (i % 2 == 0) s += i * i;
	});
#else
	for (int x : v | std::views::filter([](int i) { return i % 2 == 0; }) | std::views::transform([](int i) { return i * i; }))
		s += x;
#endif
	return s;
}

__attribute__((noinline)) long count_large(const std::vector<int>& v, int limit) {
	return std::ranges::count_if(v, [limit](int i) { return i > limit; });
}

__attribute__((noinline)) std::vector<std::string> sorted_copy(std::vector<std::string> v) {
	std::ranges::sort(v, std::ranges::greater{});
	return v;
}

// std::variant visitors with generic lambdas.
using value = std::variant<int, double, std::string>;

__attribute__((noinline)) std::size_t weight(const value& v) {
	return std::visit([](const auto& x) -> std::size_t {
		if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::string>)
			return x.size();
		else
			return sizeof(x);
	}, v);
}

template <typename... F>
struct overloaded : F... {
	using F::operator()...;
};
// clang++ 14 has no aggregate deduction.
template <typename... F>
overloaded(F...) -> overloaded<F...>;

__attribute__((noinline)) int kind(value v) {
	return std::visit(overloaded{
		[](int) { return 0; },
		[](double) { return 1; },
		[](auto&&) { return 2; },
	}, std::move(v));
}

__attribute__((noinline)) value combine(const value& a, const value& b) {
	return std::visit([](auto&& x, auto&& y) -> value {
		using X = std::decay_t<decltype(x)>;
		using Y = std::decay_t<decltype(y)>;
		if constexpr (std::is_arithmetic_v<X> && std::is_arithmetic_v<Y>)
			return double(x) + double(y);
		else
			return std::string("mixed");
	}, a, b);
}

// Template lambdas.
__attribute__((noinline)) int template_lambdas() {
	auto first = []<typename T>(const std::vector<T>& v) { return v.empty() ? T{} : v.front(); };
	auto sized = []<typename T, std::size_t N>(T (&)[N]) { return N; };
	auto constrained = []<Numeric T>(T a, T b) requires(sizeof(T) >= 4) { return a < b ? b : a; };
	int arr[3] = {1, 2, 3};
	std::vector<int> v{4, 5};
	return first(v) + int(sized(arr)) + constrained(6, 7) + int(constrained(1.5, 2.5));
}

}  // namespace probe

int main() {
	using namespace probe;
	std::vector<int> v{1, 2, 3, 4};
	std::vector<std::string> words{"b", "a", "c"};
	long total = twice(21) + twice(1.5) + long(measure(v)) + pick(&total) + pick(3);
	total += add(1, 2) + add(1.0, 2) + scale(3, 4) + scale(2.5, 2);
	each(v, [&](int x) { total += x; });
	each(words, [&](const std::string& s) { total += long(s.size()); });
	std::printf("%s %s %zu\n", tag<fixed{"hello"}>::name(), tag<fixed{"hi"}>::name(), tagged_length<fixed{"world"}>());
	total += before(version{1, 2}, version{1, 3}) + before(weak{1}, weak{2}) + before(std::string("a"), std::string("b"));
	auto g = counter(3);
	while (g.next()) total += g.get();
	auto r = repeat(2.5, 2);
	while (r.next()) total += long(r.get());
	auto t = sum(4);
	total += t.get();
	total += sum_even_squares(v) + long(sorted_copy(words).size()) + count_large(v, 2);
	value a = 1, b = 2.5, c = std::string("three");
	total += long(weight(a) + weight(b) + weight(c)) + kind(a) + kind(b) + kind(c);
	total += long(std::get<double>(combine(a, b)));
	total += long(std::get<std::string>(combine(a, c)).size());
	total += template_lambdas();
	std::printf("%ld\n", total);
	return 0;
}
