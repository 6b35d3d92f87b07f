/*
 * The tier interface.
 *
 * Every storage stage of ucmfs -- the memory cache, the disk tier, and the pipeline that
 * stacks them -- is a `struct tier`: a const table of operations plus private state. The FS
 * layer holds one `struct tier *` (the pipeline) and never learns which tiers sit below it.
 *
 * The interface is two-phase admission plus pinned reads:
 *
 *   reading:  open -> read/data ... -> close       (open pins a committed version)
 *   writing:  reserve -> write ... -> commit|abort (invisible to lookup until commit)
 *
 * A handle (`struct tier_handle *`) is owned by whoever received it and is given back exactly
 * once, by close (read handles) or by commit/abort (write handles). Handles may be used from
 * any thread; reads of one read handle may run in parallel (the kernel reads ahead while the
 * reader reads), every other use of a handle is by one thread at a time.
 *
 * Deadlines (TTL) are CLOCK_MONOTONIC nanoseconds; 0 means "no deadline". An expired block is
 * treated as absent by every op. Stat times are CLOCK_REALTIME nanoseconds.
 *
 * Errors are negative errno values with fixed meanings across tiers:
 *   -ENOENT  miss (absent, expired, or never committed)
 *   -ENOSPC  no room
 *   -EEXIST  exclusive reservation of an id that is reserved or committed
 *   -EFBIG   a write past the size limit of a block
 *   -EIO     the stored bytes are damaged or the device failed (-EBADMSG inside, never here)
 *   -ENOMEM  out of memory
 * A NULL op means the tier does not support it; callers check.
 */
#ifndef UCM_TIER_H
#define UCM_TIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

/* The 16-byte name of a block, shown as 32 lowercase hex characters (src/blockid.h has the
 * daemon's helpers). */
#define BLOCKID_LEN 16
#define BLOCKID_HEX_LEN 32
/* Number of shards ids are spread over (directories on disk, index shards, readdir). */
#define BLOCKID_SHARDS 4096

struct blockid {
	uint8_t b[BLOCKID_LEN];
};

/* The shard of an id: its first 12 bits, i.e. the first three hex characters. */
static inline unsigned blockid_shard(const struct blockid *id)
{
	return ((unsigned)id->b[0] << 4) | (id->b[1] >> 4);
}

/* Where a block lives (block_attr.where). */
#define TIER_MEM 1u
#define TIER_DISK 2u

/* Codecs of stored bytes (block_attr.codec, on-disk header). */
enum tier_codec { CODEC_RAW = 0, CODEC_ZSTD_PLAIN = 1, CODEC_ZSTD_SHUF2 = 2, CODEC_ZSTD_SHUF4 = 4 };

struct block_attr {
	uint64_t size;      /* logical bytes */
	uint64_t stored;    /* bytes the disk tier holds for it (0 if none) */
	int64_t mtime;      /* commit time, wall clock ns */
	int64_t atime;      /* last access seen by the daemon, wall clock ns */
	int64_t deadline;   /* TTL deadline, monotonic ns; 0 = none */
	uint64_t version;   /* changes whenever a new version of the id is committed */
	uint32_t where;     /* TIER_MEM | TIER_DISK */
	uint32_t pins;      /* open readers */
	uint32_t codec;     /* enum tier_codec of the stored bytes */
	bool dirty;         /* (cache) not yet safe in the tier below */
	bool partial;       /* (pipeline, write handle) a commit now would find bytes missing */
};

/* One independently stored piece of a block (a chunk of chunk_size raw bytes). */
struct tier_chunk {
	uint32_t len;     /* stored bytes; == the raw length means stored raw */
	uint64_t csum;    /* XXH3-64 of the stored bytes */
};

/*
 * How a block's bytes are stored below the memory tier: a codec and, optionally, a table of
 * chunks that can be read and checked one at a time. Without a table (nchunks == 0) the
 * stored bytes are the raw bytes, checked as a whole.
 */
