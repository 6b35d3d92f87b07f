/*
 * The memory tier (tiers/cache.c) against a reference model: a long run of random
 * operations on a small cache (16 pages) and a small set of ids (24), so that reservations
 * fail, blocks are evicted, replaced, expired and removed all the time, under every
 * replacement policy. After every step the cache and the model must agree:
 *
 *   - an id the model holds committed and unexpired is visible with its version, size,
 *     dirty bit, pins and deadline, and opens read its bytes; an id the model holds absent,
 *     expired or removed is not visible to any operation;
 *   - the only blocks that may disappear are clean, unpinned ones, and only during a
 *     reservation or a write that succeeded (eviction); the model then forgets them;
 *   - a reservation, or a write that grows one, succeeds iff the bytes nothing can free
 *     (reservations, dirty blocks, versions held by handles) plus what it asks for fit the
 *     capacity; one that fails evicts nothing;
 *   - open handles read exactly the bytes of the version they opened, whatever happened to
 *     the id since;
 *   - usage(): used equals the buffers of the blocks, handles and reservations the model
 *     holds (never more than the capacity), blocks and dirty blocks what the model counts.
 *
 * The model knows the size of every buffer but three, which it learns from usage() in the
 * step that makes them (and checks for plausibility): a reservation without a size hint may
 * get a pooled buffer of any size, a write that grows a reservation may grow it into a
 * larger buffer that the room it made came from, and a commit may keep a pooled buffer a
 * little larger than the block. It also mirrors one rule of the implementation: a write past a
 * reservation's buffer asks for twice the buffer (or the end of the write if larger) and,
 * if that does not fit, for just the end of the write (cache_write()).
 *
 * Block contents are ut_fill(id, seed) with a new seed per reservation, so every version of
 * an id has its own bytes.
 *
 * The run is seeded: UCM_MODEL_SEED=N repeats one (the seed is printed at the start and in
 * every failure), UCM_MODEL_OPS=N sets the number of operations (default 1,000,000; fewer
 * under a sanitizer, see tests/unit/meson.build), UCM_MODEL_TRACE=1 prints every operation.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "src/buf.h"
#include "src/clock.h"
#include "tests/unit/tier_util.h"
#include "tests/unit/unit.h"
#include "tiers/cache.h"

#define PAGE ((uint64_t)4096)
#define CAPACITY (16 * PAGE)
#define NIDS 24
#define MAXH 8 /* open read handles */
#define MAXR 2 /* open reservations */
#define MAXV (NIDS + MAXH + 1) /* versions in memory: one per id, one per handle */
#define MAXSIZE (CAPACITY + PAGE)

#if defined(__SANITIZE_ADDRESS__)
#define DEFAULT_OPS 500000
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DEFAULT_OPS 500000
#endif
#endif
#ifndef DEFAULT_OPS
#define DEFAULT_OPS 1000000
#endif

static const char *const policy_name[] = { "clock", "lru", "fifo" };

enum mstate {
	M_ABSENT,  /* not in the cache's map */
	M_LIVE,    /* committed, unexpired: visible */
	M_EXPIRED, /* committed, expired, still in the map (pinned, or nobody reaped it yet) */
};

/* A committed version in memory: in an id's slot, or held by handles, or both. */
struct mver {
	bool alive;
	int idx;
	uint64_t seed, size;
	uint64_t version; /* 0 until known (a version committed already expired, no handle) */
	uint64_t cap;     /* its buffer; 0 while the step that made it learns it */
};

struct mid {
	struct blockid id;
	enum mstate st;
	int vi; /* its version (not M_ABSENT) */
	bool dirty;
	int64_t deadline;
};

struct mhandle {
	struct tier_handle *h;
	int vi;
	bool pin; /* false: TIER_OPEN_INTERNAL */
};

struct mres {
	struct tier_handle *h;
	int idx;
	uint64_t seed, size, written;
	uint64_t cap; /* its buffer; 0 while the step that made it learns it */
};

struct model {
	struct tier *t;
	const char *policy;
	uint64_t seed, step, rng, next_seed, last_version;
	int64_t far; /* a deadline that does not pass during the run */
	struct mid ids[NIDS];
	struct mver vs[MAXV];
	struct mhandle hs[MAXH];
	int nh;
	struct mres rs[MAXR];
	int nr;
	bool may_evict; /* this step's operation may have evicted clean unpinned blocks */
	bool made_room; /* this step's operation may have reaped expired blocks */
	uint64_t *learn; /* a buffer size this step learns from usage() */
	int learn_vi;    /* ... of this version (-1: of a reservation), unless it is gone */
	uint64_t learn_lo, learn_hi, learn_alt; /* its bounds; alt: if not 0, one more value */
	const char *op;
	bool trace;
	uint8_t *buf;
	uint64_t n_enospc, n_evicted, n_commits, n_expired;
};

