/*
 * The memory tier.
 *
 * DESIGN
 *
 * Every block version in memory is a `struct cblock` with a 4 KiB-aligned buffer. A cblock
 * is in one of three states:
 *
 *   RESERVED  being written through a reservation handle; in no map, so invisible
 *   LIVE      the committed version of its id: in c->map, found by lookup/open
 *   DEAD      replaced, removed, expired or evicted; kept only while handles refer to it
 *
 *   reserve -> RESERVED -> commit -> LIVE -> (replace|remove|evict|expire) -> DEAD -> freed
 *                       -> abort  -> freed
 *
 * Invariants (checked by cache_check() in builds with -DUCM_CHECK_INVARIANTS):
 *   - refs counts handles plus one for the map while LIVE; a cblock is freed at refs == 0.
 *   - pins <= refs; pins counts user-visible readers only (not TIER_OPEN_INTERNAL refs).
 *   - a LIVE cblock is in the policy iff !dirty; it is evictable iff also refs == 1 (only
 *     the map holds it: not pinned, no handle of the daemon). Pinned blocks stay in the
 *     policy, so its order reflects every use; the victim it picks skips held ones.
 *   - used == the sum of cap over all cblocks not yet freed, and used <= capacity except
 *     transiently never: room is made before a buffer grows.
 *   - dirty_bytes == the sum of cap over LIVE dirty cblocks.
 *
 * A dirty block (committed, not yet written to the tier below) is never evicted; a pinned
 * block is never evicted. TTLs: an expired block is invisible at once (find_live()); its
 * space is reclaimed before the policy is asked for a victim, through a min-heap of
 * (deadline, id) entries. Entries go stale when a block's deadline changes or the block goes;
 * a popped entry counts only if the id's live block still has exactly that deadline, and the
 * heap is rebuilt from the map when stale entries outnumber live ones. An expired block that
 * is pinned is killed by its last close. A reservation that cannot find room waits up to
 * dirty_wait_ms for dirty blocks to become clean before it fails -ENOSPC.
 *
 * Memory is reused rather than faulted in again: a buffer freed while no room is being made
 * (a block removed or replaced) goes to a pool that later reservations take from, and a
 * reservation that evicts takes over the buffer of a victim of its own size. Both hold
 * another block's bytes, which zero_stale() keeps from ever being read. A writer's
 * reservation that grows past its buffer (no size declared) and evicts for it takes over a
 * victim's buffer at least as large, cut to the block's size at commit. A buffer whose file
 * was handed to the kernel (cache_backing(), for passthrough) is never written while its
 * block lives, and goes back to the pool only once nobody else holds the file: a process
 * may still map it after its close (reclaim_buffer()).
 *
 * Memory is also made ready before it is needed: the prefaulter (a thread at SCHED_IDLE, so
 * that it only takes what the CPUs leave) fills the pool, while used + one buffer stays
 * within `prefault`, with buffers faulted in of the size most blocks have (size_hint, else
 * the size of the last large block committed, else the size most blocks below have).
 * Pooled memory goes back to the system only when make_room() needs room that no pooled
 * buffer of the right size gives (a block of another size), never because a block left
 * memory.
 *
 * Locking: one mutex, c->lock, protects everything above. It is never held across a call
 * into another tier or the policy's caller; buffers are freed after it is dropped.
 */
#include "tiers/cache.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "src/buf.h"
#include "src/clock.h"
#include "src/dlheap.h"
#include "src/idmap.h"
#include "src/metrics.h"
#include "tiers/cache_policy.h"

enum { CB_RESERVED, CB_LIVE, CB_DEAD };

struct cblock {
	struct idnode node;      /* node.id is the id; in c->map while LIVE */
	struct policy_entry pe;  /* in the policy while evictable */
	int refs;                /* protected by c->lock */
	uint32_t pins;           /* protected by c->lock */
	uint8_t state;           /* protected by c->lock */
	bool dirty;              /* protected by c->lock */
	bool in_policy;          /* protected by c->lock */
	bool pool_sized;         /* its buffer came from the pool: keep its size */
	bool exposed;            /* its buffer's file was handed out (cache_backing()): never
				    written again, reused only once nobody holds the file
				    (reclaim_buffer()); protected by c->lock */
	uint64_t stale_end;      /* reservation: bytes below may hold someone else's data; the
				    bytes from here on are zero */
	bool fresh;              /* dirty, and its id has no version below (TIER_COMMIT_FRESH) */
	void *data;              /* cap bytes; resized only by the reservation's owner */
	uint64_t cap;            /* buffer bytes (the accounted size) */
	uint64_t size;           /* logical size */
	uint64_t version;
	int64_t mtime, atime, deadline;
};

/* A free buffer in the pool: the list node lives in the buffer's first bytes. */
struct pooled {
	struct pooled *next;
	uint64_t cap;
};

enum { H_READ, H_INTERNAL, H_WRITE };

struct chandle {
	struct tier_handle base;
	struct cblock *b;
	int kind;
};

struct cache {
	struct tier tier;
	pthread_mutex_t lock;
	pthread_cond_t cleaned;        /* signalled when a dirty block becomes clean */
	struct idmap map;              /* LIVE cblocks; protected by lock */
	const struct cache_policy_ops *pol;
	void *pol_priv;                /* protected by lock */
	uint64_t capacity;
	uint64_t used;                 /* protected by lock */
	uint64_t dirty_bytes;          /* protected by lock */
	uint64_t dirty_blocks;         /* protected by lock */
	uint64_t fresh_blocks;         /* dirty cblocks marked fresh; protected by lock */
	uint64_t policy_bytes;         /* sum of cap of the blocks in the policy; lock */
	uint64_t held_bytes;           /* ... of those a handle holds (not evictable); lock */
	struct pooled *pool;           /* free buffers kept for reuse, newest first; lock */
	uint64_t pool_bytes;           /* their size, part of used; protected by lock */
	bool draining;                 /* make_room() is freeing: do not pool; lock */
	uint64_t next_version;         /* protected by lock */
	uint64_t pins;                 /* open readers of all blocks; protected by lock */
	uint64_t reservations;         /* RESERVED cblocks; protected by lock */
	struct dlheap deadlines;       /* TTL index; protected by lock */
	unsigned dirty_wait_ms;
	bool dumps_stuck;              /* no dirty block becomes clean soon; protected by lock */
	counter_t hits, misses, evictions, expirations, bytes_in;
	counter_t reused;              /* reservations given a freed block's buffer */
	counter_t reclaimed;           /* handed-out buffers taken back (reclaim_buffer()) */
	uint64_t prefault;             /* bytes to keep allocated and faulted in; 0 = none */
	uint64_t common_cap;           /* buffer size to prefault; protected by lock */
	bool size_hinted;              /* common_cap is the configured size_hint */
	pthread_t prefaulter;
	bool prefaulting;              /* the thread runs */
	bool stopping;                 /* it must end; protected by lock */
	pthread_cond_t pf_wake;        /* a size was learnt, or stop */
	counter_t prefaulted;          /* bytes of buffers it made */
};

