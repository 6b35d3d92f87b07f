/*
 * idmap: an intrusive hash map from BlockId to a node embedded in the caller's struct.
 *
 * It is split into BLOCKID_SHARDS independent shards by blockid_shard() (the first three hex
 * characters), each a chained table that grows on its own. Shards give two things: a cursor
 * for streaming iteration (list one shard at a time, in id order, with bounded memory) and
 * a natural unit for lock striping. The map takes no locks: callers serialize access.
 */
#ifndef UCM_IDMAP_H
#define UCM_IDMAP_H

#include <stddef.h>
#include <stdint.h>

#include "src/blockid.h"

struct idnode {
	struct idnode *next; /* chain within a bucket; owned by the map while inserted */
	struct blockid id;
};

struct idshard {
	struct idnode **buckets; /* NULL until the first insert */
	uint32_t mask;           /* buckets - 1 */
	uint32_t count;
};

struct idmap {
	struct idshard shard[BLOCKID_SHARDS];
	size_t count;
};

void idmap_init(struct idmap *m);
/* Free the bucket arrays. Nodes still inserted are not touched (they belong to the caller). */
void idmap_destroy(struct idmap *m);

struct idnode *idmap_find(const struct idmap *m, const struct blockid *id);
/* Insert n (n->id set; no node with that id may be present). Returns 0, or -ENOMEM only when
 * the shard has no table yet and none can be allocated (a full table just grows chains). */
int idmap_insert(struct idmap *m, struct idnode *n);
/* Make sure the shard of id has its table, so that inserting a node of that id cannot fail
 * (tables are never freed before idmap_destroy). 0 or -ENOMEM. */
int idmap_reserve(struct idmap *m, const struct blockid *id);
/* Remove n, which must be inserted. */
void idmap_remove(struct idmap *m, struct idnode *n);

/* Call fn on every node of one shard (fn must not insert or remove). */
void idmap_shard_foreach(const struct idmap *m, unsigned shard,
			 void (*fn)(struct idnode *n, void *arg), void *arg);

/* Call fn on every node; fn may remove the node it is given (and only that one). */
void idmap_foreach_safe(struct idmap *m, void (*fn)(struct idnode *n, void *arg), void *arg);

#endif
