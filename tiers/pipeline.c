/*
 * The pipeline: memory cache on top, the disk side below, two-phase admission across both.
 *
 * DESIGN
 *
 * Writes. Every writer of an id shares one write session (content addressing: they write the
 * same bytes). A session owns one reservation, in the cache while it fits, else "spilled" to
 * the tier below (its bytes so far are copied down once and the rest is written there). A
 * session tracks the byte ranges written (extents) and any declared size (ftruncate). Each
 * writer's commit (its close) checks completeness; the last one publishes if the content is
 * complete then, and discards it otherwise.
 *
 *   publish in cache:  commit DIRTY (visible at once) -> dump job queued -> worker writes it
 *                      below -> mark_clean (now evictable)
 *   publish spilled:   the tier below commits it directly; the cache forgets older versions
 *   durable commit:    the dump runs in the committing thread before it returns
 *
 * Reads. open pins the cache's version; on a miss it loads the block from below into a cache
 * reservation and admits it (LOADED: only if nothing newer arrived meanwhile). If the cache has
 * no room that it could make without waiting, the read handle streams from below instead.
 *
 * Ordering across tiers. Three races could make the tier below disagree with the cache: a
 * slow dump of version 1 finishing after version 2's; a dump finishing after an unlink; a load
 * admitting a version that was replaced while it was read. All three are closed by a striped
 * lock per id (stripe_of()): a dump publishes below only if its version is still the cache's
 * live one, an unlink removes from both tiers, and a load admits only if the version below is
 * still the one it read, each under the id's stripe. The stripe is held across a rename, never
 * across the bulk of a transfer.
 *
 * A shared store (-o shared). Other hosts replace and remove blocks below without this host
 * knowing. A clean copy in memory (the bytes below, by commit time: the mtime of a version
 * goes down with its dump and up with its load) is therefore compared with the version below
 * before it answers a lookup, an open or a query (drop_stale()); the tier below looks at the
 * shared store itself once what it knows is older than shared= (tiers/posix_shared.c). A copy
 * whose version is no longer below leaves memory (its open readers keep it, whole) and the
 * caller goes on as on a miss. A dirty copy is this host's newer version on its way down.
 *
 * Locks and order: p->lock (sessions map) -> session lock -> stripe -> tier locks.
 * p->lock is never held across a tier call that can wait. Worker threads own dump jobs.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/clock.h"
#include "src/log.h"
#include "src/units.h"
#include "tiers/cache.h"
#include "tiers/compress.h"
#include "tiers/pipeline_int.h"
#include "tiers/posix.h"
#include "tiers/stripe.h"

struct session {
	struct idnode node;          /* in p->sessions while writers may join */
	bool listed;                 /* node is in p->sessions; protected by p->lock */
	int refs;                    /* writers holding it; protected by p->lock */
	pthread_mutex_t lock;        /* serializes everything below */
	struct tier_handle *res;     /* the reservation (cache, or below once spilled) */
	int err;                     /* why res is NULL */
	int write_err;               /* a write failed: the content is not what was meant */
	bool spilled;
	bool durable;
	bool replacing;
	bool modified;               /* written or resized since it was opened (or O_TRUNC) */
	struct extents ext;
	uint64_t declared;           /* ftruncate size, or NO_SIZE */
	_Atomic int64_t ttl_ms;      /* set under p->lock by set_ttl, read at publish */
};

#define NO_SIZE UINT64_MAX
#define SESSION(n) ((struct session *)((char *)(n) - offsetof(struct session, node)))

static int64_t deadline_from_ttl(int64_t ttl_ms)
{
	return ttl_ms == TTL_NONE || ttl_ms <= 0 ? 0 : mono_ns() + ttl_ms * 1000000;
}

/* --- lookup ------------------------------------------------------------------------------ */

/* A shared store: forget the clean copy of id in memory if another host replaced or removed
 * its version below (see the top of this file). */
static void drop_stale(struct pipeline *p, const struct blockid *id)
{
	struct block_attr a, b;
	pthread_mutex_t *st;

	if (!p->shared || !p->cache || !p->below ||
	    p->cache->ops->lookup(p->cache, id, &a) || a.dirty)
		return;
	/* outside the stripe: this may ask the shared store */
	if (p->below->ops->lookup(p->below, id, &b) == 0 && b.mtime == a.mtime)
		return;
	st = stripe_of(p, id);
	pthread_mutex_lock(st);
	/* under the stripe no commit, dump or load of id lands in between */
	if (p->cache->ops->lookup(p->cache, id, &a) == 0 && !a.dirty &&
	    (p->below->ops->lookup(p->below, id, &b) || b.mtime != a.mtime) &&
	    p->cache->ops->remove(p->cache, id) == 0)
		counter_add(&p->stale_dropped, 1);
	pthread_mutex_unlock(st);
}

static int pipe_lookup(struct tier *t, const struct blockid *id, struct block_attr *attr)
{
	struct pipeline *p = pipe_of(t);
	struct block_attr a, b;
	int rc = -ENOENT;

	drop_stale(p, id);
	if (p->cache)
		rc = p->cache->ops->lookup(p->cache, id, &a);
	if (rc == 0) {
		/* in memory; the disk copy counts only if it is this version's (clean) */
		if (p->below && !a.dirty && p->below->ops->lookup(p->below, id, &b) == 0) {
			a.where |= TIER_DISK;
			a.stored = b.stored;
			a.codec = b.codec;
		}
	} else if (p->below) {
		rc = p->below->ops->lookup(p->below, id, &a);
	}
	if (rc == 0 && attr)
		*attr = a;
	return rc;
}

