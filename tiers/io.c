/*
 * Disk IO engines. See tiers/io.h.
 *
 * DESIGN
 *
 * aio: one kernel AIO context per engine, sized `depth`. A request (one io_pread) is cut into
 * segments of at most IO_SEG bytes over its 4 KiB-aligned span:
 *   - buffer and offset aligned: the segments read straight into the caller's memory; a
 *     length that is not a multiple of 4 KiB ends with one segment of a page read into the
 *     engine's memory and copied (the payload of a native block file is padded to 4 KiB, the
 *     last page of a UCM-layout file reads short);
 *   - anything else (a compressed chunk at any offset): the whole span is read into the
 *     engine's aligned memory and the asked bytes copied out.
 * The requester submits as many segments as the depth leaves room for (all of them, for a
 * request of up to `depth` segments, so the disk sees them as one deep queue), then waits;
 * one completion thread reaps events in batches and wakes requesters. No thread is parked
 * per IO: a request of sixteen segments is one wait. A read's segments go one per io_submit:
 * the block layer merges the adjacent bios of one submission (one plug) into requests of up
 * to max_sectors_kb, and this project's virtual disks answer fewer, larger requests slower
 * than the same bytes as 1 MiB ones (a prefetch of 1 GiB: 2.15-2.25 GB/s merged, 2.5-2.7
 * not; docs/BENCHMARKS.md "Reads the disk takes as they are cut"). Writes keep one submit:
 * there larger requests were faster.
 *
 * Two classes share the depth. Foreground requests (a reader waiting for its bytes) take any
 * free slot. Background ones (the pipeline's workers loading ahead of readers, prefetches,
 * dumps) hold at most half the depth, are cut into BG_SEG segments if they are reads, and
 * submit nothing while a foreground read is in the engine: what a foreground read finds
 * ahead of it in the disk's queue is a few small segments, not a block. A prefetch
 * (io_prefetch) submits what the depth allows at once; the rest waits in e->pf_queue, from
 * which the completion thread submits as segments complete (and a foreground request, when
 * it is done), oldest prefetch first: a stream's read-ahead keeps the disk busy while its
 * reader decodes. A prefetch waited for submits its own rest in the waiter's class.
 *
 * The engine's own memory is pooled by power-of-two size (POOL_BYTES at most kept): fresh
 * memory costs a page fault per 4 KiB at its first use, more than the copy out of it.
 *
 * A request not complete `timeout` after it began fails -EIO and is counted. Its segments
 * are still in the kernel's hands, so their memory must outlive them: the engine's own memory
 * is freed by the completion that comes last; the caller's pages are replaced (mmap
 * MAP_FIXED, fresh anonymous pages) before the requester returns, so a late transfer lands in
 * the old pages, which the kernel holds until it completes, and never in memory the caller
 * has reused. io_submit itself can block when the device's queue is full; that wait is not
 * bounded.
 *
 * Writes (io_pwrite) are always straight from the caller's memory: buffer, offset and length
 * 4 KiB-aligned (the disk tier stages what is not); a timed-out write leaves the caller's
 * memory alone (the kernel only reads it; the file it was for is given up). A write is cut
 * into IO_WSEG segments in either class (nobody reads what a dump writes; its depth is
 * bounded by the writer, four stages per block in the disk tier). The disk takes requests
 * of up to max_sectors_kb (4 MiB on this project's virtio disks) but of at most
 * max_segments (254) pieces of memory that are contiguous: 1 MiB of 4 KiB pages went as two
 * requests, so writes of 1 MiB stages reached 0.28-0.37 GB/s until durable where the page
 * cache's writeback of 4 MiB folios reached 1 GB/s. The engine's own memory of BUF_HUGE and
 * more (the disk tier's stages, read-ahead windows) is therefore huge-page aligned and asks
 * for transparent huge pages: a 4 MiB stage is two pieces, one request (0.58 GB/s with
 * zstd, docs/BENCHMARKS.md "Requests the disk takes whole").
 *
 * Locks: e->lock protects every request's and segment's state, the counts of IOs in flight
 * and the pool; never held across io_submit or io_getevents.
 */
#include "tiers/io.h"

