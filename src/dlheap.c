#include "src/dlheap.h"

#include <errno.h>
#include <stdlib.h>

static void swap(struct dlheap *h, size_t a, size_t b)
{
	struct dl_entry t = h->v[a];

	h->v[a] = h->v[b];
	h->v[b] = t;
}

int dlheap_push(struct dlheap *h, int64_t deadline, const struct blockid *id)
{
	size_t i;

	if (h->n == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 64;
		struct dl_entry *v = realloc(h->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		h->v = v;
		h->cap = cap;
	}
	i = h->n++;
	h->v[i].deadline = deadline;
	h->v[i].id = *id;
	while (i && h->v[(i - 1) / 2].deadline > h->v[i].deadline) {
		swap(h, i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
	return 0;
}

void dlheap_pop(struct dlheap *h)
{
	size_t i = 0;

	h->v[0] = h->v[--h->n];
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;

		if (l < h->n && h->v[l].deadline < h->v[m].deadline)
			m = l;
		if (r < h->n && h->v[r].deadline < h->v[m].deadline)
			m = r;
		if (m == i)
			break;
		swap(h, i, m);
		i = m;
	}
}

void dlheap_free(struct dlheap *h)
{
	free(h->v);
	h->v = NULL;
	h->n = h->cap = 0;
}
