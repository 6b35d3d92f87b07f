/*
 * extents: the set of byte ranges written into a reservation, kept as sorted, disjoint,
 * non-adjacent [start, end) intervals. Sequential writes stay a single interval, so the
 * common case costs one comparison per write.
 */
#ifndef UCM_EXTENTS_H
#define UCM_EXTENTS_H

#include <stdbool.h>
#include <stdint.h>

struct extent {
	uint64_t start, end;
};

struct extents {
	struct extent *v; /* owned */
	uint32_t n, cap;
};

void extents_init(struct extents *e);
void extents_free(struct extents *e);
/* Add [off, off+len). Returns 0 or -ENOMEM (the set is then unchanged). */
int extents_add(struct extents *e, uint64_t off, uint64_t len);
/* Drop every byte at or past size. */
void extents_clip(struct extents *e, uint64_t size);
/* End of the last written byte (0 if none). */
uint64_t extents_end(const struct extents *e);
/* True if every byte of [0, size) is written. */
bool extents_cover(const struct extents *e, uint64_t size);

#endif
