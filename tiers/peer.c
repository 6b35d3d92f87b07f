/*
 * A peer: blocks split between branches (pipelines) by a route.
 *
 * DESIGN
 *
 * Where a block lives. Each id lives in one branch, chosen when it is published from what the
 * writer said by then: its TTL (user.ucm.ttl set before close, else the mount's ttl=) or its
 * size. Everything that names a committed id -- lookup, open, query, prefetch, TTL changes,
 * unlink -- goes to the branch that holds it, found by asking the branches in order (a miss
 * costs one lookup per branch; branches answer from their own indexes). The choice survives a
 * remount as far as its branch does: a branch with a store finds its blocks again at start.
 *
 * Writes. A write of an id that a branch holds is reserved there at once (a replacement
 * starts from the old bytes there, as in any pipeline). A new id is placed at its first write,
 * truncate or close, by what is known then: a TTL set on the open file before its bytes, the
 * mount's ttl=, the size declared or hinted. The TTL may also come after the bytes, so the
 * last writer's close routes again; if the branch changed, the block's bytes are copied into a
 * reservation of the new branch, which publishes it, and the first reservation is dropped: a
 * short-lived block never reaches the disk of the other branch either way, and only a TTL
 * given late costs the copy. A write that is incomplete at close is not moved (its branch
 * refuses it as any pipeline does).
 *
 * One version. A publication in one branch removes the id from the others, under the id's
 * stripe, so that lookups (which also take it) never see two versions.
 *
 * Handles. Read handles are the branches' own: operations on them go to the tier that made
 * them. A write handle is the peer's: it wraps the branch's reservation, which may change.
 */
#include "tiers/peer.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/clock.h"
#include "src/idmap.h"
#include "src/metrics.h"
#include "src/units.h"

#define NSTRIPES 64
#define COPY_CHUNK (1u << 20)

/* The writers of one id. */
struct psession {
	struct idnode node;
	int branch;             /* where its reservations are, once placed */
	bool placed;            /* branch chosen (p->lock): at reserve for an id some branch
				   holds, else at the first write, truncate or commit */
	unsigned refs;          /* open writers; p->lock */
	int64_t ttl_ms;         /* as set on the write; TTL_NONE: none */
	bool ttl_set;           /* else the mount's default applies */
	atomic_bool wrote;      /* a write or truncate came through: there is something to route */
	atomic_bool durable;
};

struct pwh {
	struct tier_handle base; /* base.tier: the peer */
	struct tier_handle *in;  /* the branch's reservation; NULL until placed */
	struct psession *s;
	unsigned flags;          /* of the reservation */
	uint64_t size_hint;      /* of the reservation (a size declared before it is placed) */
};

struct peer {
	struct tier tier;
	enum peer_route route;
	int n;
	struct tier *branch[PEER_MAX];
	uint64_t bound[PEER_MAX - 1];
	int64_t default_ttl_ms;
	pthread_mutex_t lock;    /* sessions */
	struct idmap sessions;
	pthread_mutex_t stripe[NSTRIPES];
	atomic_uint_fast64_t routed[PEER_MAX], moved;
};

static struct peer *peer_of(struct tier *t)
{
	return t->priv;
}

static bool is_peer_handle(struct tier_handle *h)
{
	return h->tier->ops == &tier_peer_ops;
}

static pthread_mutex_t *stripe_of(struct peer *p, const struct blockid *id)
{
	return &p->stripe[blockid_hash(id) % NSTRIPES];
}

/* The branch a block of this TTL and size belongs in. */
static int route(const struct peer *p, int64_t ttl_ms, uint64_t size)
{
	if (p->route == ROUTE_TTL) {
		if (ttl_ms == TTL_NONE)
			return p->n - 1;
		for (int i = 0; i < p->n - 1; i++)
			if ((uint64_t)ttl_ms < p->bound[i])
				return i;
		return p->n - 1;
	}
	for (int i = 0; i < p->n - 1; i++)
		if (size <= p->bound[i])
			return i;
	return p->n - 1;
}

/* The branch that holds the live version of id, or -1. Caller holds the id's stripe. */
static int holder(struct peer *p, const struct blockid *id)
{
	for (int i = 0; i < p->n; i++)
		if (p->branch[i]->ops->lookup(p->branch[i], id, NULL) == 0)
			return i;
	return -1;
}