struct block_layout {
	uint32_t codec;              /* enum tier_codec */
	uint32_t chunk_size;         /* raw bytes per chunk (the last may be shorter) */
	uint32_t nchunks;
	uint64_t stored;             /* payload bytes: the sum of the chunk lengths */
	const struct tier_chunk *chunk;
	bool whole;                  /* no table, one checksum for all the stored bytes: a read
					of part of them reads and checks them all first */
};

/* What a commit publishes beside the bytes. */
struct block_meta {
	uint64_t size;     /* logical size */
	int64_t mtime;     /* wall clock ns */
	int64_t deadline;  /* monotonic ns, 0 = none */
	const struct block_layout *layout; /* disk tiers: how the written bytes are stored;
					      NULL = raw, one piece */
};

/* open() flags */
#define TIER_OPEN_INTERNAL 1u /* a reference for the daemon's own use: not counted as a pin */
#define TIER_OPEN_RUNS 2u     /* the caller reads a block stored raw in large requests of
				 its own, several at once: a disk tier reads nothing ahead
				 of them (an encoded one is read a chunk at a time, decoded
				 in between: reading ahead still pays there) */

/* reserve() flags */
#define TIER_RESERVE_EXCL 1u  /* fail -EEXIST if the id is committed or reserved */
#define TIER_RESERVE_TRUNC 2u /* a replacement starts empty instead of with the old bytes */
#define TIER_RESERVE_NOWAIT 4u /* (cache) fail -ENOSPC at once rather than wait for room */
#define TIER_RESERVE_SEQ 8u    /* the whole block will be written once, in order from 0: a
				  compressing tier may encode it as it arrives */
#define TIER_RESERVE_OVERWRITE 16u /* (cache) every byte is written before any is read or
				      committed: a reused buffer need not be cleared */
#define TIER_RESERVE_SHRINK 32u /* (disk) size_hint bounds the bytes to come, which may be
				   far fewer (encoded): room is made as they come, and blocks
				   are evicted for it only while the whole bound could fit */

/* commit() flags */
#define TIER_COMMIT_DIRTY 1u   /* (cache) bytes are not yet safe below: never evict them */
#define TIER_COMMIT_LOADED 2u  /* (cache) admission of a block loaded from below: only if absent */
#define TIER_COMMIT_DURABLE 4u /* (disk) durable before commit returns */
#define TIER_COMMIT_PIN 8u     /* the handle returned in *rd is a pin, not an internal ref */
#define TIER_COMMIT_TRY 16u    /* (pipeline) incomplete: fail -EIO but keep the handle usable */
#define TIER_COMMIT_FRESH 32u  /* (cache, with DIRTY) no version of the id is below yet:
				  counted in usage().fresh_blocks until clean */

struct tier;
struct tier_handle;
struct metrics;

/* Capacity and use, for statfs and metrics. */
struct tier_usage {
	uint64_t capacity;   /* bytes */
	uint64_t used;       /* bytes */
	uint64_t blocks;     /* committed, live blocks */
	uint64_t dirty_blocks; /* (cache) blocks not yet safe below */
	uint64_t fresh_blocks; /* (cache) dirty blocks of ids with no version below at all */
	uint64_t fs_free;    /* bytes free on the underlying filesystem (disk tiers), else 0 */
	uint64_t common_size; /* (disk) the size most of the latest used blocks have, 0 if none */
};

/* Called back by map_start(): data (valid until the handle is returned) or NULL and -errno. */
typedef void (*tier_map_fn)(void *arg, const void *data, int err);

/* Called for each id of a shard by list_shard(). Returning non-zero stops the listing. */
typedef int (*tier_list_fn)(const struct blockid *id, void *arg);

struct tier_ops {
	const char *name;

	/* Free everything; handles must all have been returned. */
	void (*destroy)(struct tier *t);

	/* (optional) Start background threads, once the daemon will not fork again (it forks to
	 * go to the background after the tiers are created). 0 or -errno. */
	int (*start)(struct tier *t);

