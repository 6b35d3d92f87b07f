/*
 * Striping: STORE a:b:c spreads blocks over several directories (disks). Each block lives in
 * the child its id hashes to, so every id-addressed op goes to exactly one child; listings and
 * usage combine all of them. Handles are the children's own: operations on a handle go to the
 * tier that made it.
 */
#include "tiers/stripe.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "src/blockid.h"

struct stripe {
	struct tier tier;
	struct tier *child[STRIPE_MAX];
	int n;
};

static struct stripe *st_of(struct tier *t)
{
	return t->priv;
}

/* The child that holds id. The hash's high bits: the low ones pick cache stripes. */
static struct tier *pick(struct tier *t, const struct blockid *id)
{
	struct stripe *s = st_of(t);

	return s->child[(blockid_hash(id) >> 32) % (uint64_t)s->n];
}

#define BY_ID(call) struct tier *c = pick(t, id); return c->ops->call

static int s_lookup(struct tier *t, const struct blockid *id, struct block_attr *attr)
{
	BY_ID(lookup)(c, id, attr);
}

static int s_open(struct tier *t, const struct blockid *id, unsigned flags,
		  struct tier_handle **out)
{
	BY_ID(open)(c, id, flags, out);
}

static int s_reserve(struct tier *t, const struct blockid *id, unsigned flags, uint64_t hint,
		     struct tier_handle **out)
{
	BY_ID(reserve)(c, id, flags, hint, out);
}

static int s_remove(struct tier *t, const struct blockid *id)
{
	BY_ID(remove)(c, id);
}

static int s_touch(struct tier *t, const struct blockid *id)
{
	BY_ID(touch)(c, id);
}

static int s_set_deadline(struct tier *t, const struct blockid *id, int64_t deadline)
{
	BY_ID(set_deadline)(c, id, deadline);
}

static int s_sync(struct tier *t, const struct blockid *id)
{
	BY_ID(sync)(c, id);
}

static void s_present(struct tier *t, const struct blockid *ids, size_t n, uint8_t *hit)
{
	struct stripe *s = st_of(t);

	/* each directory finds only its own ids */
	for (int i = 0; i < s->n; i++)
		s->child[i]->ops->present(s->child[i], ids, n, hit);
}

/* handle ops: the handle belongs to a child */
static ssize_t s_read(struct tier_handle *h, void *buf, size_t len, uint64_t off)
{
	return h->tier->ops->read(h, buf, len, off);
}

static int s_layout(struct tier_handle *h, struct block_layout *out)
{
	return h->tier->ops->layout(h, out);
}

static int s_stat(struct tier_handle *h, struct block_attr *attr)
{
	return h->tier->ops->stat(h, attr);
}

static void s_close(struct tier_handle *h)
{
	h->tier->ops->close(h);
}

static ssize_t s_write(struct tier_handle *h, const void *buf, size_t len, uint64_t off)
{
	return h->tier->ops->write(h, buf, len, off);
}

static int s_truncate(struct tier_handle *h, uint64_t size)
{
	return h->tier->ops->truncate(h, size);
}

static int s_commit(struct tier_handle *h, const struct block_meta *meta, unsigned flags,
		    struct tier_handle **rd)
{
	return h->tier->ops->commit(h, meta, flags, rd);
}

static void s_abort(struct tier_handle *h)
{
	h->tier->ops->abort(h);
}

struct list_ctx {
	tier_list_fn fn;
	void *arg;
	bool stopped;
};

static int list_one(const struct blockid *id, void *arg)
{
	struct list_ctx *l = arg;

	if (l->fn(id, l->arg))
		l->stopped = true;
	return l->stopped;
}

static int s_list_shard(struct tier *t, unsigned shard, tier_list_fn fn, void *arg)
{
	struct stripe *s = st_of(t);
	struct list_ctx l = { fn, arg, false };

	for (int i = 0; i < s->n && !l.stopped; i++)
		s->child[i]->ops->list_shard(s->child[i], shard, list_one, &l);
	return 0;
}

static int s_usage(struct tier *t, struct tier_usage *u)
{
	struct stripe *s = st_of(t);

	memset(u, 0, sizeof(*u));
	for (int i = 0; i < s->n; i++) {
		struct tier_usage c;

		s->child[i]->ops->usage(s->child[i], &c);
		u->capacity += c.capacity;
		u->used += c.used;
		u->blocks += c.blocks;
		u->fs_free += c.fs_free;
		if (!u->common_size)
			u->common_size = c.common_size; /* blocks spread evenly: any one says */
	}
	return 0;
}

static void s_sweep(struct tier *t)
{
	struct stripe *s = st_of(t);

	for (int i = 0; i < s->n; i++)
		if (s->child[i]->ops->sweep)
			s->child[i]->ops->sweep(s->child[i]);
}

static void s_metrics(struct tier *t, struct metrics *m)
{
	struct stripe *s = st_of(t);

	/* each directory reports with its own store label */
	for (int i = 0; i < s->n; i++)
		if (s->child[i]->ops->metrics)
			s->child[i]->ops->metrics(s->child[i], m);
}

static void s_destroy(struct tier *t)
{
	struct stripe *s = st_of(t);

	for (int i = 0; i < s->n; i++)
		tier_destroy(s->child[i]);
	free(s);
}

const struct tier_ops tier_stripe_ops = {
	.name = "stripe",
	.destroy = s_destroy,
	.lookup = s_lookup,
	.present = s_present,
	.open = s_open,
	.read = s_read,
	.layout = s_layout,
	.stat = s_stat,
	.close = s_close,
	.reserve = s_reserve,
	.write = s_write,
	.truncate = s_truncate,
	.commit = s_commit,
	.abort = s_abort,
	.remove = s_remove,
	.touch = s_touch,
	.set_deadline = s_set_deadline,
	.sync = s_sync,
	.list_shard = s_list_shard,
	.usage = s_usage,
	.sweep = s_sweep,
	.metrics = s_metrics,
};

int stripe_create(struct tier **children, int n, struct tier **out)
{
	struct stripe *s = calloc(1, sizeof(*s));

	if (!s || n < 1 || n > STRIPE_MAX) {
		for (int i = 0; i < n; i++)
			tier_destroy(children[i]);
		free(s);
		return s ? -EINVAL : -ENOMEM;
	}
	memcpy(s->child, children, (size_t)n * sizeof(*children));
	s->n = n;
	s->tier.ops = &tier_stripe_ops;
	s->tier.priv = s;
	*out = &s->tier;
	return 0;
}
