// The comparator is the busy leaf; the stack runs through the C library's qsort (its
// msort_with_tmp recursion) back to main. Linked dynamically: libc's own unwind tables are
// what the walk needs.
#include <stdlib.h>
#include <time.h>
static volatile unsigned long sink;
static int cmp(const void *a, const void *b) {
	unsigned long x = *(const unsigned long *)a;
	for (int i = 0; i < 2000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
	sink += x;
	unsigned long p = *(const unsigned long *)a, q = *(const unsigned long *)b;
	return p < q ? -1 : p > q;
}
int main(int argc, char **argv) {
	time_t end = time(NULL) + (argc > 1 ? atoi(argv[1]) : 30);
	static unsigned long v[1024];
	while (time(NULL) < end) {
		for (int i = 0; i < 1024; i++) v[i] = (unsigned long)rand();
		qsort(v, 1024, sizeof v[0], cmp);
	}
	return 0;
}
