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
 * Locks and order: p->lock (sessions map) -> session lock -> stripe -> tier locks.
 * p->lock is never held across a tier call that can wait. Worker threads own dump jobs.
 */
#include "tiers/pipeline.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/clock.h"
#include "src/extents.h"
#include "src/idmap.h"
#include "src/log.h"
#include "src/metrics.h"
#include "src/units.h"
#include "tiers/cache.h"
#include "tiers/compress.h"
#include "tiers/posix.h"
#include "tiers/stripe.h"

#define NSTRIPES 64
#define MAX_DUMP_THREADS 8
#define COPY_CHUNK (1u << 20)
#define DUMP_RETRIES 3
#define SWEEP_MS 1000

struct session {
	struct idnode node;          /* in p->sessions while writers may join */
	int refs;                    /* writers holding it; protected by p->lock */
	pthread_mutex_t lock;        /* serializes everything below */
	struct tier_handle *res;     /* the reservation (cache, or below once spilled) */
	int err;                     /* why res is NULL */
	bool spilled;
	bool durable;
	bool replacing;
	struct extents ext;
	uint64_t declared;           /* ftruncate size, or NO_SIZE */
	_Atomic int64_t ttl_ms;      /* set under p->lock by set_ttl, read at publish */
};

#define NO_SIZE UINT64_MAX

enum { PH_READ, PH_WRITE };

struct pphandle {
	struct tier_handle base;
	int kind;
	struct tier_handle *in;      /* PH_READ: the cache's or below's handle */
	struct session *s;           /* PH_WRITE */
};

struct dump_job {
	struct dump_job *next;
	struct tier_handle *rd;      /* internal reference to the cache's committed version */
	struct blockid id;
	uint64_t version;
	int attempts;
};

struct pipeline {
	struct tier tier;
	struct tier *cache, *below;
	uint64_t limit;              /* largest block: block_size or max_block */
	uint64_t block_size;
	int64_t default_ttl_ms;
	bool durable;

	pthread_mutex_t lock;
	struct idmap sessions;       /* protected by lock */

	pthread_mutex_t stripe[NSTRIPES];

	pthread_mutex_t qlock;
	pthread_cond_t qcond;        /* work queued, or stop (dump workers only wait on it:
					a signal must wake a worker) */
	pthread_cond_t qidle;        /* a job finished */
	struct dump_job *qhead, *qtail; /* protected by qlock */
	unsigned queued, running;    /* protected by qlock */
	bool stop;                   /* protected by qlock */
	unsigned nthreads;
	pthread_t threads[MAX_DUMP_THREADS];
	pthread_t sweeper;           /* reclaims expired blocks every SWEEP_MS */
	pthread_cond_t sweep_cond;   /* wakes the sweeper to stop (its own: see qcond) */
	bool started, sweeping;

	atomic_uint_fast64_t commits_ok, commits_incomplete, commits_failed;
	atomic_uint_fast64_t dumps, dump_errors, loads, load_errors, spills, streamed;
	struct histogram load_hist, dump_hist;
	_Atomic int64_t last_commit; /* see commit_time() */
};

#define SESSION(n) ((struct session *)((char *)(n) - offsetof(struct session, node)))

static struct pipeline *pipe_of(struct tier *t)
{
	return t->priv;
}

static pthread_mutex_t *stripe_of(struct pipeline *p, const struct blockid *id)
{
	return &p->stripe[blockid_hash(id) % NSTRIPES];
}

static int64_t deadline_from_ttl(int64_t ttl_ms)
{
	return ttl_ms == TTL_NONE || ttl_ms <= 0 ? 0 : mono_ns() + ttl_ms * 1000000;
}

/* --- lookup ------------------------------------------------------------------------------ */

