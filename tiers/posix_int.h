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
	int64_t fmtime;             /* the file's own mtime: with ino, what a shared STORE's
				       check compares (a touch of its atime moves ctime, not it) */
	int64_t touched;            /* shared: when this host last set the file's atime (wall) */
	uint32_t round;             /* shared: the reclaimer's walk that last saw it */
	uint32_t codec;
	uint32_t opens;             /* read handles on this version: never evicted */
	bool expired_held;          /* expired, kept for its readers: not counted as a block */
};

#define PE(n) ((struct pentry *)((char *)(n) - offsetof(struct pentry, node)))

/* A block file to remove: id, and its version (0: whatever file has the name); cold: an
 * eviction, which on a shared STORE spares a file that a host opened lately (SHARED_USED_NS). */
struct victim {
	struct blockid id;
	uint64_t ino;
	bool cold;
};

#define SHARED_USED_NS (60 * 1000000000LL) /* shared: "used lately" */
#define SHARED_TOUCH_NS (10 * 1000000000LL) /* shared: a host says it uses a block this often */

/* The figures of a shared STORE as a whole, from its reclaimer (STORE/.usage). */
struct store_usage {
	uint64_t blocks, bytes, capacity;
	int64_t at;                 /* wall s of the walk they come from; 0: none yet */
	char holder[HOST_NAME_MAX + 1];
};

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
	/* shared: one capacity, one reclaimer (posix_reclaim.c); all but usage: the sweeper's */
	uint64_t own_capacity;   /* this host's disk_size= (0: keep 5% free) */
	int lease_fd;            /* STORE/.reclaim while this host holds the lease, else -1 */
	unsigned walk_shard;     /* next shard of the walk; BLOCKID_SHARDS: between walks */
	uint32_t walk_round;     /* walks begun */
	int64_t walk_started, walk_ended, usage_read, lease_tried; /* mono */
	struct store_usage usage; /* protected by lock */
};

int posix_fsync_dir(const char *path);
/* open(path, flags) of a block file, looked up again when the answer is ESTALE (another host
 * renamed a new version onto the name meanwhile, on a distributed filesystem). */
int posix_open_file(const char *path, int flags);
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
/* Remove the temp files of hosts whose daemon died, and learn the live hosts' disk_size=
 * (at most every few seconds). */
void posix_shared_reap(struct posix *p);
/* The shard a directory name "<hex[0:3]>" stands for, or -1 (posix_scan.c). */
int posix_shard_of_name(const char *name);
/* Does the STORE have the directory of this shard (read at most every shared_ns; at the
 * next call again after posix_shards_forget())? */
bool posix_shard_exists(struct posix *p, unsigned shard);
void posix_shards_forget(struct posix *p);
/* Call fn for every block file (not temp files) of one shard directory of the STORE, until
 * it returns non-zero. 0 or -errno of opening the directory (none: 0). */
typedef int (*posix_file_fn)(struct posix *p, int dfd, const char *name,
			     const struct blockid *id, void *arg);
int posix_each_block_file(struct posix *p, unsigned shard, posix_file_fn fn, void *arg);
/* p->lock held. The file of id is still version ino: its entry is seen now, with the file's
 * atime if later than what it had. The entry, or NULL if it is no longer that version. */
struct pentry *posix_entry_seen(struct posix *p, const struct blockid *id, uint64_t ino,
				int64_t atime);
/* p->lock held. What the STORE has for id replaces its entry (e; NULL: nothing, the entry is
 * dropped) if the entry is still the one looked at (version ino; 0: none); else e is freed. */
void posix_entry_replace(struct posix *p, const struct blockid *id, uint64_t ino,
			 struct pentry *e);
/* The reclaimer (tiers/posix_reclaim.c): take the lease if it is free; if held, walk a slice
 * of the STORE, and at the end of a walk publish the usage and trim to capacity. Every host:
 * read the published usage. */
void posix_reclaim(struct posix *p);
void posix_reclaim_stop(struct posix *p);
/* Capacity in physical bytes given `used` (posix.c). */
uint64_t posix_capacity(struct posix *p, uint64_t used);
/* Remove the file of a block if it is still version ino (posix.c). p->lock held. */
void posix_remove_file(struct posix *p, const char *path, uint64_t ino, bool cold);
/* Remove the coldest blocks the index holds until it fits the capacity (posix.c). */
void posix_trim(struct posix *p);
/* Order the recency list by atime, oldest first (posix_scan.c). p->lock held. */
void posix_sort_recency(struct posix *p);
/* What a daemon writes into its STORE/.lock.<host>: "<pid>\ndisk_size=<bytes>\n" while it
 * runs, this when it stops cleanly. */
#define LOCK_STOPPED "stopped\n"

/* Rebuild the index at start (tiers/posix_scan.c). 0 or -errno (logged). */
int posix_scan(struct posix *p);
/* At a clean stop: write the index where the next start of this host finds it. */
void posix_save_index(struct posix *p);

#endif