/* Fail with the seed, the policy and the step, so that the run can be repeated. */
#define MCHECK(m, cond, fmt, ...)                                                             \
	UT_CHECK(cond, "policy %s seed %" PRIu64 " step %" PRIu64 " (%s): " fmt, (m)->policy,   \
		 (m)->seed, (m)->step, (m)->op, ##__VA_ARGS__)

static void trace(struct model *m, int idx, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void trace(struct model *m, int idx, const char *fmt, ...)
{
	struct tier_usage u;
	va_list ap;

	if (!m->trace)
		return;
	m->t->ops->usage(m->t, &u);
	fprintf(stderr, "%" PRIu64 " [used %" PRIu64 "] %s id %d: ", m->step, u.used, m->op, idx);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static uint64_t rnd(struct model *m, uint64_t n)
{
	return ut_rand(&m->rng) % n;
}

static uint64_t cap_of(uint64_t size)
{
	return buf_round(size ? size : 1);
}

static const char *hexi(struct model *m, int idx)
{
	return ut_hex(&m->ids[idx].id);
}

/* --- versions ---------------------------------------------------------------------------- */

static int new_version(struct model *m, int idx, uint64_t seed, uint64_t size, uint64_t cap)
{
	for (int i = 0; i < MAXV; i++) {
		if (!m->vs[i].alive) {
			m->vs[i] = (struct mver){ .alive = true, .idx = idx, .seed = seed,
						  .size = size, .cap = cap };
			return i;
		}
	}
	ck_abort_msg("model: out of version records");
	return -1;
}

/* Forget a version once neither its id's slot nor any handle refers to it. */
static void drop_version(struct model *m, int vi)
{
	struct mid *d = &m->ids[m->vs[vi].idx];

	if (d->st != M_ABSENT && d->vi == vi)
		return;
	for (int i = 0; i < m->nh; i++)
		if (m->hs[i].vi == vi)
			return;
	m->vs[vi].alive = false;
}

/* The id leaves the map (removed, reaped, evicted, replaced). */
static void slot_clear(struct model *m, int idx)
{
	struct mid *d = &m->ids[idx];

	if (d->st == M_ABSENT)
		return;
	d->st = M_ABSENT;
	d->dirty = false;
	drop_version(m, d->vi);
}

static uint32_t pins_on(struct model *m, int vi)
{
	uint32_t n = 0;

	for (int i = 0; i < m->nh; i++)
		n += m->hs[i].pin && m->hs[i].vi == vi;
	return n;
}

static bool held(struct model *m, int vi)
{
	for (int i = 0; i < m->nh; i++)
		if (m->hs[i].vi == vi)
			return true;
	return false;
}

static uint32_t slot_pins(struct model *m, int idx)
{
	return m->ids[idx].st == M_ABSENT ? 0 : pins_on(m, m->ids[idx].vi);
}

/*
 * Bytes nothing can free: reservations, dirty live blocks, versions held by handles (pinned
 * or not, in the map or not). Expired blocks nobody pins are reclaimed before anything.
 */
static uint64_t unfreeable(struct model *m)
{
	uint64_t sum = 0;

	for (int i = 0; i < m->nr; i++)
		sum += m->rs[i].cap;
	for (int vi = 0; vi < MAXV; vi++) {
		struct mver *v = &m->vs[vi];
		struct mid *d = &m->ids[v->idx];

		if (!v->alive)
			continue;
		if (held(m, vi) || (d->st == M_LIVE && d->vi == vi && d->dirty))
			sum += v->cap;
	}
	return sum;
}

/* Compare the bytes of a version read through h: whole, or one random range. */
static void check_handle_bytes(struct model *m, struct mhandle *mh, bool whole)
{
	struct mver *v = &m->vs[mh->vi];
	uint64_t size = v->size, off = 0, len = size + 1;
	uint64_t want;
	ssize_t n;
	long long bad;

	if (!whole) {
		off = rnd(m, size + 2);
		len = rnd(m, size + 2);
	}
	want = off >= size ? 0 : (len < size - off ? len : size - off);
	n = tier_read(mh->h, m->buf, len, off);
	MCHECK(m, n == (ssize_t)want, "%s: read(%" PRIu64 ", %" PRIu64 ") = %zd, want %" PRIu64,
	       hexi(m, v->idx), off, len, n, want);
	bad = ut_diff(&m->ids[v->idx].id, v->seed, m->buf, (size_t)want, off);
	MCHECK(m, bad < 0, "%s: version %" PRIu64 " (seed %" PRIu64 "): wrong byte at %" PRIu64,
	       hexi(m, v->idx), v->version, v->seed, off + (uint64_t)bad);
	if (whole && size) {
		const uint8_t *p = tier_data(mh->h);

		MCHECK(m, p && memcmp(p, m->buf, (size_t)size) == 0, "%s: data() differs",
		       hexi(m, v->idx));
	}
}

static void check_handle_stat(struct model *m, struct mhandle *mh)
{
	struct mver *v = &m->vs[mh->vi];
	struct block_attr a;

	MCHECK(m, mh->h->tier->ops->stat(mh->h, &a) == 0, "stat");
	MCHECK(m, a.size == v->size, "%s: handle size %" PRIu64 ", want %" PRIu64,
	       hexi(m, v->idx), a.size, v->size);
	if (!v->version)
		v->version = a.version;
	MCHECK(m, a.version == v->version, "%s: handle version %" PRIu64 ", want %" PRIu64,
	       hexi(m, v->idx), a.version, v->version);
}

static void add_handle(struct model *m, struct tier_handle *h, int vi, bool pin)
{
	m->hs[m->nh++] = (struct mhandle){ .h = h, .vi = vi, .pin = pin };
}

/* --- operations -------------------------------------------------------------------------- */

static uint64_t pick_size(struct model *m)
{
	uint64_t r = rnd(m, 100);

	if (r < 3)
		return 0;
	if (r < 35)
		return 1 + rnd(m, PAGE);
	if (r < 85)
		return 1 + rnd(m, 4 * PAGE);
	if (r < 97)
		return 1 + rnd(m, 10 * PAGE);
	return CAPACITY - PAGE + rnd(m, 2 * PAGE + 1); /* around the whole capacity */
}

static void op_reserve(struct model *m)
{
	struct mres *r = &m->rs[m->nr];
	uint64_t size = pick_size(m), hint, need, r100 = rnd(m, 100), base = unfreeable(m);
	unsigned flags = 0;
	bool ok;
	int rc;

	m->op = "reserve";
	r->idx = (int)rnd(m, NIDS);
	if (r100 < 60)
		hint = size;
	else if (r100 < 75)
		hint = 0;
	else if (r100 < 85)
		hint = size / 2;
	else
		hint = size + rnd(m, 2 * PAGE);
	if (rnd(m, 2))
		flags |= TIER_RESERVE_NOWAIT;
	if (rnd(m, 4) == 0)
		flags |= TIER_RESERVE_TRUNC;
	need = cap_of(hint);
	ok = base + need <= CAPACITY;
	rc = m->t->ops->reserve(m->t, &m->ids[r->idx].id, flags, hint, &r->h);
	trace(m, r->idx, "size %" PRIu64 " hint %" PRIu64 " = %d", size, hint, rc);
	MCHECK(m, rc == (ok ? 0 : -ENOSPC),
	       "reserve %s hint %" PRIu64 " = %d, want %d (%" PRIu64 " bytes nothing can free)",
	       hexi(m, r->idx), hint, rc, ok ? 0 : -ENOSPC, base);
	m->made_room = true; /* expired blocks may have been reaped, even if it failed */
	if (rc) {
		m->n_enospc++;
		return;
	}
	r->seed = ++m->next_seed;
	r->size = size;
	r->written = 0;
	r->cap = need;
	if (hint == 0) {
		/* a pooled buffer of any size, or a fresh page */
		r->cap = 0;
		m->learn = &r->cap;
		m->learn_vi = -1;
		m->learn_lo = PAGE;
		m->learn_hi = CAPACITY - base;
		m->learn_alt = 0;
	}
	m->nr++;
	m->may_evict = true;
}

static void drop_res(struct model *m, int i)
{
	m->rs[i] = m->rs[--m->nr];
}

static void op_write(struct model *m, int i)
{
	struct mres *r = &m->rs[i];
	uint64_t left = r->size - r->written, len, end, cap = r->cap, base = unfreeable(m);
	int expect = 0;
	ssize_t n;

	m->op = "write";
	len = rnd(m, 3) ? 1 + rnd(m, left) : left;
	end = r->written + len;
	if (end > r->cap) {
		uint64_t want = 2 * r->cap > end ? 2 * r->cap : end;

		if (base + cap_of(want) - r->cap <= CAPACITY)
			cap = cap_of(want);
		else if (want > end && base + cap_of(end) - r->cap <= CAPACITY)
			cap = cap_of(end);
		else
			expect = -ENOSPC;
	}
	ut_fill(&m->ids[r->idx].id, r->seed, m->buf, (size_t)len, r->written);
	n = r->h->tier->ops->write(r->h, m->buf, (size_t)len, r->written);
	trace(m, r->idx, "[%" PRIu64 ", %" PRIu64 ") buffer %" PRIu64 " -> %" PRIu64 " = %zd",
	      r->written, end, r->cap, cap, n);
	MCHECK(m, n == (expect ? expect : (ssize_t)len),
	       "write %s [%" PRIu64 ", %" PRIu64 ") into a buffer of %" PRIu64 " = %zd, want %zd "
	       "(%" PRIu64 " bytes nothing can free)",
	       hexi(m, r->idx), r->written, end, r->cap, n, expect ? (ssize_t)expect : (ssize_t)len,
	       base);
	if (cap != r->cap || n < 0)
		m->made_room = true;
	if (n < 0) {
		m->n_enospc++;
		return;
	}
	r->written = end;
	if (cap == r->cap)
		return;
	m->may_evict = true;
	/* grown into a buffer that the room it made came from, if one was large enough: at
	 * least cap bytes, at most what the bytes nothing else holds leave */
	m->learn = &r->cap;
	m->learn_vi = -1;
	m->learn_lo = cap;
	m->learn_hi = CAPACITY - (base - r->cap);
	m->learn_alt = 0;
	r->cap = 0;
}

static void op_commit(struct model *m, int i)
{
	struct mres *r = &m->rs[i];
	int idx = r->idx;
	struct mid *d = &m->ids[idx];
	struct block_meta meta = tu_meta(r->size, 0);
	struct tier_handle *rd = NULL;
	bool want_rd = m->nh < MAXH && rnd(m, 6) == 0, pin = rnd(m, 2);
	unsigned flags = 0;
	uint64_t r100 = rnd(m, 100), seed = r->seed, size = r->size, rcap = r->cap;
	int expect = 0, rc, vi;

	m->op = "commit";
	if (rnd(m, 2))
		flags |= TIER_COMMIT_DIRTY;
	if (want_rd && pin)
		flags |= TIER_COMMIT_PIN;
	if (rnd(m, 20) == 0) {
		flags |= TIER_COMMIT_LOADED;
		if (d->st == M_LIVE)
			expect = -EEXIST;
	}
	if (r100 < 8)
		meta.deadline = 1;
	else if (r100 < 15)
		meta.deadline = m->far;
	rc = r->h->tier->ops->commit(r->h, &meta, flags, want_rd ? &rd : NULL);
	trace(m, idx, "seed %" PRIu64 " size %" PRIu64 " flags %#x deadline %" PRId64 " = %d",
	      seed, size, flags, meta.deadline, rc);
	MCHECK(m, rc == expect, "commit %s flags %#x = %d, want %d", hexi(m, idx), flags, rc,
	       expect);
	if (rc) {
		/* a refused load stays with its caller: the reservation goes on, in a buffer
		 * trimmed as a commit trims it */
		r->cap = 0;
		m->learn = &r->cap;
		m->learn_vi = -1;
		m->learn_lo = m->learn_hi = cap_of(size);
		m->learn_alt = buf_round(size) + rcap / 4 >= rcap ? rcap : 0;
		return;
	}
	m->n_commits++;
	drop_res(m, i);
	/* the old version, live or expired, leaves the map; handles keep theirs */
	slot_clear(m, idx);
	vi = new_version(m, idx, seed, size, 0);
	d->st = meta.deadline == 1 ? M_EXPIRED : M_LIVE;
	d->vi = vi;
	d->dirty = (flags & TIER_COMMIT_DIRTY) != 0;
	d->deadline = meta.deadline;
	/* the buffer shrinks to the block, unless it is a pooled one a little larger */
	m->learn = &m->vs[vi].cap;
	m->learn_vi = vi;
	m->learn_lo = m->learn_hi = cap_of(size);
	m->learn_alt = buf_round(size) + rcap / 4 >= rcap ? rcap : 0;
	if (rd) {
		add_handle(m, rd, vi, pin);
		check_handle_stat(m, &m->hs[m->nh - 1]);
	}
	if (d->st == M_LIVE) {
		struct block_attr a;

		/* nothing ran since the commit: it is there */
		rc = m->t->ops->lookup(m->t, &d->id, &a);
		MCHECK(m, rc == 0, "lookup %s after its commit = %d", hexi(m, idx), rc);
		MCHECK(m, !m->vs[vi].version || a.version == m->vs[vi].version,
		       "the handle commit returned has version %" PRIu64 ", lookup %" PRIu64,
		       m->vs[vi].version, a.version);
		m->vs[vi].version = a.version;
	}
	if (m->vs[vi].version) {
		MCHECK(m, m->vs[vi].version > m->last_version,
		       "version %" PRIu64 " not newer than %" PRIu64, m->vs[vi].version,
		       m->last_version);
		m->last_version = m->vs[vi].version;
	}
	if (d->st == M_EXPIRED)
		m->n_expired++;
}

static void op_abort(struct model *m, int i)
{
	m->op = "abort";
	trace(m, m->rs[i].idx, "seed %" PRIu64, m->rs[i].seed);
	m->rs[i].h->tier->ops->abort(m->rs[i].h);
	drop_res(m, i);
}

/* An op on an id the model holds not live missed; that reaps an expired one nobody pins. */
static void missed(struct model *m, int idx)
{
	if (m->ids[idx].st == M_EXPIRED && slot_pins(m, idx) == 0)
		slot_clear(m, idx);
}

static void op_open(struct model *m, bool pin)
{
	int idx = (int)rnd(m, NIDS);
	struct mid *d = &m->ids[idx];
	struct tier_handle *h;
	int rc;

	m->op = pin ? "open" : "open internal";
	rc = m->t->ops->open(m->t, &d->id, pin ? 0 : TIER_OPEN_INTERNAL, &h);
	trace(m, idx, "= %d", rc);
	MCHECK(m, rc == (d->st == M_LIVE ? 0 : -ENOENT), "open %s = %d, model state %d",
	       hexi(m, idx), rc, d->st);
	if (rc) {
		missed(m, idx);
		return;
	}
	add_handle(m, h, d->vi, pin);
	check_handle_stat(m, &m->hs[m->nh - 1]);
	check_handle_bytes(m, &m->hs[m->nh - 1], true);
}

static void op_close(struct model *m)
{
	int i = (int)rnd(m, (uint64_t)m->nh);
	struct mhandle mh = m->hs[i];
	int idx = m->vs[mh.vi].idx;
	struct mid *d = &m->ids[idx];

	m->op = "close";
	trace(m, idx, "%s, seed %" PRIu64, mh.pin ? "pin" : "internal", m->vs[mh.vi].seed);
	check_handle_stat(m, &m->hs[i]);
	tier_close(mh.h);
	m->hs[i] = m->hs[--m->nh];
	/* the close that leaves an expired version unpinned kills it */
	if (d->st == M_EXPIRED && d->vi == mh.vi && pins_on(m, mh.vi) == 0)
		slot_clear(m, idx);
	drop_version(m, mh.vi);
}

static void op_read(struct model *m)
{
	struct mhandle *mh = &m->hs[rnd(m, (uint64_t)m->nh)];

	m->op = "read";
	trace(m, m->vs[mh->vi].idx, "seed %" PRIu64, m->vs[mh->vi].seed);
	check_handle_bytes(m, mh, rnd(m, 8) == 0);
}

static void op_touch(struct model *m)
{
	int idx = (int)rnd(m, NIDS);
	int rc;

	m->op = "touch";
	rc = m->t->ops->touch(m->t, &m->ids[idx].id);
	trace(m, idx, "= %d", rc);
	MCHECK(m, rc == (m->ids[idx].st == M_LIVE ? 0 : -ENOENT), "touch %s = %d, state %d",
	       hexi(m, idx), rc, m->ids[idx].st);
	if (rc)
		missed(m, idx);
}

static void op_set_deadline(struct model *m, int64_t deadline)
{
	int idx = (int)rnd(m, NIDS);
	struct mid *d = &m->ids[idx];
	int rc;

	m->op = deadline == 1 ? "set_deadline(past)" : deadline ? "set_deadline(far)"
								 : "set_deadline(none)";
	rc = m->t->ops->set_deadline(m->t, &d->id, deadline);
	trace(m, idx, "= %d", rc);
	MCHECK(m, rc == (d->st == M_LIVE ? 0 : -ENOENT), "set_deadline %s = %d, state %d",
	       hexi(m, idx), rc, d->st);
	if (rc) {
		missed(m, idx);
		return;
	}
	d->deadline = deadline;
	if (deadline == 1) {
		d->st = M_EXPIRED;
		m->n_expired++;
	}
}

static void op_mark_clean(struct model *m)
{
	int idx = (int)rnd(m, NIDS);
	struct mid *d = &m->ids[idx];
	uint64_t known = d->st != M_ABSENT ? m->vs[d->vi].version : 0;
	bool right = known && rnd(m, 10) != 0;
	uint64_t v = right ? known : m->last_version + 1 + rnd(m, 1000);
	int rc;

	m->op = right ? "mark_clean" : "mark_clean(stale version)";
	rc = m->t->ops->mark_clean(m->t, &d->id, v);
	trace(m, idx, "= %d", rc);
	if (d->st == M_EXPIRED && right) {
		/* not asserted here (see test_cache_model_mark_clean_expired): an expired block
		 * still in the map is marked clean */
		MCHECK(m, rc == 0 || rc == -ENOENT, "mark_clean %s (expired) = %d", hexi(m, idx),
		       rc);
		if (rc == 0)
			d->dirty = false;
		return;
	}
	MCHECK(m, rc == (d->st == M_LIVE && right ? 0 : -ENOENT),
	       "mark_clean %s version %" PRIu64 " = %d, state %d version %" PRIu64, hexi(m, idx),
	       v, rc, d->st, known);
	if (rc == 0)
		d->dirty = false;
}

static void op_remove(struct model *m)
{
	int idx = (int)rnd(m, NIDS);
	struct mid *d = &m->ids[idx];
	int rc;

	m->op = "remove";
	rc = m->t->ops->remove(m->t, &d->id);
	trace(m, idx, "= %d", rc);
	MCHECK(m, rc == (d->st == M_LIVE ? 0 : -ENOENT), "remove %s = %d, state %d", hexi(m, idx),
	       rc, d->st);
	slot_clear(m, idx); /* expired ones leave the map too, pinned or not */
}

/* Open without pinning, read whole, close: the bytes of the version the model holds. */
static void op_verify(struct model *m)
{
	int idx = (int)rnd(m, NIDS);
	struct mid *d = &m->ids[idx];
	struct mhandle mh = { .vi = d->vi, .pin = false };
	int rc;

	m->op = "verify";
	rc = m->t->ops->open(m->t, &d->id, TIER_OPEN_INTERNAL, &mh.h);
	trace(m, idx, "= %d", rc);
	MCHECK(m, rc == (d->st == M_LIVE ? 0 : -ENOENT), "open %s = %d, state %d", hexi(m, idx),
	       rc, d->st);
	if (rc) {
		missed(m, idx);
		return;
	}
	check_handle_stat(m, &mh);
	check_handle_bytes(m, &mh, true);
	tier_close(mh.h);
}

static void op_sweep(struct model *m)
{
	m->op = "sweep";
	trace(m, -1, "all");
	m->t->ops->sweep(m->t);
	for (int i = 0; i < NIDS; i++)
		missed(m, i);
}

/* One random operation. */
static void step(struct model *m)
{
	uint64_t r = rnd(m, 140);
	int nfull = 0, full[MAXR], nopen = 0, open[MAXR];

	for (int i = 0; i < m->nr; i++) {
		if (m->rs[i].written == m->rs[i].size)
			full[nfull++] = i;
		else
			open[nopen++] = i;
	}
	if (r < 16) {
		if (m->nr < MAXR)
			op_reserve(m);
		else if (nopen)
			op_write(m, open[rnd(m, (uint64_t)nopen)]);
		else
			op_commit(m, full[rnd(m, (uint64_t)nfull)]);
	} else if (r < 36) {
		if (nopen)
			op_write(m, open[rnd(m, (uint64_t)nopen)]);
		else if (m->nr < MAXR)
			op_reserve(m);
	} else if (r < 50) {
		if (nfull)
			op_commit(m, full[rnd(m, (uint64_t)nfull)]);
		else if (m->nr < MAXR)
			op_reserve(m);
	} else if (r < 53) {
		if (m->nr)
			op_abort(m, (int)rnd(m, (uint64_t)m->nr));
	} else if (r < 68) {
		if (m->nh < MAXH)
			op_open(m, r < 64);
		else
			op_close(m);
	} else if (r < 82) {
		if (m->nh)
			op_close(m);
	} else if (r < 90) {
		if (m->nh)
			op_read(m);
	} else if (r < 96) {
		op_touch(m);
	} else if (r < 100) {
		op_set_deadline(m, 1);
	} else if (r < 104) {
		op_set_deadline(m, 0);
	} else if (r < 106) {
		op_set_deadline(m, m->far);
	} else if (r < 120) {
		op_mark_clean(m);
	} else if (r < 126) {
		op_remove(m);
	} else if (r < 138) {
		op_verify(m);
	} else {
		op_sweep(m);
	}
}

/* After each step: what is visible, then the accounting. */
static void check_all(struct model *m)
{
	struct tier_usage u;
	uint64_t used = 0, blocks = 0, dirty = 0;

	m->op = "check";
	for (int i = 0; i < NIDS; i++) {
		struct mid *d = &m->ids[i];
		struct mver *v = &m->vs[d->vi];
		struct block_attr a;
		int rc;

		/* leave most expired ids alone, so that reservations meet unreaped ones; after
		 * a step that made room, look at them all (they may be gone) */
		if (d->st == M_EXPIRED && !m->made_room && !m->learn && rnd(m, 8))
			continue;
		rc = m->t->ops->lookup(m->t, &d->id, &a);
		if (d->st != M_LIVE) {
			MCHECK(m, rc == -ENOENT, "%s visible (version %" PRIu64 "), model state %d",
			       hexi(m, i), a.version, d->st);
			missed(m, i);
			continue;
		}
		if (rc == -ENOENT && m->may_evict && !d->dirty && slot_pins(m, i) == 0) {
			trace(m, i, "evicted");
			slot_clear(m, i);
			m->n_evicted++;
			continue;
		}
		MCHECK(m, rc == 0, "%s (version %" PRIu64 ", %s, %u pins) is gone after %s",
		       hexi(m, i), v->version, d->dirty ? "dirty" : "clean", slot_pins(m, i),
		       m->may_evict ? "a step that may evict only clean unpinned blocks"
				    : "a step that evicts nothing (no or a failed reservation)");
		MCHECK(m, a.version == v->version && a.size == v->size,
		       "%s: version %" PRIu64 " size %" PRIu64 ", want %" PRIu64 " %" PRIu64,
		       hexi(m, i), a.version, a.size, v->version, v->size);
		MCHECK(m, a.dirty == d->dirty, "%s: dirty %d, want %d", hexi(m, i), a.dirty,
		       d->dirty);
		MCHECK(m, a.pins == slot_pins(m, i), "%s: %u pins, want %u", hexi(m, i), a.pins,
		       slot_pins(m, i));
		MCHECK(m, a.deadline == d->deadline, "%s: deadline %" PRId64 ", want %" PRId64,
		       hexi(m, i), a.deadline, d->deadline);
	}
	m->may_evict = m->made_room = false;

	/* every byte the cache holds for blocks: versions in the map or held, reservations */
	for (int i = 0; i < m->nr; i++)
		used += m->rs[i].cap;
	for (int vi = 0; vi < MAXV; vi++)
		if (m->vs[vi].alive)
			used += m->vs[vi].cap;
	for (int i = 0; i < NIDS; i++) {
		if (m->ids[i].st != M_ABSENT) {
			blocks++;
			dirty += m->ids[i].dirty;
		}
	}
	MCHECK(m, m->t->ops->usage(m->t, &u) == 0, "usage");
	MCHECK(m, u.used <= CAPACITY, "used %" PRIu64 " > capacity %" PRIu64, u.used, CAPACITY);
	if (m->learn && m->learn_vi >= 0 && !m->vs[m->learn_vi].alive)
		m->learn = NULL; /* committed expired, and already reaped */
	if (m->learn) {
		/* the one buffer of unknown size is what usage() says is left */
		uint64_t cap = u.used - used;

		MCHECK(m, u.used >= used && cap % PAGE == 0 &&
				  ((cap >= m->learn_lo && cap <= m->learn_hi) ||
				   (m->learn_alt && cap == m->learn_alt)),
		       "used %" PRIu64 ", the model accounts for %" PRIu64 " and a buffer of "
		       "%" PRIu64 "..%" PRIu64 " (or %" PRIu64 ")",
		       u.used, used, m->learn_lo, m->learn_hi, m->learn_alt);
		*m->learn = cap;
		used += cap;
		m->learn = NULL;
	}
	MCHECK(m, u.used == used, "used %" PRIu64 ", the model accounts for %" PRIu64, u.used,
	       used);
	MCHECK(m, u.blocks == blocks, "%" PRIu64 " blocks, the model has %" PRIu64, u.blocks,
	       blocks);
	MCHECK(m, u.dirty_blocks == dirty, "%" PRIu64 " dirty blocks, the model has %" PRIu64,
	       u.dirty_blocks, dirty);
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
	const char *s = getenv(name);

	return s && *s ? strtoull(s, NULL, 0) : dflt;
}

START_TEST(test_cache_model_random_ops)
{
	struct model *m = calloc(1, sizeof(*m));
	uint64_t ops = env_u64("UCM_MODEL_OPS", DEFAULT_OPS);
	struct tier_usage u;

	ck_assert_ptr_nonnull(m);
	m->policy = policy_name[_i];
	m->seed = env_u64("UCM_MODEL_SEED",
			  ut_mix((uint64_t)time(NULL) ^ (uint64_t)getpid() << 32 ^ (uint64_t)_i));
	m->rng = m->seed;
	m->trace = env_u64("UCM_MODEL_TRACE", 0) != 0;
	m->far = mono_ns() + 24 * 3600 * 1000000000LL;
	m->buf = malloc(MAXSIZE + 2);
	ck_assert_ptr_nonnull(m->buf);
	for (int i = 0; i < NIDS; i++)
		m->ids[i].id = ut_id(424200 + (uint64_t)i);
	fprintf(stderr, "cache_model: policy %s, %" PRIu64 " operations, UCM_MODEL_SEED=%" PRIu64
			"\n", m->policy, ops, m->seed);
	m->t = tu_cache_policy(CAPACITY, 0, (enum ucm_policy)_i);

	for (m->step = 1; m->step <= ops; m->step++) {
		step(m);
		check_all(m);
	}

	/* give everything back: the cache ends empty */
	m->op = "teardown";
	while (m->nh)
		op_close(m);
	while (m->nr)
		op_abort(m, 0);
	for (int i = 0; i < NIDS; i++)
		m->t->ops->remove(m->t, &m->ids[i].id);
	MCHECK(m, m->t->ops->usage(m->t, &u) == 0, "usage");
	MCHECK(m, u.used == 0 && u.blocks == 0 && u.dirty_blocks == 0,
	       "after removing everything: used %" PRIu64 ", %" PRIu64 " blocks, %" PRIu64
	       " dirty", u.used, u.blocks, u.dirty_blocks);
	fprintf(stderr, "cache_model: policy %s: %" PRIu64 " commits, %" PRIu64 " evictions seen, "
			"%" PRIu64 " -ENOSPC, %" PRIu64 " expiries\n", m->policy, m->n_commits,
		m->n_evicted, m->n_enospc, m->n_expired);
	tier_destroy(m->t);
	free(m->buf);
	free(m);
}
END_TEST

/* --- targeted cases the model runs into -------------------------------------------------- */

static void put(struct tier *t, const struct blockid *id, uint64_t seed, uint64_t size,
		unsigned cflags)
{
	ck_assert_int_eq(tu_put(t, id, seed, size, 0, cflags, 0), 0);
}

/*
 * A failed reservation evicts nothing, also when a clean block is held by an internal
 * reference (TIER_OPEN_INTERNAL, as the pipeline's dump holds one): evicting that block
 * frees no memory, so it does not make room.
 */
START_TEST(test_cache_model_failed_reserve_keeps_internally_held)
{
	struct tier *t = tu_cache_policy(4 * PAGE, 0, (enum ucm_policy)_i);
	struct blockid a = ut_id(1), b = ut_id(2);
	struct tier_handle *ref, *h;

	put(t, &a, 1, 2 * PAGE, 0);
	put(t, &b, 1, 2 * PAGE, 0);
	ck_assert_int_eq(t->ops->open(t, &a, TIER_OPEN_INTERNAL, &ref), 0);
	/* 4 pages would need both blocks gone, but a's buffer stays with ref: no room */
	ck_assert_int_eq(t->ops->reserve(t, &b, TIER_RESERVE_NOWAIT, 4 * PAGE, &h), -ENOSPC);
	ck_assert_msg(tu_lookup(t, &a, NULL) == 0 && tu_lookup(t, &b, NULL) == 0,
		      "a failed reservation evicted a block (a %s, b %s)",
		      tu_lookup(t, &a, NULL) ? "gone" : "there",
		      tu_lookup(t, &b, NULL) ? "gone" : "there");
	tier_close(ref);
	tu_expect(t, &a, 1, 2 * PAGE);
	tu_expect(t, &b, 1, 2 * PAGE);
	tier_destroy(t);
}
END_TEST

/*
 * A new version of an id whose old version has expired while pinned replaces it: the id is
 * in the map once, and the new version stays visible whatever happens to the map's tables
 * (more ids of the same shard make it grow).
 */
START_TEST(test_cache_model_replace_expired_pinned)
{
	struct tier *t = tu_cache_policy(256 * PAGE, 0, (enum ucm_policy)_i);
	struct blockid x = ut_id_in_shard(0x5a5, 1);
	struct tier_handle *pin;
	struct tier_usage u;
	struct block_attr a;

	put(t, &x, 1, PAGE, 0);
	ck_assert_int_eq(t->ops->open(t, &x, 0, &pin), 0);
	ck_assert_int_eq(t->ops->set_deadline(t, &x, 1), 0);
	ck_assert_int_eq(tu_lookup(t, &x, NULL), -ENOENT);
	put(t, &x, 2, PAGE, 0); /* the new version */
	ck_assert_int_eq(tu_lookup(t, &x, &a), 0);
	for (uint64_t n = 2; n < 40; n++) {
		struct blockid o = ut_id_in_shard(0x5a5, n);

		put(t, &o, 3, 100, 0);
		ck_assert_msg(tu_lookup(t, &x, NULL) == 0,
			      "the new version vanished after %llu more ids in its shard",
			      (unsigned long long)n - 1);
	}
	ck_assert_int_eq(t->ops->usage(t, &u), 0);
	ck_assert_msg(u.blocks == 39, "39 ids, %llu blocks in the map",
		      (unsigned long long)u.blocks);
	tu_expect(t, &x, 2, PAGE);
	tu_check_read(pin, &x, 1, PAGE, 0, PAGE); /* the reader keeps the old bytes */
	tier_close(pin);
	ck_assert_int_eq(tu_lookup(t, &x, NULL), 0);
	tu_expect(t, &x, 2, PAGE);
	ck_assert_int_eq(t->ops->remove(t, &x), 0);
	ck_assert_int_eq(tu_lookup(t, &x, NULL), -ENOENT);
	tier_destroy(t);
}
END_TEST

/*
 * A reservation starts zero-filled, also in a reused (pooled) buffer: a truncate that grows
 * it, a read through it and a commit of more than was written show zeros where nothing was
 * written, never the bytes of a block freed before.
 */
START_TEST(test_cache_model_reused_buffer_zero_filled)
{
	struct tier *t = tu_cache_policy(64 * PAGE, 0, (enum ucm_policy)_i);
	struct blockid old = ut_id(11), id = ut_id(12);
	struct tier_handle *h;
	struct block_meta m = tu_meta(6 * PAGE, 0);
	uint8_t *buf = malloc(6 * PAGE);
	ssize_t n;

	ck_assert_ptr_nonnull(buf);
	/* a freed block leaves its buffer, full of its bytes, for the next reservation */
	put(t, &old, 1, 6 * PAGE, 0);
	ck_assert_int_eq(t->ops->remove(t, &old), 0);

	ck_assert_int_eq(t->ops->reserve(t, &id, 0, 0, &h), 0);
	ck_assert_int_eq(tu_write(h, &id, 2, 0, 100), 100);
	ck_assert_int_eq(t->ops->truncate(h, 3 * PAGE), 0);
	n = tier_read(h, buf, 3 * PAGE, 0);
	ck_assert_int_eq(n, (ssize_t)(3 * PAGE));
	ck_assert_int_eq(ut_diff(&id, 2, buf, 100, 0), -1);
	for (size_t i = 100; i < 3 * PAGE; i++)
		ck_assert_msg(buf[i] == 0, "reservation byte %zu is %#x, not 0 (after truncate)",
			      i, buf[i]);
	ck_assert_int_eq(tu_write(h, &id, 2, 4 * PAGE, 100), 100);
	ck_assert_int_eq(t->ops->commit(h, &m, 0, NULL), 0);
	ck_assert_int_eq(t->ops->open(t, &id, 0, &h), 0);
	ck_assert_int_eq(tier_read(h, buf, 6 * PAGE, 0), (ssize_t)(6 * PAGE));
	for (size_t i = 0; i < 6 * PAGE; i++) {
		bool written = i < 100 || (i >= 4 * PAGE && i < 4 * PAGE + 100);

		if (!written)
			ck_assert_msg(buf[i] == 0, "block byte %zu is %#x, not 0", i, buf[i]);
	}
	tier_close(h);
	free(buf);
	tier_destroy(t);
}
END_TEST

/* Every op treats an expired block as absent (tiers/tier.h), mark_clean too. */
START_TEST(test_cache_model_mark_clean_expired)
{
	struct tier *t = tu_cache_policy(16 * PAGE, 0, (enum ucm_policy)_i);
	struct blockid x = ut_id(5);
	struct block_attr a;

	put(t, &x, 1, PAGE, TIER_COMMIT_DIRTY);
	ck_assert_int_eq(tu_lookup(t, &x, &a), 0);
	ck_assert_int_eq(t->ops->set_deadline(t, &x, 1), 0);
	ck_assert_int_eq(t->ops->mark_clean(t, &x, a.version), -ENOENT);
	tier_destroy(t);
}
END_TEST

/* --- memory ------------------------------------------------------------------------------ */

static uint64_t rss_bytes(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	unsigned long long size = 0, resident = 0;

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fscanf(f, "%llu %llu", &size, &resident), 2);
	fclose(f);
	return resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

/*
 * Re-setting the deadlines of a few blocks a million times keeps the TTL index bounded
 * (stale entries are compacted away): the process grows by less than a few MB. Without
 * compaction the index would hold a million entries of 24 bytes.
 */
START_TEST(test_cache_model_deadline_heap_bounded)
{
	struct tier *t = tu_cache_policy(64 * PAGE, 0, (enum ucm_policy)_i);
	enum { N = 4, LOOPS = 1000000 };
	struct blockid ids[N];
	int64_t far = mono_ns() + 3600 * 1000000000LL;
	uint64_t before, after;

	for (int i = 0; i < N; i++) {
		ids[i] = ut_id(9000 + (uint64_t)i);
		put(t, &ids[i], 1, PAGE, 0);
	}
	/* warm up: the heap reaches its steady size, the allocator its pools */
	for (int i = 0; i < 10000; i++)
		ck_assert_int_eq(t->ops->set_deadline(t, &ids[i % N], far + i), 0);
	before = rss_bytes();
	for (int i = 0; i < LOOPS; i++) {
		int rc = t->ops->set_deadline(t, &ids[i % N], i % 97 == 0 ? 0 : far + i);

		UT_CHECK(rc == 0, "set_deadline = %d at %d", rc, i);
	}
	after = rss_bytes();
	ck_assert_msg(after < before + (4u << 20), "RSS grew from %llu to %llu KiB",
		      (unsigned long long)before >> 10, (unsigned long long)after >> 10);
	for (int i = 0; i < N; i++)
		tu_expect(t, &ids[i], 1, PAGE);
	tier_destroy(t);
}
END_TEST

Suite *cache_model_suite(void)
{
	Suite *s = suite_create("cache_model");
	TCase *core = ut_tcase("core", UT_TIMEOUT_SLOW), *errors = ut_tcase("errors", UT_TIMEOUT);

	tcase_add_loop_test(core, test_cache_model_random_ops, 0, 3);
	tcase_add_loop_test(core, test_cache_model_deadline_heap_bounded, 0, 3);
	tcase_add_loop_test(errors, test_cache_model_failed_reserve_keeps_internally_held, 0, 3);
	tcase_add_loop_test(errors, test_cache_model_replace_expired_pinned, 0, 3);
	tcase_add_loop_test(errors, test_cache_model_mark_clean_expired, 0, 3);
	tcase_add_loop_test(errors, test_cache_model_reused_buffer_zero_filled, 0, 3);
	suite_add_tcase(s, core);
	suite_add_tcase(s, errors);
	return s;
}