static void pipe_present(struct tier *t, const struct blockid *ids, size_t n, uint8_t *hit)
{
	struct pipeline *p = pipe_of(t);

	if (p->shared && p->below) {
		/* each id checked against the shared store: first all at once below (which
		 * asks the store in parallel for what it does not know), then each in memory */
		uint8_t *below = calloc(n ? n : 1, 1);

		if (below) {
			memcpy(below, hit, n);
			p->below->ops->present(p->below, ids, n, below);
		}
		for (size_t i = 0; i < n; i++) {
			if (hit[i])
				continue;
			/* in memory (compared with below), or no answer from below: one lookup */
			if (!below ||
			    (p->cache && p->cache->ops->lookup(p->cache, &ids[i], NULL) == 0))
				hit[i] = pipe_lookup(t, &ids[i], NULL) == 0;
			else
				hit[i] = below[i];
		}
		free(below);
		return;
	}
	if (p->cache)
		p->cache->ops->present(p->cache, ids, n, hit);
	if (p->below)
		p->below->ops->present(p->below, ids, n, hit);
}

/* --- reading ----------------------------------------------------------------------------- */

static struct pphandle *wrap(struct pipeline *p, int kind)
{
	struct pphandle *h = calloc(1, sizeof(*h));

	if (h) {
		h->base.tier = &p->tier;
		h->kind = kind;
	}
	return h;
}

static int pipe_open(struct tier *t, const struct blockid *id, unsigned flags,
		     struct tier_handle **out)
{
	struct pipeline *p = pipe_of(t);
	struct pphandle *h = wrap(p, PH_READ);
	int rc = -ENOENT;

	if (!h)
		return -ENOMEM;
	drop_stale(p, id);
	for (int attempt = 0; attempt < 8; attempt++) {
		if (p->cache)
			rc = p->cache->ops->open(p->cache, id, flags, &h->in);
		/* memory holds the block but cannot open it: its version may be newer than
		 * the disk's (not written yet), so the disk's is no answer */
		if (rc != -ENOENT || !p->below)
			break;
		rc = load_open(p, id, flags & TIER_OPEN_INTERNAL, &h->ld, &h->in);
		if (rc || h->in)
			break; /* an error, or reading straight from below */
		if (!(flags & TIER_OPEN_INTERNAL)) {
			h->kind = PH_LOADING; /* reads fetch what they need as it arrives */
			break;
		}
		/* the daemon's own opens (prefetch, replacement) want the block in memory */
		rc = load_start(p, h->ld);
		load_put(p, h->ld);
		h->ld = NULL;
		if (rc)
			break;
		rc = -ENOENT;
	}
	if (rc) {
		free(h);
		return rc;
	}
	/* a shared store learns which blocks the hosts use from this (tiers/posix_shared.c) */
	if (p->shared && p->below && p->below->ops->touch && !(flags & TIER_OPEN_INTERNAL))
		p->below->ops->touch(p->below, id);
	*out = &h->base;
	return 0;
}

/* A writer reads zeros where nothing was written (a reused buffer holds older bytes). */
static void zero_unwritten(const struct session *s, char *buf, size_t len, uint64_t off)
{
	uint64_t pos = off, end = off + len;

	for (uint32_t i = 0; i <= s->ext.n && pos < end; i++) {
		uint64_t gap_end = i < s->ext.n ? s->ext.v[i].start : end;

		if (gap_end > pos) {
			uint64_t e = gap_end < end ? gap_end : end;

			memset(buf + (pos - off), 0, e - pos);
		}
		if (i < s->ext.n && s->ext.v[i].end > pos)
			pos = s->ext.v[i].end;
	}
}

static ssize_t pipe_read(struct tier_handle *th, void *buf, size_t len, uint64_t off)
{
	struct pphandle *h = (struct pphandle *)th;
	struct session *s = h->s;
	ssize_t n;

	if (h->kind == PH_READ)
		return tier_read(h->in, buf, len, off);
	if (h->kind == PH_LOADING)
		return load_read(pipe_of(th->tier), h->ld, buf, len, off);
	pthread_mutex_lock(&s->lock);
	n = s->res ? tier_read(s->res, buf, len, off) : s->err;
	if (n > 0)
		zero_unwritten(s, buf, (size_t)n, off);
	pthread_mutex_unlock(&s->lock);
	return n;
}

static const void *pipe_data(struct tier_handle *th)
{
	struct pphandle *h = (struct pphandle *)th;

	if (h->kind == PH_LOADING)
		return load_data(h->ld);
	return h->kind == PH_READ ? tier_data(h->in) : NULL;
}

static int pipe_backing(struct tier_handle *th)
{
	struct pphandle *h = (struct pphandle *)th;

	if (h->kind == PH_LOADING)
		return load_backing(h->ld);
	if (h->kind != PH_READ || !h->in->tier->ops->backing)
		return -ENOTSUP;
	return h->in->tier->ops->backing(h->in);
}

static const void *pipe_map(struct tier_handle *th, uint64_t off, size_t len)
{
	struct pphandle *h = (struct pphandle *)th;
	const char *d;

	if (h->kind == PH_LOADING)
		d = load_map(pipe_of(th->tier), h->ld, off, len);
	else
		d = h->kind == PH_READ ? tier_data(h->in) : NULL;
	if (!d)
		return NULL;
	counter_add(&pipe_of(th->tier)->mem_bytes_out, len);
	return h->kind == PH_LOADING ? d : d + off;
}