	/* Attributes of the live committed version. 0, -ENOENT */
	int (*lookup)(struct tier *t, const struct blockid *id, struct block_attr *attr);

	/* For each of n ids whose hit[i] is 0, set it to 1 if the id is committed and live here.
	 * One pass for a whole lookup query: takes each lock once, pins nothing. */
	void (*present)(struct tier *t, const struct blockid *ids, size_t n, uint8_t *hit);

	/* Open the live committed version for reading; pins it unless TIER_OPEN_INTERNAL.
	 * 0, -ENOENT, -EIO, -ENOMEM, -ENOSPC (a cache that cannot load it) */
	int (*open)(struct tier *t, const struct blockid *id, unsigned flags,
		    struct tier_handle **out);

	/* Read from a read or write handle. Count (short only at the end of the block), -EIO,
	 * -ENOMEM.
	 * A disk tier reads the stored payload (see layout()); every other tier the raw bytes. */
	ssize_t (*read)(struct tier_handle *h, void *buf, size_t len, uint64_t off);

	/* (disk) How an open block is stored; valid until the handle is closed. 0 */
	int (*layout)(struct tier_handle *h, struct block_layout *out);

	/* (disk, optional) The stored bytes of an open read handle passed every checksum but
	 * cannot be decoded: move the file to quarantine, count and log it, forget the block. */
	void (*damaged)(struct tier_handle *h, const char *why);

	/* The bytes of a handle held in memory, for replies without a copy: a pointer valid
	 * until the handle is returned, or NULL if this handle's bytes are not in memory. */
	const void *(*data)(struct tier_handle *h);

	/* (memory) A new descriptor (the caller closes it) of a file that holds exactly the bytes
	 * of this open version, for the kernel to read without the daemon (FUSE passthrough).
	 * The file's bytes never change from then on, even after the handle is returned and the
	 * block has left memory: whoever still maps the file keeps them. >= 0; -ENOTSUP if the
	 * bytes are not in such a file (anonymous memory, a small block, a block not yet all in
	 * memory, a write handle); another -errno. */
	int (*backing)(struct tier_handle *h);

	/* (pipeline) Bytes [off, off + len) of an open block in memory, fetched first if need be,
	 * for replies without a copy: a pointer valid until the handle is returned, or NULL if
	 * this handle cannot (then copy with read(), which also reports any error). The range
	 * must lie within the block. */
	const void *(*map)(struct tier_handle *h, uint64_t off, size_t len);

	/* (pipeline) As map(), without waiting for the disk: 1 with *out if the bytes are in
	 * memory now; 0 if they are being fetched: done(arg, ...) is then called exactly once,
	 * by the thread that fetched the last of them (possibly before map_start returns);
	 * -ENOTSUP if this handle cannot (copy with read()); another -errno if it failed. */
	int (*map_start)(struct tier_handle *h, uint64_t off, size_t len, tier_map_fn done,
			 void *arg, const void **out);

	/* Attributes of whatever the handle refers to (for a write handle: the reservation). */
	int (*stat)(struct tier_handle *h, struct block_attr *attr);

	/* Return a read handle (unpin). */
	void (*close)(struct tier_handle *h);

	/* Reserve id for writing. size_hint is the expected size (0 if unknown).
	 * 0, -EEXIST (EXCL), -ENOSPC, -ENOMEM, -EIO */
	int (*reserve)(struct tier *t, const struct blockid *id, unsigned flags,
		       uint64_t size_hint, struct tier_handle **out);

	/* Write into a reservation. Count, -EFBIG, -ENOSPC, -EIO, -ENOMEM */
	ssize_t (*write)(struct tier_handle *h, const void *buf, size_t len, uint64_t off);

	/* Declare the size of a reservation (ftruncate). 0, -EFBIG, -ENOSPC, -EIO, -ENOMEM */
	int (*truncate)(struct tier_handle *h, uint64_t size);

	/* Ask that this reservation's commit be durable (fsync before close). 0 */
	int (*set_durable)(struct tier_handle *h);

