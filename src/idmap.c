#include "src/idmap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define INITIAL_BUCKETS 8

void idmap_init(struct idmap *m)
{
	memset(m, 0, sizeof(*m));
}

void idmap_destroy(struct idmap *m)
{
	for (unsigned s = 0; s < BLOCKID_SHARDS; s++)
		free(m->shard[s].buckets);
	memset(m, 0, sizeof(*m));
}

static struct idnode **bucket(const struct idshard *sh, const struct blockid *id)
{
	return &sh->buckets[blockid_hash(id) & sh->mask];
}

struct idnode *idmap_find(const struct idmap *m, const struct blockid *id)
{
	const struct idshard *sh = &m->shard[blockid_shard(id)];

	if (!sh->buckets)
		return NULL;
	for (struct idnode *n = *bucket(sh, id); n; n = n->next)
		if (blockid_eq(&n->id, id))
			return n;
	return NULL;
}

static void grow(struct idshard *sh)
{
	uint32_t nb = sh->buckets ? (sh->mask + 1) * 2 : INITIAL_BUCKETS;
	struct idnode **old = sh->buckets, **b = calloc(nb, sizeof(*b));
	uint32_t oldn = sh->buckets ? sh->mask + 1 : 0;

	if (!b)
		return;
	sh->buckets = b;
	sh->mask = nb - 1;
	for (uint32_t i = 0; i < oldn; i++) {
		struct idnode *n = old[i], *next;

		for (; n; n = next) {
			struct idnode **dst = bucket(sh, &n->id);

			next = n->next;
			n->next = *dst;
			*dst = n;
		}
	}
	free(old);
}

int idmap_insert(struct idmap *m, struct idnode *n)
{
	struct idshard *sh = &m->shard[blockid_shard(&n->id)];
	struct idnode **b;

	if (!sh->buckets || sh->count > sh->mask)
		grow(sh); /* on failure an existing table just gets longer chains */
	if (!sh->buckets)
		return -ENOMEM;
	b = bucket(sh, &n->id);
	n->next = *b;
	*b = n;
	sh->count++;
	m->count++;
	return 0;
}

int idmap_reserve(struct idmap *m, const struct blockid *id)
{
	struct idshard *sh = &m->shard[blockid_shard(id)];

	if (!sh->buckets)
		grow(sh);
	return sh->buckets ? 0 : -ENOMEM;
}

void idmap_remove(struct idmap *m, struct idnode *n)
{
	struct idshard *sh = &m->shard[blockid_shard(&n->id)];

	for (struct idnode **p = bucket(sh, &n->id); *p; p = &(*p)->next) {
		if (*p == n) {
			*p = n->next;
			n->next = NULL;
			sh->count--;
			m->count--;
			return;
		}
	}
}

void idmap_shard_foreach(const struct idmap *m, unsigned shard,
			 void (*fn)(struct idnode *n, void *arg), void *arg)
{
	const struct idshard *sh = &m->shard[shard];

	for (uint32_t i = 0; sh->buckets && i <= sh->mask; i++)
		for (struct idnode *n = sh->buckets[i]; n; n = n->next)
			fn(n, arg);
}

void idmap_foreach_safe(struct idmap *m, void (*fn)(struct idnode *n, void *arg), void *arg)
{
	for (unsigned s = 0; s < BLOCKID_SHARDS; s++) {
		struct idshard *sh = &m->shard[s];

		for (uint32_t i = 0; sh->buckets && i <= sh->mask; i++) {
			struct idnode *n = sh->buckets[i], *next;

			for (; n; n = next) {
				next = n->next;
				fn(n, arg);
			}
		}
	}
}