#include <errno.h>
#include <fcntl.h>
#include <libaio.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "src/buf.h"
#include "src/clock.h"
#include "src/log.h"
#include "src/metrics.h"

#define REAP_BATCH 64
#define WAIT_SLICE_NS 20000000 /* a waiter looks again at least this often (see wait_until) */
#define BG_SEG (256u << 10) /* segments of background requests: what a foreground one may
			       find ahead of it in the disk's queue, per background slot */

/* The pool of the engine's own memory and of its callers' (io_buf_get(): the disk tier's
 * write stages, four of IO_WSEG per block being written, two or three blocks at once):
 * power-of-two classes from 64 KiB to 8 MiB, up to POOL_KEEP buffers of each and POOL_BYTES
 * in all kept. */
#define POOL_MIN_SHIFT 16
#define POOL_CLASSES 8
#define POOL_KEEP 12
#define POOL_BYTES (64u << 20)

static __thread bool io_bg; /* this thread's requests are background ones */

void io_set_background(bool on)
{
	io_bg = on;
}
#define REAP_WAIT_NS 200000000 /* how often the completion thread looks at e->stop */

struct io_req;

struct io_seg {
	struct iocb cb;
	struct io_req *req;
	char *mem;          /* where the bytes land: the caller's memory or the request's own */
	size_t len;         /* bytes asked (a multiple of IO_ALIGN) */
	long res;           /* bytes read or -errno, once done */
	bool direct;        /* mem is the caller's */
	bool bg;            /* of a background request */
	bool submitted, done;
};

struct io_req {
	unsigned nseg, submitted, pending; /* pending: submitted, not yet done */
	int refs;                          /* the requester + segments in the kernel */
	bool bg;                           /* background: see io_set_background() */
	bool direct;                       /* the first dlen bytes land in the caller's memory */
	bool waited;                       /* (prefetch) waited for: n is its result */
	bool write;                        /* a write: always straight from the caller */
	bool queued;                       /* (prefetch) on e->pf_queue: segments left */
	struct io_req *pf_next;            /* ... the next one there */
	char *own;                         /* the engine's memory for this request */
	size_t own_len;
	uint64_t off, skip;                /* asked from off; skip: own + skip holds byte off */
	size_t len, dlen;
	ssize_t n;
	int64_t t0, deadline;
	struct io_seg seg[];
};

struct io_engine {
	struct io_config cfg;
	io_context_t ctx;
	pthread_t reaper;
	bool started;             /* the context and the reaper exist; e->lock */
	atomic_bool ready;        /* started, read without the lock */
	atomic_bool failed;       /* could not start: pread from then on */
	pthread_mutex_t lock;
	pthread_cond_t cond;      /* a segment completed */
	unsigned inflight;        /* segments in the kernel; e->lock */
	unsigned bg_inflight;     /* of them, background ones; e->lock */
	unsigned fg_active;       /* foreground requests not yet done; e->lock */
	bool stop;                /* e->lock */
	void *spare[POOL_CLASSES][POOL_KEEP]; /* the engine's memory kept for reuse; e->lock */
	unsigned nspare[POOL_CLASSES];
	size_t spare_bytes;
	struct io_req *pf_queue;  /* prefetches with segments not yet submitted, oldest first */
	counter_t requests, segments, bytes, errors, timeouts;
	counter_t writes, wbytes, werrors;
	struct histogram lat, wlat;
};

ssize_t io_pread_full(int fd, void *buf, size_t len, uint64_t off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		done += (size_t)n;
	}
	return (ssize_t)done;
}