	/* (stages) Someone now waits for this reservation to be safe below: spend no more CPU
	 * on the bytes still to come (a compressing stage passes them on as they are). true if
	 * they will take more room than they would have (the block is worth writing again
	 * later, when nobody waits), false if nothing changes. Optional. */
	bool (*hurry)(struct tier_handle *h);


	/* Publish a reservation atomically and give the handle back. With rd != NULL, also
	 * open the published version into *rd (pinned with TIER_COMMIT_PIN, else internal).
	 * 0; -EIO (incomplete: nothing published), -ENOSPC, -ENOMEM, -EEXIST (LOADED and already
	 * present). A failed TIER_COMMIT_LOADED admission leaves the handle with the caller, who
	 * may still be reading its bytes; so does -EIO with TIER_COMMIT_TRY. */
	int (*commit)(struct tier_handle *h, const struct block_meta *meta, unsigned flags,
		      struct tier_handle **rd);

	/* Drop a reservation and give the handle back. */
	void (*abort)(struct tier_handle *h);

	/* Remove the live version from this tier (open readers keep theirs). 0, -ENOENT */
	int (*remove)(struct tier *t, const struct blockid *id);

	/* Refresh recency and atime. 0, -ENOENT */
	int (*touch)(struct tier *t, const struct blockid *id);

	/* Set the deadline of a committed block (monotonic ns, 0 = none). 0, -ENOENT, -EIO */
	int (*set_deadline)(struct tier *t, const struct blockid *id, int64_t deadline);

	/* (pipeline) Set the TTL of id in ms (TTL_NONE clears it): of the block being written,
	 * counted from its commit, else of the committed block, counted from now.
	 * 0, -ENOENT, -EIO (the deadline could not be persisted), -ENOMEM */
	int (*set_ttl)(struct tier *t, const struct blockid *id, int64_t ttl_ms);

	/* (cache) the version is now safe in the tier below: it may be evicted. 0, -ENOENT */
	int (*mark_clean)(struct tier *t, const struct blockid *id, uint64_t version);

	/* Make the live version durable (fsync of data and directory).
	 * 0, -ENOENT, -EIO, -ENOSPC (it had to be written below first) */
	int (*sync)(struct tier *t, const struct blockid *id);

	/* Call fn for every live id of one shard (blockid_shard()), in no particular order. */
	int (*list_shard)(struct tier *t, unsigned shard, tier_list_fn fn, void *arg);

	/* Capacity and use. 0 */
	int (*usage)(struct tier *t, struct tier_usage *u);

	/* Reclaim the space of expired blocks now (a background sweep calls it). */
	void (*sweep)(struct tier *t);

	/* (pipeline) Load the listed blocks that are only in the tiers below into memory, several
	 * at once, as the daemon's own opens do (waiting for room that dumps make); returns once
	 * each is in memory or could not be. How many were loaded. */
	size_t (*prefetch)(struct tier *t, const struct blockid *ids, size_t n);

	/* Finish all background work (dumps) before returning. */
	void (*drain)(struct tier *t);

	/* Add this tier's samples (and those of the tiers it stacks) to m. */
	void (*metrics)(struct tier *t, struct metrics *m);
};

struct tier {
	const struct tier_ops *ops;
	void *priv;
};

/* Every handle starts with this. */
struct tier_handle {
	struct tier *tier;
};

/* Convenience wrappers that dispatch through the handle's tier. */
static inline ssize_t tier_read(struct tier_handle *h, void *buf, size_t len, uint64_t off)
{
	return h->tier->ops->read(h, buf, len, off);
}

static inline const void *tier_data(struct tier_handle *h)
{
	return h->tier->ops->data ? h->tier->ops->data(h) : NULL;
}

static inline bool tier_hurry(struct tier_handle *h)
{
	return h->tier->ops->hurry ? h->tier->ops->hurry(h) : false;
}

static inline void tier_close(struct tier_handle *h)
{
	if (h)
		h->tier->ops->close(h);
}

static inline int tier_start(struct tier *t)
{
	return t->ops->start ? t->ops->start(t) : 0;
}

