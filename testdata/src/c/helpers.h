/* Static inline helpers shared by the C corpus translation units. Each unit gets
 * its own copy, so the same helper appears inlined under several compilation
 * units, with call sites in a header and in .c files. */
#ifndef CORPUS_HELPERS_H
#define CORPUS_HELPERS_H

#include <stddef.h>
#include <stdint.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define NOINLINE __attribute__((noinline))

ALWAYS_INLINE uint32_t rotl32(uint32_t x, int r) {
	return (x << (r & 31)) | (x >> ((32 - r) & 31));
}

ALWAYS_INLINE uint32_t mix_leaf(uint32_t h, uint32_t v) {
	h ^= v * 0x9e3779b1u;
	return rotl32(h, 13) * 5u + 0xe6546b64u;
}

ALWAYS_INLINE uint32_t mix_mid(uint32_t h, const uint8_t *p, size_t n) {
	for (size_t i = 0; i + 4 <= n; i += 4) {
		uint32_t v = (uint32_t)p[i] | (uint32_t)p[i + 1] << 8 |
			     (uint32_t)p[i + 2] << 16 | (uint32_t)p[i + 3] << 24;
		h = mix_leaf(h, v);
	}
	for (size_t i = n & ~(size_t)3; i < n; i++)
		h = mix_leaf(h, p[i]);
	return h;
}

ALWAYS_INLINE uint32_t mix_top(const uint8_t *p, size_t n, uint32_t seed) {
	uint32_t h = mix_mid(seed ^ (uint32_t)n, p, n);
	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	return h;
}

/* Plain static inline: the compiler decides, so gcc and clang differ here. */
static inline int clamp_int(int v, int lo, int hi) {
	return v < lo ? lo : (v > hi ? hi : v);
}

static inline int64_t saturating_add(int64_t a, int64_t b) {
	if (b > 0 && a > INT64_MAX - b)
		return INT64_MAX;
	if (b < 0 && a < INT64_MIN - b)
		return INT64_MIN;
	return a + b;
}

static inline unsigned popcount_slow(uint64_t x) {
	unsigned c = 0;
	while (x) {
		x &= x - 1;
		c++;
	}
	return c;
}

struct vec {
	int64_t *data;
	size_t len, cap;
};

void vec_push(struct vec *v, int64_t x);
void vec_free(struct vec *v);
uint32_t hash_bytes(const uint8_t *p, size_t n, uint32_t seed);
int64_t run_kernels(const struct vec *v, unsigned rounds);
int64_t run_sorts(struct vec *v);
int64_t run_tree(const struct vec *v);
int64_t run_strings(const char *s, unsigned rounds);

#endif