static int find(struct peer *p, const struct blockid *id)
{
	int b;

	pthread_mutex_lock(stripe_of(p, id));
	b = holder(p, id);
	pthread_mutex_unlock(stripe_of(p, id));
	return b;
}

/* --- ops by id ------------------------------------------------------------------------- */

static int peer_lookup(struct tier *t, const struct blockid *id, struct block_attr *attr)
{
	struct peer *p = peer_of(t);
	int rc = -ENOENT;

	pthread_mutex_lock(stripe_of(p, id));
	for (int i = 0; i < p->n && rc == -ENOENT; i++)
		rc = p->branch[i]->ops->lookup(p->branch[i], id, attr);
	pthread_mutex_unlock(stripe_of(p, id));
	return rc;
}

static void peer_present(struct tier *t, const struct blockid *ids, size_t n, uint8_t *hit)
{
	struct peer *p = peer_of(t);

	for (int i = 0; i < p->n; i++)
		p->branch[i]->ops->present(p->branch[i], ids, n, hit);
}

static int peer_open(struct tier *t, const struct blockid *id, unsigned flags,
		     struct tier_handle **out)
{
	struct peer *p = peer_of(t);

	/* the holder may change between finding and opening it (a move, a replacement): ask
	 * again, a bounded number of times */
	for (int tries = 0; tries < 4; tries++) {
		int b = find(p, id), rc;

		if (b < 0)
			return -ENOENT;
		rc = p->branch[b]->ops->open(p->branch[b], id, flags, out);
		if (rc != -ENOENT)
			return rc;
	}
	return -ENOENT;
}

