/* Inline chains of depth 3+ shared by the C test programs. */
#ifndef CHAIN_H
#define CHAIN_H
static inline __attribute__((always_inline)) unsigned mix4(unsigned x) {
	x ^= x >> 13;
	x *= 0x5bd1e995u;
	return x ^ (x >> 15);
}
static inline __attribute__((always_inline)) unsigned mix3(unsigned x, unsigned y) {
	unsigned r = mix4(x + y);
	if (r & 1)
		r = mix4(r ^ y);
	return r;
}
static inline unsigned mix2(unsigned x, int n) {
	unsigned acc = 0;
	for (int i = 0; i < n; i++)
		acc += mix3(x, (unsigned)i);
	return acc;
}
static inline unsigned mix1(const unsigned *v, int n) {
	unsigned acc = 1;
	for (int i = 0; i < n; i++)
		acc = acc * 31 + mix2(v[i], i & 7);
	return acc;
}
#endif
