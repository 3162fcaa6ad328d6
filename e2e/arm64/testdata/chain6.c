// A chain of six functions that keep working after each call (so no call becomes a jump)
// and a busy leaf. Built with -fomit-frame-pointer, x29 holds no frame chain: only the
// unwind tables (.eh_frame) lead from the leaf back to main.
#include <stdlib.h>
#include <time.h>
static volatile unsigned long sink;
#define N __attribute__((noinline))
N unsigned long leaf(unsigned long x) {
	for (int i = 0; i < 400000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}
N unsigned long f6(unsigned long x) { return leaf(x) ^ (x + 6); }
N unsigned long f5(unsigned long x) { return f6(x) ^ (x + 5); }
N unsigned long f4(unsigned long x) { return f5(x) ^ (x + 4); }
N unsigned long f3(unsigned long x) { return f4(x) ^ (x + 3); }
N unsigned long f2(unsigned long x) { return f3(x) ^ (x + 2); }
N unsigned long f1(unsigned long x) { return f2(x) ^ (x + 1); }
int main(int argc, char **argv) {
	time_t end = time(NULL) + (argc > 1 ? atoi(argv[1]) : 30);
	unsigned long i = argc;
	while (time(NULL) < end) sink += f1(i++);
	return 0;
}
