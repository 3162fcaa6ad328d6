#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "chain.h"

unsigned helper_hash(const char *s, int n);
unsigned helper_sum(const unsigned *v, int n);
int helper_unused(int x);

struct node {
	struct node *next;
	unsigned val;
};

static struct node *push(struct node *head, unsigned v) {
	struct node *n = malloc(sizeof *n);
	if (!n)
		abort();
	n->next = head;
	n->val = v;
	return n;
}

static __attribute__((noinline)) unsigned walk(struct node *n) {
	unsigned acc = 0;
	while (n) {
		acc = mix3(acc, n->val);
		n = n->next;
	}
	return acc;
}

static unsigned fib(unsigned n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

typedef unsigned (*op_fn)(unsigned);
static unsigned op_a(unsigned x) { return mix4(x) + 1; }
static unsigned op_b(unsigned x) { return mix3(x, 7) * 3; }
static unsigned op_c(unsigned x) { return fib(x & 15); }

__attribute__((noinline)) unsigned dispatch(int which, unsigned x) {
	static const op_fn ops[] = {op_a, op_b, op_c};
	switch (which % 4) {
	case 0:
		return ops[0](x);
	case 1:
		return ops[1](x) ^ mix2(x, 3);
	case 2:
		return ops[2](x);
	default:
		return mix1(&x, 1);
	}
}

int main(int argc, char **argv) {
	unsigned v[64];
	struct node *list = NULL;
	for (int i = 0; i < 64; i++) {
		v[i] = (unsigned)(i * argc);
		list = push(list, v[i]);
	}
	unsigned r = mix1(v, 64) + walk(list) + helper_sum(v, 64);
	for (int i = 1; i < argc; i++)
		r += helper_hash(argv[i], (int)strlen(argv[i])) + dispatch(i, r);
	printf("%u\n", r);
	return 0;
}