/* An op on the branch that holds id (the pipeline ops that a branch may lack: -ENOTSUP). */
#define ON_HOLDER(op, ...)                                                        \
	do {                                                                      \
		struct peer *p = peer_of(t);                                      \
		int b = find(p, id);                                              \
		if (b < 0)                                                        \
			return -ENOENT;                                           \
		if (!p->branch[b]->ops->op)                                       \
			return -ENOTSUP;                                          \
		return p->branch[b]->ops->op(p->branch[b], id, ##__VA_ARGS__);    \
	} while (0)

static int peer_touch(struct tier *t, const struct blockid *id)
{
	ON_HOLDER(touch);
}

static int peer_set_deadline(struct tier *t, const struct blockid *id, int64_t deadline)
{
	ON_HOLDER(set_deadline, deadline);
}

static int peer_sync(struct tier *t, const struct blockid *id)
{
	ON_HOLDER(sync);
}

/* Remove id from every branch but `keep` (-1: from all). 0 if any held it. Stripe held. */
static int drop_others(struct peer *p, const struct blockid *id, int keep)
{
	int rc = -ENOENT;

	for (int i = 0; i < p->n; i++)
		if (i != keep && p->branch[i]->ops->remove(p->branch[i], id) == 0)
			rc = 0;
	return rc;
}

static int peer_remove(struct tier *t, const struct blockid *id)
{
	struct peer *p = peer_of(t);
	int rc;

	pthread_mutex_lock(stripe_of(p, id));
	rc = drop_others(p, id, -1);
	pthread_mutex_unlock(stripe_of(p, id));
	return rc;
}

static int peer_set_ttl(struct tier *t, const struct blockid *id, int64_t ttl_ms)
{
	struct peer *p = peer_of(t);
	struct psession *s;
	struct idnode *n;
	int b = -1;

	/* a block being written: remember it for the route at close, and give it to the
	 * branch's write too (it applies there if the block stays) */
	pthread_mutex_lock(&p->lock);
	n = idmap_find(&p->sessions, id);
	if (n) {
		s = (struct psession *)n;
		s->ttl_ms = ttl_ms;
		s->ttl_set = true;
		b = s->placed ? s->branch : -2;
	}
	pthread_mutex_unlock(&p->lock);
	if (b == -2)
		return 0; /* not placed yet: it will be by this TTL */
	if (b < 0)
		b = find(p, id);
	if (b < 0)
		return -ENOENT;
	if (!p->branch[b]->ops->set_ttl)
		return -ENOTSUP;
	return p->branch[b]->ops->set_ttl(p->branch[b], id, ttl_ms);
}

/* --- writing --------------------------------------------------------------------------- */

/* Writer's handle done with: the session goes with its last writer. */
static void put_writer(struct peer *p, struct pwh *h)
{
	struct psession *s = h->s;

	pthread_mutex_lock(&p->lock);
	if (--s->refs == 0) {
		idmap_remove(&p->sessions, &s->node);
		free(s);
	}
	pthread_mutex_unlock(&p->lock);
	free(h);
}

/* The branch's reservation of a writer, made at its first write, truncate or commit if the
 * id was new: by then the writer has usually said its TTL, and the block goes straight to its
 * branch. 0 or the branch's error. */
static int place(struct peer *p, struct pwh *h)
{
	struct psession *s = h->s;
	int64_t ttl;
	bool ttl_set;
	int rc, b;

	if (h->in)
		return 0;
	pthread_mutex_lock(&p->lock);
	if (!s->placed) {
		s->branch = route(p, s->ttl_set ? s->ttl_ms : p->default_ttl_ms, h->size_hint);
		s->placed = true;
	}
	b = s->branch;
	ttl = s->ttl_ms;
	ttl_set = s->ttl_set;
	pthread_mutex_unlock(&p->lock);
	/* EXCL was checked at reserve, against the peer's writers and every branch */
	rc = p->branch[b]->ops->reserve(p->branch[b], &s->node.id, h->flags & ~TIER_RESERVE_EXCL,
					h->size_hint, &h->in);
	if (rc)
		return rc;
	/* a TTL given before the branch had this write applies there too */
	if (ttl_set && p->branch[b]->ops->set_ttl)
		p->branch[b]->ops->set_ttl(p->branch[b], &s->node.id, ttl);
	if (s->durable && h->in->tier->ops->set_durable)
		h->in->tier->ops->set_durable(h->in);
	return 0;
}

static int peer_reserve(struct tier *t, const struct blockid *id, unsigned flags,
			uint64_t size_hint, struct tier_handle **out)
{
	struct peer *p = peer_of(t);
	struct pwh *h = calloc(1, sizeof(*h));
	struct psession *s = NULL, *fresh = calloc(1, sizeof(*fresh));
	struct idnode *n;
	bool placed = false;
	int rc = 0, b;

	if (!h || !fresh) {
		free(h);
		free(fresh);
		return -ENOMEM;
	}
	h->base.tier = t;
	h->flags = flags;
	h->size_hint = size_hint;
	pthread_mutex_lock(&p->lock);
	n = idmap_find(&p->sessions, id);
	if (n && (flags & TIER_RESERVE_EXCL)) {
		rc = -EEXIST;
	} else if (n) {
		s = (struct psession *)n;  /* join its writers, in its branch */
		s->refs++;
		placed = s->placed;
	} else {
		s = fresh;
		fresh = NULL;
		s->node.id = *id;
		s->refs = 1;
		s->ttl_ms = TTL_NONE;
		/* a committed id is written in the branch that holds it (a replacement starts
		 * from its bytes there); a new one is placed at its first write */
		b = find(p, id);
		if (b >= 0) {
			s->branch = b;
			s->placed = placed = true;
		}
		if (b >= 0 && (flags & TIER_RESERVE_EXCL)) {
			free(s);
			s = NULL;
			rc = -EEXIST;
		} else if (idmap_insert(&p->sessions, &s->node)) {
			free(s);
			s = NULL;
			rc = -ENOMEM;
		}
	}
	pthread_mutex_unlock(&p->lock);
	free(fresh);
	h->s = s;
	if (rc == 0 && placed)
		rc = place(p, h);
	if (rc) {
		if (s)
			put_writer(p, h);
		else
			free(h);
		return rc;
	}
	*out = &h->base;
	return 0;
}

static ssize_t peer_write(struct tier_handle *th, const void *buf, size_t len, uint64_t off)
{
	struct pwh *h = (struct pwh *)th;
	int rc = place(peer_of(th->tier), h);

	if (rc)
		return rc;
	h->s->wrote = true;
	return h->in->tier->ops->write(h->in, buf, len, off);
}

static int peer_truncate(struct tier_handle *th, uint64_t size)
{
	struct pwh *h = (struct pwh *)th;
	int rc;

	if (!h->in)
		h->size_hint = size; /* the size it declares routes it */
	rc = place(peer_of(th->tier), h);
	if (rc)
		return rc;
	h->s->wrote = true;
	return h->in->tier->ops->truncate(h->in, size);
}

static int peer_set_durable(struct tier_handle *th)
{
	struct pwh *h = (struct pwh *)th;

	h->s->durable = true;
	if (!h->in)
		return 0; /* applied when it is placed */
	return h->in->tier->ops->set_durable ? h->in->tier->ops->set_durable(h->in) : 0;
}

/* Copy a complete write of `size` bytes into a reservation of branch b and publish it there
 * with its TTL (TTL_NONE: none).
 * 0 (the old reservation is then aborted by the caller) or -errno (nothing published). */
static int move(struct peer *p, struct pwh *h, int b, uint64_t size, int64_t ttl_ms,
		const struct block_meta *meta, unsigned flags, struct tier_handle **rd)
{
	struct tier *to = p->branch[b];
	struct tier_handle *res;
	char *buf = malloc(COPY_CHUNK);
	int rc;

	if (!buf)
		return -ENOMEM;
	rc = to->ops->reserve(to, &h->s->node.id, TIER_RESERVE_TRUNC | TIER_RESERVE_SEQ |
			      TIER_RESERVE_OVERWRITE, size, &res);
	if (rc) {
		free(buf);
		return rc;
	}
	rc = to->ops->truncate(res, size);
	for (uint64_t off = 0; rc == 0 && off < size;) {
		size_t len = size - off < COPY_CHUNK ? (size_t)(size - off) : COPY_CHUNK;
		ssize_t got = h->in->tier->ops->read(h->in, buf, len, off);

		if (got <= 0) {
			rc = got < 0 ? (int)got : -EIO;
			break;
		}
		ssize_t put = to->ops->write(res, buf, (size_t)got, off);

		if (put != got)
			rc = put < 0 ? (int)put : -EIO;
		off += (uint64_t)got;
	}
	free(buf);
	if (rc == 0 && to->ops->set_ttl)
		rc = to->ops->set_ttl(to, &h->s->node.id, ttl_ms);
	if (rc == 0 && h->s->durable && to->ops->set_durable)
		rc = to->ops->set_durable(res);
	if (rc) {
		to->ops->abort(res);
		return rc;
	}
	return to->ops->commit(res, meta, flags & ~TIER_COMMIT_TRY, rd);
}

static int peer_commit(struct tier_handle *th, const struct block_meta *meta, unsigned flags,
		       struct tier_handle **rd)
{
	struct pwh *h = (struct pwh *)th;
	struct peer *p = peer_of(th->tier);
	struct psession *s = h->s;
	const struct blockid *id = &s->node.id;
	struct block_attr a;
	int64_t ttl_ms;
	bool last;
	int rc, b;

	rc = place(p, h); /* a block closed without a write: an empty one */
	if (rc) {
		put_writer(p, h);
		return rc;
	}
	pthread_mutex_lock(&p->lock);
	last = s->refs == 1;
	ttl_ms = s->ttl_set ? s->ttl_ms : p->default_ttl_ms;
	b = s->branch;
	pthread_mutex_unlock(&p->lock);
	if (last && s->wrote && h->in->tier->ops->stat(h->in, &a) == 0 && !a.partial) {
		b = route(p, ttl_ms, a.size);
		if (b != s->branch) {
			rc = move(p, h, b, a.size, ttl_ms, meta, flags, rd);
			if (rc == 0) {
				h->in->tier->ops->abort(h->in);
				atomic_fetch_add(&p->moved, 1);
				goto published;
			}
			b = s->branch; /* the new branch could not take it: publish where it is */
		}
	}
	rc = h->in->tier->ops->commit(h->in, meta, flags, rd);
	if (rc == -EIO && (flags & TIER_COMMIT_TRY))
		return rc; /* the handle stays with its caller */
	if (rc || !last || !s->wrote) {
		put_writer(p, h);
		return rc;
	}
published:
	atomic_fetch_add(&p->routed[b], 1);
	pthread_mutex_lock(stripe_of(p, id));
	drop_others(p, id, b);
	pthread_mutex_unlock(stripe_of(p, id));
	put_writer(p, h);
	return 0;
}

static void peer_abort(struct tier_handle *th)
{
	struct pwh *h = (struct pwh *)th;

	if (h->in)
		h->in->tier->ops->abort(h->in);
	put_writer(peer_of(th->tier), h);
}

/* --- handles: a write handle is the peer's, a read handle its branch's ------------------ */

/* (a write not yet placed has no bytes: it reads as empty) */
static ssize_t peer_read(struct tier_handle *th, void *buf, size_t len, uint64_t off)
{
	struct tier_handle *in = is_peer_handle(th) ? ((struct pwh *)th)->in : th;

	return in ? in->tier->ops->read(in, buf, len, off) : 0;
}

static int peer_stat(struct tier_handle *th, struct block_attr *attr)
{
	struct tier_handle *in = is_peer_handle(th) ? ((struct pwh *)th)->in : th;

	if (!in) {
		memset(attr, 0, sizeof(*attr));
		attr->where = TIER_MEM;
		attr->mtime = attr->atime = wall_ns();
		return 0;
	}
	return in->tier->ops->stat(in, attr);
}

static const void *peer_data(struct tier_handle *th)
{
	struct tier_handle *in = is_peer_handle(th) ? ((struct pwh *)th)->in : th;

	return in ? tier_data(in) : NULL;
}

static int peer_backing(struct tier_handle *th)
{
	if (is_peer_handle(th) || !th->tier->ops->backing)
		return -ENOTSUP;
	return th->tier->ops->backing(th);
}

static const void *peer_map(struct tier_handle *th, uint64_t off, size_t len)
{
	if (is_peer_handle(th) || !th->tier->ops->map)
		return NULL;
	return th->tier->ops->map(th, off, len);
}

static int peer_map_start(struct tier_handle *th, uint64_t off, size_t len, tier_map_fn done,
			  void *arg, const void **out)
{
	if (is_peer_handle(th) || !th->tier->ops->map_start)
		return -ENOTSUP;
	return th->tier->ops->map_start(th, off, len, done, arg, out);
}

static void peer_close(struct tier_handle *th)
{
	th->tier->ops->close(th);
}

/* --- the whole tier -------------------------------------------------------------------- */

struct listing {
	struct peer *p;
	int branch;
	tier_list_fn fn;
	void *arg;
};

/* An id listed by a branch, unless a branch before it holds it too (a publication that is
 * removing it there right now): each id once. */
static int list_one(const struct blockid *id, void *arg)
{
	struct listing *l = arg;

	for (int i = 0; i < l->branch; i++)
		if (l->p->branch[i]->ops->lookup(l->p->branch[i], id, NULL) == 0)
			return 0;
	return l->fn(id, l->arg);
}

static int peer_list_shard(struct tier *t, unsigned shard, tier_list_fn fn, void *arg)
{
	struct peer *p = peer_of(t);
	struct listing l = { .p = p, .fn = fn, .arg = arg };
	int rc = 0;

	for (int i = 0; i < p->n && rc == 0; i++) {
		l.branch = i;
		rc = p->branch[i]->ops->list_shard(p->branch[i], shard, list_one, &l);
	}
	return rc;
}

static int peer_usage(struct tier *t, struct tier_usage *u)
{
	struct peer *p = peer_of(t);

	memset(u, 0, sizeof(*u));
	for (int i = 0; i < p->n; i++) {
		struct tier_usage b = { 0 };

		p->branch[i]->ops->usage(p->branch[i], &b);
		u->capacity += b.capacity;
		u->used += b.used;
		u->blocks += b.blocks;
		u->dirty_blocks += b.dirty_blocks;
		u->fresh_blocks += b.fresh_blocks;
		if (b.fs_free > u->fs_free)
			u->fs_free = b.fs_free;
		if (b.common_size)
			u->common_size = b.common_size;
	}
	return 0;
}

static void peer_sweep(struct tier *t)
{
	struct peer *p = peer_of(t);

	for (int i = 0; i < p->n; i++)
		if (p->branch[i]->ops->sweep)
			p->branch[i]->ops->sweep(p->branch[i]);
}

static void peer_drain(struct tier *t)
{
	struct peer *p = peer_of(t);

	for (int i = 0; i < p->n; i++)
		if (p->branch[i]->ops->drain)
			p->branch[i]->ops->drain(p->branch[i]);
}

/* Each branch loads the ids it holds; the branches one after the other (each loads several
 * at once). */
static size_t peer_prefetch(struct tier *t, const struct blockid *ids, size_t n)
{
	struct peer *p = peer_of(t);
	struct blockid *mine = malloc((n ? n : 1) * sizeof(*mine));
	int *where = malloc((n ? n : 1) * sizeof(*where));
	size_t loaded = 0;

	if (!mine || !where) {
		free(mine);
		free(where);
		return 0;
	}
	for (size_t k = 0; k < n; k++)
		where[k] = find(p, &ids[k]);
	for (int i = 0; i < p->n; i++) {
		size_t m = 0;

		for (size_t k = 0; k < n; k++)
			if (where[k] == i)
				mine[m++] = ids[k];
		if (m && p->branch[i]->ops->prefetch)
			loaded += p->branch[i]->ops->prefetch(p->branch[i], mine, m);
	}
	free(mine);
	free(where);
	return loaded;
}

static void peer_metrics(struct tier *t, struct metrics *m)
{
	struct peer *p = peer_of(t);
	struct peer_counters c;
	char label[32];

	peer_counters(t, &c);
	for (int i = 0; i < p->n; i++) {
		snprintf(label, sizeof(label), "branch=\"%d\"", i);
		metrics_counter(m, "ucmfs_peer_published_total",
				"Blocks published in each branch of the peer.", label, c.routed[i]);
	}
	metrics_counter(m, "ucmfs_peer_moved_total",
			"Writes moved to another branch at close (their TTL or size said so).", "",
			c.moved);
	for (int i = 0; i < p->n; i++) {
		const char *outer;

		if (!p->branch[i]->ops->metrics)
			continue;
		snprintf(label, sizeof(label), "branch=\"%d\"", i);
		outer = metrics_scope(m, label);
		p->branch[i]->ops->metrics(p->branch[i], m);
		metrics_scope(m, outer);
	}
}

void peer_counters(struct tier *t, struct peer_counters *out)
{
	struct peer *p = peer_of(t);

	memset(out, 0, sizeof(*out));
	for (int i = 0; i < p->n; i++)
		out->routed[i] = atomic_load(&p->routed[i]);
	out->moved = atomic_load(&p->moved);
}

static int peer_start(struct tier *t)
{
	struct peer *p = peer_of(t);

	for (int i = 0; i < p->n; i++) {
		int rc = tier_start(p->branch[i]);

		if (rc)
			return rc;
	}
	return 0;
}

static void peer_destroy(struct tier *t)
{
	struct peer *p = peer_of(t);

	for (int i = 0; i < p->n; i++)
		tier_destroy(p->branch[i]);
	idmap_destroy(&p->sessions);
	pthread_mutex_destroy(&p->lock);
	for (int i = 0; i < NSTRIPES; i++)
		pthread_mutex_destroy(&p->stripe[i]);
	free(p);
}

const struct tier_ops tier_peer_ops = {
	.name = "peer",
	.destroy = peer_destroy,
	.start = peer_start,
	.lookup = peer_lookup,
	.present = peer_present,
	.open = peer_open,
	.read = peer_read,
	.data = peer_data,
	.backing = peer_backing,
	.map = peer_map,
	.map_start = peer_map_start,
	.stat = peer_stat,
	.close = peer_close,
	.reserve = peer_reserve,
	.write = peer_write,
	.truncate = peer_truncate,
	.set_durable = peer_set_durable,
	.commit = peer_commit,
	.abort = peer_abort,
	.remove = peer_remove,
	.touch = peer_touch,
	.set_deadline = peer_set_deadline,
	.set_ttl = peer_set_ttl,
	.sync = peer_sync,
	.list_shard = peer_list_shard,
	.usage = peer_usage,
	.sweep = peer_sweep,
	.prefetch = peer_prefetch,
	.drain = peer_drain,
	.metrics = peer_metrics,
};

int peer_create(const struct peer_config *cfg, struct tier **out)
{
	struct peer *p = calloc(1, sizeof(*p));

	if (!p || cfg->n < 2 || cfg->n > PEER_MAX) {
		for (int i = 0; i < cfg->n && i < PEER_MAX; i++)
			tier_destroy(cfg->branch[i]);
		free(p);
		return p ? -EINVAL : -ENOMEM;
	}
	p->route = cfg->route;
	p->n = cfg->n;
	memcpy(p->branch, cfg->branch, sizeof(p->branch));
	memcpy(p->bound, cfg->bound, sizeof(p->bound));
	p->default_ttl_ms = cfg->default_ttl_ms;
	pthread_mutex_init(&p->lock, NULL);
	idmap_init(&p->sessions);
	for (int i = 0; i < NSTRIPES; i++)
		pthread_mutex_init(&p->stripe[i], NULL);
	p->tier.ops = &tier_peer_ops;
	p->tier.priv = p;
	*out = &p->tier;
	return 0;
}