static int pipe_map_start(struct tier_handle *th, uint64_t off, size_t len, tier_map_fn done,
			  void *arg, const void **out)
{
	struct pphandle *h = (struct pphandle *)th;
	const char *d;

	if (h->kind == PH_LOADING)
		return load_map_start(pipe_of(th->tier), h->ld, off, len, done, arg, out);
	d = h->kind == PH_READ ? tier_data(h->in) : NULL;
	if (!d)
		return -ENOTSUP;
	counter_add(&pipe_of(th->tier)->mem_bytes_out, len);
	*out = d + off;
	return 1;
}

static uint64_t session_size(const struct session *s)
{
	uint64_t end = extents_end(&s->ext);

	return s->declared != NO_SIZE && s->declared > end ? s->declared : end;
}

static bool complete(const struct pipeline *p, const struct session *s, uint64_t *size);

static int pipe_stat(struct tier_handle *th, struct block_attr *attr)
{
	struct pphandle *h = (struct pphandle *)th;

	if (h->kind == PH_READ)
		return h->in->tier->ops->stat(h->in, attr);
	if (h->kind == PH_LOADING) {
		load_stat(h->ld, attr);
		return 0;
	}
	memset(attr, 0, sizeof(*attr));
	pthread_mutex_lock(&h->s->lock);
	attr->partial = !complete(pipe_of(th->tier), h->s, &attr->size);
	attr->where = h->s->spilled ? TIER_DISK : TIER_MEM;
	pthread_mutex_unlock(&h->s->lock);
	attr->mtime = attr->atime = wall_ns();
	return 0;
}

static void pipe_close(struct tier_handle *th)
{
	struct pphandle *h = (struct pphandle *)th;

	if (h->kind == PH_LOADING)
		load_put_reader(pipe_of(th->tier), h->ld);
	else
		tier_close(h->in);
	free(h);
}

/* --- writing ----------------------------------------------------------------------------- */

/* Move a session's bytes from its cache reservation to a new one below. Session locked. */
static int spill(struct pipeline *p, struct session *s, const struct blockid *id)
{
	struct tier_handle *lres;
	const char *data = tier_data(s->res);
	int rc;

	if (!p->below || s->spilled)
		return -ENOSPC;
	rc = p->below->ops->reserve(p->below, id, 0, session_size(s), &lres);
	if (rc)
		return rc;
	for (uint32_t i = 0; i < s->ext.n && rc == 0; i++) {
		for (uint64_t off = s->ext.v[i].start; off < s->ext.v[i].end && rc == 0;) {
			uint64_t len = s->ext.v[i].end - off;
			ssize_t n;

			if (len > COPY_CHUNK)
				len = COPY_CHUNK;
			n = p->below->ops->write(lres, data + off, (size_t)len, off);
			rc = n < 0 ? (int)n : 0;
			off += len;
		}
	}
	/* the declared size, or the end of what was written after it, whichever is further */
	if (rc == 0 && s->declared != NO_SIZE)
		rc = p->below->ops->truncate(lres, session_size(s));
	if (rc) {
		p->below->ops->abort(lres);
		return rc;
	}
	p->cache->ops->abort(s->res);
	s->res = lres;
	s->spilled = true;
	atomic_fetch_add(&p->spills, 1);
	return 0;
}

/* Write into a session (locked), spilling to the tier below when memory is full. */
static ssize_t session_write(struct pipeline *p, struct session *s, const struct blockid *id,
			     const void *buf, size_t len, uint64_t off)
{
	ssize_t n;

	if (!s->res)
		return s->err;
	n = s->res->tier->ops->write(s->res, buf, len, off);
	if (n == -ENOSPC && !s->spilled && p->below && spill(p, s, id) == 0)
		n = s->res->tier->ops->write(s->res, buf, len, off);
	if (n > 0 && extents_add(&s->ext, off, (uint64_t)n))
		n = -ENOMEM;
	if (n < 0 && !s->write_err)
		s->write_err = (int)n; /* never publish what a failed write left behind */
	return n;
}

/* Start a replacement with the committed bytes of id (session locked). */
static int copy_old(struct pipeline *p, struct session *s, const struct blockid *id)
{
	struct tier_handle *old;
	struct block_attr a;
	char *bounce = NULL;
	int rc = pipe_open(&p->tier, id, TIER_OPEN_INTERNAL, &old);

	if (rc == -ENOENT)
		return 0; /* gone meanwhile: an empty replacement */
	if (rc)
		return rc;
	pipe_stat(old, &a);
	for (uint64_t off = 0; off < a.size && rc == 0;) {
		size_t len = a.size - off > COPY_CHUNK ? COPY_CHUNK : (size_t)(a.size - off);
		const char *src = pipe_data(old);
		ssize_t n;

		if (!src) {
			if (!bounce && !(bounce = malloc(COPY_CHUNK))) {
				rc = -ENOMEM;
				break;
			}
			n = pipe_read(old, bounce, len, off);
			if (n != (ssize_t)len) {
				rc = n < 0 ? (int)n : -EIO;
				break;
			}
		}
		n = session_write(p, s, id, src ? src + off : bounce, len, off);
		rc = n < 0 ? (int)n : 0;
		off += len;
	}
	free(bounce);
	pipe_close(old);
	return rc;
}

