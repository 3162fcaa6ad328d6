#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace geo {

template <typename T> struct Vec {
	T x, y;
	Vec operator+(const Vec &o) const { return {x + o.x, y + o.y}; }
	T dot(const Vec &o) const { return x * o.x + y * o.y; }
};

class Shape {
public:
	virtual ~Shape() = default;
	virtual double area() const = 0;
	virtual std::string name() const = 0;
};

class Rect : public Shape {
	Vec<double> lo_, hi_;

public:
	Rect(Vec<double> lo, Vec<double> hi) : lo_(lo), hi_(hi) {}
	double area() const override { return (hi_.x - lo_.x) * (hi_.y - lo_.y); }
	std::string name() const override { return "rect"; }
};

class Circle : public Shape {
	double r_;

public:
	explicit Circle(double r) : r_(r) {}
	double area() const override { return 3.14159 * r_ * r_; }
	std::string name() const override { return "circle"; }
};

template <typename T, int N> T poly(T x) {
	T acc = 0;
	for (int i = 0; i < N; i++)
		acc = acc * x + static_cast<T>(i + 1);
	return acc;
}

template <typename T> struct Stats {
	std::vector<T> vals;
	void add(T v) { vals.push_back(v); }
	T median() {
		std::sort(vals.begin(), vals.end());
		return vals.empty() ? T() : vals[vals.size() / 2];
	}
	template <typename F> T fold(F f, T init) const {
		for (const auto &v : vals)
			init = f(init, v);
		return init;
	}
};

} // namespace geo

namespace {
__attribute__((noinline)) double total_area(const std::vector<std::unique_ptr<geo::Shape>> &shapes) {
	double t = 0;
	for (const auto &s : shapes)
		t += s->area();
	return t;
}
} // namespace

int main(int argc, char **argv) {
	std::vector<std::unique_ptr<geo::Shape>> shapes;
	for (int i = 0; i < argc * 8; i++) {
		if (i % 2)
			shapes.push_back(std::make_unique<geo::Rect>(geo::Vec<double>{0, 0}, geo::Vec<double>{double(i), 2}));
		else
			shapes.push_back(std::make_unique<geo::Circle>(i * 0.5));
	}
	std::map<std::string, int> counts;
	geo::Stats<long> st;
	for (const auto &s : shapes) {
		counts[s->name()]++;
		st.add(static_cast<long>(s->area()));
	}
	geo::Vec<int> a{argc, 2}, b{3, argc};
	long p = geo::poly<long, 5>(argc) + geo::poly<int, 3>(argc) + (a + b).dot(b);
	long f = st.fold([](long acc, long v) { return acc * 7 + v; }, 1);
	std::printf("%f %ld %ld %ld %zu\n", total_area(shapes), st.median(), p, f, counts.size());
	(void)argv;
	return 0;
}
