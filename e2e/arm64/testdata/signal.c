// A signal handler that runs almost all the time: a profiling timer fires every millisecond
// and its handler works for longer than that. Its stacks run from the handler through the
// vDSO's signal trampoline (__kernel_rt_sigreturn) into the interrupted chain.
#include <signal.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
static volatile unsigned long sink;
#define N __attribute__((noinline))
N void spin(void) {
	unsigned long x = sink;
	for (int i = 0; i < 4000000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
	sink = x;
}
N void on_prof(int sig) { spin(); sink += sig; }
N unsigned long g3(unsigned long x) { for (int i = 0; i < 1000; i++) x = x * 3 + 1; return x; }
N unsigned long g2(unsigned long x) { return g3(x) ^ (x + 2); }
N unsigned long g1(unsigned long x) { return g2(x) ^ (x + 1); }
int main(int argc, char **argv) {
	time_t end = time(NULL) + (argc > 1 ? atoi(argv[1]) : 30);
	struct sigaction sa = {0};
	sa.sa_handler = on_prof;
	sigaction(SIGPROF, &sa, NULL);
	struct itimerval it = {{0, 1000}, {0, 1000}};
	setitimer(ITIMER_PROF, &it, NULL);
	unsigned long i = argc;
	while (time(NULL) < end) sink += g1(i++);
	return 0;
}