#define CB(n) ((struct cblock *)((char *)(n) - offsetof(struct cblock, node)))
#define PE_CB(e) ((struct cblock *)((char *)(e) - offsetof(struct cblock, pe)))

static struct cache *cache_of(struct tier *t)
{
	return t->priv;
}

static bool expired(const struct cblock *b, int64_t now)
{
	return b->deadline && now >= b->deadline;
}

#ifdef UCM_CHECK_INVARIANTS
/* Check the invariants of the design notes; c->lock held. */
static void check_one(struct idnode *n, void *arg)
{
	struct cblock *b = CB(n);
	uint64_t *dirty = arg;

	assert(b->state == CB_LIVE);
	assert(b->refs >= 1 && b->pins <= (uint32_t)b->refs);
	assert(b->in_policy == !b->dirty);
	if (b->dirty)
		*dirty += b->cap;
}

static void cache_check(struct cache *c)
{
	uint64_t dirty = 0;

	idmap_foreach_safe(&c->map, check_one, &dirty);
	assert(dirty == c->dirty_bytes);
	assert(c->used <= c->capacity || c->map.count == 0);
}
#else
static inline void cache_check(struct cache *c)
{
	(void)c;
}
#endif

/* --- state transitions, all with c->lock held ------------------------------------------ */

static void policy_out(struct cache *c, struct cblock *b)
{
	if (b->in_policy) {
		c->pol->removed(c->pol_priv, &b->pe);
		b->in_policy = false;
		c->policy_bytes -= b->cap;
		if (b->refs > 1)
			c->held_bytes -= b->cap;
	}
}

static void policy_in(struct cache *c, struct cblock *b)
{
	if (!b->in_policy && b->state == CB_LIVE && !b->dirty) {
		c->pol->admitted(c->pol_priv, &b->pe);
		b->in_policy = true;
		c->policy_bytes += b->cap;
		if (b->refs > 1)
			c->held_bytes += b->cap;
	}
}

/* May the policy's pick be evicted? Only if nothing but the map holds it (a pinned block,
 * or one a handle of the daemon holds, would free nothing). */
static bool unheld(struct policy_entry *e, void *arg)
{
	(void)arg;
	return PE_CB(e)->refs == 1;
}

/* Buffers (and their cblocks) freed once c->lock is dropped. */
struct freelist {
	struct {
		struct cblock *b; /* may be NULL: a pooled buffer */
		void *data;
		uint64_t cap;
		bool reclaim;     /* its file was handed out: back to the pool if nobody holds it */
	} v[8];
	int n;
};

static bool freelist_full(const struct freelist *fl)
{
	return fl->n == (int)(sizeof(fl->v) / sizeof(fl->v[0]));
}

static void pool_push(struct cache *c, void *data, uint64_t cap)
{
	struct pooled *p = data;

	p->cap = cap;
	p->next = c->pool;
	c->pool = p;
	c->pool_bytes += cap;
}

/*
 * A buffer whose file was handed to the kernel (cache_backing()) goes back to the pool only
 * once nobody else holds that file (buf_reclaim(): no reader's descriptor, no mapping left),
 * and only if there is room for it; else it is freed, its pages left to whoever maps them.
 * Called without c->lock.
 */
static void reclaim_buffer(struct cache *c, void *data, uint64_t cap)
{
	if (buf_reclaim(data, cap))
		return; /* freed */
	pthread_mutex_lock(&c->lock);
	if (!c->draining && c->used + cap <= c->capacity) {
		c->used += cap;
		pool_push(c, data, cap);
		data = NULL;
	}
	pthread_mutex_unlock(&c->lock);
	if (data)
		buf_free(data, cap);
	else
		counter_add(&c->reclaimed, 1);
}

static void freelist_run(struct cache *c, struct freelist *fl)
{
	for (int i = 0; i < fl->n; i++) {
		if (fl->v[i].reclaim && fl->v[i].data)
			reclaim_buffer(c, fl->v[i].data, fl->v[i].cap);
		else
			buf_free(fl->v[i].data, fl->v[i].cap);
		free(fl->v[i].b);
	}
	fl->n = 0;
}

/* Give a buffer back to the system (later, if fl has room; with reclaim, maybe to the pool
 * again, see reclaim_buffer()). c->lock held. */
static void unmap_later(struct cache *c, struct cblock *b, void *data, uint64_t cap,
			struct freelist *fl, bool reclaim)
{
	c->used -= cap;
	if (fl && !freelist_full(fl)) {
		fl->v[fl->n].b = b;
		fl->v[fl->n].data = data;
		fl->v[fl->n].cap = cap;
		fl->v[fl->n].reclaim = reclaim;
		fl->n++;
	} else {
		buf_free(data, cap);
		free(b);
	}
}

/* A freed block's buffer goes to the pool (its pages stay faulted in), unless make_room() is
 * freeing memory right now. c->lock held. */
static void release_buffer(struct cache *c, struct cblock *b, struct freelist *fl)
{
	if (!c->draining && b->data && !b->exposed) {
		pool_push(c, b->data, b->cap);
		free(b);
		return;
	}
	unmap_later(c, b, b->data, b->cap, fl, b->exposed && !c->draining);
}

/*
 * Take out of fl a buffer make_room() just freed (an evicted block's, or a pooled one) of
 * exactly cap bytes, or (!exact) of at least cap, the smallest (*got: its size): a reservation
 * that made room by eviction writes into memory already faulted in instead of unmapping it
 * and faulting in (and zeroing) as much again. In a full cache that was the price of every
 * load, and of every write of blocks smaller than the ones they evict (a writer's buffer
 * grows into a larger one, cut to the block's size at commit). NULL if none.
 */
