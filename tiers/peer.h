/* A peer: blocks split between branches by a route. See the design notes in tiers/peer.c. */
#ifndef UCM_PEER_H
#define UCM_PEER_H

#include <stdint.h>

#include "tiers/tier.h"

#define PEER_MAX 8

enum peer_route {
	ROUTE_TTL,  /* by the block's TTL: branch i takes TTL < bound[i] (ms); no TTL: the last */
	ROUTE_SIZE, /* by its size: branch i takes size <= bound[i] (bytes) */
};

struct peer_config {
	enum peer_route route;
	int n;                          /* branches, 2 .. PEER_MAX */
	struct tier *branch[PEER_MAX];  /* owned by the peer from then on (also on failure) */
	uint64_t bound[PEER_MAX - 1];   /* n - 1 of them, each above the one before */
	int64_t default_ttl_ms;         /* the mount's ttl= (TTL_NONE: none) */
};

/* 0 or -ENOMEM, -EINVAL. */
int peer_create(const struct peer_config *cfg, struct tier **out);

struct peer_counters {
	uint64_t routed[PEER_MAX]; /* blocks published in each branch */
	uint64_t moved;            /* writes copied to another branch at commit */
};
void peer_counters(struct tier *t, struct peer_counters *out);

extern const struct tier_ops tier_peer_ops;

#endif
