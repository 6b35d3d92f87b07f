/* BlockId: the 16-byte name of a block, shown as 32 lowercase hex characters. */
#ifndef UCM_BLOCKID_H
#define UCM_BLOCKID_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* struct blockid, BLOCKID_LEN, BLOCKID_HEX_LEN, BLOCKID_SHARDS and blockid_shard() belong to
 * the tier ABI (tiers/tier.h): tiers built outside the tree name blocks the same way. */
#include "tiers/tier.h"

/*
 * Parse exactly 32 lowercase hex characters (s need not be NUL-terminated; len is its length).
 * Returns 0, or -EINVAL for any other length, an uppercase letter or a non-hex character.
 */
int blockid_parse(const char *s, size_t len, struct blockid *out);

/* Parse a NUL-terminated name; same results as blockid_parse(). */
int blockid_parse_name(const char *name, struct blockid *out);

/* Write 32 lowercase hex characters and a NUL into out. */
void blockid_format(const struct blockid *id, char out[BLOCKID_HEX_LEN + 1]);

/* Well-mixed 64-bit hash of an id (ids may be chosen by users, so they are hashed). */
uint64_t blockid_hash(const struct blockid *id);

static inline bool blockid_eq(const struct blockid *a, const struct blockid *b)
{
	return memcmp(a->b, b->b, BLOCKID_LEN) == 0;
}

static inline int blockid_cmp(const struct blockid *a, const struct blockid *b)
{
	return memcmp(a->b, b->b, BLOCKID_LEN);
}

/* Sort an array of ids in ascending order (the order of their hex names). */
void blockid_sort(struct blockid *ids, size_t n);

/* A growable array of ids (listings). Zero-initialize; free with idvec_free(). */
struct idvec {
	struct blockid *v;
	size_t n, cap;
};

/* Append id. 0, or -ENOMEM (the vector is unchanged). */
int idvec_push(struct idvec *iv, const struct blockid *id);
void idvec_free(struct idvec *iv);

#endif
