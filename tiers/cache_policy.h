/*
 * Replacement policies of the memory tier.
 *
 * A policy only orders the entries that may be evicted right now (committed, unpinned and
 * safe below). The cache owns every other piece of state and calls the policy, under the
 * cache lock, when an entry becomes evictable (admitted), is used while evictable (touched),
 * stops being evictable (removed), or when it needs room (victim). A new policy is one file
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
	/* e becomes evictable, as the most recently used entry */
	void (*admitted)(void *priv, struct policy_entry *e);
	/* e, evictable, was used again */
	void (*touched)(void *priv, struct policy_entry *e);
	/* e stops being evictable (pinned, replaced, removed, evicted) */
	void (*removed)(void *priv, struct policy_entry *e);
	/* the entry to evict next, still admitted; NULL if none */
	struct policy_entry *(*victim)(void *priv);
};

extern const struct cache_policy_ops cache_policy_clock;
extern const struct cache_policy_ops cache_policy_lru;
extern const struct cache_policy_ops cache_policy_fifo;

#endif
