/* The C workload the cluster's end-to-end test profiles: a known call chain
 * main -> run -> outer -> middle -> leaf, where mix() is inlined into leaf, built with
 * -O2 -g -fomit-frame-pointer (no frame pointers; DWARF and .eh_frame to unwind and symbolize).
 * It spins on the CPU until SIGTERM or SIGINT. */
#include <signal.h>
#include <stdio.h>

static volatile sig_atomic_t stop;
volatile unsigned long sink;

static void on_signal(int sig) { (void)sig; stop = 1; }

static inline __attribute__((always_inline)) unsigned long mix(unsigned long x) {
	return x * 6364136223846793005UL + 1442695040888963407UL;
}

__attribute__((noinline)) unsigned long leaf(unsigned long n) {
	unsigned long x = n;
	for (int i = 0; i < 1000000; i++)
		x = mix(x);
	return x;
}

__attribute__((noinline)) unsigned long middle(unsigned long n) { return leaf(n + 1) ^ n; }

__attribute__((noinline)) unsigned long outer(unsigned long n) { return middle(n * 3) + 1; }

__attribute__((noinline)) void run(void) {
	for (unsigned long n = 0; !stop; n++)
		sink += outer(n);
}

int main(void) {
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	puts("cchain: spinning in run -> outer -> middle -> leaf (mix inlined)");
	fflush(stdout);
	run();
	return 0;
}