ssize_t io_pwrite_full(int fd, const void *buf, size_t len, uint64_t off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pwrite(fd, (const char *)buf + done, len - done, (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		done += (size_t)n;
	}
	return (ssize_t)done;
}

static int pool_class(size_t len)
{
	int c = 0;

	while (((size_t)1 << (POOL_MIN_SHIFT + c)) < len)
		c++;
	return c;
}

/* Aligned memory of at least len bytes (*cap: how much). e->lock held. NULL if none. */
static char *own_alloc(struct io_engine *e, size_t len, size_t *cap)
{
	int c = pool_class(len);

	if (c < POOL_CLASSES) {
		*cap = (size_t)1 << (POOL_MIN_SHIFT + c);
		if (e->nspare[c]) {
			e->spare_bytes -= *cap;
			return e->spare[c][--e->nspare[c]];
		}
	} else {
		*cap = len;
	}
	return buf_io_alloc(*cap); /* huge pages from BUF_HUGE on: see "Writes" above */
}

static void own_free(struct io_engine *e, char *p, size_t cap)
{
	int c = pool_class(cap);

	if (p && c < POOL_CLASSES && ((size_t)1 << (POOL_MIN_SHIFT + c)) == cap &&
	    e->nspare[c] < POOL_KEEP && e->spare_bytes + cap <= POOL_BYTES) {
		e->spare[c][e->nspare[c]++] = p;
		e->spare_bytes += cap;
	} else {
		free(p);
	}
}

void *io_buf_get(struct io_engine *e, size_t len)
{
	size_t cap;
	char *p;

	pthread_mutex_lock(&e->lock);
	p = own_alloc(e, len, &cap);
	pthread_mutex_unlock(&e->lock);
	return p;
}

void io_buf_put(struct io_engine *e, void *p, size_t len)
{
	int c = pool_class(len);

	pthread_mutex_lock(&e->lock);
	own_free(e, p, c < POOL_CLASSES ? (size_t)1 << (POOL_MIN_SHIFT + c) : len);
	pthread_mutex_unlock(&e->lock);
}

/* e->lock held */
static void req_free(struct io_engine *e, struct io_req *r)
{
	own_free(e, r->own, r->own_len);
	free(r);
}

static void topup(struct io_engine *e);

static void *reap(void *arg)
{
	struct io_engine *e = arg;
	struct io_event ev[REAP_BATCH];

	for (;;) {
		struct timespec ts = { 0, REAP_WAIT_NS };
		int n = io_getevents(e->ctx, 1, REAP_BATCH, ev, &ts);

		if (n > 0 && e->cfg.test_stall_ns) {
			struct timespec st = { e->cfg.test_stall_ns / 1000000000,
					       e->cfg.test_stall_ns % 1000000000 };

			nanosleep(&st, NULL);
		}
		pthread_mutex_lock(&e->lock);
		for (int i = 0; i < n; i++) {
			struct io_seg *s = ev[i].data;
			struct io_req *r = s->req;

			s->res = (long)ev[i].res;
			s->done = true;
			r->pending--;
			e->inflight--;
			e->bg_inflight -= s->bg;
			if (--r->refs == 0)
				req_free(e, r); /* abandoned by its requester, which timed out */
		}
		if (n > 0) {
			pthread_cond_broadcast(&e->cond);
			topup(e);
		}
		if (e->stop && e->inflight == 0) {
			pthread_mutex_unlock(&e->lock);
			return NULL;
		}
		pthread_mutex_unlock(&e->lock);
	}
}

int io_engine_create(const struct io_config *c, struct io_engine **out)
{
	struct io_engine *e = calloc(1, sizeof(*e));

	if (!e)
		return -ENOMEM;
	e->cfg = *c;
	if (e->cfg.depth == 0)
		e->cfg.depth = 1;
	pthread_mutex_init(&e->lock, NULL);
	pthread_cond_init(&e->cond, NULL);
	*out = e;
	return 0;
}

/*
 * The AIO context and the completion thread, at the first read: neither survives the fork
 * that puts the daemon in the background, which comes after the stores are opened. If they
 * cannot be had, the engine reads with pread from then on (said once in the log).
 */
static bool aio_ready(struct io_engine *e)
{
	int rc;

	if (atomic_load_explicit(&e->ready, memory_order_acquire))
		return true;
	pthread_mutex_lock(&e->lock);
	if (!e->started && !atomic_load(&e->failed)) {
		rc = io_setup((int)e->cfg.depth, &e->ctx);
		if (rc == 0) {
			rc = -pthread_create(&e->reaper, NULL, reap, e);
			if (rc)
				io_destroy(e->ctx);
		}
		if (rc == 0) {
			pthread_setname_np(e->reaper, "ucmfs-aio");
			e->started = true;
			atomic_store_explicit(&e->ready, true, memory_order_release);
		} else {
			log_warn("io=aio: no AIO context (%s); reading with pread instead",
				 strerror(-rc));
			atomic_store(&e->failed, true);
		}
	}
	pthread_mutex_unlock(&e->lock);
	return e->started;
}

void io_engine_destroy(struct io_engine *e)
{
	if (!e)
		return;
	if (e->started) {
		pthread_mutex_lock(&e->lock);
		e->stop = true;
		pthread_mutex_unlock(&e->lock);
		pthread_join(e->reaper, NULL);
		io_destroy(e->ctx);
	}
	for (int c = 0; c < POOL_CLASSES; c++)
		while (e->nspare[c])
			free(e->spare[c][--e->nspare[c]]);
	pthread_cond_destroy(&e->cond);
	pthread_mutex_destroy(&e->lock);
	free(e);
}

bool io_engine_direct(const struct io_engine *e)
{
	return e && e->cfg.aio && !atomic_load(&e->failed);
}

/* Cut [start, start + span) into segments of seg bytes landing at mem (the caller's when
 * direct). */
static unsigned add_segs(struct io_req *r, unsigned k, int fd, char *mem, uint64_t start,
			 uint64_t span, size_t seg, bool direct, bool write)
{
	for (uint64_t o = 0; o < span; o += seg, k++) {
		struct io_seg *s = &r->seg[k];

		s->req = r;
		s->mem = mem + o;
		s->len = span - o < seg ? (size_t)(span - o) : seg;
		s->direct = direct;
		if (write)
			io_prep_pwrite(&s->cb, fd, s->mem, s->len, (long long)(start + o));
		else
			io_prep_pread(&s->cb, fd, s->mem, s->len, (long long)(start + o));
		s->cb.data = s;
	}
	return k;
}

/* After a timeout: keep the kernel's late transfers out of the caller's memory (a write only
 * reads it, and its late bytes go to a file its caller gives up). */
static void shield_caller(struct io_req *r)
{
	for (unsigned i = 0; i < r->nseg; i++) {
		struct io_seg *s = &r->seg[i];

		if (s->direct && !r->write && s->submitted && !s->done &&
		    mmap(s->mem, s->len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
			log_err("io: cannot detach %zu bytes from a timed-out read: %s", s->len,
				  strerror(errno));
	}
}

/*
 * Wait for e->cond, at most WAIT_SLICE_NS at a time (the caller looks again); false once the
 * deadline (0: none) has passed. e->lock held. The slice is a safety net: runs of the
 * benchmark showed, about once in five, a prefetch waiting out its whole timeout for bytes
 * that had arrived. One cause was found (io_prefetch_wait slept after a submit, which drops
 * the lock, without looking whether what it submitted had completed meanwhile); the slice
 * turns any other missed wakeup into at most 20 ms.
 */
static bool wait_until(struct io_engine *e, int64_t deadline)
{
	struct timespec ts;
	int64_t left = WAIT_SLICE_NS;

	if (deadline) {
		left = deadline - mono_ns();
		if (left <= 0)
			return false;
		if (left > WAIT_SLICE_NS)
			left = WAIT_SLICE_NS;
	}
	left += wall_ns();
	ts.tv_sec = left / 1000000000;
	ts.tv_nsec = left % 1000000000;
	pthread_cond_timedwait(&e->cond, &e->lock, &ts);
	return true;
}

/* Segments a request of this class may submit now. e->lock held. */
static unsigned room(const struct io_engine *e, bool bg)
{
	unsigned k = e->cfg.depth - e->inflight, bg_cap = e->cfg.depth / 2 ? e->cfg.depth / 2 : 1;

	if (e->inflight >= e->cfg.depth)
		return 0;
	if (bg) {
		/* background: none while a foreground request waits, at most half the depth
		 * otherwise, so that a foreground one finds little ahead of it (a quarter
		 * measured no better for cold shards, and no worse for whole blocks) */
		if (e->fg_active || e->bg_inflight >= bg_cap)
			return 0;
		if (k > bg_cap - e->bg_inflight)
			k = bg_cap - e->bg_inflight;
	}
	return k;
}

/*
 * Submit the segments of r not yet submitted, as the depth leaves room for; with wait, until
 * all are (or the deadline passes: *late), else only while there is room. e->lock held.
 */
static void submit(struct io_engine *e, struct io_req *r, bool wait, bool *late)
{
	struct iocb *cbs[REAP_BATCH];

	while (r->submitted < r->nseg && !*late) {
		unsigned base = r->submitted, k = room(e, r->bg);
		int n;

		if (k == 0) {
			if (!wait)
				return;
			*late = !wait_until(e, r->deadline);
			continue;
		}
		if (k > r->nseg - base)
			k = r->nseg - base;
		if (k > REAP_BATCH)
			k = REAP_BATCH;
		if (!r->write)
			k = 1; /* a read's segments unmerged: see DESIGN */
		for (unsigned i = 0; i < k; i++) {
			r->seg[base + i].submitted = true;
			r->seg[base + i].bg = r->bg;
			cbs[i] = &r->seg[base + i].cb;
		}
		r->submitted += k;
		r->pending += k;
		r->refs += (int)k;
		e->inflight += k;
		if (r->bg)
			e->bg_inflight += k;
		pthread_mutex_unlock(&e->lock);
		n = io_submit(e->ctx, (long)k, cbs);
		pthread_mutex_lock(&e->lock);
		counter_add(&e->segments, n > 0 ? (uint64_t)n : 0);
		if (n < (int)k) {
			/* the kernel took only the first n: the others failed here */
			for (unsigned i = n > 0 ? (unsigned)n : 0; i < k; i++) {
				struct io_seg *s = &r->seg[base + i];

				s->done = true;
				s->res = n < 0 ? n : -EIO;
				r->pending--;
				r->refs--;
				e->inflight--;
				e->bg_inflight -= s->bg;
			}
			pthread_cond_broadcast(&e->cond);
			r->nseg = r->submitted; /* submit nothing more */
		}
	}
}

/* Take r off e->pf_queue if it is there. e->lock held. */
static void unqueue(struct io_engine *e, struct io_req *r)
{
	struct io_req **pp = &e->pf_queue;

	if (!r->queued)
		return;
	while (*pp != r)
		pp = &(*pp)->pf_next;
	*pp = r->pf_next;
	r->queued = false;
}

/*
 * Submit what the depth allows of the prefetches still queued, oldest first, so that the disk
 * goes on reading ahead of a stream while its reader checks and decodes what it has, not only
 * when the reader next waits. Called by the completion thread after each batch, and when the
 * last foreground request is done. e->lock held (submit drops it around io_submit).
 */
static void topup(struct io_engine *e)
{
	bool late = false;

	while (e->pf_queue) {
		struct io_req *r = e->pf_queue;
		unsigned before = r->submitted;
		bool stalled;

		r->refs++; /* r may be dropped while submit lets go of the lock */
		submit(e, r, false, &late);
		if (r->submitted >= r->nseg)
			unqueue(e, r);
		stalled = r->queued && r->submitted == before; /* no room left */
		if (--r->refs == 0)
			req_free(e, r);
		if (stalled)
			break;
	}
}

/* Submit every segment of r left and wait for them all. 0 or -ETIMEDOUT. Only a read holds
 * the background back: an fsync writing its block itself must not stop the workers' dumps
 * of the blocks it waits for next. */
static int run(struct io_engine *e, struct io_req *r)
{
	bool late = false, fg = !r->bg && !r->write;

	pthread_mutex_lock(&e->lock);
	if (fg)
		e->fg_active++;
	submit(e, r, true, &late);
	while (r->pending && !late)
		late = !wait_until(e, r->deadline);
	if (late) {
		shield_caller(r);
		r->nseg = r->submitted;
	}
	if (fg && --e->fg_active == 0) {
		pthread_cond_broadcast(&e->cond); /* background requests may go on */
		topup(e);
	}
	pthread_mutex_unlock(&e->lock);
	return late ? -ETIMEDOUT : 0;
}

/* Bytes read from the start of the span: up to the first short segment; -errno on error. */
static long span_done(const struct io_req *r, unsigned nseg)
{
	long total = 0;

	for (unsigned i = 0; i < nseg; i++) {
		const struct io_seg *s = &r->seg[i];

		if (!s->done || s->res < 0)
			return s->done ? s->res : -EIO;
		total += s->res;
		if ((size_t)s->res < s->len)
			break;
	}
	return total;
}

/*
 * A request for [off, off + len): straight into buf where buf and off allow it (buf NULL:
 * all into the engine's memory), in segments of its class's size. NULL if out of memory.
 */
static struct io_req *plan(struct io_engine *e, int fd, void *buf, size_t len, uint64_t off,
			   bool bg, bool write)
{
	uint64_t lo = off & ~(uint64_t)(IO_ALIGN - 1);
	uint64_t hi = (off + len + IO_ALIGN - 1) & ~(uint64_t)(IO_ALIGN - 1);
	bool direct = buf && ((uintptr_t)buf % IO_ALIGN) == 0 && off == lo;
	size_t dlen = direct ? len & ~(size_t)(IO_ALIGN - 1) : 0; /* into the caller's memory */
	uint64_t own_len = direct ? hi - off - dlen : hi - lo;
	size_t seg = write ? IO_WSEG : bg ? BG_SEG : IO_SEG;
	unsigned nseg = (unsigned)((dlen + seg - 1) / seg + (own_len + seg - 1) / seg), k = 0;
	struct io_req *r = calloc(1, sizeof(*r) + nseg * sizeof(r->seg[0]));

	if (!r)
		return NULL;
	if (own_len) {
		pthread_mutex_lock(&e->lock);
		r->own = own_alloc(e, (size_t)own_len, &r->own_len);
		pthread_mutex_unlock(&e->lock);
		if (!r->own) {
			free(r);
			return NULL;
		}
	}
	r->refs = 1;
	r->bg = bg;
	r->write = write;
	r->direct = direct;
	r->off = off;
	r->len = len;
	r->skip = direct ? 0 : off - lo;
	r->dlen = dlen;
	r->t0 = mono_ns();
	r->deadline = e->cfg.timeout_ns ? r->t0 + e->cfg.timeout_ns : 0;
	if (dlen)
		k = add_segs(r, k, fd, buf, off, dlen, seg, true, write);
	if (own_len)
		k = add_segs(r, k, fd, r->own, direct ? off + dlen : lo, own_len, seg, false, write);
	r->nseg = k;
	counter_add(write ? &e->writes : &e->requests, 1);
	return r;
}

/* Bytes of [off, off + len) that r read (rc: what run() said), or -EIO. e->lock held. */
static ssize_t result(struct io_engine *e, struct io_req *r, int rc)
{
	long done = rc ? rc : span_done(r, r->nseg);
	ssize_t n;

	if (done < 0) {
		n = r->write && (done == -ENOSPC || done == -EDQUOT) ? (ssize_t)done : -EIO;
	} else {
		n = (uint64_t)done > r->skip ? (ssize_t)((uint64_t)done - r->skip) : 0;
		if ((size_t)n > r->len)
			n = (ssize_t)r->len;
	}
	if (rc == -ETIMEDOUT) {
		counter_add(&e->timeouts, 1);
		log_err("io: a %s of %zu bytes at %llu did not complete in %lld ms (%u of %u IOs "
			"still in the kernel): EIO",
			r->write ? "write" : "read", r->len, (unsigned long long)r->off,
			(long long)(e->cfg.timeout_ns / 1000000), r->pending, r->nseg);
	}
	if (n < 0)
		counter_add(r->write ? &e->werrors : &e->errors, 1);
	else
		counter_add(r->write ? &e->wbytes : &e->bytes, (uint64_t)n);
	histogram_observe(r->write ? &e->wlat : &e->lat, mono_ns() - r->t0);
	return n;
}

/* Give r back; segments still in the kernel free it when the last one completes. */
static void put(struct io_engine *e, struct io_req *r)
{
	pthread_mutex_lock(&e->lock);
	if (--r->refs == 0)
		req_free(e, r);
	pthread_mutex_unlock(&e->lock);
}

/* The engine could not start: read fd through the page cache from now on. */
static bool use_psync(struct io_engine *e, int fd)
{
	int fl;

	if (!e->cfg.aio)
		return true;
	if (aio_ready(e))
		return false;
	fl = fcntl(fd, F_GETFL);
	if (fl >= 0 && (fl & O_DIRECT))
		fcntl(fd, F_SETFL, fl & ~O_DIRECT);
	return true;
}

ssize_t io_pread(struct io_engine *e, int fd, void *buf, size_t len, uint64_t off)
{
	struct io_req *r;
	ssize_t n;
	int rc;

	if (use_psync(e, fd))
		return io_pread_full(fd, buf, len, off);
	if (len == 0)
		return 0;
	r = plan(e, fd, buf, len, off, io_bg, false);
	if (!r)
		return -ENOMEM;
	rc = run(e, r);
	pthread_mutex_lock(&e->lock);
	n = result(e, r, rc);
	if (n > 0 && !r->direct)
		memcpy(buf, r->own + r->skip, (size_t)n);
	else if (n > 0 && (size_t)n > r->dlen)
		memcpy((char *)buf + r->dlen, r->own, (size_t)n - r->dlen);
	pthread_mutex_unlock(&e->lock);
	put(e, r);
	return n;
}

ssize_t io_pwrite(struct io_engine *e, int fd, const void *buf, size_t len, uint64_t off)
{
	struct io_req *r;

	if (use_psync(e, fd))
		return io_pwrite_full(fd, buf, len, off);
	if (len == 0)
		return 0;
	if (((uintptr_t)buf | off | len) % IO_ALIGN)
		return -EINVAL;
	r = io_write_start(e, fd, buf, len, off);
	return r ? io_write_wait(e, r) : -ENOMEM;
}

struct io_req *io_write_start(struct io_engine *e, int fd, const void *buf, size_t len,
			     uint64_t off)
{
	struct io_req *r;
	bool late = false;

	if (len == 0 || ((uintptr_t)buf | off | len) % IO_ALIGN || use_psync(e, fd))
		return NULL;
	r = plan(e, fd, (void *)buf, len, off, io_bg, true);
	if (!r)
		return NULL;
	pthread_mutex_lock(&e->lock);
	submit(e, r, false, &late);
	pthread_mutex_unlock(&e->lock);
	return r;
}

ssize_t io_write_wait(struct io_engine *e, struct io_req *r)
{
	ssize_t n;
	int rc;

	r->bg = io_bg;
	if (e->cfg.timeout_ns)
		r->deadline = mono_ns() + e->cfg.timeout_ns; /* a wait is bounded from its start */
	rc = run(e, r);
	pthread_mutex_lock(&e->lock);
	n = result(e, r, rc);
	pthread_mutex_unlock(&e->lock);
	put(e, r);
	return n;
}

struct io_req *io_prefetch(struct io_engine *e, int fd, uint64_t off, size_t len)
{
	struct io_req *r;
	bool late = false;

	if (len == 0 || use_psync(e, fd))
		return NULL;
	r = plan(e, fd, NULL, len, off, true, false);
	if (!r)
		return NULL;
	pthread_mutex_lock(&e->lock);
	submit(e, r, false, &late);
	if (r->submitted < r->nseg) {
		struct io_req **pp = &e->pf_queue;

		while (*pp)
			pp = &(*pp)->pf_next;
		*pp = r;
		r->queued = true;
	}
	pthread_mutex_unlock(&e->lock);
	return r;
}

/* Bytes done from the start of r's span, in order, up to the first segment not yet done
 * (*all: every byte r will have is in); -errno if a segment of that prefix failed. */
static long span_prefix(const struct io_req *r, bool *all)
{
	long total = 0;
	unsigned i;

	*all = false;
	for (i = 0; i < r->nseg; i++) {
		const struct io_seg *s = &r->seg[i];

		if (!s->done)
			return total;
		if (s->res < 0)
			return s->res;
		total += s->res;
		if ((size_t)s->res < s->len)
			break;
	}
	*all = true;
	return total;
}

ssize_t io_prefetch_wait(struct io_engine *e, struct io_req *r, size_t want, const char **bytes)
{
	uint64_t need = r->skip + want;
	bool all = false, late = false;
	long have;
	ssize_t n;

	*bytes = r->own + r->skip;
	pthread_mutex_lock(&e->lock);
	if (r->waited) {
		/* settled by an earlier wait (readers may share a prefetch) */
		n = r->n;
		pthread_mutex_unlock(&e->lock);
		return n;
	}
	r->bg = io_bg; /* the rest goes in the class of who waits for it */
	if (e->cfg.timeout_ns)
		r->deadline = mono_ns() + e->cfg.timeout_ns; /* a wait is bounded from its start */
	for (;;) {
		unsigned before = r->submitted;

		have = span_prefix(r, &all);
		if (have < 0 || all || (uint64_t)have >= need)
			break;
		submit(e, r, false, &late);
		if (r->submitted != before)
			continue; /* submit let go of the lock: what it started may be done */
		if (!wait_until(e, r->deadline)) {
			late = true;
			break;
		}
	}
	if (late || have < 0 || all) {
		/* settled: the answer for good */
		if (late)
			r->nseg = r->submitted;
		unqueue(e, r);
		r->n = result(e, r, late ? -ETIMEDOUT : 0);
		r->waited = true;
		n = r->n;
	} else {
		n = (ssize_t)((uint64_t)have - r->skip);
		if ((size_t)n > r->len)
			n = (ssize_t)r->len;
	}
	pthread_mutex_unlock(&e->lock);
	return n;
}

void io_prefetch_drop(struct io_engine *e, struct io_req *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&e->lock);
	unqueue(e, r);
	if (--r->refs == 0)
		req_free(e, r);
	pthread_mutex_unlock(&e->lock);
}

void io_engine_stats(struct io_engine *e, struct io_stats *out)
{
	out->requests = counter_get(&e->requests);
	out->segments = counter_get(&e->segments);
	out->bytes = counter_get(&e->bytes);
	out->errors = counter_get(&e->errors);
	out->timeouts = counter_get(&e->timeouts);
	out->writes = counter_get(&e->writes);
	out->wbytes = counter_get(&e->wbytes);
	out->werrors = counter_get(&e->werrors);
	pthread_mutex_lock(&e->lock);
	out->inflight = e->inflight;
	pthread_mutex_unlock(&e->lock);
}

void io_engine_metrics(struct io_engine *e, struct metrics *m, const char *labels)
{
	struct io_stats s;
	char l[4200];

	if (!e->cfg.aio)
		return;
	io_engine_stats(e, &s);
	snprintf(l, sizeof(l), "%s%sengine=\"aio\"", labels, *labels ? "," : "");
	metrics_counter(m, "ucmfs_io_reads_total", "Reads the IO engine served.", l, s.requests);
	metrics_counter(m, "ucmfs_io_segments_total", "IOs the IO engine submitted.", l,
			s.segments);
	metrics_counter(m, "ucmfs_io_read_bytes_total", "Bytes the IO engine read.", l, s.bytes);
	metrics_counter(m, "ucmfs_io_errors_total", "Reads of the IO engine that failed.", l,
			s.errors);
	metrics_counter(m, "ucmfs_io_writes_total", "Writes the IO engine served.", l, s.writes);
	metrics_counter(m, "ucmfs_io_write_bytes_total", "Bytes the IO engine wrote.", l,
			s.wbytes);
	metrics_counter(m, "ucmfs_io_write_errors_total", "Writes of the IO engine that failed.",
			l, s.werrors);
	metrics_counter(m, "ucmfs_io_timeouts_total",
			"Reads and writes that did not complete within io_timeout (failed EIO).", l,
			s.timeouts);
	metrics_gauge(m, "ucmfs_io_inflight", "IOs in the kernel now.", l, (double)s.inflight);
	metrics_histogram(m, "ucmfs_io_read_seconds", "Latency of the IO engine's reads.", l,
			  &e->lat);
	metrics_histogram(m, "ucmfs_io_write_seconds", "Latency of the IO engine's writes.", l,
			  &e->wlat);
}

int io_probe_direct(const char *dir, const char *tag)
{
	char path[4200];
	void *page = NULL;
	int fd, rc = 0;

	snprintf(path, sizeof(path), "%s/.direct-probe.%s.%d", dir, tag, (int)getpid());
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (posix_memalign(&page, IO_ALIGN, IO_ALIGN)) {
		rc = -ENOMEM;
	} else {
		memset(page, 0x5a, IO_ALIGN);
		if (pwrite(fd, page, IO_ALIGN, 0) != (ssize_t)IO_ALIGN ||
		    pread(fd, page, IO_ALIGN, 0) != (ssize_t)IO_ALIGN)
			rc = errno ? -errno : -EIO;
	}
	free(page);
	close(fd);
	unlink(path);
	return rc;
}
