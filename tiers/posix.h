/* The disk tier: one file per block under a STORE directory. See tiers/posix.c. */
#ifndef UCM_POSIX_H
#define UCM_POSIX_H

#include <stdbool.h>
#include <stdint.h>

#include "src/options.h"
#include "tiers/tier.h"

#define AIO_DEPTH 128 /* io=aio: IOs in flight per store (measured: docs/BENCHMARKS.md) */

struct posix_config {
	const char *root;        /* the STORE directory (created 0700 if missing) */
	enum ucm_layout layout;
	bool durable;            /* every commit is durable before it returns */
	uint64_t capacity;       /* physical bytes; 0 = keep 5% of the filesystem free */
	unsigned lock_wait_s;    /* how long to wait for a previous daemon of this host */
	bool aio;                /* reads through libaio and O_DIRECT (if STORE allows it) */
	unsigned io_depth;       /* aio: IOs in flight */
	int64_t io_timeout_ns;   /* aio: a read not done by then fails -EIO; 0 = no limit */
	int64_t io_test_stall_ns; /* tests only: see struct io_config */
	bool shared;             /* other hosts share the STORE (tiers/posix_shared.c): */
	int64_t shared_check_ms; /* entries are looked at again once older than this */
};

/*
 * Open (or create) a store: take the per-host store lock, remove this host's leftover temp
 * files, and rebuild the index from the directory tree (and the index the last clean stop of
 * this host saved: tiers/posix_scan.c); its destroy saves that index. Returns 0, -EBUSY
 * (another daemon of this host still holds the store after lock_wait_s), or -errno of the
 * failing system call; a one-line reason is logged.
 */
int posix_create(const struct posix_config *cfg, struct tier **out);

/* Counters of what the store met (for metrics and tests). */
struct posix_counters {
	uint64_t quarantined;   /* damaged block files moved to STORE/quarantine */
	uint64_t temp_removed;  /* leftover temp files deleted at start */
	uint64_t skipped;       /* entries that are not block files (wrong type, name) */
	uint64_t from_snapshot; /* blocks indexed at start from the index saved at a stop */
};
void posix_counters(struct tier *t, struct posix_counters *out);

extern const struct tier_ops tier_posix_ops;

#endif
