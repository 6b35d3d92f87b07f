/* LRU: a doubly linked list with the most recently used entry at the head. */
#include <errno.h>
#include <stdlib.h>

#include "tiers/cache_policy.h"

struct lru {
	struct policy_entry head; /* circular list sentinel: head.next is the most recent */
};

static int lru_create(void **priv)
{
	struct lru *l = calloc(1, sizeof(*l));

	if (!l)
		return -ENOMEM;
	l->head.next = l->head.prev = &l->head;
	*priv = l;
	return 0;
}

static void lru_destroy(void *priv)
{
	free(priv);
}

static void unlink_entry(struct policy_entry *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
	e->next = e->prev = NULL;
}

static void push_front(struct lru *l, struct policy_entry *e)
{
	e->next = l->head.next;
	e->prev = &l->head;
	l->head.next->prev = e;
	l->head.next = e;
}

static void lru_admitted(void *priv, struct policy_entry *e)
{
	push_front(priv, e);
}

static void lru_touched(void *priv, struct policy_entry *e)
{
	unlink_entry(e);
	push_front(priv, e);
}

static void lru_removed(void *priv, struct policy_entry *e)
{
	unlink_entry(e);
}

static struct policy_entry *lru_victim(void *priv)
{
	struct lru *l = priv;

	return l->head.prev == &l->head ? NULL : l->head.prev;
}

const struct cache_policy_ops cache_policy_lru = {
	.name = "lru",
	.create = lru_create,
	.destroy = lru_destroy,
	.admitted = lru_admitted,
	.touched = lru_touched,
	.removed = lru_removed,
	.victim = lru_victim,
};
