#include "src/extents.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void extents_init(struct extents *e)
{
	memset(e, 0, sizeof(*e));
}

void extents_free(struct extents *e)
{
	free(e->v);
	extents_init(e);
}

int extents_add(struct extents *e, uint64_t off, uint64_t len)
{
	uint64_t end = off + len;
	uint32_t i, j;

	if (len == 0)
		return 0;
	/* fast path: appending to, or inside, the last interval */
	if (e->n && off >= e->v[e->n - 1].start && off <= e->v[e->n - 1].end) {
		if (end > e->v[e->n - 1].end)
			e->v[e->n - 1].end = end;
		return 0;
	}
	/* first interval that ends at or after off (it may touch or overlap [off, end)) */
	for (i = 0; i < e->n && e->v[i].end < off; i++)
		;
	/* intervals i..j-1 overlap or touch [off, end) */
	for (j = i; j < e->n && e->v[j].start <= end; j++)
		;
	if (j > i) {
		uint64_t s = e->v[i].start < off ? e->v[i].start : off;
		uint64_t t = e->v[j - 1].end > end ? e->v[j - 1].end : end;

		e->v[i].start = s;
		e->v[i].end = t;
		memmove(&e->v[i + 1], &e->v[j], (e->n - j) * sizeof(*e->v));
		e->n -= j - i - 1;
		return 0;
	}
	if (e->n == e->cap) {
		uint32_t cap = e->cap ? e->cap * 2 : 4;
		struct extent *v = realloc(e->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		e->v = v;
		e->cap = cap;
	}
	memmove(&e->v[i + 1], &e->v[i], (e->n - i) * sizeof(*e->v));
	e->v[i].start = off;
	e->v[i].end = end;
	e->n++;
	return 0;
}

void extents_clip(struct extents *e, uint64_t size)
{
	while (e->n && e->v[e->n - 1].start >= size)
		e->n--;
	if (e->n && e->v[e->n - 1].end > size)
		e->v[e->n - 1].end = size;
}

uint64_t extents_end(const struct extents *e)
{
	return e->n ? e->v[e->n - 1].end : 0;
}

bool extents_cover(const struct extents *e, uint64_t size)
{
	if (size == 0)
		return true;
	return e->n >= 1 && e->v[0].start == 0 && e->v[0].end >= size;
}
