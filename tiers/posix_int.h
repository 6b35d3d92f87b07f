/*
 * The disk tier's insides, shared by its two halves: tiers/posix.c (the tier: index, reads,
 * reservations, commits, capacity) and tiers/posix_scan.c (what happens at start and at a
 * clean stop: the scan that rebuilds the index, and the index snapshot that spares it).
 * Nothing outside tiers/posix*.c includes this file.
 */
#ifndef UCM_POSIX_INT_H
#define UCM_POSIX_INT_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

#include "src/dlheap.h"
#include "src/idmap.h"
#include "src/metrics.h"
#include "tiers/io.h"
#include "tiers/posix.h"

#define TEMP_MARK ".tmp"
#define FOREIGN_TEMP_AGE_S 3600

/* One committed block file. ino and ctime identify the file's contents: a replacement is a
 * new inode, and any change to the file (a write, a truncate, a rename) moves its ctime. */
struct pentry {
	struct idnode node;
	struct pentry *prev, *next; /* recency list, coldest first */
	uint64_t size, stored, phys, ino;
	int64_t mtime, atime, deadline, ctime; /* atime, ctime: wall; deadline: mono */
	uint64_t seq;               /* commit number (posix.c, "Durability"); 0: found at start */
	int64_t checked;            /* shared STORE: when the file was last seen (mono) */
	uint32_t codec;
	uint32_t opens;             /* read handles on this version: never evicted */
	bool expired_held;          /* expired, kept for its readers: not counted as a block */
};

#define PE(n) ((struct pentry *)((char *)(n) - offsetof(struct pentry, node)))

struct posix {
	struct tier tier;
	char *root;
	char *data;              /* directory holding the shard directories */
	enum ucm_layout layout;
	bool durable;
	bool opened;             /* the start scan succeeded: a stop saves the index */
	int64_t shared_ns;       /* shared with other hosts: how old an entry may be before the
				    file is looked at again (posix_shared.c); -1: private */
	uint64_t capacity;
	char host[HOST_NAME_MAX + 1];
	uint8_t store_id[16];    /* STORE/.store-id: the same through any path to the STORE;
				    all zero if it could not be read or made */
	int lock_fd;
	bool locked;             /* lock_fd is this daemon's lock of the STORE */
	struct io_engine *io;    /* how read handles read (tiers/io.h) */
	atomic_uint_fast64_t temp_seq;
	pthread_mutex_t lock;
	struct idmap map;        /* protected by lock */
	struct pentry lru;       /* recency list sentinel; protected by lock */
	struct dlheap deadlines; /* TTL index (stale entries skipped); protected by lock */
	uint64_t phys_used;      /* protected by lock */
	uint64_t expired_held;   /* entries expired_held; protected by lock */
	uint64_t pending;        /* room promised to open reservations; protected by lock */
	uint64_t unlinking;      /* bytes out of the index, not unlinked yet; protected by lock */
	pthread_cond_t unlinked; /* unlinking fell to 0 */
	/* durability (posix.c, "Durability") */
	bool syncfs;             /* a local filesystem: one syncfs() makes every commit durable */
	uint64_t commit_seq;     /* commits numbered so far; protected by lock */
	pthread_mutex_t sync_lock;
	pthread_cond_t synced;   /* a sync finished */
	bool syncing;            /* protected by sync_lock, as the four below */
	uint64_t durable_seq;    /* every commit numbered up to it is durable */
	uint64_t sync_round;     /* syncs finished */
	uint64_t last_upto;      /* what the last sync covered, and how it ended */
	int last_rc;
	atomic_uint_fast64_t quarantined, temp_removed, skipped;
	atomic_uint_fast64_t from_snapshot; /* blocks the start took from the index snapshot */
	counter_t hits, misses, bytes_read, bytes_written, expirations, checksum_failures;
	counter_t evictions, syncs;
	counter_t store_lookups; /* shared: files looked up on the STORE for a miss or a check */
	/* shared: the shard directories the STORE has, read at most every shared_ns
	 * (posix_shared.c) */
	pthread_mutex_t shards_lock;
	uint8_t shards[BLOCKID_SHARDS / 8]; /* protected by shards_lock, as the one below */
	int64_t shards_read;     /* when, mono; 0: never */
	int64_t reaped;          /* shared: when the other hosts' locks were last looked at */
};

int posix_fsync_dir(const char *path);
/* STORE/.../<hex[0:3]>/<hex> of id, and its directory. */
void posix_block_path(const struct posix *p, const struct blockid *id, char *out, size_t len);
void posix_shard_path(const struct posix *p, const struct blockid *id, char *out, size_t len);
/* The attributes of an entry. */
void posix_fill_attr(const struct pentry *e, struct block_attr *a);
/* Remove the entry of id if its inode is ino (any inode if ino == 0). p->lock held. */
bool posix_index_drop(struct posix *p, const struct blockid *id, uint64_t ino);

/* Make e the most recently used entry. p->lock held. */
void posix_lru_touch(struct posix *p, struct pentry *e);
/* Insert or replace the entry of e->node.id; takes ownership of e. p->lock held. */
void posix_index_put(struct posix *p, struct pentry *e);
/* Move a damaged block file to STORE/quarantine/ and forget its entry (see posix.c). */
void posix_quarantine(struct posix *p, const char *path, const struct blockid *id,
		      uint64_t ino, const char *why);

/* Read the entry of the block file open at fd (tiers/posix_scan.c). 0 or -errno, see there. */
int posix_entry_read(struct posix *p, int fd, const struct blockid *id, struct pentry **out);

/* Shared STORE (tiers/posix_shared.c): look id up on the STORE itself, for a miss or an
 * entry older than shared_ns, and bring the index in line. 0 (attr filled if not NULL) or
 * -ENOENT. */
int posix_shared_lookup(struct posix *p, const struct blockid *id, struct block_attr *attr);
/* List the block files of one shard directory of the STORE. 0 or -errno. */
int posix_shared_list(struct posix *p, unsigned shard, tier_list_fn fn, void *arg);
/* Remove the temp files of hosts whose daemon died (at most every few seconds). */
void posix_shared_reap(struct posix *p);
/* What a daemon writes into its STORE/.lock.<host> when it stops cleanly. */
#define LOCK_STOPPED "stopped\n"

/* Rebuild the index at start (tiers/posix_scan.c). 0 or -errno (logged). */
int posix_scan(struct posix *p);
/* At a clean stop: write the index where the next start of this host finds it. */
void posix_save_index(struct posix *p);

#endif