static inline void tier_destroy(struct tier *t)
{
	if (t)
		t->ops->destroy(t);
}

/* --- Tiers as plugins --------------------------------------------------------------------- */

/*
 * This header is also the contract of a tier built outside the tree (`#include <tier.h>` with
 * the flags of `pkg-config --cflags ucmfs-tier`, or <ucmfs/tier.h>): a shared library that
 * exports
 *
 *	const struct tier_plugin *ucmfs_tier_plugin(void);
 *
 * returning a static description whose `abi` is the UCMFS_TIER_ABI it was compiled with. The
 * daemon loads it with dlopen when a stage name contains '/' or ends in ".so", refuses any
 * other ABI version, creates the tier through `create`, and unloads the library only after
 * the tier's destroy has returned. The built-in tiers are described by the same struct.
 *
 * A store (TIER_KIND_STORE) keeps blocks itself: it must provide destroy, lookup, present,
 * open, read, stat, close, reserve, write, truncate, commit, abort, remove, touch,
 * set_deadline, sync, list_shard and usage, and honour TIER_RESERVE_EXCL and
 * TIER_RESERVE_TRUNC, TIER_OPEN_INTERNAL (a reference, not a pin) and TIER_COMMIT_DURABLE;
 * the other ops may be NULL and the other flags ignored. Its bytes are
 * read back raw unless it also provides layout() (then a compress stage may sit over it).
 * A stage (TIER_KIND_STAGE) sits over the tier below it, which it owns from then on (also
 * when create fails), and passes through what it does not change.
 * `build/ucm-tier-check LIB.so` runs the daemon's tier contract suite against a store.
 */
/* Any change to a struct or a flag of this header that a built library would see differently
 * makes a new ABI version. A new flag that a tier may ignore (TIER_OPEN_RUNS) is not one. */
#define UCMFS_TIER_ABI 2
#define UCMFS_TIER_ENTRY "ucmfs_tier_plugin"

enum tier_kind {
	TIER_KIND_STORE = 1,  /* bottom of a pipe: keeps the bytes */
	TIER_KIND_STAGE = 2,  /* between: transforms what it passes to the tier below */
	TIER_KIND_MEMORY = 3, /* top of a pipe: the daemon's memory tier (built in only) */
};

/* One "key": "value" of the stage's options in the topology file (numbers as text). */
struct tier_param {
	const char *key;
	const char *value;
};

struct ucm_options;

/* What create() is given. Pointers are valid only during the call. */
struct tier_setup {
	const char *name;               /* the stage's place in the topology, for messages */
	const struct tier_param *param; /* its options, in the file's order */
	size_t nparam;
	struct tier *below;             /* TIER_KIND_STAGE: the tier under it; else NULL */
	uint64_t max_block;             /* largest block the daemon will write */
	bool durable;                   /* the mount wants every commit durable */
	const struct ucm_options *options; /* built-in tiers: the mount's options with this
					     stage's applied; NULL for plugins */
	char *err;                      /* create() failing writes a one-line reason here */
	size_t errlen;
};

struct tier_plugin {
	uint32_t abi;                   /* UCMFS_TIER_ABI */
	const char *name;
	enum tier_kind kind;
	/* The option keys it takes, NULL-terminated: the daemon refuses any other before
	 * create. NULL: create checks them itself. */
	const char *const *keys;
	/* 0 with *out, or -errno with a reason in s->err. Unknown keys in s->param are an error
	 * (-EINVAL naming the key): a misspelt option must not be ignored. */
	int (*create)(const struct tier_setup *s, struct tier **out);
};

typedef const struct tier_plugin *(*tier_plugin_fn)(void);

/* The value of key among the stage's options, or NULL. */
static inline const char *tier_param_get(const struct tier_setup *s, const char *key)
{
	for (size_t i = 0; i < s->nparam; i++)
		if (!strcmp(s->param[i].key, key))
			return s->param[i].value;
	return NULL;
}

#endif
