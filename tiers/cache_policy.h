/*
 * Replacement policies of the memory tier.
 *
 * A policy orders the committed blocks that are safe below (clean), pinned or not. The cache
 * owns every other piece of state and calls the policy, under the cache lock, when an entry
 * becomes clean (admitted), is used (touched: a read's open, a touch), stops being a candidate
 * (removed: evicted, replaced, removed, dirty), or when it needs room (victim: the entry to
 * evict, skipping those the cache says are held right now). A new policy is one file
 * with one `const struct cache_policy_ops`.
 */
#ifndef UCM_CACHE_POLICY_H
#define UCM_CACHE_POLICY_H

#include <stdbool.h>
#include <stdint.h>

/* Embedded in each cache entry; the policy owns these fields while the entry is admitted. */
struct policy_entry {
	struct policy_entry *prev, *next;
	uint8_t referenced; /* clock's second-chance bit */
};

struct cache_policy_ops {
	const char *name;
	/* 0 or -ENOMEM */
	int (*create)(void **priv);
	void (*destroy)(void *priv);
	/* e becomes a candidate, as the most recent entry */
	void (*admitted)(void *priv, struct policy_entry *e);
	/* e was used again */
	void (*touched)(void *priv, struct policy_entry *e);
	/* e stops being a candidate (replaced, removed, evicted) */
	void (*removed)(void *priv, struct policy_entry *e);
	/* the entry to evict next among those ok() accepts, still admitted; NULL if none */
	struct policy_entry *(*victim)(void *priv, bool (*ok)(struct policy_entry *e, void *arg),
				       void *arg);
};

extern const struct cache_policy_ops cache_policy_clock;
extern const struct cache_policy_ops cache_policy_lru;
extern const struct cache_policy_ops cache_policy_fifo;

#endif
