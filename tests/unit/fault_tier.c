/*
 * The fault tier and allocation faults; see fault_tier.h.
 *
 * DESIGN
 *
 * Every op of the fault tier first asks decide() whether this call faults, then either
 * returns the error (touching nothing below) or forwards the call. decide() counts the call
 * if the plan counts its op, under f->lock, so the counted numbers of concurrent calls are
 * distinct and exactly the planned calls fault.
 *
 * Handles: the fault tier's handles wrap the inner tier's (struct fhandle), so that every
 * later op on them comes back through the fault tier. A wrapper is allocated before the
 * inner call that would make the inner handle (commit's rd included), so a wrapper that
 * cannot be allocated is a failed call that left nothing behind, never a handle made below
 * and lost.
 *
 * The ops table is per instance: a copy of fault_ops with NULL wherever the inner tier has
 * NULL, since callers test ops for NULL to learn what a tier supports.
 *
 * Allocation faults: the __wrap_ functions (built with UCM_FAULT_WRAP_ALLOC, linked with
 * --wrap) count the calls of the allocation functions while armed and fail the nth. They
 * also keep every live allocation they made in a table (pointer, size, call site), which
 * is how fault_alloc_in_use() measures leaks without a sanitizer and names their sites.
 *
 * Locks: f->lock only, never held across a call into the inner tier or a sleep; the
 * allocation table has its own (track_lock), taken by the wrappers alone.
 */
#include "tests/unit/fault_tier.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

struct fault {
	struct tier tier;
	struct tier_ops ops;      /* fault_ops less what inner lacks */
	struct tier *inner;
	pthread_mutex_t lock;
	bool armed;               /* protected by lock */
	struct fault_plan plan;   /* protected by lock */
	uint64_t rng;             /* protected by lock */
	struct fault_stats st;    /* protected by lock, but seen[] (atomic adds) */
};

struct fhandle {
	struct tier_handle base;
	struct tier_handle *in;
};

static struct fault *fault_of(struct tier *t)
{
	return t->priv;
}

static struct tier_handle *in_of(struct tier_handle *th)
{
	return ((struct fhandle *)th)->in;
}

static const char *const op_names[FOP_COUNT] = {
	"lookup", "present", "open", "read", "layout", "data", "map", "stat", "close",
	"reserve", "write", "truncate", "set_durable", "commit", "abort", "remove", "touch",
	"set_deadline", "set_ttl", "mark_clean", "sync", "list_shard", "usage", "sweep", "drain",
	"metrics",
};

const char *fault_op_name(enum fault_op op)
{
	return op < FOP_COUNT ? op_names[op] : "?";
}

int fault_error_for(enum fault_op op, int err)
{
	if (err != -EIO && err != -ENOSPC && err != -ENOMEM)
		err = -EIO;
	switch (op) {
	case FOP_OPEN: /* 0, -ENOENT, -EIO, -ENOMEM, -ENOSPC */
	case FOP_RESERVE: /* 0, -EEXIST, -ENOSPC, -ENOMEM, -EIO */
	case FOP_WRITE: /* count, -EFBIG, -ENOSPC, -EIO, -ENOMEM */
	case FOP_COMMIT: /* 0, -EIO, -ENOSPC, -ENOMEM, -EEXIST */
		return err;
	case FOP_TRUNCATE: /* 0, -EFBIG, -ENOSPC */
		return -ENOSPC;
	default: /* read: count, -EIO; set_deadline, sync: 0, -ENOENT, -EIO */
		return -EIO;
	}
}

static const char *basename_of(const char *path)
{
	const char *b = strrchr(path, '/');

	return b ? b + 1 : path;
}

static uint64_t next_rand(uint64_t *s)
{
	uint64_t x = (*s += 0x9e3779b97f4a7c15ULL);

	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000),
			       .tv_nsec = (long)(ns % 1000000000) };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* Does this call fault? 0: forward it (after any delay); else the error to return. */
