/*
 * Inode table: the kernel's node ids for blocks.
 *
 * A block's node id is the address of its `struct inode`, which lives while the kernel
 * holds lookups on it (nlookup) or the daemon holds references (open handles). The small
 * node ids below NID_FIRST_BLOCK name the fixed files of the namespace.
 */
#ifndef UCM_FS_INODE_H
#define UCM_FS_INODE_H

#include <stdint.h>

#include "src/blockid.h"
#include "src/idmap.h"

enum {
	NID_ROOT = 1,     /* / */
	NID_UCM = 2,      /* /.ucm */
	NID_CONFIG = 3,   /* /.ucm/config */
	NID_STATS = 4,    /* /.ucm/stats */
	NID_QUERY = 5,    /* /.ucm/query */
	NID_FIRST_BLOCK = 4096,
};

/* What a node id above NID_FIRST_BLOCK points at: its first byte says. */
enum node_kind { NODE_BLOCK = 1, NODE_QUERY = 2 };

struct inode {
	uint8_t kind;           /* NODE_BLOCK */
	struct idnode node;     /* by id, in the table */
	uint64_t nlookup;       /* kernel references; protected by the table lock */
	uint64_t refs;          /* daemon references; protected by the table lock */
	uint64_t st_ino;        /* stable inode number shown to users */
	uint32_t writers;       /* open write handles; protected by the table lock */
	uint64_t resv_size;     /* size of the reservation they share; protected by the lock */
};

struct itable;

int itable_create(struct itable **out);
void itable_destroy(struct itable *t);

/* The inode of id, created if needed, with one more kernel lookup (nlookup) if `kernel`,
 * else one more daemon reference. NULL on ENOMEM. */
struct inode *itable_get(struct itable *t, const struct blockid *id, int kernel);
/* Drop n kernel lookups. */
void itable_forget(struct itable *t, struct inode *ino, uint64_t n);
/* Drop a daemon reference. */
void itable_put(struct itable *t, struct inode *ino);

/* Writers: the attributes of a block that exists only as a reservation. */
void itable_add_writer(struct itable *t, struct inode *ino, uint64_t size);
void itable_del_writer(struct itable *t, struct inode *ino);
/* Record the reservation's size after a write (grow to end) or a truncate (set). */
void itable_resv_grow(struct itable *t, struct inode *ino, uint64_t end);
void itable_resv_set(struct itable *t, struct inode *ino, uint64_t size);
/* The reservation's size if ino has open writers: 0 and *size set, else -ENOENT. */
int itable_resv_size(struct itable *t, struct inode *ino, uint64_t *size);

#endif
