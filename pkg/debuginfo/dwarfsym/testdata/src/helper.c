#include "chain.h"

/* Small enough to be inlined into main across units with -flto. */
unsigned helper_hash(const char *s, int n) {
	unsigned h = 2166136261u;
	for (int i = 0; i < n; i++)
		h = mix3(h ^ (unsigned char)s[i], 16777619u);
	return h;
}

unsigned helper_sum(const unsigned *v, int n) { return mix1(v, n) + mix2((unsigned)n, 5); }

/* Never called: -ffunction-sections -Wl,--gc-sections discards it. */
int helper_unused(int x) {
	int acc = 0;
	for (int i = 0; i < x; i++)
		acc += (int)mix2((unsigned)i, 4);
	return acc;
}