static void session_free(struct session *s)
{
	if (s->res)
		s->res->tier->ops->abort(s->res);
	extents_free(&s->ext);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

/* Take s out of p->sessions (p->lock held): no writer joins it any more. */
static void unlist(struct pipeline *p, struct session *s)
{
	if (s->listed) {
		idmap_remove(&p->sessions, &s->node);
		s->listed = false;
	}
}

static int pipe_reserve(struct tier *t, const struct blockid *id, unsigned flags,
			uint64_t size_hint, struct tier_handle **out)
{
	struct pipeline *p = pipe_of(t);
	struct pphandle *h = wrap(p, PH_WRITE);
	struct tier *first = p->cache ? p->cache : p->below;
	struct block_attr old;
	struct session *s;
	struct idnode *n;
	bool committed;
	int rc;

	if (!h)
		return -ENOMEM;
	/* a new session is made (and locked) before p->lock is taken: the order everywhere is
	 * session lock -> p->lock (a replacement's copy opens the old block under its lock) */
	s = calloc(1, sizeof(*s));
	if (!s) {
		free(h);
		return -ENOMEM;
	}
	s->node.id = *id;
	s->refs = 1;
	s->declared = NO_SIZE;
	atomic_init(&s->ttl_ms, p->default_ttl_ms);
	extents_init(&s->ext);
	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_lock(&s->lock);
	pthread_mutex_lock(&p->lock);
	n = idmap_find(&p->sessions, id);
	if (n) {
		/* join the writers of this id */
		pthread_mutex_unlock(&s->lock);
		session_free(s);
		s = SESSION(n);
		if (flags & TIER_RESERVE_EXCL) {
			pthread_mutex_unlock(&p->lock);
			free(h);
			return -EEXIST;
		}
		s->refs++;
		pthread_mutex_unlock(&p->lock);
		h->s = s;
		*out = &h->base;
		return 0;
	}
	committed = pipe_lookup(t, id, &old) == 0;
	s->replacing = committed;
	s->modified = !committed || (flags & TIER_RESERVE_TRUNC);
	if ((committed && (flags & TIER_RESERVE_EXCL)) || idmap_insert(&p->sessions, &s->node)) {
		pthread_mutex_unlock(&p->lock);
		pthread_mutex_unlock(&s->lock);
		session_free(s);
		free(h);
		return committed ? -EEXIST : -ENOMEM;
	}
	s->listed = true;
	pthread_mutex_unlock(&p->lock);

	/* joiners wait on s->lock until the reservation exists */
	if (!size_hint)
		size_hint = p->block_size ? p->block_size : (committed ? old.size : 0);
	rc = first->ops->reserve(first, id, 0, size_hint, &s->res);
	s->spilled = rc == 0 && first != p->cache; /* no memory tier: written below directly */
	if (rc == -ENOSPC && first == p->cache && p->below) {
		rc = p->below->ops->reserve(p->below, id, 0, size_hint, &s->res);
		s->spilled = rc == 0;
	}
	if (rc == 0 && committed && !(flags & TIER_RESERVE_TRUNC))
		rc = copy_old(p, s, id);
	if (rc) {
		if (s->res)
			s->res->tier->ops->abort(s->res);
		s->res = NULL;
		s->err = rc;
		pthread_mutex_unlock(&s->lock);
		/* leave, and let any writer that joined meanwhile see the error */
		pthread_mutex_lock(&p->lock);
		unlist(p, s);
		if (--s->refs == 0) {
			pthread_mutex_unlock(&p->lock);
			session_free(s);
		} else {
			pthread_mutex_unlock(&p->lock);
		}
		free(h);
		return rc;
	}
	pthread_mutex_unlock(&s->lock);
	h->s = s;
	*out = &h->base;
	return 0;
}

static ssize_t pipe_write(struct tier_handle *th, const void *buf, size_t len, uint64_t off)
{
	struct pphandle *h = (struct pphandle *)th;
	struct pipeline *p = pipe_of(th->tier);
	struct session *s = h->s;
	ssize_t n;

	if (off > p->limit || len > p->limit - off)
		return -EFBIG; /* nothing written: what was written before still counts */
	pthread_mutex_lock(&s->lock);
	s->modified = true;
	n = session_write(p, s, &s->node.id, buf, len, off);
	pthread_mutex_unlock(&s->lock);
	return n;
}

static int pipe_truncate(struct tier_handle *th, uint64_t size)
{
	struct pphandle *h = (struct pphandle *)th;
	struct pipeline *p = pipe_of(th->tier);
	struct session *s = h->s;
	int rc;

	if (size > p->limit)
		return -EFBIG;
	pthread_mutex_lock(&s->lock);
	if (!s->res) {
		rc = s->err;
	} else {
		rc = s->res->tier->ops->truncate(s->res, size);
		if (rc == -ENOSPC && !s->spilled && spill(p, s, &s->node.id) == 0)
			rc = s->res->tier->ops->truncate(s->res, size);
	}
	if (rc == 0) {
		s->declared = size;
		s->modified = true;
		extents_clip(&s->ext, size);
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

static int pipe_set_durable(struct tier_handle *th)
{
	struct session *s = ((struct pphandle *)th)->s;

	pthread_mutex_lock(&s->lock);
	s->durable = true;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* Is the session's content a whole block? (session locked) */
static bool complete(const struct pipeline *p, const struct session *s, uint64_t *size)
{
	*size = session_size(s);
	if (!s->res || s->write_err)
		return false;
	if (p->block_size)
		return *size == p->block_size && extents_cover(&s->ext, p->block_size);
	return extents_cover(&s->ext, *size);
}

/* The commit time of a new version: the wall clock, but strictly increasing, so that the
 * commit time also tells versions of one id apart (it survives a trip through disk). */
static int64_t commit_time(struct pipeline *p)
{
	int64_t now = wall_ns(), last = atomic_load(&p->last_commit);

	while (!atomic_compare_exchange_weak(&p->last_commit, &last, now > last ? now : last + 1))
		;
	return now > last ? now : last + 1;
}

/* Publish a complete session (locked, no writer left). */
static int publish(struct pipeline *p, struct session *s, uint64_t size)
{
	struct block_meta m = { .size = size, .mtime = commit_time(p),
				.deadline = deadline_from_ttl(atomic_load(&s->ttl_ms)) };
	bool durable = s->durable || p->durable, fresh;
	struct tier_handle *res = s->res, *rd = NULL;
	struct block_attr a;
	int rc;

	s->res = NULL;
	if (s->spilled) {
		pthread_mutex_t *st = stripe_of(p, &s->node.id);

		pthread_mutex_lock(st);
		pthread_rwlock_rdlock(&p->usage_lock);
		rc = p->below->ops->commit(res, &m, durable ? TIER_COMMIT_DURABLE : 0, NULL);
		/* under the stripe: no dump or load of the older version lands in between */
		if (rc == 0 && p->cache)
			p->cache->ops->remove(p->cache, &s->node.id);
		pthread_rwlock_unlock(&p->usage_lock);
		pthread_mutex_unlock(st);
		return rc;
	}
	if (!p->below)
		return p->cache->ops->commit(res, &m, 0, NULL);
	/* a block with no copy below yet is counted apart, for statfs' f_files; under the
	 * stripe, so that no dump of an older version lands below in between */
	pthread_mutex_lock(stripe_of(p, &s->node.id));
	fresh = p->below->ops->lookup(p->below, &s->node.id, NULL) != 0;
	/* the version it replaces below expires with it: if this one expires before its dump
	 * (which then drops it), the older bytes must not come back */
	if (!fresh && m.deadline &&
	    p->below->ops->set_deadline(p->below, &s->node.id, m.deadline) != 0)
		p->below->ops->remove(p->below, &s->node.id);
	rc = p->cache->ops->commit(res, &m, TIER_COMMIT_DIRTY | (fresh ? TIER_COMMIT_FRESH : 0),
				   &rd);
	pthread_mutex_unlock(stripe_of(p, &s->node.id));
	if (rc)
		return rc;
	p->cache->ops->stat(rd, &a);
	if (durable)
		return dump(p, rd, &s->node.id, a.version, DUMP_DURABLE | DUMP_WAITED);
	enqueue_dump(p, rd, &s->node.id, a.version);
	return 0;
}

/*
 * A writer's close: 0 if the block was complete at that moment, -EIO if not; the last
 * writer publishes (and returns the publication's error, if any) or discards. With
 * TIER_COMMIT_TRY an incomplete block keeps this writer's reference: the handle stays usable
 * (a descriptor closed while a duplicate of it goes on writing).
 */
static int pipe_commit(struct tier_handle *th, const struct block_meta *meta, unsigned flags,
		       struct tier_handle **rd)
{
	struct pphandle *h = (struct pphandle *)th;
	struct pipeline *p = pipe_of(th->tier);
	struct session *s = h->s;
	uint64_t size;
	bool ok, last;
	int rc = 0;

	(void)meta;
	if (rd)
		*rd = NULL;
	pthread_mutex_lock(&s->lock);
	ok = complete(p, s, &size);
	if (flags & TIER_COMMIT_DURABLE)
		s->durable = true;
	pthread_mutex_unlock(&s->lock);
	if (!ok && (flags & TIER_COMMIT_TRY)) {
		/* the close of the only writer failed: its caller may go on writing through a
		 * duplicate, but a later open must start afresh, not join what close refused */
		pthread_mutex_lock(&p->lock);
		if (s->refs == 1)
			unlist(p, s);
		pthread_mutex_unlock(&p->lock);
		return -EIO;
	}

	pthread_mutex_lock(&p->lock);
	last = --s->refs == 0;
	if (last)
		unlist(p, s);
	pthread_mutex_unlock(&p->lock);

	if (last) {
		pthread_mutex_lock(&s->lock);
		ok = complete(p, s, &size);
		if (ok && !s->modified)
			rc = 0; /* opened for writing, left as it was (touch): nothing new to publish */
		else
			rc = ok ? publish(p, s, size) : -EIO;
		if (rc == -EIO && (flags & TIER_COMMIT_TRY)) {
			/* tier.h: -EIO with TRY leaves the handle with its caller, who commits or
			 * aborts it again: keep the session, out of the map, as a failed one */
			if (s->res)
				s->res->tier->ops->abort(s->res);
			s->res = NULL;
			s->err = -EIO;
			s->refs = 1;
			pthread_mutex_unlock(&s->lock);
			return -EIO;
		}
		pthread_mutex_unlock(&s->lock);
		session_free(s);
		if (!ok)
			atomic_fetch_add(&p->commits_incomplete, 1);
		else if (rc)
			atomic_fetch_add(&p->commits_failed, 1);
		else
			atomic_fetch_add(&p->commits_ok, 1);
	} else if (!ok) {
		rc = -EIO;
	}
	free(h);
	return rc;
}

static void pipe_abort(struct tier_handle *th)
{
	struct pphandle *h = (struct pphandle *)th;
	struct pipeline *p = pipe_of(th->tier);
	struct session *s = h->s;
	bool last;

	pthread_mutex_lock(&p->lock);
	last = --s->refs == 0;
	if (last)
		unlist(p, s);
	pthread_mutex_unlock(&p->lock);
	if (last)
		session_free(s);
	free(h);
}

static size_t pipe_prefetch(struct tier *t, const struct blockid *ids, size_t n)
{
	struct pipeline *p = pipe_of(t);

	return p->cache && p->below ? jobs_prefetch(p, ids, n) : 0;
}

static void pipe_drain(struct tier *t)
{
	jobs_drain(pipe_of(t));
}

/* --- other ops --------------------------------------------------------------------------- */

static int pipe_remove(struct tier *t, const struct blockid *id)
{
	struct pipeline *p = pipe_of(t);
	pthread_mutex_t *st = stripe_of(p, id);
	bool live = pipe_lookup(t, id, NULL) == 0;

	pthread_mutex_lock(st);
	if (p->cache)
		p->cache->ops->remove(p->cache, id);
	if (p->below)
		p->below->ops->remove(p->below, id);
	pthread_mutex_unlock(st);
	return live ? 0 : -ENOENT;
}

static int pipe_touch(struct tier *t, const struct blockid *id)
{
	struct pipeline *p = pipe_of(t);
	int a = p->cache ? p->cache->ops->touch(p->cache, id) : -ENOENT;
	int b = p->below ? p->below->ops->touch(p->below, id) : -ENOENT;

	return a == 0 || b == 0 ? 0 : -ENOENT;
}

static int pipe_set_deadline(struct tier *t, const struct blockid *id, int64_t deadline)
{
	struct pipeline *p = pipe_of(t);
	pthread_mutex_t *st = stripe_of(p, id);
	int a = -ENOENT, b = -ENOENT;

	if (pipe_lookup(t, id, NULL))
		return -ENOENT;
	/* under the stripe, so that a dump publishing this block below carries the new deadline */
	pthread_mutex_lock(st);
	if (p->cache)
		a = p->cache->ops->set_deadline(p->cache, id, deadline);
	if (p->below)
		b = p->below->ops->set_deadline(p->below, id, deadline);
	pthread_mutex_unlock(st);
	if (b && b != -ENOENT)
		return b;
	return a == 0 || b == 0 ? 0 : -ENOENT;
}

static int pipe_set_ttl(struct tier *t, const struct blockid *id, int64_t ttl_ms)
{
	struct pipeline *p = pipe_of(t);
	struct idnode *n;

	pthread_mutex_lock(&p->lock);
	n = idmap_find(&p->sessions, id);
	if (n)
		atomic_store(&SESSION(n)->ttl_ms, ttl_ms);
	pthread_mutex_unlock(&p->lock);
	if (n)
		return 0;
	return pipe_set_deadline(t, id, deadline_from_ttl(ttl_ms));
}

/* The live version of id written below if it is not yet, then made durable there. */
static int sync_below(struct pipeline *p, const struct blockid *id)
{
	struct tier_handle *rd;
	struct block_attr a;
	int rc;

	/* the live version is safe below once it is clean: write it now if it is not */
	while (p->cache && p->cache->ops->lookup(p->cache, id, &a) == 0 && a.dirty) {
		rc = p->cache->ops->open(p->cache, id, TIER_OPEN_INTERNAL, &rd);
		if (rc == -ENOENT)
			continue; /* replaced or removed meanwhile: look again */
		if (rc)
			return -EIO; /* it cannot be written below now */
		rc = dump(p, rd, id, a.version, DUMP_WAITED);
		if (rc)
			return rc == -ENOSPC ? rc : -EIO;
	}
	if (p->below->ops->lookup(p->below, id, NULL))
		return pipe_lookup(&p->tier, id, NULL) == 0 ? -EIO : -ENOENT;
	return p->below->ops->sync(p->below, id);
}

static int pipe_sync(struct tier *t, const struct blockid *id)
{
	struct pipeline *p = pipe_of(t);
	int rc;

	if (!p->below)
		return pipe_lookup(t, id, NULL);
	/* the caller waits until the flush below is done too: dumps that start meanwhile are
	 * hurried as well (the next fsync of a writer's loop comes to them), so that each flush
	 * finds more blocks written */
	dump_wait_begin(p);
	rc = sync_below(p, id);
	dump_wait_end(p);
	return rc;
}

static int merge_add(const struct blockid *id, void *arg)
{
	return idvec_push(arg, id) ? 1 : 0;
}

/* Every live id of one shard across the tiers, each once, in id order. */
static int pipe_list_shard(struct tier *t, unsigned shard, tier_list_fn fn, void *arg)
{
	struct pipeline *p = pipe_of(t);
	struct idvec m = { 0 }, c = { 0 };

	if (p->cache && p->shared && p->below) {
		/* a clean copy is listed if the shared store lists its id (which costs no lookup
		 * per block): only this host's blocks not yet below come from memory */
		struct block_attr a;

		p->cache->ops->list_shard(p->cache, shard, merge_add, &c);
		for (size_t i = 0; i < c.n; i++)
			if (p->cache->ops->lookup(p->cache, &c.v[i], &a) == 0 && a.dirty)
				merge_add(&c.v[i], &m);
		idvec_free(&c);
	} else if (p->cache) {
		p->cache->ops->list_shard(p->cache, shard, merge_add, &m);
	}
	if (p->below)
		p->below->ops->list_shard(p->below, shard, merge_add, &m);
	blockid_sort(m.v, m.n);
	for (size_t i = 0; i < m.n; i++) {
		if (i && blockid_eq(&m.v[i], &m.v[i - 1]))
			continue;
		if (fn(&m.v[i], arg))
			break;
	}
	idvec_free(&m);
	return 0;
}

static int pipe_usage(struct tier *t, struct tier_usage *u)
{
	struct pipeline *p = pipe_of(t);
	struct tier_usage c = { 0 };

	if (!p->below) {
		p->cache->ops->usage(p->cache, u);
		return 0;
	}
	/* between publications below: a dump publishes below and marks the block clean
	 * holding usage_lock shared, so the two counts never see half of one */
	pthread_rwlock_wrlock(&p->usage_lock);
	p->below->ops->usage(p->below, u);
	if (p->cache)
		p->cache->ops->usage(p->cache, &c);
	pthread_rwlock_unlock(&p->usage_lock);
	u->blocks += c.fresh_blocks; /* committed, with no copy below yet */
	return 0;
}

static void pipe_destroy(struct tier *t)
{
	struct pipeline *p = pipe_of(t);

	jobs_stop(p);
	tier_destroy(p->cache);
	tier_destroy(p->below);
	idmap_destroy(&p->sessions);
	idmap_destroy(&p->loading);
	for (int i = 0; i < NSTRIPES; i++)
		pthread_mutex_destroy(&p->stripe[i]);
	pthread_mutex_destroy(&p->lock);
	pthread_mutex_destroy(&p->qlock);
	pthread_rwlock_destroy(&p->usage_lock);
	pthread_cond_destroy(&p->qcond);
	pthread_cond_destroy(&p->qidle);
	pthread_cond_destroy(&p->ucond);
	pthread_cond_destroy(&p->sweep_cond);
	free(p);
}

static void pipe_metrics(struct tier *t, struct metrics *m)
{
	struct pipeline *p = pipe_of(t);
	struct pipeline_counters c;
	const char *help = "Commits (closes that published or failed) by result.";

	pipeline_counters(t, &c);
	metrics_counter(m, "ucmfs_commits_total", help, "result=\"ok\"", c.commits_ok);
	metrics_counter(m, "ucmfs_commits_total", help, "result=\"incomplete\"",
			c.commits_incomplete);
	metrics_counter(m, "ucmfs_commits_total", help, "result=\"failed\"", c.commits_failed);
	metrics_counter(m, "ucmfs_loads_total", "Blocks loaded from disk into memory.", "",
			c.loads);
	metrics_counter(m, "ucmfs_load_errors_total", "Loads that failed.", "", c.load_errors);
	metrics_counter(m, "ucmfs_dumps_total", "Blocks written from memory to disk.", "",
			c.dumps);
	metrics_counter(m, "ucmfs_dump_errors_total", "Writes to disk that failed.", "",
			c.dump_errors);
	metrics_counter(m, "ucmfs_spills_total",
			"Reservations moved to disk because memory was full.", "", c.spills);
	metrics_counter(m, "ucmfs_streamed_opens_total",
			"Opens served straight from disk (no room in memory).", "",
			c.streamed_opens);
	metrics_counter(m, "ucmfs_dump_yields_total",
			"Loads run between two pieces of a dump instead of after it.", "",
			c.dump_yields);
	metrics_counter(m, "ucmfs_dumps_hurried_total",
			"Dumps written while an fsync waited and other dumps kept the CPU busy: "
			"the rest of the block went to disk uncompressed.", "", c.dumps_hurried);
	metrics_counter(m, "ucmfs_recompressed_total",
			"Hurried blocks written to disk again, compressed.", "", c.recompressed);
	metrics_counter(m, "ucmfs_recompress_dropped_total",
			"Hurried blocks left uncompressed: too many waiting to be written again.",
			"", c.recompress_dropped);
	metrics_gauge(m, "ucmfs_recompress_pending",
		      "Hurried blocks waiting for idle workers to be written again, compressed.",
		      "", (double)c.recompress_pending);
	metrics_gauge(m, "ucmfs_disk_queue_depth", "Disk operations queued or running.",
		      "queue=\"load\"", (double)c.load_queue);
	metrics_gauge(m, "ucmfs_disk_queue_depth", "Disk operations queued or running.",
		      "queue=\"dump\"", (double)c.dump_queue);
	metrics_gauge(m, "ucmfs_reads_waiting",
		      "Reads waiting for their bytes to come from disk.", "",
		      (double)c.reads_waiting);
	metrics_counter(m, "ucmfs_tier_bytes_out_total", "Bytes read from the tier.",
			"tier=\"mem\"", counter_get(&p->mem_bytes_out));
	if (p->shared)
		metrics_counter(m, "ucmfs_mem_stale_dropped_total",
				"Blocks dropped from memory because another host of the shared "
				"STORE replaced or removed them.", "",
				counter_get(&p->stale_dropped));
	metrics_histogram(m, "ucmfs_load_seconds", "Time to load a block from disk into memory.",
			  "", &p->load_hist);
	metrics_histogram(m, "ucmfs_dump_seconds", "Time to write a block from memory to disk.",
			  "", &p->dump_hist);
	if (p->cache && p->cache->ops->metrics)
		p->cache->ops->metrics(p->cache, m);
	if (p->below && p->below->ops->metrics)
		p->below->ops->metrics(p->below, m);
}

const struct tier_ops tier_pipeline_ops = {
	.name = "pipeline",
	.destroy = pipe_destroy,
	.start = pipeline_start,
	.lookup = pipe_lookup,
	.present = pipe_present,
	.open = pipe_open,
	.read = pipe_read,
	.data = pipe_data,
	.backing = pipe_backing,
	.map = pipe_map,
	.map_start = pipe_map_start,
	.stat = pipe_stat,
	.close = pipe_close,
	.reserve = pipe_reserve,
	.write = pipe_write,
	.truncate = pipe_truncate,
	.set_durable = pipe_set_durable,
	.commit = pipe_commit,
	.abort = pipe_abort,
	.remove = pipe_remove,
	.touch = pipe_touch,
	.set_deadline = pipe_set_deadline,
	.set_ttl = pipe_set_ttl,
	.sync = pipe_sync,
	.list_shard = pipe_list_shard,
	.usage = pipe_usage,
	.prefetch = pipe_prefetch,
	.drain = pipe_drain,
	.metrics = pipe_metrics,
};

void pipeline_counters(struct tier *t, struct pipeline_counters *out)
{
	struct pipeline *p = pipe_of(t);
	unsigned loads = 0;

	out->commits_ok = atomic_load(&p->commits_ok);
	out->commits_incomplete = atomic_load(&p->commits_incomplete);
	out->commits_failed = atomic_load(&p->commits_failed);
	out->dumps = atomic_load(&p->dumps);
	out->dump_errors = atomic_load(&p->dump_errors);
	out->loads = atomic_load(&p->loads);
	out->load_errors = atomic_load(&p->load_errors);
	out->spills = atomic_load(&p->spills);
	out->streamed_opens = atomic_load(&p->streamed);
	out->dump_yields = atomic_load(&p->dump_yields);
	out->dumps_hurried = atomic_load(&p->dumps_hurried);
	out->recompressed = atomic_load(&p->recodes);
	out->recompress_dropped = atomic_load(&p->recodes_dropped);
	pthread_mutex_lock(&p->qlock);
	out->recompress_pending = p->nrecode;
	pthread_mutex_unlock(&p->qlock);
	out->dump_queue = jobs_pending(p, &loads);
	out->load_queue = loads;
	out->dump_queue -= loads;
	out->reads_waiting = atomic_load(&p->reads_waiting);
}

int pipeline_create(const struct pipeline_config *cfg, struct tier **out)
{
	struct pipeline *p = calloc(1, sizeof(*p));

	if (!p) {
		tier_destroy(cfg->cache);
		tier_destroy(cfg->below);
		return -ENOMEM;
	}
	p->cache = cfg->cache;
	p->below = cfg->below;
	p->block_size = cfg->block_size;
	p->limit = cfg->block_size ? cfg->block_size : cfg->max_block;
	p->default_ttl_ms = cfg->default_ttl_ms;
	p->durable = cfg->durable;
	p->shared = cfg->shared;
	/* hosts sharing the store: a block written again later could land over another host's
	 * newer version, so fsyncs there wait for compression */
	p->hurry = cfg->hurry && !cfg->shared;
	p->recode_delay_ns = cfg->recode_delay_ms > 0 ? cfg->recode_delay_ms * 1000000LL
						      : RECODE_DELAY_NS;
	p->ndumpers = cfg->dump_threads < 1 ? 1
		      : cfg->dump_threads > MAX_WORKERS ? MAX_WORKERS : cfg->dump_threads;
	p->nthreads = cfg->load_threads > MAX_WORKERS ? MAX_WORKERS : cfg->load_threads;
	if (p->nthreads < p->ndumpers)
		p->nthreads = p->ndumpers;
	pthread_mutex_init(&p->lock, NULL);
	for (int i = 0; i < NSTRIPES; i++)
		pthread_mutex_init(&p->stripe[i], NULL);
	pthread_mutex_init(&p->qlock, NULL);
	pthread_rwlock_init(&p->usage_lock, NULL);
	pthread_cond_init(&p->qcond, NULL);
	pthread_cond_init(&p->qidle, NULL);
	pthread_cond_init(&p->ucond, NULL);
	pthread_cond_init(&p->sweep_cond, NULL);
	idmap_init(&p->sessions);
	idmap_init(&p->loading);
	p->tier.ops = &tier_pipeline_ops;
	p->tier.priv = p;
	*out = &p->tier;
	return 0;
}

int pipeline_start(struct tier *t)
{
	struct pipeline *p = pipe_of(t);
	struct tier_usage u = { 0 };
	int rc;

	if (p->launched)
		return 0;
	p->launched = true;
	/* memory made ready first for the blocks the disk holds (most are one size) */
	if (p->below && p->below->ops->usage)
		p->below->ops->usage(p->below, &u);
	rc = cache_start(p->cache, u.common_size);
	if (rc)
		log_warn("no prefaulter thread (%s): memory is faulted in as blocks come",
			 strerror(-rc));
	return jobs_start(p);
}
