// C++ linked against libstdc++.so: a virtual call, a std::function holding a lambda, and a
// namespaced leaf. Part of each round runs in libstdc++ itself (std::string growth).
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
namespace wl {
static volatile unsigned long sink;
__attribute__((noinline)) unsigned long leaf(unsigned long x) {
	for (int i = 0; i < 400000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}
struct Stage {
	virtual ~Stage() = default;
	virtual unsigned long run(unsigned long x) = 0;
};
struct Hash : Stage {
	std::function<unsigned long(unsigned long)> step = [](unsigned long y) { return leaf(y) ^ (y + 3); };
	__attribute__((noinline)) unsigned long run(unsigned long x) override {
		std::string s;
		for (int i = 0; i < 64; i++) s.append(std::to_string(x + i));
		return step(x) ^ s.size();
	}
};
}  // namespace wl
int main(int argc, char **argv) {
	auto end = std::chrono::steady_clock::now() + std::chrono::seconds(argc > 1 ? std::atoi(argv[1]) : 30);
	std::unique_ptr<wl::Stage> stage = std::make_unique<wl::Hash>();
	unsigned long i = argc;
	while (std::chrono::steady_clock::now() < end) wl::sink += stage->run(i++);
	return 0;
}
