/*
 * Helpers for the suites that drive a `struct tier` (contract, cache, posix, pipeline):
 * write a whole block, read one back and compare it with its deterministic content, and
 * build the tiers the suites use.
 *
 * Block contents come from ut_fill(id, seed, ...), so any reader can check any byte it gets
 * without knowing who wrote it.
 */
#ifndef UCM_TESTS_TIER_UTIL_H
#define UCM_TESTS_TIER_UTIL_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "src/options.h"
#include "tiers/tier.h"

/* Reserve, write [0, size) in pieces of `chunk` bytes (0: one piece), commit with
 * meta {size, now, deadline}. Returns the first error (the handle is given back). */
int tu_put(struct tier *t, const struct blockid *id, uint64_t seed, uint64_t size,
	   unsigned rflags, unsigned cflags, int64_t deadline);
int tu_put_chunked(struct tier *t, const struct blockid *id, uint64_t seed, uint64_t size,
		   size_t chunk, unsigned rflags, unsigned cflags, int64_t deadline);

/* Write [off, off+len) of block (id, seed) into a reservation; returns write()'s result
 * for the first piece that fails, else len. */
ssize_t tu_write(struct tier_handle *h, const struct blockid *id, uint64_t seed, uint64_t off,
		 uint64_t len);

/* The meta a commit of `size` bytes publishes: mtime now, the given deadline. */
struct block_meta tu_meta(uint64_t size, int64_t deadline);

/* Read [off, off+len) through h and compare it with block (id, seed) of `size` bytes
 * (a read past the end must be short). Fails the test on any mismatch. */
void tu_check_read(struct tier_handle *h, const struct blockid *id, uint64_t seed,
		   uint64_t size, uint64_t off, uint64_t len);

/* Open id, check size and every byte, close. */
void tu_expect(struct tier *t, const struct blockid *id, uint64_t seed, uint64_t size);

/* Open id and read it whole: 0 if every byte matched, else the negative error of open or
 * read, or -EILSEQ on a size or content mismatch (no test failure). */
int tu_try_read(struct tier *t, const struct blockid *id, uint64_t seed, uint64_t size);

/* -ENOENT if lookup misses, else 0 (attr filled if not NULL). */
int tu_lookup(struct tier *t, const struct blockid *id, struct block_attr *attr);

/* The ids list_shard() reports for one shard (malloc'ed, *n set; never NULL). */
struct blockid *tu_list(struct tier *t, unsigned shard, size_t *n);

/* Let background work finish (drain op, if any). */
void tu_settle(struct tier *t);

/* The value of the sample `name` (with or without labels) of t's metrics; 0 if it has none.
 * For families with one sample per tier. */
double tu_metric(struct tier *t, const char *name);

/* --- building tiers ---------------------------------------------------------------------- */

struct tier *tu_cache(uint64_t capacity, unsigned dirty_wait_ms); /* LRU */
struct tier *tu_cache_policy(uint64_t capacity, unsigned dirty_wait_ms, enum ucm_policy policy);
struct tier *tu_posix(const char *dir, enum ucm_layout layout);
/* The same with the IO engine chosen: aio reads O_DIRECT through libaio (io_depth 4). */
struct tier *tu_posix_io(const char *dir, enum ucm_layout layout, bool aio);

/*
 * The store in the tier library lib (a path; tiers/plugin.c loads it as the daemon does),
 * created with the n params and, unless one of them is `path`, path=DIR of a fresh temporary
 * directory (ut_mkdtemp: in a test case only), whose name goes into dir (else dir is "").
 * 0 with *out, or -errno with a one-line reason in err: the loader's, "not a store", or the
 * tier's own.
 */
int tu_plugin_create(const char *lib, const struct tier_param *param, size_t n, char *dir,
		     size_t dirlen, struct tier **out, char *err, size_t errlen);
/* The same in a test case, which fails if the store cannot be made; started (tier_start). */
struct tier *tu_plugin_store(const char *lib, const struct tier_param *param, size_t n,
			     char *dir, size_t dirlen);

struct tu_stack {
	struct tier *t;         /* the pipeline */
	struct tier *cache;     /* owned by the pipeline; NULL if none */
	struct tier *below;     /* owned by the pipeline; NULL if none (compress if asked) */
	struct tier *disk;      /* the posix (or stripe) tier at the bottom */
	char dir[PATH_MAX];     /* the STORE (the first one when striped), "" if none */
};

struct tu_stack_config {
	uint64_t cache_capacity;   /* 0: no cache */
	bool posix;                /* a posix tier below */
	enum ucm_layout layout;
	uint64_t block_size;
	uint64_t max_block;        /* 0: 256M */
	int64_t default_ttl_ms;    /* 0: none */
	bool durable;
	unsigned dirty_wait_ms;    /* 0: 5000 when there is a tier below */
	bool no_start;             /* do not start the dump workers */
	bool compress;             /* a compress tier (zstd) over the disk, as the daemon has */
	uint32_t chunk_size;       /* its chunk size; 0: the default */
	int nstores;               /* > 1: a stripe over that many posix tiers */
	bool hurry;                /* fsyncs behind other dumps hurry them (sync_compress=defer) */
};

void tu_stack_open(struct tu_stack *s, const struct tu_stack_config *cfg);
void tu_stack_close(struct tu_stack *s);

/* Path of a block file of a posix store. */
void tu_block_path(const char *store, enum ucm_layout layout, const struct blockid *id,
		   char *out, size_t len);

/* This host's name as the posix tier writes it into temp file names. */
void tu_hostname(char *out, size_t len);

#endif
