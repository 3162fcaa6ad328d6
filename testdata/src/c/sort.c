/* Sorting and a binary tree: recursion, function pointers and inlined comparators. */
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

void vec_push(struct vec *v, int64_t x)
{
	if (v->len == v->cap) {
		size_t cap = v->cap ? v->cap * 2 : 16;
		int64_t *d = realloc(v->data, cap * sizeof(*d));
		if (!d)
			abort();
		v->data = d;
		v->cap = cap;
	}
	v->data[v->len++] = x;
}

void vec_free(struct vec *v)
{
	free(v->data);
	v->data = NULL;
	v->len = v->cap = 0;
}

ALWAYS_INLINE int cmp_i64(int64_t a, int64_t b) { return (a > b) - (a < b); }
ALWAYS_INLINE void swap_i64(int64_t *a, int64_t *b) { int64_t t = *a; *a = *b; *b = t; }

ALWAYS_INLINE size_t partition(int64_t *d, size_t lo, size_t hi)
{
	int64_t pivot = d[lo + (hi - lo) / 2];
	size_t i = lo, j = hi;
	for (;;) {
		while (cmp_i64(d[i], pivot) < 0)
			i++;
		while (cmp_i64(d[j], pivot) > 0)
			j--;
		if (i >= j)
			return j;
		swap_i64(&d[i], &d[j]);
		i++;
		j--;
	}
}

static void quicksort(int64_t *d, size_t lo, size_t hi)
{
	while (lo < hi) {
		size_t p = partition(d, lo, hi);
		if (p - lo < hi - p) {
			quicksort(d, lo, p);
			lo = p + 1;
		} else {
			quicksort(d, p + 1, hi);
			hi = p;
		}
	}
}

static inline void insertion_sort(int64_t *d, size_t n)
{
	for (size_t i = 1; i < n; i++) {
		int64_t x = d[i];
		size_t j = i;
		while (j > 0 && cmp_i64(d[j - 1], x) > 0) {
			d[j] = d[j - 1];
			j--;
		}
		d[j] = x;
	}
}

static int qsort_cmp(const void *a, const void *b)
{
	return cmp_i64(*(const int64_t *)a, *(const int64_t *)b);
}

int64_t run_sorts(struct vec *v)
{
	int64_t *copy = malloc(v->len * sizeof(int64_t));
	if (!copy)
		abort();
	memcpy(copy, v->data, v->len * sizeof(int64_t));
	if (v->len > 1)
		quicksort(copy, 0, v->len - 1);
	insertion_sort(v->data, v->len < 64 ? v->len : 64);
	qsort(v->data, v->len, sizeof(int64_t), qsort_cmp);
	int64_t s = 0;
	for (size_t i = 0; i < v->len; i++)
		s = saturating_add(s, copy[i] ^ v->data[i]);
	free(copy);
	return s;
}

struct node {
	int64_t key;
	struct node *left, *right;
};

static struct node *tree_insert(struct node *root, int64_t key)
{
	struct node **p = &root;
	while (*p)
		p = key < (*p)->key ? &(*p)->left : &(*p)->right;
	*p = calloc(1, sizeof(**p));
	if (!*p)
		abort();
	(*p)->key = key;
	return root;
}

static int64_t tree_sum(const struct node *n, int depth)
{
	if (!n)
		return 0;
	return n->key * depth + tree_sum(n->left, depth + 1) + tree_sum(n->right, depth + 1);
}

static void tree_free(struct node *n)
{
	if (!n)
		return;
	tree_free(n->left);
	tree_free(n->right);
	free(n);
}

int64_t run_tree(const struct vec *v)
{
	struct node *root = NULL;
	for (size_t i = 0; i < v->len && i < 4096; i++)
		root = tree_insert(root, v->data[i]);
	int64_t s = tree_sum(root, 1);
	tree_free(root);
	return s;
}
