/*
 * ucmfs client: the calls an inference engine makes on a mounted ucmfs, in C.
 *
 * Two files (ucmfs.h, ucmfs.c), the C library and nothing else: copy them into an engine or
 * a connector, or link the installed libucmfs-client.so (Debian: libucmfs-client-dev;
 * `pkg-config --cflags --libs ucmfs-client`, then #include <ucmfs.h>). Everything goes through the filesystem as documented in ucmfs(8): a block is
 * the file MNT/<32 hex>, a prefix lookup is a query file under MNT/.ucm/query/ answered by
 * extended attributes in one round trip.
 *
 *   struct ucmfs *u;
 *   ucmfs_open("/mnt/ucm", &u);
 *   ucmfs_put(u, id, buf, len, NULL);                  // write and publish a block
 *   ucmfs_get(u, id, buf, len, 0, 0);                  // read it back (or a part of it)
 *   ucmfs_lookup(u, ids, n, &res, NULL);               // how many leading ids are stored?
 *   ucmfs_close(u);
 *
 * Errors: every call returns 0 (or a count) and -errno on failure, never sets errno for the
 * caller. A miss is -ENOENT. Thread safety: a struct ucmfs can be shared by any number of
 * threads; a writer or a prefetch handle belongs to one thread at a time.
 */
#ifndef UCMFS_CLIENT_H
#define UCMFS_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define UCMFS_ID_LEN 16
#define UCMFS_HEX_LEN 32
#define UCMFS_TTL_NONE (-1)  /* no deadline, in TTL arguments and ucmfs_info.ttl_ms */

typedef uint8_t ucmfs_id[UCMFS_ID_LEN];

struct ucmfs;

/* Open a mounted ucmfs (checks that MNT/.ucm/query exists). 0, -ENOMEM, -ENOTDIR (not a
 * ucmfs mount) or the error of open(2). *out is freed by ucmfs_close(). */
int ucmfs_open(const char *mountpoint, struct ucmfs **out);
/* Accepts NULL. */
void ucmfs_close(struct ucmfs *u);

/* 32 lowercase hex characters and a NUL into hex. */
void ucmfs_id_format(const ucmfs_id id, char hex[UCMFS_HEX_LEN + 1]);
/* Parse exactly 32 lowercase hex characters (len of them). 0 or -EINVAL. */
int ucmfs_id_parse(const char *hex, size_t len, ucmfs_id out);

/* --- writing -------------------------------------------------------------------------- */

enum {
	UCMFS_PUT_REPLACE = 1, /* replace a committed block (default: leave it, return 1) */
	UCMFS_PUT_DURABLE = 2, /* return once the block is durable on disk (fsync) */
};

struct ucmfs_put_opts {
	unsigned flags;      /* UCMFS_PUT_* */
	int64_t ttl_ms;      /* > 0: TTL of the new block; 0: the mount's default ttl= */
};

/*
 * Write len bytes of buf as block id and publish it (the size is declared first, so a crash
 * half-way never publishes a torn block). opts may be NULL. Returns 0 when written, 1 when the
 * block was already committed or being written by another writer (nothing written: ids are
 * content hashes), or -errno: -EFBIG (larger than block_size/max_block), -EIO (the commit
 * failed, e.g. len differs from block_size), -ENOSPC, -EACCES.
 */
int ucmfs_put(struct ucmfs *u, const ucmfs_id id, const void *buf, size_t len,
	      const struct ucmfs_put_opts *opts);

/* A block written in pieces (shards, layer by layer), published by ucmfs_writer_commit(). */
struct ucmfs_writer;

/* Reserve block id of `size` bytes. 0, 1 (already committed or reserved: *out is NULL, skip
 * it) or -errno. */
int ucmfs_writer_begin(struct ucmfs *u, const ucmfs_id id, uint64_t size,
		       const struct ucmfs_put_opts *opts, struct ucmfs_writer **out);
/* Write len bytes at off (any order; shard i of size s: off = i * s). 0 or -errno. */
int ucmfs_writer_write(struct ucmfs_writer *w, const void *buf, size_t len, uint64_t off);
/* Publish the block and free w. 0, or -EIO if some byte of the declared size was never
 * written (nothing is published), or another -errno. */