static void *freelist_take(struct freelist *fl, uint64_t cap, bool exact, uint64_t *got)
{
	int best = -1;
	void *data;

	for (int i = 0; i < fl->n; i++) {
		if (!fl->v[i].data || fl->v[i].cap < cap || (exact && fl->v[i].cap != cap) ||
		    (fl->v[i].b && fl->v[i].b->exposed))
			continue;
		if (best < 0 || fl->v[i].cap < fl->v[best].cap)
			best = i;
	}
	if (best < 0)
		return NULL;
	data = fl->v[best].data;
	fl->v[best].data = NULL; /* its cblock is still freed by freelist_run() */
	*got = fl->v[best].cap;
	return data;
}

/* Take a pooled buffer of exactly cap bytes, or (any_size) the newest one. c->lock held. */
static struct pooled *pool_take(struct cache *c, uint64_t cap, bool any_size)
{
	for (struct pooled **pp = &c->pool; *pp; pp = &(*pp)->next) {
		struct pooled *p = *pp;

		if (p->cap == cap || any_size) {
			*pp = p->next;
			c->pool_bytes -= p->cap;
			return p;
		}
	}
	return NULL;
}

static void put_locked(struct cache *c, struct cblock *b, struct freelist *fl)
{
	assert(b->refs > 0);
	if (b->in_policy && b->refs == 2)
		c->held_bytes -= b->cap; /* evictable again */
	if (--b->refs == 0) {
		assert(b->state != CB_LIVE);
		release_buffer(c, b, fl);
	}
}

/* LIVE -> DEAD: out of the map and the policy; drops the map's reference. */
static void kill_locked(struct cache *c, struct cblock *b, struct freelist *fl)
{
	assert(b->state == CB_LIVE);
	policy_out(c, b);
	idmap_remove(&c->map, &b->node);
	if (b->dirty) {
		c->dirty_bytes -= b->cap;
		c->dirty_blocks--;
		b->dirty = false;
	}
	if (b->fresh) {
		c->fresh_blocks--;
		b->fresh = false;
	}
	b->state = CB_DEAD;
	put_locked(c, b, fl);
}

/* The LIVE, unexpired cblock of id, or NULL; an expired one is killed when unpinned. */
static struct cblock *find_live(struct cache *c, const struct blockid *id, struct freelist *fl)
{
	struct idnode *n = idmap_find(&c->map, id);
	struct cblock *b;

	if (!n)
		return NULL;
	b = CB(n);
	if (expired(b, mono_ns())) {
		if (b->pins == 0) {
			kill_locked(c, b, fl);
			counter_add(&c->expirations, 1);
		}
		return NULL;
	}
	return b;
}

/* --- deadlines (src/dlheap.h), c->lock held ------------------------------------------------- */

static void push_live(struct idnode *n, void *arg)
{
	struct cblock *b = CB(n);

	if (b->deadline)
		dlheap_push(arg, b->deadline, &n->id);
}

/* Rebuild the heap from the live blocks when stale entries outnumber live ones. */
static void heap_compact(struct cache *c)
{
	if (c->deadlines.n <= 2 * c->map.count + 64)
		return;
	dlheap_clear(&c->deadlines);
	idmap_foreach_safe(&c->map, push_live, &c->deadlines);
}

static void set_deadline_locked(struct cache *c, struct cblock *b, int64_t deadline)
{
	b->deadline = deadline;
	if (deadline) {
		dlheap_push(&c->deadlines, deadline, &b->node.id);
		heap_compact(c);
	}
}

/* Kill the expired blocks nobody holds, until fl is full (then call again). */
static void expire_locked(struct cache *c, int64_t now, struct freelist *fl)
{
	while (!freelist_full(fl) && dlheap_top(&c->deadlines) &&
	       dlheap_top(&c->deadlines)->deadline <= now) {
		struct dl_entry e = *dlheap_top(&c->deadlines);
		struct idnode *n;

		dlheap_pop(&c->deadlines);
		n = idmap_find(&c->map, &e.id);
		if (!n || CB(n)->deadline != e.deadline || CB(n)->pins)
			continue; /* stale entry, or pinned: its last close kills it */
		kill_locked(c, CB(n), fl);
		counter_add(&c->expirations, 1);
	}
}

/*
 * Make room for `need` more bytes: evict policy victims until used + need <= capacity.
 * Waits for dirty blocks to be cleaned (up to dirty_wait_ms). 0 or -ENOSPC.
 */
static int make_room_draining(struct cache *c, uint64_t need, bool wait, struct freelist *fl);

static int make_room(struct cache *c, uint64_t need, bool wait, struct freelist *fl)
{
	int rc = make_room_draining(c, need, wait, fl);

	c->draining = false;
	return rc;
}

static int make_room_draining(struct cache *c, uint64_t need, bool wait, struct freelist *fl)
{
	int64_t give_up = 0;

	if (need > c->capacity)
		return -ENOSPC;
	c->draining = true;
	/* free pooled buffers before anything that holds data */
	while (c->used + need > c->capacity && c->pool) {
		struct pooled *p = pool_take(c, 0, true);

		if (freelist_full(fl)) {
			pthread_mutex_unlock(&c->lock);
			freelist_run(c, fl);
			pthread_mutex_lock(&c->lock);
		}
		unmap_later(c, NULL, p, p->cap, fl, false);
	}
	while (c->used + need > c->capacity && !freelist_full(fl) &&
	       dlheap_top(&c->deadlines) && dlheap_top(&c->deadlines)->deadline <= mono_ns()) {
		/* expired blocks go before the policy is asked */
		expire_locked(c, mono_ns(), fl);
		if (freelist_full(fl)) {
			pthread_mutex_unlock(&c->lock);
			freelist_run(c, fl);
			pthread_mutex_lock(&c->lock);
		}
	}
	while (c->used + need > c->capacity) {
		struct timespec ts;

		/* evict only if that is enough: a failed reservation leaves the cache as it was */
		if (c->used - (c->policy_bytes - c->held_bytes) + need <= c->capacity) {
			struct policy_entry *e = c->pol->victim(c->pol_priv, unheld, NULL);

			kill_locked(c, PE_CB(e), fl);
			counter_add(&c->evictions, 1);
			continue;
		}
		/* not enough: only dirty blocks can still become evictable */
		if (c->dirty_bytes == 0 || c->dirty_wait_ms == 0 || !wait || c->dumps_stuck)
			return -ENOSPC;
		if (!give_up)
			give_up = mono_ns() + (int64_t)c->dirty_wait_ms * 1000000;
		else if (mono_ns() >= give_up)
			return -ENOSPC;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100 * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		/* the buffers collected so far are freed before sleeping */
		c->draining = false;
		pthread_mutex_unlock(&c->lock);
		freelist_run(c, fl);
		pthread_mutex_lock(&c->lock);
		pthread_cond_timedwait(&c->cleaned, &c->lock, &ts);
		c->draining = true;
	}
	return 0;
}

