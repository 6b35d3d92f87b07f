/*
 * CLOCK (second chance): evictable entries on a ring swept by a hand. A use sets an entry's
 * referenced bit; the hand clears set bits as it passes and evicts the first entry whose bit
 * is clear. New entries join just behind the hand, so they are the last it reaches, with the
 * bit clear: a block touched since has its second chance over one that was not.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "tiers/cache_policy_list.h"

struct clock {
	struct policy_entry head; /* ring sentinel, skipped by the hand */
	struct policy_entry *hand;
	size_t n;                 /* entries on the ring */
};

static int clock_create(void **priv)
{
	struct clock *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	plist_init(&c->head);
	c->hand = &c->head;
	*priv = c;
	return 0;
}

static void clock_destroy(void *priv)
{
	free(priv);
}

static void clock_admitted(void *priv, struct policy_entry *e)
{
	struct clock *c = priv;

	e->referenced = 0;
	plist_insert_before(c->hand, e);
	c->n++;
}

static void clock_touched(void *priv, struct policy_entry *e)
{
	(void)priv;
	e->referenced = 1;
}

static void clock_removed(void *priv, struct policy_entry *e)
{
	struct clock *c = priv;

	if (c->hand == e)
		c->hand = e->next;
	plist_del(e);
	c->n--;
}

static struct policy_entry *clock_victim(void *priv,
					bool (*ok)(struct policy_entry *e, void *arg), void *arg)
{
	struct clock *c = priv;

	/* two sweeps at most: the first clears every bit it passes; held entries keep their
	 * bit and are passed over */
	for (size_t steps = 0; steps <= 2 * c->n + 1; steps++) {
		struct policy_entry *e = c->hand;

		c->hand = e->next;
		if (e == &c->head || !ok(e, arg))
			continue;
		if (!e->referenced) {
			c->hand = e; /* removed() moves the hand past it */
			return e;
		}
		e->referenced = 0;
	}
	return NULL;
}

const struct cache_policy_ops cache_policy_clock = {
	.name = "clock",
	.create = clock_create,
	.destroy = clock_destroy,
	.admitted = clock_admitted,
	.touched = clock_touched,
	.removed = clock_removed,
	.victim = clock_victim,
};
