// Spends its time in the kernel: large reads from /dev/zero, which the kernel fills by
// clearing user memory. Samples carry kernel frames (the read path) above the user ones.
#include <fcntl.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static char buf[1 << 20];
__attribute__((noinline)) long reader(int fd) {
	long n = 0;
	for (int i = 0; i < 16; i++) n += read(fd, buf, sizeof buf);
	return n;
}
int main(int argc, char **argv) {
	time_t end = time(NULL) + (argc > 1 ? atoi(argv[1]) : 30);
	int fd = open("/dev/zero", O_RDONLY);
	if (fd < 0) return 1;
	long total = 0;
	while (time(NULL) < end) total += reader(fd);
	return total < 0;
}