void cache_dumps_stuck(struct tier *t, bool stuck)
{
	struct cache *c;

	if (!t || t->ops != &tier_cache_ops)
		return;
	c = t->priv;
	pthread_mutex_lock(&c->lock);
	c->dumps_stuck = stuck;
	pthread_cond_broadcast(&c->cleaned); /* waiters give up at once */
	pthread_mutex_unlock(&c->lock);
}

/* --- handles ----------------------------------------------------------------------------- */

static struct chandle *new_handle(struct cache *c, struct cblock *b, int kind)
{
	struct chandle *h = malloc(sizeof(*h));

	if (!h)
		return NULL;
	h->base.tier = &c->tier;
	h->b = b;
	h->kind = kind;
	return h;
}

/* Take a reference (and a pin for H_READ) on a LIVE cblock; c->lock held. */
static void grab_locked(struct cache *c, struct cblock *b, int kind)
{
	if (b->in_policy && b->refs == 1)
		c->held_bytes += b->cap; /* held: not evictable while the handle lives */
	b->refs++;
	if (kind == H_READ) {
		b->pins++;
		c->pins++;
		if (b->in_policy)
			c->pol->touched(c->pol_priv, &b->pe); /* a read is a use */
	}
	b->atime = wall_ns();
}

static void fill_attr(const struct cblock *b, struct block_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->size = b->size;
	a->mtime = b->mtime;
	a->atime = b->atime;
	a->deadline = b->deadline;
	a->version = b->version;
	a->where = TIER_MEM;
	a->pins = b->pins;
	a->codec = CODEC_RAW;
	a->dirty = b->dirty;
}

/* --- tier ops ---------------------------------------------------------------------------- */

static int cache_lookup(struct tier *t, const struct blockid *id, struct block_attr *attr)
{
	struct cache *c = cache_of(t);
	struct freelist fl = { .n = 0 };
	struct cblock *b;

	pthread_mutex_lock(&c->lock);
	b = find_live(c, id, &fl);
	if (b && attr)
		fill_attr(b, attr);
	pthread_mutex_unlock(&c->lock);
	freelist_run(c, &fl);
	return b ? 0 : -ENOENT;
}

static void cache_present(struct tier *t, const struct blockid *ids, size_t n, uint8_t *hit)
{
	struct cache *c = cache_of(t);
	int64_t now = mono_ns();

	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < n; i++) {
		struct idnode *x;

		if (hit[i])
			continue;
		x = idmap_find(&c->map, &ids[i]);
		hit[i] = x && !expired(CB(x), now);
	}
	pthread_mutex_unlock(&c->lock);
}

static int cache_open(struct tier *t, const struct blockid *id, unsigned flags,
		      struct tier_handle **out)
{
	struct cache *c = cache_of(t);
	int kind = (flags & TIER_OPEN_INTERNAL) ? H_INTERNAL : H_READ;
	struct freelist fl = { .n = 0 };
	struct chandle *h = new_handle(c, NULL, kind);
	struct cblock *b;

	if (!h)
		return -ENOMEM;
	pthread_mutex_lock(&c->lock);
	b = find_live(c, id, &fl);
	if (b) {
		grab_locked(c, b, kind);
		h->b = b;
	}
	pthread_mutex_unlock(&c->lock);
	freelist_run(c, &fl);
	if (!b) {
		if (kind == H_READ)
			counter_add(&c->misses, 1);
		free(h);
		return -ENOENT;
	}
	if (kind == H_READ) /* the daemon's own opens (dumps, prefetch) are not hits */
		counter_add(&c->hits, 1);
	*out = &h->base;
	return 0;
}

static ssize_t cache_read(struct tier_handle *th, void *buf, size_t len, uint64_t off)
{
	struct cblock *b = ((struct chandle *)th)->b;

	if (off >= b->size)
		return 0;
	if (len > b->size - off)
		len = (size_t)(b->size - off);
	memcpy(buf, (char *)b->data + off, len);
	return (ssize_t)len;
}

static const void *cache_data(struct tier_handle *th)
{
	return ((struct chandle *)th)->b->data;
}

static int cache_backing(struct tier_handle *th)
{
	struct chandle *h = (struct chandle *)th;
	struct cache *c = cache_of(th->tier);
	struct cblock *b = h->b;
	int fd;

	if (h->kind == H_WRITE)
		return -ENOTSUP;
	/* committed: its bytes and size are final; the handle keeps the buffer alive */
	fd = buf_file(b->data, b->cap, b->size);
	if (fd >= 0) {
		/* from now on the file is the kernel's too: never written again, and reused only
		 * once nobody holds it (reclaim_buffer()) */
		pthread_mutex_lock(&c->lock);
		b->exposed = true;
		pthread_mutex_unlock(&c->lock);
	}
	return fd;
}

