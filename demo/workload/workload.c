// The demo's workload: two CPU-bound call chains and a little system-call traffic, built with
// frame pointers and debug info so a profile of it shows real functions, lines and inline
// frames once the symbolizer has its debuginfo.
//
//   main -> run_workload -> process_request -> checksum_buffer -> [mix_block -> mix_round]
//   main -> run_workload -> render_frame -> shade_row -> [shade_pixel]
//   main -> run_workload -> flush_log -> write (kernel frames)
//
// The bracketed helpers are always_inline: they have no code of their own, only inline
// frames under the function they are folded into.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

#define INLINE static inline __attribute__((always_inline))
#define NOINLINE __attribute__((noinline))

static volatile uint64_t sink;

INLINE uint64_t mix_round(uint64_t h, uint64_t v) {
	h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
	h *= 0xff51afd7ed558ccdull;
	return h ^ (h >> 33);
}

INLINE uint64_t mix_block(uint64_t h, const uint8_t *p, size_t n) {
	for (size_t i = 0; i < n; i++)
		h = mix_round(h, p[i]);
	return h;
}

NOINLINE uint64_t checksum_buffer(const uint8_t *buf, size_t len) {
	uint64_t h = 1469598103934665603ull;
	for (size_t off = 0; off < len; off += 64)
		h = mix_block(h, buf + off, len - off < 64 ? len - off : 64);
	return h;
}

NOINLINE uint64_t process_request(uint8_t *buf, size_t len, uint64_t seq) {
	for (size_t i = 0; i < len; i += 8)
		buf[i] = (uint8_t)(seq + i);
	// Work after the call keeps it from becoming a tail call, which would drop this frame
	// from the stack.
	uint64_t h = checksum_buffer(buf, len);
	return h ^ seq;
}

INLINE double shade_pixel(double x, double y, int iters) {
	double zx = 0, zy = 0;
	int i = 0;
	for (; i < iters && zx * zx + zy * zy < 4.0; i++) {
		double t = zx * zx - zy * zy + x;
		zy = 2 * zx * zy + y;
		zx = t;
	}
	return i + zx * 1e-9;
}

NOINLINE double shade_row(int row, int width) {
	double acc = 0;
	for (int col = 0; col < width; col++)
		acc += shade_pixel(-2.0 + 3.0 * col / width, -1.2 + 2.4 * row / width, 200);
	return acc;
}

NOINLINE double render_frame(int width) {
	double acc = 0;
	for (int row = 0; row < width; row++)
		acc += shade_row(row, width);
	return acc;
}

NOINLINE void flush_log(int fd, uint64_t v) {
	char line[64];
	int n = snprintf(line, sizeof line, "checksum %016llx\n", (unsigned long long)v);
	// Enough system calls that the profile shows kernel frames under this chain.
	for (int i = 0; i < 100; i++)
		if (write(fd, line, (size_t)n) < 0)
			return;
}

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

NOINLINE void run_workload(double seconds) {
	size_t len = 1 << 16;
	uint8_t *buf = malloc(len);
	int fd = open("/dev/null", O_WRONLY);
	if (buf == NULL || fd < 0) {
		perror("workload setup");
		exit(1);
	}
	double end = now() + seconds;
	for (uint64_t seq = 0; seconds <= 0 || now() < end; seq++) {
		uint64_t h = process_request(buf, len, seq);
		if (seq % 4 == 0)
			sink += (uint64_t)render_frame(96);
		flush_log(fd, h);
		sink += h;
	}
	close(fd);
	free(buf);
}

int main(int argc, char **argv) {
	// With no argument it runs until it is stopped; the demo stops it by signal.
	double seconds = argc > 1 ? atof(argv[1]) : 0;
	run_workload(seconds);
	return 0;
}
