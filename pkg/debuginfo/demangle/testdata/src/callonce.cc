// std::call_once with a lambda: libstdc++ instantiates its helpers (once_flag's
// _Prepare_execution, __addressof, __invoke) with local names in their template arguments.
#include <mutex>
#include <vector>

static std::once_flag once;

__attribute__((noinline)) void work(std::vector<int>& v) {
	std::call_once(once, [&v] { v.push_back(1); });
}

int main() {
	std::vector<int> v;
	work(v);
	return v.size() == 1 ? 0 : 1;
}