static int decide(struct fault *f, enum fault_op op)
{
	uint64_t delay = 0;
	int err = 0;

	__atomic_fetch_add(&f->st.seen[op], 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&f->lock);
	if (f->armed && (f->plan.ops & FAULT_BIT(op)) &&
	    (f->plan.action == FAULT_DELAY || (FAULT_FAILABLE & FAULT_BIT(op)))) {
		uint64_t n = ++f->st.calls;
		uint64_t times = f->plan.times ? f->plan.times : 1;
		bool hit = f->plan.nth && n >= f->plan.nth && n - f->plan.nth < times;

		if (!hit && f->plan.probability > 0)
			hit = (double)(next_rand(&f->rng) >> 11) * 0x1.0p-53 < f->plan.probability;
		if (hit) {
			if (f->plan.action == FAULT_DELAY)
				delay = f->plan.delay_ns;
			else
				err = fault_error_for(op, f->plan.err);
			if (!f->st.faults++) {
				f->st.first_n = n;
				f->st.first_op = op;
				f->st.first_err = err;
			}
		}
	}
	pthread_mutex_unlock(&f->lock);
	if (delay)
		sleep_ns(delay);
	return err;
}

static struct fhandle *new_fhandle(struct fault *f)
{
	struct fhandle *h = calloc(1, sizeof(*h));

	if (h)
		h->base.tier = &f->tier;
	return h;
}

/* --- ops on the tier --------------------------------------------------------------------- */

