/* The memory tier: see the design notes at the top of tiers/cache.c. */
#ifndef UCM_CACHE_H
#define UCM_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "src/options.h"
#include "tiers/tier.h"

struct cache_config {
	uint64_t capacity;      /* bytes of block buffers */
	enum ucm_policy policy;
	/* How long a reservation waits for dirty blocks to be written below before it fails
	 * -ENOSPC (ms); 0 = never wait (no tier below). */
	unsigned dirty_wait_ms;
	/* Memory ready before it is needed: a thread at idle priority keeps up to this many bytes
	 * of buffers (blocks and pooled ones together) allocated and faulted in, in buffers of
	 * the size most blocks have; 0 = none. See cache_start(). */
	uint64_t prefault;
	uint64_t size_hint;     /* that size if known (block_size=), else learnt from commits */
};

/* 0, -ENOMEM, -EINVAL (unknown policy). *out is owned by the caller (tier_destroy). */
int cache_create(const struct cache_config *cfg, struct tier **out);

/* Start the cache's own thread (the prefaulter), once the process will not fork again;
 * `size`, if not 0 and no size_hint was configured, is the size of the blocks it expects
 * first (those the tier below holds). 0 or -errno (the cache works without it). */
int cache_start(struct tier *t, uint64_t size);

/* The tier below refuses writes for now (stuck: dumps are parked until it takes them again):
 * a reservation does not wait for dirty blocks to become clean, it fails -ENOSPC at once. */
void cache_dumps_stuck(struct tier *t, bool stuck);

extern const struct tier_ops tier_cache_ops;

#endif
