/*
 * LRU and FIFO: one list, coldest entry at the head, victims taken from the head.
 * LRU moves an entry to the tail on every use; FIFO keeps the order in which blocks were
 * committed (or loaded).
 */
#include <errno.h>
#include <stdlib.h>

#include "tiers/cache_policy_list.h"

struct list_policy {
	struct policy_entry head; /* head.next is the coldest, head.prev the most recent */
};

static int list_create(void **priv)
{
	struct list_policy *l = calloc(1, sizeof(*l));

	if (!l)
		return -ENOMEM;
	plist_init(&l->head);
	*priv = l;
	return 0;
}

static void list_destroy(void *priv)
{
	free(priv);
}

static void list_admitted(void *priv, struct policy_entry *e)
{
	plist_insert_before(&((struct list_policy *)priv)->head, e);
}

static void lru_touched(void *priv, struct policy_entry *e)
{
	plist_del(e);
	plist_insert_before(&((struct list_policy *)priv)->head, e);
}

static void fifo_touched(void *priv, struct policy_entry *e)
{
	(void)priv;
	(void)e;
}

static void list_removed(void *priv, struct policy_entry *e)
{
	(void)priv;
	plist_del(e);
}

static struct policy_entry *list_victim(void *priv,
				       bool (*ok)(struct policy_entry *e, void *arg), void *arg)
{
	struct list_policy *l = priv;

	/* from the coldest; held entries (few: open readers) are passed over */
	for (struct policy_entry *e = l->head.next; e != &l->head; e = e->next)
		if (ok(e, arg))
			return e;
	return NULL;
}

const struct cache_policy_ops cache_policy_lru = {
	.name = "lru",
	.create = list_create,
	.destroy = list_destroy,
	.admitted = list_admitted,
	.touched = lru_touched,
	.removed = list_removed,
	.victim = list_victim,
};

const struct cache_policy_ops cache_policy_fifo = {
	.name = "fifo",
	.create = list_create,
	.destroy = list_destroy,
	.admitted = list_admitted,
	.touched = fifo_touched,
	.removed = list_removed,
	.victim = list_victim,
};