static int pipe_lookup(struct tier *t, const struct blockid *id, struct block_attr *attr)
{
	struct pipeline *p = pipe_of(t);
	struct block_attr a, b;
	int rc = -ENOENT;

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

/*
 * Load id from below into the cache and return a handle on the cached version (pinned
 * unless internal), or a handle that streams from below if the cache has no room now.
 */
static int load(struct pipeline *p, const struct blockid *id, unsigned flags,
		struct tier_handle **out)
{
	struct tier_handle *lh, *r, *rd = NULL;
	struct block_attr a, now;
	int64_t t0 = mono_ns();
	void *buf;
	ssize_t n;
	int rc;

	rc = p->below->ops->open(p->below, id, 0, &lh);
	if (rc)
		return rc;
	p->below->ops->stat(lh, &a);
	if (!p->cache ||
	    p->cache->ops->reserve(p->cache, id, TIER_RESERVE_NOWAIT, a.size, &r)) {
		atomic_fetch_add(&p->streamed, 1);
		*out = lh;
		return 0;
	}
	rc = p->cache->ops->truncate(r, a.size);
	buf = (void *)tier_data(r);
	n = rc ? rc : tier_read(lh, buf, a.size, 0);
	if (n != (ssize_t)a.size) {
		p->cache->ops->abort(r);
		tier_close(lh);
		atomic_fetch_add(&p->load_errors, 1);
		return n < 0 ? (int)n : -EIO;
	}
	pthread_mutex_lock(stripe_of(p, id));
	if (p->below->ops->lookup(p->below, id, &now) == 0 && now.version == a.version) {
		struct block_meta m = { .size = a.size, .mtime = a.mtime, .deadline = a.deadline,
					.layout = NULL };
		unsigned cf = TIER_COMMIT_LOADED | ((flags & TIER_OPEN_INTERNAL) ? 0 : TIER_COMMIT_PIN);

		rc = p->cache->ops->commit(r, &m, cf, &rd);
	} else {
		p->cache->ops->abort(r);
		rc = -EAGAIN; /* replaced or removed while we read it */
	}
	pthread_mutex_unlock(stripe_of(p, id));
	if (rc == 0) {
		atomic_fetch_add(&p->loads, 1);
		histogram_observe(&p->load_hist, mono_ns() - t0);
		tier_close(lh);
		*out = rd;
		return 0;
	}
	if (rc == -EEXIST) {
		/* another reader loaded it first */
		tier_close(lh);
		return -EAGAIN;
	}
	/* cannot admit it: serve the bytes we verified from below */
	*out = lh;
	return 0;
}

static int pipe_open(struct tier *t, const struct blockid *id, unsigned flags,
		     struct tier_handle **out)
{
	struct pipeline *p = pipe_of(t);
	struct pphandle *h = wrap(p, PH_READ);
	int rc = -ENOENT;

	if (!h)
		return -ENOMEM;
	for (int attempt = 0; attempt < 8; attempt++) {
		if (p->cache)
			rc = p->cache->ops->open(p->cache, id, flags, &h->in);
		if (rc == 0 || !p->below)
			break;
		rc = load(p, id, flags, &h->in);
		if (rc != -EAGAIN)
			break;
	}
	if (rc) {
		free(h);
		return rc;
	}
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

	return h->kind == PH_READ ? tier_data(h->in) : NULL;
}

static uint64_t session_size(const struct session *s)
{
	uint64_t end = extents_end(&s->ext);

	return s->declared != NO_SIZE && s->declared > end ? s->declared : end;
}

static int pipe_stat(struct tier_handle *th, struct block_attr *attr)
{
	struct pphandle *h = (struct pphandle *)th;

	if (h->kind == PH_READ)
		return h->in->tier->ops->stat(h->in, attr);
	memset(attr, 0, sizeof(*attr));
	pthread_mutex_lock(&h->s->lock);
	attr->size = session_size(h->s);
	attr->where = h->s->spilled ? TIER_DISK : TIER_MEM;
	pthread_mutex_unlock(&h->s->lock);
	attr->mtime = attr->atime = wall_ns();
	return 0;
}

static void pipe_close(struct tier_handle *th)
{
	struct pphandle *h = (struct pphandle *)th;

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
	if (rc == 0 && s->declared != NO_SIZE)
		rc = p->below->ops->truncate(lres, s->declared);
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
	pthread_mutex_lock(&p->lock);
	n = idmap_find(&p->sessions, id);
	if (n) {
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
	if (committed && (flags & TIER_RESERVE_EXCL)) {
		pthread_mutex_unlock(&p->lock);
		free(h);
		return -EEXIST;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		pthread_mutex_unlock(&p->lock);
		free(h);
		return -ENOMEM;
	}
	s->node.id = *id;
	s->refs = 1;
	s->declared = NO_SIZE;
	atomic_init(&s->ttl_ms, p->default_ttl_ms);
	s->replacing = committed;
	extents_init(&s->ext);
	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_lock(&s->lock);
	if (idmap_insert(&p->sessions, &s->node)) {
		pthread_mutex_unlock(&p->lock);
		pthread_mutex_unlock(&s->lock);
		session_free(s);
		free(h);
		return -ENOMEM;
	}
	pthread_mutex_unlock(&p->lock);

	/* joiners wait on s->lock until the reservation exists */
	if (!size_hint)
		size_hint = p->block_size ? p->block_size : (committed ? old.size : 0);
	rc = first->ops->reserve(first, id, 0, size_hint, &s->res);
	if (rc == -ENOSPC && first == p->cache && p->below)
		rc = p->below->ops->reserve(p->below, id, 0, size_hint, &s->res),
		s->spilled = rc == 0;
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
		idmap_remove(&p->sessions, &s->node);
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
		return -EFBIG;
	pthread_mutex_lock(&s->lock);
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
	if (!s->res)
		return false;
	if (p->block_size)
		return *size == p->block_size && extents_cover(&s->ext, p->block_size);
	return extents_cover(&s->ext, *size);
}

static int dump(struct pipeline *p, struct tier_handle *rd, const struct blockid *id,
		uint64_t version, unsigned flags);

/* The commit time of a new version: the wall clock, but strictly increasing, so that the
 * commit time also tells versions of one id apart (it survives a trip through disk). */
static int64_t commit_time(struct pipeline *p)
{
	int64_t now = wall_ns(), last = atomic_load(&p->last_commit);

	while (!atomic_compare_exchange_weak(&p->last_commit, &last, now > last ? now : last + 1))
		;
	return now > last ? now : last + 1;
}

static void enqueue_dump(struct pipeline *p, struct tier_handle *rd, const struct blockid *id,
			 uint64_t version);

/* Publish a complete session (locked, no writer left). */
static int publish(struct pipeline *p, struct session *s, uint64_t size)
{
	struct block_meta m = { .size = size, .mtime = commit_time(p),
				.deadline = deadline_from_ttl(atomic_load(&s->ttl_ms)) };
	bool durable = s->durable || p->durable;
	struct tier_handle *res = s->res, *rd = NULL;
	struct block_attr a;
	int rc;

	s->res = NULL;
	if (s->spilled) {
		pthread_mutex_t *st = stripe_of(p, &s->node.id);

		pthread_mutex_lock(st);
		if (p->cache)
			p->cache->ops->remove(p->cache, &s->node.id);
		rc = p->below->ops->commit(res, &m, durable ? TIER_COMMIT_DURABLE : 0, NULL);
		pthread_mutex_unlock(st);
		return rc;
	}
	if (!p->below)
		return p->cache->ops->commit(res, &m, 0, NULL);
	rc = p->cache->ops->commit(res, &m, TIER_COMMIT_DIRTY, &rd);
	if (rc)
		return rc;
	p->cache->ops->stat(rd, &a);
	if (durable)
		return dump(p, rd, &s->node.id, a.version, TIER_COMMIT_DURABLE);
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
	if (!ok && (flags & TIER_COMMIT_TRY))
		return -EIO;

	pthread_mutex_lock(&p->lock);
	last = --s->refs == 0;
	if (last && s->err == 0)
		idmap_remove(&p->sessions, &s->node);
	pthread_mutex_unlock(&p->lock);

	if (last) {
		pthread_mutex_lock(&s->lock);
		ok = complete(p, s, &size);
		rc = ok ? publish(p, s, size) : -EIO;
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
	if (last && s->err == 0)
		idmap_remove(&p->sessions, &s->node);
	pthread_mutex_unlock(&p->lock);
	if (last)
		session_free(s);
	free(h);
}

/* --- dumps ------------------------------------------------------------------------------- */

/*
 * Write the cache's committed version `version` of id below, then mark it clean. Consumes rd.
 * 0; -ESTALE if it was replaced or removed meanwhile (nothing to do); or the tier's error.
 */
static int dump(struct pipeline *p, struct tier_handle *rd, const struct blockid *id,
		uint64_t version, unsigned flags)
{
	struct tier_handle *lres;
	struct block_attr a, cur;
	struct block_meta m;
	pthread_mutex_t *st = stripe_of(p, id);
	const char *data = tier_data(rd);
	int64_t t0 = mono_ns();
	int rc;

	p->cache->ops->stat(rd, &a);
	m.size = a.size;
	m.mtime = a.mtime;
	m.deadline = a.deadline;
	m.layout = NULL;
	rc = p->below->ops->reserve(p->below, id, TIER_RESERVE_SEQ, a.size, &lres);
	for (uint64_t off = 0; rc == 0 && off < a.size;) {
		size_t len = a.size - off > COPY_CHUNK ? COPY_CHUNK : (size_t)(a.size - off);
		ssize_t n = p->below->ops->write(lres, data + off, len, off);

		if (n < 0) {
			rc = (int)n;
			p->below->ops->abort(lres);
		}
		off += len;
	}
	if (rc == 0 && a.size == 0)
		rc = p->below->ops->truncate(lres, 0);
	if (rc == 0) {
		pthread_mutex_lock(st);
		if (p->cache->ops->lookup(p->cache, id, &cur) == 0 && cur.version == version) {
			m.deadline = cur.deadline; /* a TTL set while we wrote (under this stripe) */
			rc = p->below->ops->commit(lres, &m, flags, NULL);
			if (rc == 0)
				p->cache->ops->mark_clean(p->cache, id, version);
		} else {
			p->below->ops->abort(lres);
			rc = -ESTALE;
		}
		pthread_mutex_unlock(st);
	}
	tier_close(rd);
	if (rc == 0) {
		atomic_fetch_add(&p->dumps, 1);
		histogram_observe(&p->dump_hist, mono_ns() - t0);
	}
	return rc == -ESTALE ? 0 : rc;
}

static void enqueue_dump(struct pipeline *p, struct tier_handle *rd, const struct blockid *id,
			 uint64_t version)
{
	struct dump_job *j = calloc(1, sizeof(*j));

	if (!j || !p->started) {
		/* no worker (or no memory for the job): write it now */
		free(j);
		dump(p, rd, id, version, 0);
		return;
	}
	j->rd = rd;
	j->id = *id;
	j->version = version;
	pthread_mutex_lock(&p->qlock);
	if (p->qtail)
		p->qtail->next = j;
	else
		p->qhead = j;
	p->qtail = j;
	p->queued++;
	pthread_cond_signal(&p->qcond);
	pthread_mutex_unlock(&p->qlock);
}

static void *dump_worker(void *arg)
{
	struct pipeline *p = arg;

	pthread_mutex_lock(&p->qlock);
	for (;;) {
		struct dump_job *j = p->qhead;
		struct tier_handle *again = NULL;
		int rc;

		if (!j) {
			if (p->stop)
				break;
			pthread_cond_wait(&p->qcond, &p->qlock);
			continue;
		}
		p->qhead = j->next;
		if (!p->qhead)
			p->qtail = NULL;
		p->queued--;
		p->running++;
		pthread_mutex_unlock(&p->qlock);

		/* keep a second reference in case the dump fails and is tried again */
		if (j->attempts + 1 < DUMP_RETRIES && p->cache->ops->open(p->cache, &j->id,
									  TIER_OPEN_INTERNAL, &again))
			again = NULL;
		rc = dump(p, j->rd, &j->id, j->version, 0);
		if (rc && again) {
			atomic_fetch_add(&p->dump_errors, 1);
			log_warn("writing a block to disk failed (%s); trying again", strerror(-rc));
			usleep(100000);
			j->rd = again;
			j->attempts++;
			j->next = NULL;
		} else {
			if (rc) {
				atomic_fetch_add(&p->dump_errors, 1);
				log_err("writing a block to disk failed (%s); it stays in memory only",
					strerror(-rc));
			}
			tier_close(again);
			free(j);
			j = NULL;
		}
		pthread_mutex_lock(&p->qlock);
		p->running--;
		if (j) {
			if (p->qtail)
				p->qtail->next = j;
			else
				p->qhead = j;
			p->qtail = j;
			p->queued++;
		}
		pthread_cond_broadcast(&p->qidle);
	}
	pthread_mutex_unlock(&p->qlock);
	return NULL;
}

static void *sweep_worker(void *arg)
{
	struct pipeline *p = arg;
	struct timespec ts;

	pthread_mutex_lock(&p->qlock);
	while (!p->stop) {
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += SWEEP_MS / 1000;
		pthread_cond_timedwait(&p->sweep_cond, &p->qlock, &ts);
		if (p->stop)
			break;
		pthread_mutex_unlock(&p->qlock);
		if (p->cache && p->cache->ops->sweep)
			p->cache->ops->sweep(p->cache);
		if (p->below && p->below->ops->sweep)
			p->below->ops->sweep(p->below);
		pthread_mutex_lock(&p->qlock);
	}
	pthread_mutex_unlock(&p->qlock);
	return NULL;
}

static void pipe_drain(struct tier *t)
{
	struct pipeline *p = pipe_of(t);

	pthread_mutex_lock(&p->qlock);
	while (p->queued || p->running)
		pthread_cond_wait(&p->qidle, &p->qlock);
	pthread_mutex_unlock(&p->qlock);
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

static int pipe_sync(struct tier *t, const struct blockid *id)
{
	struct pipeline *p = pipe_of(t);
	struct tier_handle *rd;
	struct block_attr a;
	bool idle;
	int rc;

	if (!p->below)
		return pipe_lookup(t, id, NULL);
	/* wait until the live version is no longer dirty: its dump finished */
	while (p->cache && p->cache->ops->lookup(p->cache, id, &a) == 0 && a.dirty) {
		pthread_mutex_lock(&p->qlock);
		idle = !p->queued && !p->running;
		if (!idle)
			pthread_cond_wait(&p->qidle, &p->qlock);
		pthread_mutex_unlock(&p->qlock);
		if (!idle)
			continue;
		/* dirty with no dump under way (not queued yet, or it failed): write it now */
		if (p->cache->ops->open(p->cache, id, TIER_OPEN_INTERNAL, &rd))
			continue;
		rc = dump(p, rd, id, a.version, 0);
		if (rc)
			return rc == -ENOSPC ? rc : -EIO;
	}
	if (p->below->ops->lookup(p->below, id, NULL))
		return pipe_lookup(t, id, NULL) == 0 ? -EIO : -ENOENT;
	return p->below->ops->sync(p->below, id);
}

struct merge {
	struct blockid *ids;
	size_t n, cap;
};

static int merge_add(const struct blockid *id, void *arg)
{
	struct merge *m = arg;

	if (m->n == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 64;
		struct blockid *v = realloc(m->ids, cap * sizeof(*v));

		if (!v)
			return 1;
		m->ids = v;
		m->cap = cap;
	}
	m->ids[m->n++] = *id;
	return 0;
}

/* Every live id of one shard across the tiers, each once, in id order. */
static int pipe_list_shard(struct tier *t, unsigned shard, tier_list_fn fn, void *arg)
{
	struct pipeline *p = pipe_of(t);
	struct merge m = { 0 };

	if (p->cache)
		p->cache->ops->list_shard(p->cache, shard, merge_add, &m);
	if (p->below)
		p->below->ops->list_shard(p->below, shard, merge_add, &m);
	blockid_sort(m.ids, m.n);
	for (size_t i = 0; i < m.n; i++) {
		if (i && blockid_eq(&m.ids[i], &m.ids[i - 1]))
			continue;
		if (fn(&m.ids[i], arg))
			break;
	}
	free(m.ids);
	return 0;
}

static int pipe_usage(struct tier *t, struct tier_usage *u)
{
	struct pipeline *p = pipe_of(t);
	struct tier_usage c = { 0 };

	if (p->cache)
		p->cache->ops->usage(p->cache, &c);
	if (!p->below) {
		*u = c;
		return 0;
	}
	p->below->ops->usage(p->below, u);
	u->blocks += c.dirty_blocks; /* committed, not yet on disk */
	return 0;
}

static void pipe_destroy(struct tier *t)
{
	struct pipeline *p = pipe_of(t);

	if (p->started || p->sweeping) {
		pipe_drain(t);
		pthread_mutex_lock(&p->qlock);
		p->stop = true;
		pthread_cond_broadcast(&p->qcond);
		pthread_cond_broadcast(&p->sweep_cond);
		pthread_mutex_unlock(&p->qlock);
		for (unsigned i = 0; p->started && i < p->nthreads; i++)
			pthread_join(p->threads[i], NULL);
		if (p->sweeping)
			pthread_join(p->sweeper, NULL);
	}
	tier_destroy(p->cache);
	tier_destroy(p->below);
	idmap_destroy(&p->sessions);
	for (int i = 0; i < NSTRIPES; i++)
		pthread_mutex_destroy(&p->stripe[i]);
	pthread_mutex_destroy(&p->lock);
	pthread_mutex_destroy(&p->qlock);
	pthread_cond_destroy(&p->qcond);
	pthread_cond_destroy(&p->qidle);
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
	metrics_gauge(m, "ucmfs_disk_queue_depth", "Disk operations queued or running.",
		      "queue=\"dump\"", (double)c.dump_queue);
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
	.lookup = pipe_lookup,
	.open = pipe_open,
	.read = pipe_read,
	.data = pipe_data,
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
	.drain = pipe_drain,
	.metrics = pipe_metrics,
};

void pipeline_counters(struct tier *t, struct pipeline_counters *out)
{
	struct pipeline *p = pipe_of(t);

	out->commits_ok = atomic_load(&p->commits_ok);
	out->commits_incomplete = atomic_load(&p->commits_incomplete);
	out->commits_failed = atomic_load(&p->commits_failed);
	out->dumps = atomic_load(&p->dumps);
	out->dump_errors = atomic_load(&p->dump_errors);
	out->loads = atomic_load(&p->loads);
	out->load_errors = atomic_load(&p->load_errors);
	out->spills = atomic_load(&p->spills);
	out->streamed_opens = atomic_load(&p->streamed);
	pthread_mutex_lock(&p->qlock);
	out->dump_queue = p->queued + p->running;
	pthread_mutex_unlock(&p->qlock);
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
	p->nthreads = cfg->dump_threads < 1 ? 1
		      : cfg->dump_threads > MAX_DUMP_THREADS ? MAX_DUMP_THREADS
							     : cfg->dump_threads;
	pthread_mutex_init(&p->lock, NULL);
	for (int i = 0; i < NSTRIPES; i++)
		pthread_mutex_init(&p->stripe[i], NULL);
	pthread_mutex_init(&p->qlock, NULL);
	pthread_cond_init(&p->qcond, NULL);
	pthread_cond_init(&p->qidle, NULL);
	pthread_cond_init(&p->sweep_cond, NULL);
	idmap_init(&p->sessions);
	p->tier.ops = &tier_pipeline_ops;
	p->tier.priv = p;
	*out = &p->tier;
	return 0;
}

int pipeline_start(struct tier *t)
{
	struct pipeline *p = pipe_of(t);

	if (pthread_create(&p->sweeper, NULL, sweep_worker, p) == 0)
		p->sweeping = true;
	if (!p->cache || !p->below)
		return 0; /* nothing is ever dumped */
	for (unsigned i = 0; i < p->nthreads; i++) {
		int rc = pthread_create(&p->threads[i], NULL, dump_worker, p);

		if (rc) {
			p->nthreads = i;
			p->started = i > 0;
			return -rc;
		}
	}
	p->started = true;
	return 0;
}

int pipeline_build(const struct ucm_options *o, struct tier **out)
{
	struct pipeline_config pc = {
		.block_size = o->block_size,
		.max_block = o->max_block,
		.default_ttl_ms = o->ttl_ms,
		.durable = o->durable,
		.dump_threads = 2,
	};
	int rc;

	if (!strncmp(o->pipeline, "cache", 5)) {
		struct cache_config cc = {
			.capacity = o->mem_size,
			.policy = o->policy,
			.dirty_wait_ms = o->nstores ? 10000 : 0,
		};

		rc = cache_create(&cc, &pc.cache);
		if (rc) {
			log_err("cannot create the memory tier: %s", strerror(-rc));
			return rc;
		}
	}
	if (strstr(o->pipeline, "posix")) {
		struct posix_config xc = {
			.root = o->stores[0],
			.layout = o->layout,
			.durable = o->durable,
			.capacity = o->disk_size,
			.lock_wait_s = 120,
		};
		/* the compress stage always sits over the disk tier, so blocks written
		 * compressed stay readable whatever the options; it only encodes when the
		 * pipeline names it */
		struct compress_config zc = {
			.zstd = strstr(o->pipeline, "compress") && o->codec != CODEC_NONE &&
				o->layout == LAYOUT_NATIVE,
			.level = o->zstd_level,
			.shuffle = (unsigned)o->shuffle,
		};
		struct tier *disk, *dirs[UCM_MAX_STORES];

		if (o->io == IO_AIO)
			log_info("io=aio: the libaio engine is not built yet; using psync");
		rc = 0;
		for (int i = 0; i < o->nstores && rc == 0; i++) {
			xc.root = o->stores[i];
			rc = posix_create(&xc, &dirs[i]);
			if (rc)
				while (i-- > 0)
					tier_destroy(dirs[i]);
		}
		if (rc == 0 && o->nstores == 1)
			disk = dirs[0];
		else if (rc == 0)
			rc = stripe_create(dirs, o->nstores, &disk);
		if (rc == 0)
			rc = compress_create(&zc, disk, &pc.below);
		if (rc) {
			tier_destroy(pc.cache);
			return rc;
		}
	}
	return pipeline_create(&pc, out);
}
