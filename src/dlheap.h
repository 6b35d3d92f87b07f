/*
 * A min-heap of (deadline, id): the TTL index of a tier. Entries are never updated in place:
 * a changed deadline pushes a new entry and the old one goes stale. Whoever pops an entry
 * checks it against the id's current deadline and ignores it if they differ. No locking.
 */
#ifndef UCM_DLHEAP_H
#define UCM_DLHEAP_H

#include <stddef.h>
#include <stdint.h>

#include "src/blockid.h"

struct dl_entry {
	int64_t deadline;
	struct blockid id;
};

struct dlheap {
	struct dl_entry *v; /* owned */
	size_t n, cap;
};

/* Push an entry. 0, or -ENOMEM (the heap is unchanged; the caller's block still expires,
 * it is only reclaimed later). */
int dlheap_push(struct dlheap *h, int64_t deadline, const struct blockid *id);
/* The earliest entry, or NULL if empty. */
static inline const struct dl_entry *dlheap_top(const struct dlheap *h)
{
	return h->n ? &h->v[0] : NULL;
}
/* Remove the earliest entry (the heap must not be empty). */
void dlheap_pop(struct dlheap *h);
/* Forget every entry (to rebuild it when stale entries pile up). */
static inline void dlheap_clear(struct dlheap *h)
{
	h->n = 0;
}
void dlheap_free(struct dlheap *h);

#endif
