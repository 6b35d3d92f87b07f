/* Striping: one disk tier over several, each block on the one its id hashes to. */
#ifndef UCM_STRIPE_H
#define UCM_STRIPE_H

#include "tiers/tier.h"

#define STRIPE_MAX 16

/* A tier over n children (owned from then on, also on failure). 0 or -ENOMEM. */
int stripe_create(struct tier **children, int n, struct tier **out);

extern const struct tier_ops tier_stripe_ops;

#endif
