/* C corpus program for profsym's symbolization tests. It computes something from its
 * arguments so that no compiler can fold the work away. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

ALWAYS_INLINE int is_vowel(char c)
{
	switch (c | 0x20) {
	case 'a': case 'e': case 'i': case 'o': case 'u':
		return 1;
	default:
		return 0;
	}
}

ALWAYS_INLINE unsigned count_vowels(const char *s, size_t n)
{
	unsigned c = 0;
	for (size_t i = 0; i < n; i++)
		c += is_vowel(s[i]);
	return c;
}

ALWAYS_INLINE uint32_t word_score(const char *s, size_t n)
{
	return mix_top((const uint8_t *)s, n, count_vowels(s, n));
}

int64_t run_strings(const char *s, unsigned rounds)
{
	size_t n = strlen(s);
	int64_t acc = 0;
	for (unsigned r = 0; r < rounds; r++) {
		size_t start = 0;
		for (size_t i = 0; i <= n; i++) {
			if (i == n || s[i] == ' ') {
				acc = saturating_add(acc, word_score(s + start, i - start));
				start = i + 1;
			}
		}
	}
	return acc;
}

int main(int argc, char **argv)
{
	unsigned n = argc > 1 ? (unsigned)atoi(argv[1]) : 1000;
	unsigned rounds = argc > 2 ? (unsigned)atoi(argv[2]) : 3;
	struct vec v = {0};
	uint32_t seed = 12345;
	for (unsigned i = 0; i < n; i++) {
		seed = mix_leaf(seed, i);
		vec_push(&v, (int64_t)(seed % 100000) - 50000);
	}
	int64_t k = run_kernels(&v, rounds);
	int64_t t = run_tree(&v);
	int64_t s = run_sorts(&v);
	int64_t w = run_strings(argc > 3 ? argv[3] : "the quick brown fox jumps over the lazy dog", rounds);
	printf("%lld %lld %lld %lld %u\n", (long long)k, (long long)t, (long long)s, (long long)w,
	       hash_bytes((const uint8_t *)argv[0], strlen(argv[0]), 7));
	vec_free(&v);
	return 0;
}
