#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static volatile unsigned long sink;
static time_t end;
#define N __attribute__((noinline))
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int pipefd[2];
static const char *dir;

N void sleeper(void) { struct timespec ts = {0, 20 * 1000 * 1000}; nanosleep(&ts, NULL); }
N void *t_sleep(void *a) { while (time(NULL) < end) sleeper(); return a; }

N void waiter(void) {
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += 30 * 1000 * 1000;
	if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
	pthread_mutex_lock(&mu);
	pthread_cond_timedwait(&cv, &mu, &ts);
	pthread_mutex_unlock(&mu);
}
N void *t_futex(void *a) { while (time(NULL) < end) waiter(); return a; }

N void reader(void) { char c; if (read(pipefd[0], &c, 1) < 0) sink++; }
N void *t_pipe(void *a) { while (time(NULL) < end) reader(); return a; }
N void *t_feed(void *a) {
	struct timespec ts = {0, 40 * 1000 * 1000};
	while (time(NULL) < end + 1) { nanosleep(&ts, NULL); if (write(pipefd[1], "x", 1) < 0) sink++; }
	return a;
}

N void syncer(int fd) { if (write(fd, "0123456789abcdef", 16) < 0 || fsync(fd) < 0) sink++; }
N void *t_fsync(void *a) {
	char path[4096];
	snprintf(path, sizeof path, "%s/fsync.dat", dir);
	int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
	while (time(NULL) < end) syncer(fd);
	close(fd);
	return a;
}

int main(int argc, char **argv) {
	end = time(NULL) + (argc > 1 ? atoi(argv[1]) : 30);
	dir = argc > 2 ? argv[2] : "/tmp";
	if (pipe(pipefd) < 0) return 1;
	struct { void *(*fn)(void *); const char *name; } ts[] = {
		{t_sleep, "t_sleep"}, {t_futex, "t_futex"}, {t_pipe, "t_pipe"}, {t_feed, "t_feed"}, {t_fsync, "t_fsync"}};
	pthread_t th[5];
	for (int i = 0; i < 5; i++) {
		pthread_create(&th[i], NULL, ts[i].fn, NULL);
		pthread_setname_np(th[i], ts[i].name);
	}
	for (int i = 0; i < 5; i++) pthread_join(th[i], NULL);
	return 0;
}