static void f_destroy(struct tier *t)
{
	struct fault *f = fault_of(t);

	tier_destroy(f->inner);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

static int f_lookup(struct tier *t, const struct blockid *id, struct block_attr *attr)
{
	struct fault *f = fault_of(t);

	decide(f, FOP_LOOKUP);
	return f->inner->ops->lookup(f->inner, id, attr);
}

static void f_present(struct tier *t, const struct blockid *ids, size_t n, uint8_t *hit)
{
	struct fault *f = fault_of(t);

	decide(f, FOP_PRESENT);
	f->inner->ops->present(f->inner, ids, n, hit);
}

static int f_open(struct tier *t, const struct blockid *id, unsigned flags,
		  struct tier_handle **out)
{
	struct fault *f = fault_of(t);
	struct fhandle *h;
	int rc = decide(f, FOP_OPEN);

	if (rc)
		return rc;
	h = new_fhandle(f);
	if (!h)
		return -ENOMEM;
	rc = f->inner->ops->open(f->inner, id, flags, &h->in);
	if (rc) {
		free(h);
		return rc;
	}
	*out = &h->base;
	return 0;
}

static int f_reserve(struct tier *t, const struct blockid *id, unsigned flags,
		     uint64_t size_hint, struct tier_handle **out)
{
	struct fault *f = fault_of(t);
	struct fhandle *h;
	int rc = decide(f, FOP_RESERVE);

	if (rc)
		return rc;
	h = new_fhandle(f);
	if (!h)
		return -ENOMEM;
	rc = f->inner->ops->reserve(f->inner, id, flags, size_hint, &h->in);
	if (rc) {
		free(h);
		return rc;
	}
	*out = &h->base;
	return 0;
}

static int f_remove(struct tier *t, const struct blockid *id)
{
	struct fault *f = fault_of(t);

	decide(f, FOP_REMOVE);
	return f->inner->ops->remove(f->inner, id);
}

static int f_touch(struct tier *t, const struct blockid *id)
{
	struct fault *f = fault_of(t);

	decide(f, FOP_TOUCH);
	return f->inner->ops->touch(f->inner, id);
}

static int f_set_deadline(struct tier *t, const struct blockid *id, int64_t deadline)
{
	struct fault *f = fault_of(t);
	int rc = decide(f, FOP_SET_DEADLINE);

	return rc ? rc : f->inner->ops->set_deadline(f->inner, id, deadline);
}

static int f_set_ttl(struct tier *t, const struct blockid *id, int64_t ttl_ms)
{
	struct fault *f = fault_of(t);

	decide(f, FOP_SET_TTL);
	return f->inner->ops->set_ttl(f->inner, id, ttl_ms);
}

static int f_mark_clean(struct tier *t, const struct blockid *id, uint64_t version)
{
	struct fault *f = fault_of(t);

	decide(f, FOP_MARK_CLEAN);
	return f->inner->ops->mark_clean(f->inner, id, version);
}

static int f_sync(struct tier *t, const struct blockid *id)
{
	struct fault *f = fault_of(t);
	int rc = decide(f, FOP_SYNC);

	return rc ? rc : f->inner->ops->sync(f->inner, id);
}

static int f_list_shard(struct tier *t, unsigned shard, tier_list_fn fn, void *arg)
{
	struct fault *f = fault_of(t);

	decide(f, FOP_LIST_SHARD);
	return f->inner->ops->list_shard(f->inner, shard, fn, arg);
}

static int f_usage(struct tier *t, struct tier_usage *u)
{
	struct fault *f = fault_of(t);

	decide(f, FOP_USAGE);
	return f->inner->ops->usage(f->inner, u);
}

static void f_sweep(struct tier *t)
{
	struct fault *f = fault_of(t);

	decide(f, FOP_SWEEP);
	f->inner->ops->sweep(f->inner);
}

static void f_drain(struct tier *t)
{
	struct fault *f = fault_of(t);

	decide(f, FOP_DRAIN);
	f->inner->ops->drain(f->inner);
}

static void f_metrics(struct tier *t, struct metrics *m)
{
	struct fault *f = fault_of(t);

	decide(f, FOP_METRICS);
	f->inner->ops->metrics(f->inner, m);
}

/* --- ops on handles ---------------------------------------------------------------------- */

static ssize_t f_read(struct tier_handle *th, void *buf, size_t len, uint64_t off)
{
	int rc = decide(fault_of(th->tier), FOP_READ);

	return rc ? rc : tier_read(in_of(th), buf, len, off);
}

static int f_layout(struct tier_handle *th, struct block_layout *out)
{
	struct tier_handle *in = in_of(th);

	decide(fault_of(th->tier), FOP_LAYOUT);
	return in->tier->ops->layout(in, out);
}

static const void *f_data(struct tier_handle *th)
{
	decide(fault_of(th->tier), FOP_DATA);
	return tier_data(in_of(th));
}

static const void *f_map(struct tier_handle *th, uint64_t off, size_t len)
{
	struct tier_handle *in = in_of(th);

	decide(fault_of(th->tier), FOP_MAP);
	return in->tier->ops->map(in, off, len);
}

static int f_stat(struct tier_handle *th, struct block_attr *attr)
{
	struct tier_handle *in = in_of(th);

	decide(fault_of(th->tier), FOP_STAT);
	return in->tier->ops->stat(in, attr);
}

static void f_close(struct tier_handle *th)
{
	decide(fault_of(th->tier), FOP_CLOSE);
	tier_close(in_of(th));
	free(th);
}

static ssize_t f_write(struct tier_handle *th, const void *buf, size_t len, uint64_t off)
{
	struct tier_handle *in = in_of(th);
	int rc = decide(fault_of(th->tier), FOP_WRITE);

	return rc ? rc : in->tier->ops->write(in, buf, len, off);
}

static int f_truncate(struct tier_handle *th, uint64_t size)
{
	struct tier_handle *in = in_of(th);
	int rc = decide(fault_of(th->tier), FOP_TRUNCATE);

	return rc ? rc : in->tier->ops->truncate(in, size);
}

static int f_set_durable(struct tier_handle *th)
{
	struct tier_handle *in = in_of(th);

	decide(fault_of(th->tier), FOP_SET_DURABLE);
	return in->tier->ops->set_durable(in);
}

/* Not a device call: forwarded, never faulted. */
static bool f_hurry(struct tier_handle *th)
{
	return tier_hurry(in_of(th));
}

static void f_abort(struct tier_handle *th)
{
	struct tier_handle *in = in_of(th);

	decide(fault_of(th->tier), FOP_ABORT);
	in->tier->ops->abort(in);
	free(th);
}

/* Does a commit that failed with rc leave the handle with its caller? (tier.h) */
static bool commit_keeps(unsigned flags, int rc)
{
	return (flags & TIER_COMMIT_LOADED) || (rc == -EIO && (flags & TIER_COMMIT_TRY));
}

/* A commit that failed before it reached the inner tier: give the handle back as a failed
 * inner commit would have. */
static int commit_refused(struct tier_handle *th, unsigned flags, int rc)
{
	if (!commit_keeps(flags, rc))
		f_abort(th);
	return rc;
}

static int f_commit(struct tier_handle *th, const struct block_meta *meta, unsigned flags,
		    struct tier_handle **rd)
{
	struct fault *f = fault_of(th->tier);
	struct tier_handle *in = in_of(th), *ird = NULL;
	struct fhandle *r = NULL;
	int rc = decide(f, FOP_COMMIT);

	if (rd)
		*rd = NULL;
	if (rc)
		return commit_refused(th, flags, rc);
	if (rd && !(r = new_fhandle(f)))
		return commit_refused(th, flags, -ENOMEM);
	rc = in->tier->ops->commit(in, meta, flags, rd ? &ird : NULL);
	if (rc) {
		free(r);
		if (!commit_keeps(flags, rc))
			free(th); /* the inner tier took its handle back */
		return rc;
	}
	if (r && ird) {
		r->in = ird;
		*rd = &r->base;
	} else {
		free(r); /* published, but not reopened (a disk tier may say so) */
	}
	free(th);
	return 0;
}

static const struct tier_ops fault_ops = {
	.name = "fault",
	.destroy = f_destroy,
	.lookup = f_lookup,
	.present = f_present,
	.open = f_open,
	.read = f_read,
	.layout = f_layout,
	.data = f_data,
	.map = f_map,
	.stat = f_stat,
	.close = f_close,
	.reserve = f_reserve,
	.write = f_write,
	.truncate = f_truncate,
	.set_durable = f_set_durable,
	.hurry = f_hurry,
	.commit = f_commit,
	.abort = f_abort,
	.remove = f_remove,
	.touch = f_touch,
	.set_deadline = f_set_deadline,
	.set_ttl = f_set_ttl,
	.mark_clean = f_mark_clean,
	.sync = f_sync,
	.list_shard = f_list_shard,
	.usage = f_usage,
	.sweep = f_sweep,
	.drain = f_drain,
	.metrics = f_metrics,
};

/* NULL out the ops of `ops` that `inner` lacks. */
#define KEEP_IF(op) \
	do { \
		if (!inner->op) \
			ops->op = NULL; \
	} while (0)

static void mirror_nulls(struct tier_ops *ops, const struct tier_ops *inner)
{
	KEEP_IF(lookup);
	KEEP_IF(present);
	KEEP_IF(open);
	KEEP_IF(read);
	KEEP_IF(layout);
	KEEP_IF(data);
	KEEP_IF(map);
	KEEP_IF(stat);
	KEEP_IF(close);
	KEEP_IF(reserve);
	KEEP_IF(write);
	KEEP_IF(truncate);
	KEEP_IF(set_durable);
	KEEP_IF(hurry);
	KEEP_IF(commit);
	KEEP_IF(abort);
	KEEP_IF(remove);
	KEEP_IF(touch);
	KEEP_IF(set_deadline);
	KEEP_IF(set_ttl);
	KEEP_IF(mark_clean);
	KEEP_IF(sync);
	KEEP_IF(list_shard);
	KEEP_IF(usage);
	KEEP_IF(sweep);
	KEEP_IF(drain);
	KEEP_IF(metrics);
}

int fault_tier_create(struct tier *inner, struct tier **out)
{
	struct fault *f = calloc(1, sizeof(*f));

	if (!f) {
		tier_destroy(inner);
		return -ENOMEM;
	}
	f->inner = inner;
	f->ops = fault_ops;
	mirror_nulls(&f->ops, inner->ops);
	pthread_mutex_init(&f->lock, NULL);
	f->tier.ops = &f->ops;
	f->tier.priv = f;
	*out = &f->tier;
	return 0;
}

void fault_arm(struct tier *t, const struct fault_plan *plan)
{
	struct fault *f = fault_of(t);

	pthread_mutex_lock(&f->lock);
	f->plan = *plan;
	if (!f->plan.ops)
		f->plan.ops = FAULT_FAILABLE;
	f->rng = plan->seed;
	f->st.calls = f->st.faults = f->st.first_n = 0;
	f->st.first_op = FOP_COUNT;
	f->st.first_err = 0;
	f->armed = true;
	pthread_mutex_unlock(&f->lock);
}

void fault_disarm(struct tier *t)
{
	struct fault *f = fault_of(t);

	pthread_mutex_lock(&f->lock);
	f->armed = false;
	pthread_mutex_unlock(&f->lock);
}

void fault_get_stats(struct tier *t, struct fault_stats *out)
{
	struct fault *f = fault_of(t);

	pthread_mutex_lock(&f->lock);
	out->calls = f->st.calls; /* field by field: seen[] is not under the lock */
	out->faults = f->st.faults;
	out->first_n = f->st.first_n;
	out->first_op = f->st.first_op;
	out->first_err = f->st.first_err;
	for (int i = 0; i < FOP_COUNT; i++)
		out->seen[i] = __atomic_load_n(&f->st.seen[i], __ATOMIC_RELAXED);
	pthread_mutex_unlock(&f->lock);
}

struct tier *fault_inner(struct tier *t)
{
	return fault_of(t)->inner;
}

bool fault_is(const struct tier *t)
{
	return t && t->ops && t->ops->destroy == f_destroy;
}

/* --- allocation faults ------------------------------------------------------------------- */

static atomic_bool fa_armed;
static atomic_int fa_scope;
static atomic_uint_fast64_t fa_count, fa_nth;
static atomic_bool fa_fired, fa_seen_any;
static void *_Atomic fa_site;         /* the call site of the failed allocation */
static __thread bool fa_mine;         /* this thread armed (FA_THIS_THREAD) */

void fault_alloc_arm(uint64_t nth, enum fault_alloc_scope scope)
{
	atomic_store(&fa_count, 0);
	atomic_store(&fa_nth, nth);
	atomic_store(&fa_fired, false);
	atomic_store(&fa_site, NULL);
	atomic_store(&fa_scope, (int)scope);
	fa_mine = true;
	atomic_store(&fa_armed, true);
}

uint64_t fault_alloc_disarm(void)
{
	atomic_store(&fa_armed, false);
	fa_mine = false;
	return atomic_load(&fa_count);
}

bool fault_alloc_fired(void)
{
	return atomic_load(&fa_fired);
}

bool fault_alloc_available(void)
{
	return atomic_load(&fa_seen_any);
}

/*
 * The live allocations of the wrapped call sites: an open-addressing table (linear probing,
 * backward-shift deletion) of pointer, size, call site and sequence number, under one mutex.
 * A free of a pointer the table does not hold (libc's strdup, realpath) is ignored.
 */
#define TRACK_SLOTS (1u << 18)

struct tracked {
	void *p;
	size_t n;
	void *site;
	uint64_t seq;
};

static struct tracked track_tab[TRACK_SLOTS];
static pthread_mutex_t track_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t track_bytes, track_count, track_seq; /* protected by track_lock */
static bool track_full;                               /* protected by track_lock */

static uint32_t track_slot(const void *p)
{
	return (uint32_t)(((uintptr_t)p >> 4) * 0x9e3779b97f4a7c15ULL >> 46) & (TRACK_SLOTS - 1);
}

static __attribute__((unused)) void track_add(void *p, size_t n, void *site)
{
	uint32_t i = track_slot(p);

	pthread_mutex_lock(&track_lock);
	if (track_count + 1 >= TRACK_SLOTS / 2) {
		track_full = true; /* too many to track: in_use() says so */
		pthread_mutex_unlock(&track_lock);
		return;
	}
	while (track_tab[i].p)
		i = (i + 1) & (TRACK_SLOTS - 1);
	track_tab[i] = (struct tracked){ .p = p, .n = n, .site = site, .seq = ++track_seq };
	track_bytes += n;
	track_count++;
	pthread_mutex_unlock(&track_lock);
}

static __attribute__((unused)) void track_del(void *p)
{
	uint32_t i = track_slot(p), j;

	pthread_mutex_lock(&track_lock);
	while (track_tab[i].p && track_tab[i].p != p)
		i = (i + 1) & (TRACK_SLOTS - 1);
	if (!track_tab[i].p) {
		pthread_mutex_unlock(&track_lock);
		return;
	}
	track_bytes -= track_tab[i].n;
	track_count--;
	/* shift back the entries of the run after i that hash at or before it */
	for (j = (i + 1) & (TRACK_SLOTS - 1); track_tab[j].p; j = (j + 1) & (TRACK_SLOTS - 1)) {
		uint32_t h = track_slot(track_tab[j].p);

		if (((j - h) & (TRACK_SLOTS - 1)) >= ((j - i) & (TRACK_SLOTS - 1))) {
			track_tab[i] = track_tab[j];
			i = j;
		}
	}
	track_tab[i].p = NULL;
	pthread_mutex_unlock(&track_lock);
}

int64_t fault_alloc_in_use(void)
{
	int64_t n;

	pthread_mutex_lock(&track_lock);
	n = track_full ? -1 : (int64_t)track_bytes;
	pthread_mutex_unlock(&track_lock);
	return n;
}

uint64_t fault_alloc_mark(void)
{
	uint64_t s;

	pthread_mutex_lock(&track_lock);
	s = track_seq;
	pthread_mutex_unlock(&track_lock);
	return s;
}

/* "file+0xoffset" of a code address, for addr2line. */
static void describe_site(const void *site, char *buf, size_t len)
{
	Dl_info di = { 0 };
	uintptr_t off = (uintptr_t)site;

	if (dladdr(site, &di) && di.dli_fbase)
		off -= (uintptr_t)di.dli_fbase;
	snprintf(buf, len, "%s+0x%lx", di.dli_fname ? basename_of(di.dli_fname) : "?",
		 (unsigned long)off);
}

void fault_alloc_fired_site(char *buf, size_t len)
{
	void *site = atomic_load(&fa_site);

	if (!fault_alloc_fired() || !site)
		snprintf(buf, len, "-");
	else
		describe_site(site, buf, len);
}

size_t fault_alloc_report(uint64_t mark, char *buf, size_t len)
{
	size_t used = 0, n = 0;

	if (len)
		buf[0] = '\0';
	pthread_mutex_lock(&track_lock);
	for (uint32_t i = 0; i < TRACK_SLOTS; i++) {
		const struct tracked *t = &track_tab[i];
		char site[96];

		if (!t->p || t->seq <= mark)
			continue;
		n++;
		if (used + 128 >= len)
			continue;
		describe_site(t->site, site, sizeof(site));
		used += (size_t)snprintf(buf + used, len - used, "%s%zu bytes from %s",
					 used ? ", " : "", t->n, site);
	}
	pthread_mutex_unlock(&track_lock);
	return n;
}

#ifdef UCM_FAULT_WRAP_ALLOC
/* Should this allocation (made at site) fail? Counts it if armed and in scope. */
static bool fa_fail_at(void *site)
{
	atomic_store_explicit(&fa_seen_any, true, memory_order_relaxed);
	if (!atomic_load_explicit(&fa_armed, memory_order_acquire))
		return false;
	if (atomic_load(&fa_scope) == FA_THIS_THREAD && !fa_mine)
		return false;
	if (atomic_fetch_add(&fa_count, 1) + 1 != atomic_load(&fa_nth))
		return false;
	atomic_store(&fa_site, site);
	atomic_store(&fa_fired, true);
	return true;
}

#define fa_fail() fa_fail_at(__builtin_return_address(0))

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
void __real_free(void *p);
void *__real_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
void *__real_mremap(void *old, size_t old_len, size_t new_len, int flags, ...);

void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t m);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_aligned_alloc(size_t a, size_t n);
int __wrap_posix_memalign(void **p, size_t a, size_t n);
void __wrap_free(void *p);
void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
void *__wrap_mremap(void *old, size_t old_len, size_t new_len, int flags, ...);