static int cache_stat(struct tier_handle *th, struct block_attr *attr)
{
	struct chandle *h = (struct chandle *)th;
	struct cache *c = cache_of(th->tier);

	pthread_mutex_lock(&c->lock);
	fill_attr(h->b, attr);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

static void cache_close(struct tier_handle *th)
{
	struct chandle *h = (struct chandle *)th;
	struct cache *c = cache_of(th->tier);
	struct cblock *b = h->b;
	struct freelist fl = { .n = 0 };

	pthread_mutex_lock(&c->lock);
	if (h->kind == H_READ) {
		assert(b->pins > 0);
		b->pins--;
		c->pins--;
	}
	if (b->state == CB_LIVE && b->pins == 0 && expired(b, mono_ns())) {
		kill_locked(c, b, &fl);
		counter_add(&c->expirations, 1);
		put_locked(c, b, &fl);
	} else {
		bool live = b->state == CB_LIVE;

		put_locked(c, b, &fl);
		if (live)
			policy_in(c, b);
	}
	cache_check(c);
	pthread_mutex_unlock(&c->lock);
	freelist_run(c, &fl);
	free(h);
}

static int cache_reserve(struct tier *t, const struct blockid *id, unsigned flags,
			 uint64_t size_hint, struct tier_handle **out)
{
	struct cache *c = cache_of(t);
	struct freelist fl = { .n = 0 };
	struct cblock *b = calloc(1, sizeof(*b));
	struct chandle *h = new_handle(c, b, H_WRITE);
	uint64_t cap = buf_round(size_hint ? size_hint : 1);
	struct pooled *p;
	int rc = 0;

	if (!b || !h) {
		free(b);
		free(h);
		return -ENOMEM;
	}
	b->node.id = *id;
	b->refs = 1;
	b->state = CB_RESERVED;
	pthread_mutex_lock(&c->lock);
	/* a size hint takes a pooled buffer of that size; without one (most blocks of a
	 * deployment have one size) the newest pooled buffer, grown if need be */
	p = pool_take(c, cap, size_hint == 0);
	if (p) {
		b->data = p;
		b->cap = p->cap;
		b->pool_sized = true;
		/* a reused buffer holds another block's bytes, unless all will be overwritten */
		b->stale_end = (flags & TIER_RESERVE_OVERWRITE) ? 0 : p->cap;
	} else {
		rc = make_room(c, cap, !(flags & TIER_RESERVE_NOWAIT), &fl);
		if (rc == 0) {
			c->used += cap;
			b->cap = cap;
			/* of exactly that size: a load writes into b->data from the start on, and
			 * a larger buffer cut at commit could move */
			b->data = freelist_take(&fl, cap, true, &b->cap);
			/* as a pooled one: another block's bytes, a fresh buffer's size */
			if (b->data && !(flags & TIER_RESERVE_OVERWRITE))
				b->stale_end = cap;
		}
	}
	if (rc == 0) {
		c->reservations++;
		if (b->data)
			counter_add(&c->reused, 1);
	}
	pthread_mutex_unlock(&c->lock);
	freelist_run(c, &fl);
	if (rc == 0 && !b->data) {
		/* a writer fills it all soon: fault it in at once; a load (NOWAIT) wants its
		 * first piece fast and faults pages in as pieces arrive */
		b->data = buf_alloc(cap, cap >= (64u << 10) && !(flags & TIER_RESERVE_NOWAIT));
		if (!b->data) {
			pthread_mutex_lock(&c->lock);
			c->used -= cap;
			c->reservations--;
			pthread_mutex_unlock(&c->lock);
			rc = -ENOMEM;
		}
	}
	if (rc) {
		free(h);
		free(b);
		return rc;
	}
	*out = &h->base;
	return 0;
}

/* Resize a reservation's buffer to hold `size` bytes, making room first. */
static int resize_reservation(struct cache *c, struct cblock *b, uint64_t size)
{
	struct freelist fl = { .n = 0 };
	uint64_t cap = buf_round(size ? size : 1);
	void *p;
	int rc = 0;

	if (cap == b->cap)
		return 0;
	if (cap > b->cap) {
		void *victim = NULL;
		uint64_t vcap = 0;

		pthread_mutex_lock(&c->lock);
		rc = make_room(c, cap - b->cap, true, &fl);
		/* growing into a buffer that room was made from (freelist_take()): the bytes so
		 * far are copied, where growing in place faults in fresh memory; c->used stays
		 * within capacity, as make_room() took that buffer's bytes off it */
		if (rc == 0)
			victim = freelist_take(&fl, cap, false, &vcap);
		if (rc == 0)
			c->used += (victim ? vcap : cap) - b->cap;
		pthread_mutex_unlock(&c->lock);
		freelist_run(c, &fl);
		if (rc)
			return rc;
		if (victim) {
			counter_add(&c->reused, 1);
			memcpy(victim, b->data, b->size);
			buf_free(b->data, b->cap);
			b->data = victim;
			b->cap = vcap;
			b->stale_end = vcap; /* past b->size: another block's bytes */
			b->pool_sized = false; /* cut to the block's size at commit */
			return 0;
		}
	}
	p = buf_resize(b->data, b->cap, cap);
	pthread_mutex_lock(&c->lock);
	if (!p) {
		if (cap > b->cap)
			c->used -= cap - b->cap;
		rc = -ENOMEM;
	} else {
		if (cap < b->cap)
			c->used -= b->cap - cap;
		b->data = p;
		b->cap = cap;
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/* Make [from, to) of a reservation read as zeros: only the part that may hold stale bytes
 * needs clearing (fresh pages are zero already). */
static void zero_stale(struct cblock *b, uint64_t from, uint64_t to)
{
	if (to > b->stale_end)
		to = b->stale_end;
	if (from < to)
		memset((char *)b->data + from, 0, to - from);
}

static ssize_t cache_write(struct tier_handle *th, const void *buf, size_t len, uint64_t off)
{
	struct cblock *b = ((struct chandle *)th)->b;
	uint64_t end = off + len;

	if (end > b->cap) {
		/* grow geometrically so a block written in small pieces is not copied often */
		uint64_t want = b->cap * 2 > end ? b->cap * 2 : end;
		int rc;

		/* a block past 1 MiB is a large one: 2 MiB at once is one huge page, where
		 * 1 MiB would be 256 small pages, faulted in and then copied (src/buf.c) */
		if (want >= BUF_HUGE / 2 && want < BUF_HUGE)
			want = BUF_HUGE;
		rc = resize_reservation(cache_of(th->tier), b, want);
		if (rc == -ENOSPC && want > end)
			rc = resize_reservation(cache_of(th->tier), b, end);
		if (rc)
			return rc;
	}
	if (off > b->size)
		zero_stale(b, b->size, off); /* a hole reads as zeros */
	memcpy((char *)b->data + off, buf, len);
	if (end > b->size)
		b->size = end;
	return (ssize_t)len;
}

static int cache_truncate(struct tier_handle *th, uint64_t size)
{
	struct cblock *b = ((struct chandle *)th)->b;
	int rc = 0;

	if (size > b->cap)
		rc = resize_reservation(cache_of(th->tier), b, size);
	if (rc)
		return rc;
	if (size < b->size && b->stale_end < b->size)
		b->stale_end = b->size; /* cut bytes must read as zeros if it grows again */
	else if (size > b->size)
		zero_stale(b, b->size, size);
	b->size = size;
	return 0;
}

/* A commit that publishes nothing: a load offered (TIER_COMMIT_LOADED) stays with its caller,
 * who still reads its bytes; any other reservation is dropped. */
static int commit_failed(struct tier_handle *th, unsigned flags, int rc)
{
	if (!(flags & TIER_COMMIT_LOADED))
		tier_cache_ops.abort(th);
	return rc;
}

static int cache_commit(struct tier_handle *th, const struct block_meta *meta, unsigned flags,
			struct tier_handle **rd)
{
	struct chandle *h = (struct chandle *)th;
	struct cache *c = cache_of(th->tier);
	struct cblock *b = h->b, *old;
	struct freelist fl = { .n = 0 };
	struct chandle *r = NULL;

	if (meta->size > b->size) {
		cache_truncate(th, meta->size); /* zero-filled growth: only for an empty tail */
		if (meta->size > b->cap)
			return commit_failed(th, flags, -ENOSPC);
	}
	/* give back the slack of geometric growth before the block goes live; a pooled
	 * buffer a little larger than the block is kept whole, to be pooled again */
	if (buf_round(meta->size ? meta->size : 1) < b->cap &&
	    !(b->pool_sized && buf_round(meta->size) + b->cap / 4 >= b->cap))
		resize_reservation(c, b, meta->size);
	if (rd) {
		r = new_handle(c, b, H_INTERNAL);
		if (!r)
			return commit_failed(th, flags, -ENOMEM);
	}
	pthread_mutex_lock(&c->lock);
	c->reservations--;
	old = find_live(c, &b->node.id, &fl);
	if (!old && idmap_find(&c->map, &b->node.id)) {
		old = CB(idmap_find(&c->map, &b->node.id)); /* expired, pinned */
		if (flags & TIER_COMMIT_LOADED) {
			kill_locked(c, old, &fl);
			old = NULL;
		}
	}
	if (old && (flags & TIER_COMMIT_LOADED)) {
		c->reservations++; /* still a reservation, the caller's */
		pthread_mutex_unlock(&c->lock);
		freelist_run(c, &fl);
		free(r);
		return -EEXIST;
	}
	if (old)
		kill_locked(c, old, &fl);
	b->state = CB_LIVE;
	if (b->cap >= BUF_FILE_MIN && b->cap != c->common_cap && !c->size_hinted) {
		c->common_cap = b->cap; /* what the prefaulter makes from now on */
		pthread_cond_signal(&c->pf_wake);
	}
	b->size = meta->size;
	b->mtime = meta->mtime;
	b->atime = wall_ns();
	b->version = ++c->next_version;
	b->dirty = (flags & TIER_COMMIT_DIRTY) != 0;
	if (idmap_insert(&c->map, &b->node)) {
		/* no memory for the shard's first table: the block cannot be published */
		b->dirty = false;
		b->state = CB_RESERVED;
		c->reservations++;
		pthread_mutex_unlock(&c->lock);
		freelist_run(c, &fl);
		free(r);
		return commit_failed(th, flags, -ENOMEM);
	}
	if (b->dirty) {
		c->dirty_bytes += b->cap;
		c->dirty_blocks++;
		b->fresh = (flags & TIER_COMMIT_FRESH) != 0;
		c->fresh_blocks += b->fresh;
	}
	set_deadline_locked(c, b, meta->deadline);
	/* the reservation handle's reference becomes the map's */
	if (r) {
		r->kind = (flags & TIER_COMMIT_PIN) ? H_READ : H_INTERNAL;
		grab_locked(c, b, r->kind);
		*rd = &r->base;
	}
	policy_in(c, b);
	cache_check(c);
	pthread_mutex_unlock(&c->lock);
	freelist_run(c, &fl);
	counter_add(&c->bytes_in, meta->size);
	free(h);
	return 0;
}

static void cache_abort(struct tier_handle *th)
{
	struct chandle *h = (struct chandle *)th;
	struct cache *c = cache_of(th->tier);
	struct freelist fl = { .n = 0 };

	pthread_mutex_lock(&c->lock);
	c->reservations--;
	h->b->state = CB_DEAD;
	put_locked(c, h->b, &fl);
	pthread_mutex_unlock(&c->lock);
	freelist_run(c, &fl);
	free(h);
}

static int cache_remove(struct tier *t, const struct blockid *id)
{
	struct cache *c = cache_of(t);
	struct freelist fl = { .n = 0 };
	struct idnode *n;

	bool live = false;

	pthread_mutex_lock(&c->lock);
	n = idmap_find(&c->map, id);
	if (n) {
		live = !expired(CB(n), mono_ns());
		kill_locked(c, CB(n), &fl);
	}
	pthread_mutex_unlock(&c->lock);
	freelist_run(c, &fl);
	return live ? 0 : -ENOENT; /* an expired block is already absent */
}

static int cache_touch(struct tier *t, const struct blockid *id)
{
	struct cache *c = cache_of(t);
	struct freelist fl = { .n = 0 };
	struct cblock *b;

	pthread_mutex_lock(&c->lock);
	b = find_live(c, id, &fl);
	if (b) {
		b->atime = wall_ns();
		if (b->in_policy)
			c->pol->touched(c->pol_priv, &b->pe);
	}
	pthread_mutex_unlock(&c->lock);
	freelist_run(c, &fl);
	return b ? 0 : -ENOENT;
}

static int cache_set_deadline(struct tier *t, const struct blockid *id, int64_t deadline)
{
	struct cache *c = cache_of(t);
	struct freelist fl = { .n = 0 };
	struct cblock *b;

	pthread_mutex_lock(&c->lock);
	b = find_live(c, id, &fl);
	if (b)
		set_deadline_locked(c, b, deadline);
	pthread_mutex_unlock(&c->lock);
	freelist_run(c, &fl);
	return b ? 0 : -ENOENT;
}

static int cache_mark_clean(struct tier *t, const struct blockid *id, uint64_t version)
{
	struct cache *c = cache_of(t);
	struct idnode *n;
	int rc = -ENOENT;

	pthread_mutex_lock(&c->lock);
	n = idmap_find(&c->map, id);
	if (n && CB(n)->version == version && !expired(CB(n), mono_ns())) {
		struct cblock *b = CB(n);

		if (b->dirty) {
			b->dirty = false;
			c->dirty_bytes -= b->cap;
			c->dirty_blocks--;
			if (b->fresh) {
				c->fresh_blocks--;
				b->fresh = false;
			}
			policy_in(c, b);
			pthread_cond_broadcast(&c->cleaned);
		}
		rc = 0;
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

struct shard_list {
	struct idvec ids;
	int64_t now;
};

static void collect(struct idnode *n, void *arg)
{
	struct shard_list *l = arg;

	/* best effort under memory exhaustion: an id that cannot be listed is left out */
	if (!expired(CB(n), l->now))
		idvec_push(&l->ids, &n->id);
}

static int cache_list_shard(struct tier *t, unsigned shard, tier_list_fn fn, void *arg)
{
	struct cache *c = cache_of(t);
	struct shard_list l = { .now = mono_ns() };

	pthread_mutex_lock(&c->lock);
	idmap_shard_foreach(&c->map, shard, collect, &l);
	pthread_mutex_unlock(&c->lock);
	for (size_t i = 0; i < l.ids.n; i++)
		if (fn(&l.ids.v[i], arg))
			break;
	idvec_free(&l.ids);
	return 0;
}

static int cache_usage(struct tier *t, struct tier_usage *u)
{
	struct cache *c = cache_of(t);

	pthread_mutex_lock(&c->lock);
	u->capacity = c->capacity;
	u->used = c->used - c->pool_bytes; /* pooled buffers hold no block */
	u->blocks = c->map.count;
	u->dirty_blocks = c->dirty_blocks;
	u->fresh_blocks = c->fresh_blocks;
	u->fs_free = 0;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

static void cache_sweep(struct tier *t)
{
	struct cache *c = cache_of(t);
	struct freelist fl = { .n = 0 };

	/* in slices, so that nobody waits long for the lock */
	for (bool more = true; more;) {
		pthread_mutex_lock(&c->lock);
		expire_locked(c, mono_ns(), &fl);
		more = freelist_full(&fl);
		pthread_mutex_unlock(&c->lock);
		freelist_run(c, &fl);
	}
}

static bool prefault_room(const struct cache *c, uint64_t cap);

/* Bytes the prefaulter still makes ready, in whole buffers of its size; 0 when it has made
 * all it will (or knows no size yet, or does not run). c->lock held. */
static uint64_t prefault_pending(const struct cache *c)
{
	uint64_t cap = c->common_cap, limit = c->prefault < c->capacity ? c->prefault : c->capacity;

	if (!c->prefaulting || !prefault_room(c, cap))
		return 0;
	return (limit - c->used) / cap * cap;
}

static void cache_metrics(struct tier *t, struct metrics *m)
{
	struct cache *c = cache_of(t);
	const char *l = "tier=\"mem\"";
	uint64_t blocks, used, dirty, pins, resv, pooled, pending;

	pthread_mutex_lock(&c->lock);
	pending = prefault_pending(c);
	blocks = c->map.count;
	used = c->used - c->pool_bytes;
	pooled = c->pool_bytes;
	dirty = c->dirty_blocks;
	pins = c->pins;
	resv = c->reservations;
	pthread_mutex_unlock(&c->lock);
	metrics_counter(m, "ucmfs_tier_hits_total", "Opens served by the tier.", l,
			counter_get(&c->hits));
	metrics_counter(m, "ucmfs_tier_misses_total", "Opens the tier could not serve.", l,
			counter_get(&c->misses));
	metrics_counter(m, "ucmfs_tier_bytes_in_total", "Bytes stored into the tier.", l,
			counter_get(&c->bytes_in));
	metrics_counter(m, "ucmfs_tier_evictions_total", "Blocks evicted to make room.", l,
			counter_get(&c->evictions));
	metrics_counter(m, "ucmfs_tier_expirations_total", "Blocks removed at their TTL.", l,
			counter_get(&c->expirations));
	metrics_gauge(m, "ucmfs_tier_blocks", "Committed blocks resident in the tier.", l,
		      (double)blocks);
	metrics_gauge(m, "ucmfs_tier_bytes", "Bytes the tier holds.", l, (double)used);
	metrics_gauge(m, "ucmfs_tier_capacity_bytes", "Capacity of the tier.", l,
		      (double)c->capacity);
	metrics_counter(m, "ucmfs_mem_buffers_reused_total",
			"New blocks written into a freed block's buffer, not fresh memory.", "",
			counter_get(&c->reused));
	metrics_counter(m, "ucmfs_mem_buffers_reclaimed_total",
			"Buffers whose file the kernel read (passthrough) pooled again once nobody "
			"held the file.", "", counter_get(&c->reclaimed));
	metrics_counter(m, "ucmfs_mem_prefaulted_bytes_total",
			"Bytes of buffers made ready (faulted in) before any block needed them.", "",
			counter_get(&c->prefaulted));
	metrics_gauge(m, "ucmfs_mem_prefault_pending_bytes",
		      "Bytes of buffers the prefaulter is still to make ready (0: memory ready).",
		      "", (double)pending);
	metrics_gauge(m, "ucmfs_mem_pooled_bytes",
		      "Free block buffers kept for reuse (within the capacity).", "",
		      (double)pooled);
	metrics_gauge(m, "ucmfs_mem_dirty_blocks", "Blocks in memory not yet safe on disk.", "",
		      (double)dirty);
	metrics_gauge(m, "ucmfs_pins", "Open readers of blocks in memory.", "", (double)pins);
	metrics_gauge(m, "ucmfs_reservations", "Blocks being written in memory.", "",
		      (double)resv);
}

static void drop_pool(struct cache *c)
{
	while (c->pool) {
		struct pooled *p = c->pool;

		c->pool = p->next;
		buf_free(p, p->cap);
	}
	c->pool_bytes = 0;
}

static void drop_one(struct idnode *n, void *arg)
{
	struct cache *c = arg;
	struct cblock *b = CB(n);

#ifdef UCM_CHECK_INVARIANTS
	assert(b->refs == 1); /* no handle outlives its tier */
#endif
	idmap_remove(&c->map, n);
	buf_free(b->data, b->cap);
	free(b);
}

/* --- the prefaulter --------------------------------------------------------------------- */

/* Is there room for one more prefaulted buffer of cap bytes? c->lock held. */
static bool prefault_room(const struct cache *c, uint64_t cap)
{
	return cap && c->used + cap <= c->prefault && c->used + cap <= c->capacity && !c->draining;
}

static void *prefaulter(void *arg)
{
	struct cache *c = arg;
	struct sched_param sp = { 0 };
	uint64_t cap;
	void *data;

	/* only the time the CPUs would spend idle: never in the way of a request */
	pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
	pthread_mutex_lock(&c->lock);
	while (!c->stopping) {
		cap = c->common_cap;
		if (!prefault_room(c, cap)) {
			struct timespec ts;

			/* woken when a size is learnt; memory freed is seen within 100 ms */
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 100 * 1000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&c->pf_wake, &c->lock, &ts);
			continue;
		}
		pthread_mutex_unlock(&c->lock);
		data = buf_alloc(cap, true); /* every page faulted in now, not at a load */
		pthread_mutex_lock(&c->lock);
		if (data && prefault_room(c, cap) && cap == c->common_cap) {
			c->used += cap;
			pool_push(c, data, cap);
			counter_add(&c->prefaulted, cap);
			data = NULL;
		}
		if (data) {
			pthread_mutex_unlock(&c->lock);
			buf_free(data, cap);
			pthread_mutex_lock(&c->lock);
		}
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

int cache_start(struct tier *t, uint64_t size)
{
	struct cache *c;
	int rc;

	if (!t || t->ops != &tier_cache_ops)
		return 0;
	c = t->priv;
	if (!c->prefault || c->prefaulting)
		return 0;
	pthread_mutex_lock(&c->lock);
	if (!c->common_cap && size >= BUF_FILE_MIN)
		c->common_cap = buf_round(size);
	/* under the lock, which the metrics read it by; the thread starts by waiting for it */
	rc = -pthread_create(&c->prefaulter, NULL, prefaulter, c);
	if (rc == 0) {
		pthread_setname_np(c->prefaulter, "ucmfs-prefault");
		c->prefaulting = true;
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

static void prefault_stop(struct cache *c)
{
	if (!c->prefaulting)
		return;
	pthread_mutex_lock(&c->lock);
	c->stopping = true;
	pthread_cond_signal(&c->pf_wake);
	pthread_mutex_unlock(&c->lock);
	pthread_join(c->prefaulter, NULL);
	pthread_mutex_lock(&c->lock);
	c->prefaulting = false;
	pthread_mutex_unlock(&c->lock);
}

static void cache_destroy(struct tier *t)
{
	struct cache *c = cache_of(t);

	prefault_stop(c);
	idmap_foreach_safe(&c->map, drop_one, c);
	idmap_destroy(&c->map);
	drop_pool(c);
	dlheap_free(&c->deadlines);
	c->pol->destroy(c->pol_priv);
	pthread_cond_destroy(&c->cleaned);
	pthread_cond_destroy(&c->pf_wake);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

const struct tier_ops tier_cache_ops = {
	.name = "cache",
	.destroy = cache_destroy,
	.lookup = cache_lookup,
	.present = cache_present,
	.open = cache_open,
	.read = cache_read,
	.data = cache_data,
	.backing = cache_backing,
	.stat = cache_stat,
	.close = cache_close,
	.reserve = cache_reserve,
	.write = cache_write,
	.truncate = cache_truncate,
	.commit = cache_commit,
	.abort = cache_abort,
	.remove = cache_remove,
	.touch = cache_touch,
	.set_deadline = cache_set_deadline,
	.mark_clean = cache_mark_clean,
	.list_shard = cache_list_shard,
	.usage = cache_usage,
	.sweep = cache_sweep,
	.metrics = cache_metrics,
};

int cache_create(const struct cache_config *cfg, struct tier **out)
{
	struct cache *c = calloc(1, sizeof(*c));
	int rc;

	if (!c)
		return -ENOMEM;
	switch (cfg->policy) {
	case POLICY_CLOCK:
		c->pol = &cache_policy_clock;
		break;
	case POLICY_LRU:
		c->pol = &cache_policy_lru;
		break;
	case POLICY_FIFO:
		c->pol = &cache_policy_fifo;
		break;
	default:
		free(c);
		return -EINVAL;
	}
	rc = c->pol->create(&c->pol_priv);
	if (rc) {
		free(c);
		return rc;
	}
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cleaned, NULL);
	idmap_init(&c->map);
	c->capacity = cfg->capacity;
	c->dirty_wait_ms = cfg->dirty_wait_ms;
	c->prefault = cfg->prefault;
	c->common_cap = cfg->size_hint >= BUF_FILE_MIN ? buf_round(cfg->size_hint) : 0;
	c->size_hinted = c->common_cap != 0;
	pthread_cond_init(&c->pf_wake, NULL);
	c->tier.ops = &tier_cache_ops;
	c->tier.priv = c;
	*out = &c->tier;
	return 0;
}

/* mem_prefault=, but never more than half the machine's memory: a mem_size larger than
 * what the machine has must not fault it all in at once. */
static uint64_t prefault_bytes(const struct ucm_options *o)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	uint64_t half = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz / 2 : 0;

	return half && o->mem_prefault > half ? half : o->mem_prefault;
}

/* The memory tier by name: mem_size=, policy=, mem_prefault= of its options. */
static int cache_plugin_create(const struct tier_setup *s, struct tier **out)
{
	const struct ucm_options *o = s->options;
	struct cache_config cc = {
		.capacity = o->mem_size,
		.policy = o->policy,
		/* a reservation waits this long for dirty blocks to be dumped below (a cache
		 * with nothing below has none) */
		.dirty_wait_ms = 10000,
		.prefault = prefault_bytes(o),
		.size_hint = o->block_size,
	};

	int rc = cache_create(&cc, out);

	if (rc)
		snprintf(s->err, s->errlen, "cannot create the memory tier: %s", strerror(-rc));
	return rc;
}

const struct tier_plugin tier_cache_plugin = {
	.abi = UCMFS_TIER_ABI,
	.name = "cache",
	.keys = (const char *const[]){ "mem_size", "mem_prefault", "policy", NULL },
	.kind = TIER_KIND_MEMORY,
	.create = cache_plugin_create,
};
