/*
 * The pipeline: the one tier the FS layer talks to. See the design notes in tiers/pipeline.c.
 */
#ifndef UCM_PIPELINE_H
#define UCM_PIPELINE_H

#include <stdbool.h>
#include <stdint.h>

#include "src/options.h"
#include "tiers/tier.h"

struct pipeline_config {
	struct tier *cache;      /* top tier, or NULL (writes and reads go straight below) */
	struct tier *below;      /* the disk side (compress over posix, or posix), or NULL */
	uint64_t block_size;     /* 0 = unset */
	uint64_t max_block;
	int64_t default_ttl_ms;  /* TTL_NONE = none */
	bool durable;            /* every commit durable */
	bool shared;             /* other hosts share the store below (-o shared) */
	bool hurry;              /* a waited dump behind others is stored raw, encoded later */
	int64_t recode_delay_ms; /* ... this long after at the earliest (0: 1 s; tests lengthen
				  * it to order their steps before a rewrite) */
	unsigned dump_threads;    /* dumps written at once, at most (the CPU's share) */
	unsigned load_threads;    /* workers in all (at least dump_threads): the others load */
};

/* Stack cfg's tiers; the pipeline owns them from then on (also on failure).
 * 0 or -ENOMEM. Worker threads start with pipeline_start(). */
int pipeline_create(const struct pipeline_config *cfg, struct tier **out);

/* Start the background workers (after any fork; tier_ops.start). 0 or -errno. */
int pipeline_start(struct tier *t);

/* Counters for metrics and tests. */
struct pipeline_counters {
	uint64_t commits_ok, commits_incomplete, commits_failed;
	uint64_t dumps, dump_errors, loads, load_errors, spills, streamed_opens;
	uint64_t dump_yields;
	uint64_t dumps_hurried;          /* waited-for dumps stored raw from some point on */
	uint64_t recompressed, recompress_dropped, recompress_pending; /* and written again */
	uint64_t dump_queue, load_queue; /* queued or running */
	uint64_t reads_waiting;          /* reads waiting for pieces of a load */
};
void pipeline_counters(struct tier *t, struct pipeline_counters *out);

extern const struct tier_ops tier_pipeline_ops;

#endif