int ucmfs_writer_commit(struct ucmfs_writer *w);
/* Give up: nothing is published (unless every byte was already written, in which case the
 * complete block is published, as close(2) would). Frees w; accepts NULL. */
void ucmfs_writer_abort(struct ucmfs_writer *w);

/* --- reading -------------------------------------------------------------------------- */

enum {
	UCMFS_GET_DIRECT = 1, /* O_DIRECT: large one-shot reads, bypassing the page cache */
};

/*
 * Read up to len bytes of block id at offset off into buf (a whole block: off 0, len its size;
 * a shard: off = index * shard_size). Returns the bytes read (less than len only at the end
 * of the block), or -ENOENT (not stored, expired, or still being written), -EIO (damaged).
 */
ssize_t ucmfs_get(struct ucmfs *u, const ucmfs_id id, void *buf, size_t len, uint64_t off,
		  unsigned flags);
/* Shard `index` of `shard_size` bytes into buf: exactly shard_size bytes or -errno (-EIO if
 * the block ends inside the shard, -ENXIO if the shard starts past the end). */
int ucmfs_get_shard(struct ucmfs *u, const ucmfs_id id, uint64_t index, size_t shard_size,
		    void *buf, unsigned flags);

struct ucmfs_info {
	uint64_t size;     /* block length */
	uint64_t stored;   /* bytes stored on disk, 0 if not on disk (yet) */
	int64_t ttl_ms;    /* ms left, or UCMFS_TTL_NONE */
	unsigned pins;     /* open readers */
	char tier[16];     /* "mem", "disk" or "mem,disk" */
	char codec[24];    /* "raw", "zstd", "zstd+shuffle2", ... */
};

/* Size and attributes of block id. 0 or -ENOENT. */
int ucmfs_stat(struct ucmfs *u, const ucmfs_id id, struct ucmfs_info *out);

/* --- many ids at once: lookups, TTLs, prefetch ---------------------------------------- */

struct ucmfs_lookup_result {
	size_t prefix;     /* number of leading ids that are stored */
	int64_t last;      /* index of the last stored id, -1 if none */
	size_t hits;       /* number of stored ids */
};

/*
 * Which of n ids are committed and live, in one round trip per 30,000 ids (one answer of the
 * daemon, so prefix, last and hits are consistent with each other). hits may be NULL, else it
 * receives n bytes, 1 for a stored id and 0 for a miss. 0 or -errno.
 */
int ucmfs_lookup(struct ucmfs *u, const ucmfs_id *ids, size_t n, struct ucmfs_lookup_result *r,
		 uint8_t *hits);

/* TTL of one block: ms from now, or UCMFS_TTL_NONE (0 too) to clear it. 0 or -errno. */
int ucmfs_set_ttl(struct ucmfs *u, const ucmfs_id id, int64_t ttl_ms);
/* For each of n ids that is stored with a TTL: make its deadline at least now + ttl_ms.
 * Blocks without a TTL keep none. 0 or -errno. */
int ucmfs_extend_ttl(struct ucmfs *u, const ucmfs_id *ids, size_t n, int64_t ttl_ms);

/* Promote the blocks of ids that are only on disk into memory, in the background. */
struct ucmfs_prefetch;

/* Start it. 0 or -errno; *out is freed by ucmfs_prefetch_free(). */
int ucmfs_prefetch_start(struct ucmfs *u, const ucmfs_id *ids, size_t n,
			 struct ucmfs_prefetch **out);
/* 1 when the daemon is done with every id, 0 while pending, -errno. */
int ucmfs_prefetch_poll(struct ucmfs_prefetch *p);
/* Wait until done: 0, -ETIMEDOUT after timeout_ms (< 0: no limit), -errno. */
int ucmfs_prefetch_wait(struct ucmfs_prefetch *p, int timeout_ms);
/* Accepts NULL; a prefetch still running goes on in the daemon. */
void ucmfs_prefetch_free(struct ucmfs_prefetch *p);
/* Start and wait: 0, -ETIMEDOUT or -errno. */
int ucmfs_prefetch(struct ucmfs *u, const ucmfs_id *ids, size_t n, int timeout_ms);

/* The directory file descriptor of the mount (for openat/fstatat on MNT/<hex>). */
int ucmfs_dirfd(const struct ucmfs *u);

#ifdef __cplusplus
}
#endif

#endif