#define SITE __builtin_return_address(0)

void *__wrap_malloc(size_t n)
{
	void *p;

	if (fa_fail()) {
		errno = ENOMEM;
		return NULL;
	}
	p = __real_malloc(n);
	if (p)
		track_add(p, n, SITE);
	return p;
}

void *__wrap_calloc(size_t n, size_t m)
{
	void *p;

	if (fa_fail()) {
		errno = ENOMEM;
		return NULL;
	}
	p = __real_calloc(n, m);
	if (p)
		track_add(p, n * m, SITE);
	return p;
}

void *__wrap_realloc(void *p, size_t n)
{
	void *q;

	/* realloc(p, 0) frees: not an allocation that can fail */
	if ((n || !p) && fa_fail()) {
		errno = ENOMEM;
		return NULL;
	}
	q = __real_realloc(p, n);
	if (p && (q || n == 0))
		track_del(p);
	if (q)
		track_add(q, n, SITE);
	return q;
}

void *__wrap_aligned_alloc(size_t a, size_t n)
{
	void *p;

	if (fa_fail()) {
		errno = ENOMEM;
		return NULL;
	}
	p = __real_aligned_alloc(a, n);
	if (p)
		track_add(p, n, SITE);
	return p;
}

int __wrap_posix_memalign(void **p, size_t a, size_t n)
{
	int rc;

	if (fa_fail())
		return ENOMEM;
	rc = __real_posix_memalign(p, a, n);
	if (rc == 0)
		track_add(*p, n, SITE);
	return rc;
}

void __wrap_free(void *p)
{
	if (p)
		track_del(p);
	__real_free(p);
}

void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if (fa_fail()) {
		errno = ENOMEM;
		return MAP_FAILED;
	}
	return __real_mmap(addr, len, prot, flags, fd, off);
}

void *__wrap_mremap(void *old, size_t old_len, size_t new_len, int flags, ...)
{
	void *new_addr = NULL;

	if (new_len > old_len && fa_fail()) {
		errno = ENOMEM;
		return MAP_FAILED;
	}
	if (flags & MREMAP_FIXED) {
		va_list ap;

		va_start(ap, flags);
		new_addr = va_arg(ap, void *);
		va_end(ap);
		return __real_mremap(old, old_len, new_len, flags, new_addr);
	}
	return __real_mremap(old, old_len, new_len, flags);
}
#endif
