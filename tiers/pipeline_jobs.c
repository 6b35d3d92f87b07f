/*
 * Background work of the pipeline: dumps (memory -> disk), loads (disk -> memory) and the TTL
 * sweep.
 *
 * DESIGN
 *
 * Workers serve two queues, loads first: a reader may be waiting for a load, nobody waits for
 * a dump (except fsync, which runs its dump itself). At most ndumpers of them dump at once
 * (compression takes a CPU each); the others only load, so that readers of many cold blocks
 * have as many loads in flight as the disk wants, except while anyone waits for a block to
 * be durable: dumps are hurried then (below), need no CPU, and every worker may take one.
 * They run at nice WORKER_NICE, so that the compression and writing of dumps takes the CPU
 * the FUSE threads leave (the FUSE threads answer hot reads, and never wait for the disk
 * themselves).
 *
 * A dump writes the cache's committed version below (outside any lock) and publishes it under
 * the id's stripe only if that version is still the cache's live one; then marks it clean.
 * It writes COPY_CHUNK at a time, and a worker runs the loads queued meanwhile between two
 * pieces: a load waits behind at most one piece of a dump, not a whole large block.
 *
 * A dump someone waits for (an fsync, a durable close) while dumps of other blocks are queued
 * or running waits for the CPU as well as the disk: with two CPUs, zstd (about 1 GB/s a
 * core) is slower than the disk. Such a dump is hurried (unless sync_compress=inline, or the
 * store is shared): from its next piece on, the compress stage passes its bytes on as they
 * are (tier_hurry()); so is every other dump in progress while anyone waits (an fsync waits
 * from its dump to the end of the flush below it), since the fsync loop of a writer comes to
 * those next, and each flush then finds more of them written. A hurried block is written
 * again, compressed and durable, p->recode_delay_ns (1 s) later at the earliest, by a worker
 * that finds no other job running or queued, if memory still holds that very version and
 * the disk still has the one it replaces (commit time); otherwise it stays as it is. A
 * rewrite is idle work: it stops as soon as anyone waits for a dump, and is tried again
 * later; the dumps it overlaps are not hurried for it. The list of those (at most
 * RECODE_MAX) is lost at exit.
 *
 * A load is single-flight and streaming. The first reader of a block that is only on disk
 * creates a `struct loading`: a cache reservation of the block's size split into pieces of
 * one stored chunk each (PIECE bytes where the block below has no chunks), each TODO, BUSY or
 * DONE. Only workers fetch pieces. A read never waits in the
 * thread that asked: it leaves a waiter on the load (load_map_start()) naming the pieces it
 * covers and returns; the worker that fetches the last of them calls the waiter back with the
 * bytes, so the first bytes come back as soon as their pieces are in, and a session thread is
 * never parked on the disk. Up to LOAD_RUNNERS workers run one load at once (the tier below
 * allows parallel reads of one handle), each taking the next piece to fetch: first the
 * pieces waiters lack (as foreground IO, tiers/io.h), then the others in order from the first
 * read's piece, wrapping around (background IO, which the disk serves after the foreground,
 * unless a reader waits for this block or holds it open: then foreground too, since that
 * reader asks for the rest soon). Of a block stored raw, a runner takes as many consecutive
 * pieces as RUN_BYTES holds (of those a read waits for, that read's only), in one read
 * straight into the block's memory, and the block below is opened with TIER_OPEN_RUNS: the
 * disk tier reads nothing ahead of those reads into memory of its own (that was a copy of
 * every byte). An encoded
 * block goes a piece at a time, decoded in between, behind the disk tier's read-ahead; its
 * runners count among the ndumpers workers that take a CPU. The load is queued at open (an
 * open loads the block, DESIGN.md section 3) but its runners give the first read HINT_WAIT
 * to arrive, so that a reader of one shard has its piece fetched first. A runner with only
 * unwaited pieces left gives way to any other load queued (it queues its own again behind
 * it, after one run at least), so that the first
 * read of a block opened next does not wait for the whole of this one. And the fetcher, one
 * thread at normal priority, takes the pieces waiters lack the moment they wait, while the
 * workers may be in the middle of a piece (a cold 128 KiB shard read just after another
 * block's: 1.5-1.6 ms with it, 4.7-5.3 without, docs/BENCHMARKS.md). The thread that fetches
 * the last piece (or, after an error, the last thread out of the load) admits the block into
 * the cache (TIER_COMMIT_LOADED|PIN, under the stripe, only if the version below is still the
 * one read) and the load leaves the in-flight map; only then are the reads that wait for the
 * last piece, or came meanwhile, answered, so that a reader who has every byte finds the
 * block in memory. Its readers keep reading its buffer, which is now the cache's pinned block
 * (or, if admission was refused, their private copy).
 *
 * Locks: p->lock (maps) -> ld->lock (pieces, waiters); qlock (queues) alone. No lock across
 * IO, and no waiter is called back with a lock held.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "src/clock.h"
#include "src/log.h"
#include "tiers/cache.h"
#include "tiers/io.h"
#include "tiers/pipeline_int.h"

#define DUMP_RETRIES 3
#define PARK_RETRY_NS (5 * 1000000000LL)
#define SWEEP_MS 1000
#define PIECE (256u << 10)
#define HINT_WAIT_NS 2000000 /* how long the worker waits for the first read to say where */
#define MAX_PIECES 4096
#define WORKER_NICE 5 /* workers' nice value: mostly compression and disk writes */
#define LOAD_RUNNERS 4 /* workers fetching the pieces of one load at once */
#define RUN_BYTES (4u << 20) /* pieces nobody waits for yet are read up to this many at once */
#define RECODE_MAX 65536 /* hurried blocks waiting for that; more stay as they are */

enum { P_TODO, P_BUSY, P_DONE };

/* A read waiting for pieces [first, last] of a load. */
struct load_waiter {
	struct load_waiter *next;
	uint32_t first, last;
	uint64_t off;                /* the read's bytes: [off, off + len) */
	size_t len;
	tier_map_fn done;            /* NULL: a thread waits on ld->cond for `finished` */
	void *arg;
	int err;
	bool finished;
};

struct dump_job {
	struct dump_job *next;
	struct tier_handle *rd;      /* internal reference to the cache's committed version */
	struct blockid id;
	uint64_t version;
	int attempts;
};

/* A block that a hurried dump stored larger than it could be, to be written again. */
struct recode {
	struct recode *next;
	struct blockid id;
	uint64_t version;
	int64_t due;                 /* mono_ns() from which it may run */
};

struct loading {
	struct idnode node;          /* node.id; in p->loading while in flight */
	int refs;                    /* readers + the worker's job; protected by p->lock */
	bool listed;                 /* in p->loading; protected by p->lock */
	struct loading *qnext;       /* in the load queue; protected by p->qlock */
	unsigned passes;             /* runners still to take it from the queue; p->qlock */
	bool inq;                    /* in the load queue; p->qlock */
	bool decode;                 /* stored encoded: its runners take a CPU (ndumpers) */
	struct loading *unext;       /* in the fetcher's list; p->qlock */
	bool urgent;                 /* in the fetcher's list; p->qlock */
	pthread_mutex_t lock;        /* protects everything below that changes */
	pthread_cond_t cond;         /* a piece was fetched, or the load finished */
	struct tier_handle *lh;      /* the block below */
	struct tier_handle *r;       /* the cache reservation being filled, until admitted */
	struct tier_handle *rd;      /* once admitted: the cache's pinned version */
	char *buf;                   /* the bytes (r's, then rd's: the same buffer) */
	struct block_attr a;         /* of the version below */
	uint64_t piece;              /* bytes per piece */
	uint32_t npieces;
	uint8_t *state;              /* per piece */
	uint32_t ndone;              /* pieces DONE */
	int err;                     /* first fetch error */
	bool finished;               /* admitted, refused or failed */
	bool closing;                /* being admitted (or failed): no runner starts */
	bool queued;                 /* the workers' job was queued */
	bool hinted;                 /* a read has set start */
	uint32_t start;              /* the piece the runners start from: the first read's */
	uint32_t cursor;             /* the next piece in the runners' order */
	unsigned runners;            /* threads fetching its pieces now (workers, the fetcher) */
	atomic_uint readers;         /* readers' handles on it (not the daemon's own opens) */
	struct load_waiter *waiters, **wtail; /* reads waiting for pieces, oldest first */
	int64_t t0;
};

/* --- queues and workers ------------------------------------------------------------------ */

static void load_run(struct pipeline *p, struct loading *ld);
static struct recode *pop_recode_locked(struct pipeline *p, int64_t *wait_ns);
static void recode_run(struct pipeline *p, struct recode *r);

static __thread bool in_worker; /* this thread is one of the pipeline's workers */

/* Take the first queued load (of a block stored raw, unless `decode`: the caller may take a
 * CPU), or NULL; it stays in the queue until as many runners as it wants have taken it.
 * p->qlock held. */
static struct loading *pop_load(struct pipeline *p, bool decode)
{
	struct loading *ld = p->lhead, *prev = NULL;

	while (ld && ld->decode && !decode) {
		prev = ld;
		ld = ld->qnext;
	}
	if (!ld)
		return NULL;
	if (--ld->passes > 0)
		return ld;
	ld->inq = false;
	if (prev)
		prev->qnext = ld->qnext;
	else
		p->lhead = ld->qnext;
	if (p->ltail == ld)
		p->ltail = prev;
	p->queued--;
	atomic_fetch_sub(&p->lqueued, 1);
	return ld;
}

/* Between two pieces of a dump: run the loads queued meanwhile (a worker only). */
static void yield_to_loads(struct pipeline *p)
{
	struct loading *ld;

	if (!in_worker || !atomic_load_explicit(&p->lqueued, memory_order_relaxed))
		return;
	for (;;) {
		pthread_mutex_lock(&p->qlock);
		ld = pop_load(p, true); /* this worker's CPU, which the dump leaves meanwhile */
		if (ld) {
			p->running++;
			p->running_loads++;
		}
		pthread_mutex_unlock(&p->qlock);
		if (!ld)
			return;
		atomic_fetch_add(&p->dump_yields, 1);
		load_run(p, ld);
		pthread_mutex_lock(&p->qlock);
		p->running--;
		p->running_loads--;
		pthread_cond_broadcast(&p->qidle);
		pthread_mutex_unlock(&p->qlock);
	}
}

/* Put j at the end of the dump queue. qlock held. */
static void push_dump_locked(struct pipeline *p, struct dump_job *j)
{
	j->next = NULL;
	if (p->dtail)
		p->dtail->next = j;
	else
		p->dhead = j;
	p->dtail = j;
	p->queued++;
}

static bool dumping_locked(struct pipeline *p, const struct blockid *id);

/* Take the first queued dump of a block no one is writing below now, or NULL. A dump of a
 * block being written (by an fsync, most often) stays queued for later: by then it has
 * nothing left to do, and the worker goes on with the next one instead of waiting. qlock
 * held. */
static struct dump_job *pop_dump_locked(struct pipeline *p)
{
	struct dump_job *prev = NULL, *j;

	for (j = p->dhead; j && dumping_locked(p, &j->id); j = j->next)
		prev = j;
	if (!j)
		return NULL;
	if (prev)
		prev->next = j->next;
	else
		p->dhead = j->next;
	if (p->dtail == j)
		p->dtail = prev;
	p->queued--;
	return j;
}

/* Queue every parked dump again. qlock held. */
static void unpark_locked(struct pipeline *p)
{
	while (p->parked) {
		struct dump_job *j = p->parked;

		p->parked = j->next;
		push_dump_locked(p, j);
	}
	p->park_retry = mono_ns() + PARK_RETRY_NS;
	pthread_cond_broadcast(&p->qcond);
}

static void *worker(void *arg)
{
	struct pipeline *p = arg;

	in_worker = true;
	io_set_background(true); /* its loads run ahead of readers, who fetch what they wait for */
	/* behind the FUSE threads for the CPU: a reader waits for them, nobody for a dump */
	if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), WORKER_NICE))
		log_debug("cannot lower the priority of a worker thread: %s", strerror(errno));
	pthread_mutex_lock(&p->qlock);
	for (;;) {
		/* at most ndumpers compress or decode at once (a CPU each); the others load
		 * blocks stored raw, and dump too while anyone waits for a block to be durable
		 * (dumps are hurried then: no compression) */
		bool cpu = p->running_cpu < p->ndumpers;
		struct loading *ld = pop_load(p, cpu);
		struct dump_job *j = ld || !(cpu || atomic_load(&p->waiters)) ? NULL
						: pop_dump_locked(p);
		bool decode = ld && ld->decode;
		struct tier_handle *again = NULL;
		bool park = false, retry = false;
		int rc;

		if (!ld && !j) {
			struct recode *r;
			int64_t wait_ns;

			if (p->stop && !p->dhead)
				break;
			r = pop_recode_locked(p, &wait_ns); /* only when nothing else runs */
			if (r) {
				p->running++;
				p->running_cpu++;
				pthread_mutex_unlock(&p->qlock);
				recode_run(p, r);
				pthread_mutex_lock(&p->qlock);
				p->running--;
				p->running_cpu--;
				pthread_cond_broadcast(&p->qidle);
			} else if (wait_ns) {
				struct timespec ts;

				clock_gettime(CLOCK_REALTIME, &ts);
				ts.tv_sec += wait_ns / 1000000000LL;
				ts.tv_nsec += wait_ns % 1000000000LL;
				if (ts.tv_nsec >= 1000000000L) {
					ts.tv_sec++;
					ts.tv_nsec -= 1000000000L;
				}
				pthread_cond_timedwait(&p->qcond, &p->qlock, &ts);
			} else {
				pthread_cond_wait(&p->qcond, &p->qlock); /* dump_unclaim() too */
			}
			continue;
		}
		p->running++;
		p->running_loads += ld != NULL;
		p->running_cpu += j || decode;
		if (j) {
			j->next = p->drun;
			p->drun = j;
		}
		pthread_mutex_unlock(&p->qlock);

		if (ld) {
			load_run(p, ld); /* ld may be gone after */
			pthread_mutex_lock(&p->qlock);
			p->running--;
			p->running_loads--;
			p->running_cpu -= decode;
			if (decode && (p->lhead || p->dhead))
				pthread_cond_signal(&p->qcond); /* one kept from its CPU may now */
			pthread_cond_broadcast(&p->qidle);
			continue;
		}
		/* keep a second reference in case the dump fails and is tried again */
		if (p->cache->ops->open(p->cache, &j->id, TIER_OPEN_INTERNAL, &again))
			again = NULL;
		rc = dump(p, j->rd, &j->id, j->version, 0);
		pthread_mutex_lock(&p->qlock);
		for (struct dump_job **pp = &p->drun; *pp; pp = &(*pp)->next) {
			if (*pp == j) {
				*pp = j->next;
				break;
			}
		}
		retry = rc && again && !p->final;
		pthread_mutex_unlock(&p->qlock);
		if (rc)
			atomic_fetch_add(&p->dump_errors, 1);
		if (retry) {
			/* never given up while the block lives: a full disk gets room again */
			j->rd = again;
			j->next = NULL;
			park = ++j->attempts >= DUMP_RETRIES;
			if (j->attempts < DUMP_RETRIES) {
				log_warn("writing a block to disk failed (%s); trying again",
					 strerror(-rc));
				usleep(100000);
			} else if (j->attempts == DUMP_RETRIES) {
				log_err("writing a block to disk failed (%s); it stays in memory and "
					"is tried again every %lld s", strerror(-rc),
					PARK_RETRY_NS / 1000000000LL);
			}
		} else {
			if (rc)
				log_err("writing a block to disk failed (%s); it is not on disk",
					strerror(-rc));
			tier_close(again);
			free(j);
			j = NULL;
		}
		pthread_mutex_lock(&p->qlock);
		p->running--;
		p->running_cpu--;
		if (p->dhead || p->lhead)
			pthread_cond_signal(&p->qcond); /* one kept from its CPU may now */
		if (j && park) {
			j->next = p->parked;
			p->parked = j;
			if (p->park_retry < mono_ns())
				p->park_retry = mono_ns() + PARK_RETRY_NS;
			if (!p->stuck) /* c->lock is a leaf lock: taking it under qlock is safe */
				cache_dumps_stuck(p->cache, p->stuck = true);
		} else if (j) {
			push_dump_locked(p, j);
		} else if (rc == 0 && p->parked) {
			unpark_locked(p); /* the disk takes writes again */
		}
		if (rc == 0 && !p->parked && p->stuck)
			cache_dumps_stuck(p->cache, p->stuck = false);
		pthread_cond_broadcast(&p->qidle);
	}
	pthread_mutex_unlock(&p->qlock);
	return NULL;
}

/*
 * The fetcher: fetches the pieces readers wait for as soon as they wait, at the priority of
 * the threads that answer requests, while the workers may be in the middle of a piece of
 * another load (on this machine's fresh memory a piece can take milliseconds).
 */
static void load_fetch_wanted(struct pipeline *p, struct loading *ld);

static void *fetcher(void *arg)
{
	struct pipeline *p = arg;

	pthread_mutex_lock(&p->qlock);
	for (;;) {
		struct loading *ld = p->uhead;

		if (!ld) {
			if (p->stop)
				break;
			pthread_cond_wait(&p->ucond, &p->qlock);
			continue;
		}
		p->uhead = ld->unext;
		if (!p->uhead)
			p->utail = NULL;
		ld->urgent = false;
		p->queued--;
		p->running++;
		pthread_mutex_unlock(&p->qlock);
		load_fetch_wanted(p, ld);
		pthread_mutex_lock(&p->qlock);
		p->running--;
		p->fetches--;
		pthread_cond_broadcast(&p->qidle);
	}
	pthread_mutex_unlock(&p->qlock);
	return NULL;
}

/*
 * A reader is about to wait for pieces of ld: a reference for the fetcher, taken before its
 * waiter is added (once added, the waiter may be answered, and the reader's handle closed,
 * before the reader hands ld on). false: there is no fetcher.
 */
static bool fetcher_ref(struct pipeline *p, struct loading *ld)
{
	if (!p->fetching)
		return false;
	pthread_mutex_lock(&p->lock);
	ld->refs++;
	pthread_mutex_unlock(&p->lock);
	return true;
}

/* A reader waits for pieces of ld: hand it to the fetcher (once), with the reference
 * fetcher_ref() took. */
static void load_urgent(struct pipeline *p, struct loading *ld)
{
	bool add;

	pthread_mutex_lock(&p->qlock);
	add = !ld->urgent;
	if (add) {
		ld->urgent = true;
		ld->unext = NULL;
		if (p->utail)
			p->utail->unext = ld;
		else
			p->uhead = ld;
		p->utail = ld;
		p->queued++;
		p->fetches++;
		pthread_cond_signal(&p->ucond);
	}
	pthread_mutex_unlock(&p->qlock);
	if (!add)
		load_put(p, ld);
}

static void *sweeper(void *arg)
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
		if (p->parked && mono_ns() >= p->park_retry)
			unpark_locked(p);
	}
	pthread_mutex_unlock(&p->qlock);
	return NULL;
}

int jobs_start(struct pipeline *p)
{
	if (pthread_create(&p->sweeper, NULL, sweeper, p) == 0)
		p->sweeping = true;
	if (!p->cache || !p->below)
		return 0; /* nothing is ever dumped or loaded */
	if (pthread_create(&p->fetcher, NULL, fetcher, p) == 0)
		p->fetching = true; /* else the workers fetch what readers wait for, first */
	for (unsigned i = 0; i < p->nthreads; i++) {
		int rc = pthread_create(&p->threads[i], NULL, worker, p);

		if (rc) {
			p->nthreads = i;
			p->started = i > 0;
			return -rc;
		}
	}
	p->started = true;
	return 0;
}

void jobs_drain(struct pipeline *p)
{
	pthread_mutex_lock(&p->qlock);
	/* at exit: the parked dumps get one last try, and are not parked again */
	p->final = true;
	unpark_locked(p);
	while (p->queued || p->running)
		pthread_cond_wait(&p->qidle, &p->qlock);
	pthread_mutex_unlock(&p->qlock);
}

unsigned jobs_pending(struct pipeline *p, unsigned *loads)
{
	unsigned n;

	pthread_mutex_lock(&p->qlock);
	n = p->queued + p->running;
	if (loads)
		*loads = atomic_load(&p->lqueued) + p->running_loads + p->fetches;
	pthread_mutex_unlock(&p->qlock);
	return n;
}

void jobs_stop(struct pipeline *p)
{
	if (!p->started && !p->sweeping && !p->fetching)
		return;
	jobs_drain(p);
	pthread_mutex_lock(&p->qlock);
	p->stop = true;
	pthread_cond_broadcast(&p->qcond);
	pthread_cond_broadcast(&p->sweep_cond);
	pthread_cond_broadcast(&p->ucond);
	pthread_mutex_unlock(&p->qlock);
	if (p->fetching)
		pthread_join(p->fetcher, NULL);
	p->fetching = false;
	for (unsigned i = 0; p->started && i < p->nthreads; i++)
		pthread_join(p->threads[i], NULL);
	if (p->sweeping)
		pthread_join(p->sweeper, NULL);
	p->started = p->sweeping = false;
	while (p->rhead) { /* not written again: they stay raw */
		struct recode *r = p->rhead;

		p->rhead = r->next;
		free(r);
	}
	p->rtail = NULL;
	p->nrecode = 0;
}

/* --- dumps ------------------------------------------------------------------------------- */

/* A dump in progress: no other dump of the same id runs meanwhile. */
struct dump_claim {
	struct blockid id;
	struct dump_claim *next;
	atomic_bool waited;          /* someone waits for it (an fsync, a durable close) */
	bool waiter;                 /* its own caller waits: counted in p->waiters */
	bool recode;                 /* a rewrite (DUMP_RECODE): idle work, not a dump */
};

static struct dump_claim *claim_of_locked(struct pipeline *p, const struct blockid *id)
{
	for (struct dump_claim *o = p->dumping; o; o = o->next)
		if (blockid_eq(&o->id, id))
			return o;
	return NULL;
}

/* Whether a dump of id runs now. qlock held. */
static bool dumping_locked(struct pipeline *p, const struct blockid *id)
{
	return claim_of_locked(p, id) != NULL;
}

/* Whether a dump of another id than id is queued or running: then a dump someone waits for
 * waits for the CPU as well as the disk. */
static bool other_dumps(struct pipeline *p, const struct blockid *id)
{
	bool any = false;

	pthread_mutex_lock(&p->qlock);
	for (struct dump_claim *o = p->dumping; o && !any; o = o->next)
		any = !o->recode && !blockid_eq(&o->id, id);
	for (struct dump_job *j = p->dhead; j && !any; j = j->next)
		any = !blockid_eq(&j->id, id);
	/* taken from the queue, not yet claimed (or claimed: counted twice, harmless) */
	for (struct dump_job *j = p->drun; j && !any; j = j->next)
		any = !blockid_eq(&j->id, id);
	pthread_mutex_unlock(&p->qlock);
	return any;
}

void dump_wait_begin(struct pipeline *p)
{
	atomic_fetch_add(&p->waiters, 1);
	pthread_mutex_lock(&p->qlock);
	if (p->dhead) /* idle workers may take dumps now */
		pthread_cond_broadcast(&p->qcond);
	pthread_mutex_unlock(&p->qlock);
}

void dump_wait_end(struct pipeline *p)
{
	atomic_fetch_sub(&p->waiters, 1);
}

/* Wait until no dump of id runs, then claim it for the caller. A caller who waits for the
 * block to be safe (waited) tells the dump it waits for. */
static void dump_claim(struct pipeline *p, const struct blockid *id, struct dump_claim *c,
		       bool waited, bool recode)
{
	struct dump_claim *o;

	if (waited)
		dump_wait_begin(p);
	pthread_mutex_lock(&p->qlock);
	while ((o = claim_of_locked(p, id))) {
		if (waited)
			atomic_store(&o->waited, true);
		pthread_cond_wait(&p->qidle, &p->qlock);
	}
	c->id = *id;
	atomic_init(&c->waited, waited);
	c->waiter = waited;
	c->recode = recode;
	c->next = p->dumping;
	p->dumping = c;
	pthread_mutex_unlock(&p->qlock);
}

static void dump_unclaim(struct pipeline *p, struct dump_claim *c)
{
	struct dump_claim **pp;

	pthread_mutex_lock(&p->qlock);
	for (pp = &p->dumping; *pp != c; pp = &(*pp)->next)
		;
	*pp = c->next;
	if (c->waiter)
		dump_wait_end(p);
	pthread_cond_broadcast(&p->qidle);
	if (p->dhead) /* a queued dump of this id may be waiting for it (pop_dump_locked()) */
		pthread_cond_signal(&p->qcond);
	pthread_mutex_unlock(&p->qlock);
}

static void recode_add(struct pipeline *p, const struct blockid *id, uint64_t version)
{
	struct recode *r = malloc(sizeof(*r));

	pthread_mutex_lock(&p->qlock);
	if (!r || p->nrecode >= RECODE_MAX || p->stop) {
		free(r);
		atomic_fetch_add(&p->recodes_dropped, 1);
	} else {
		r->next = NULL;
		r->id = *id;
		r->version = version;
		r->due = mono_ns() + p->recode_delay_ns;
		if (p->rtail)
			p->rtail->next = r;
		else
			p->rhead = r;
		p->rtail = r;
		p->nrecode++;
		pthread_cond_signal(&p->qcond);
	}
	pthread_mutex_unlock(&p->qlock);
}

/*
 * Write version `version` of id (rd: the cache's reference to it, closed here) below and
 * publish it there, unless it is no longer worth it: a dump is single-flight per id, and one
 * that waited for another (a worker's queued dump and an fsync's of the same block) finds the
 * version clean, or replaced, and writes nothing. With DUMP_RECODE the version is clean
 * already (a hurried dump stored it raw) and is written again, encoded; -EAGAIN if it gave
 * way to someone who came to wait for a dump. 0 (also when it had nothing to do), or -errno.
 */
int dump(struct pipeline *p, struct tier_handle *rd, const struct blockid *id, uint64_t version,
	 unsigned how)
{
	struct tier_handle *lres;
	struct block_attr a, cur;
	struct block_meta m;
	pthread_mutex_t *st = stripe_of(p, id);
	const char *data = tier_data(rd);
	struct dump_claim claim;
	bool recode = how & DUMP_RECODE, hurried = false, worth = false;
	int64_t t0 = mono_ns();
	int rc;

	dump_claim(p, id, &claim, how & DUMP_WAITED, recode);
	if (p->cache->ops->lookup(p->cache, id, &cur) || cur.version != version ||
	    cur.dirty == recode) {
		dump_unclaim(p, &claim);
		tier_close(rd);
		return 0; /* written by the dump this one waited for, or replaced, or removed */
	}
	p->cache->ops->stat(rd, &a);
	m.size = a.size;
	m.mtime = a.mtime;
	m.deadline = a.deadline;
	m.layout = NULL;
	rc = p->below->ops->reserve(p->below, id, TIER_RESERVE_SEQ, a.size, &lres);
	for (uint64_t off = 0; rc == 0 && off < a.size;) {
		size_t len = a.size - off > COPY_CHUNK ? COPY_CHUNK : (size_t)(a.size - off);
		ssize_t n;

		/* idle work gives way to anyone waiting (for a newer version of this block, or
		 * any other) */
		if (recode && (atomic_load(&claim.waited) || atomic_load(&p->waiters))) {
			p->below->ops->abort(lres);
			dump_unclaim(p, &claim);
			tier_close(rd);
			return -EAGAIN;
		}
		/* someone waits for this dump while others keep the CPU busy: the bytes go down
		 * as they are, and the block is encoded again once nobody waits */
		if (!recode && !hurried && p->hurry &&
		    (atomic_load(&claim.waited) || atomic_load(&p->waiters)) &&
		    other_dumps(p, id)) {
			hurried = true;
			worth = tier_hurry(lres);
		}
		n = p->below->ops->write(lres, data + off, len, off);
		if (n < 0) {
			rc = (int)n;
			p->below->ops->abort(lres);
		}
		off += len;
		if (rc == 0 && off < a.size)
			yield_to_loads(p);
	}
	if (rc == 0 && a.size == 0) {
		rc = p->below->ops->truncate(lres, 0);
		if (rc)
			p->below->ops->abort(lres);
	}
	if (rc == 0) {
		pthread_mutex_lock(st);
		struct block_attr was;

		/* a rewrite replaces only the very version it was made from */
		if (p->cache->ops->lookup(p->cache, id, &cur) == 0 && cur.version == version &&
		    (!recode || (p->below->ops->lookup(p->below, id, &was) == 0 &&
				 was.mtime == m.mtime))) {
			m.deadline = cur.deadline; /* a TTL set while we wrote (under this stripe) */
			pthread_rwlock_rdlock(&p->usage_lock);
			rc = p->below->ops->commit(lres, &m, (how & DUMP_DURABLE) ?
						   TIER_COMMIT_DURABLE : 0, NULL);
			if (rc == 0 && !recode)
				p->cache->ops->mark_clean(p->cache, id, version);
			pthread_rwlock_unlock(&p->usage_lock);
		} else {
			p->below->ops->abort(lres);
			rc = -ESTALE;
		}
		pthread_mutex_unlock(st);
	}
	dump_unclaim(p, &claim);
	tier_close(rd);
	if (rc == 0 && recode) {
		atomic_fetch_add(&p->recodes, 1);
	} else if (rc == 0) {
		atomic_fetch_add(&p->dumps, 1);
		atomic_fetch_add(&p->dumps_hurried, worth);
		histogram_observe(&p->dump_hist, mono_ns() - t0);
		if (worth)
			recode_add(p, id, version);
	}
	return rc == -ESTALE ? 0 : rc;
}

/* Write a hurried block again, encoded, if memory still has that version (clean): durable,
 * as the version it replaces was made by the fsync that hurried it. A block that left memory
 * meanwhile stays as it is. */
static void recode_run(struct pipeline *p, struct recode *r)
{
	struct tier_handle *rd;
	struct block_attr a;

	if (p->cache->ops->lookup(p->cache, &r->id, &a) == 0 && a.version == r->version &&
	    !a.dirty && p->cache->ops->open(p->cache, &r->id, TIER_OPEN_INTERNAL, &rd) == 0) {
		int rc = dump(p, rd, &r->id, r->version, DUMP_RECODE | DUMP_DURABLE);

		if (rc == -EAGAIN) /* gave way to a waiter: later */
			recode_add(p, &r->id, r->version);
		/* a full disk is said by the dumps that need the room */
		else if (rc && rc != -ENOSPC)
			log_warn("writing a block again, compressed, failed (%s); it stays as "
				 "it is", strerror(-rc));
	}
	free(r);
}

/* The first re-encode that may run now, or NULL: only while no other job runs or is queued.
 * *wait_ns: how long until one may (0: none). qlock held. */
static struct recode *pop_recode_locked(struct pipeline *p, int64_t *wait_ns)
{
	struct recode *r = p->rhead;
	int64_t now;

	*wait_ns = 0;
	if (!r || p->stop)
		return NULL;
	now = mono_ns();
	if (p->running || p->queued || r->due > now) {
		*wait_ns = r->due > now ? r->due - now : p->recode_delay_ns / 4;
		return NULL;
	}
	p->rhead = r->next;
	if (!p->rhead)
		p->rtail = NULL;
	p->nrecode--;
	return r;
}

void enqueue_dump(struct pipeline *p, struct tier_handle *rd, const struct blockid *id,
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
	push_dump_locked(p, j);
	pthread_cond_signal(&p->qcond);
	pthread_mutex_unlock(&p->qlock);
}

/* --- loads ------------------------------------------------------------------------------- */

#define LD(n) ((struct loading *)((char *)(n) - offsetof(struct loading, node)))

static void load_free(struct pipeline *p, struct loading *ld)
{
	tier_close(ld->lh);
	if (ld->rd)
		tier_close(ld->rd);
	if (ld->r)
		p->cache->ops->abort(ld->r);
	pthread_mutex_destroy(&ld->lock);
	pthread_cond_destroy(&ld->cond);
	free(ld->state);
	free(ld);
}

void load_put(struct pipeline *p, struct loading *ld)
{
	bool last;

	pthread_mutex_lock(&p->lock);
	last = --ld->refs == 0;
	if (last && ld->listed) {
		/* never run (an empty block, or its first read failed): nobody reads it now */
		idmap_remove(&p->loading, &ld->node);
		ld->listed = false;
	}
	pthread_mutex_unlock(&p->lock);
	if (last)
		load_free(p, ld);
}

#define CLAIM_NONE (-1)  /* no piece left to fetch (or the load failed) */
#define CLAIM_YIELD (-2) /* only pieces nobody waits for, and another load is queued */

/* Take the next pieces to fetch and mark them BUSY: the first one a waiting read lacks
 * (*wanted) and, for a block stored raw, the ones after it that the same read lacks, up to
 * RUN_BYTES (one request: 1 MiB reads of 8 readers at once went to the disk as 256 KiB ones
 * and loaded 3.0-3.5 GB/s, 3.9-4.1 in one request each), else (if bg) the next in order
 * and, for a block stored raw, the pieces after it that are still to fetch, up to RUN_BYTES
 * (*count of them, read with one request; an encoded block goes a chunk at a time, decoded
 * in between, so that its runner soon gives way to the next block's first read, and the disk
 * tier reads ahead of it). *wanted also when a reader waits for another piece of ld or holds
 * it open: the IO is then foreground. The first piece's index, CLAIM_NONE or CLAIM_YIELD.
 * ld->lock held. */
static int claim_piece(struct loading *ld, bool bg, bool *wanted, uint32_t *count)
{
	*count = 1;
	if (ld->err)
		return CLAIM_NONE;
	for (struct load_waiter *w = ld->waiters; w; w = w->next) {
		for (uint32_t i = w->first; i <= w->last; i++) {
			if (ld->state[i] == P_TODO) {
				*wanted = true;
				ld->state[i] = P_BUSY;
				/* of a raw block, the rest of the read's pieces in the same request */
				while (!ld->decode && i + *count <= w->last &&
				       ld->state[i + *count] == P_TODO &&
				       (*count + 1) * ld->piece <= RUN_BYTES)
					ld->state[i + (*count)++] = P_BUSY;
				return (int)i;
			}
		}
	}
	for (uint32_t k = 0; k < ld->npieces; k++) {
		uint32_t i = (ld->cursor + k) % ld->npieces;

		if (ld->state[i] == P_TODO) {
			if (!bg)
				return CLAIM_YIELD;
			/* a reader that holds the block open reads the rest of it soon */
			*wanted = ld->waiters != NULL || atomic_load(&ld->readers) > 0;
			ld->state[i] = P_BUSY;
			while (!ld->decode && i + *count < ld->npieces &&
			       ld->state[i + *count] == P_TODO &&
			       (*count + 1) * ld->piece <= RUN_BYTES)
				ld->state[i + (*count)++] = P_BUSY;
			ld->cursor = (i + *count) % ld->npieces;
			return (int)i;
		}
	}
	return CLAIM_NONE;
}

static bool range_done(const struct loading *ld, uint32_t first, uint32_t last)
{
	for (uint32_t i = first; i <= last; i++)
		if (ld->state[i] != P_DONE)
			return false;
	return true;
}

/* Take out the waiters whose pieces are all in (all of them once the load failed): those
 * with a callback go to *ready, for the caller to call without the lock; the others are
 * marked finished (their threads wake on ld->cond). ld->lock held. */
static void take_ready(struct pipeline *p, struct loading *ld, struct load_waiter **ready)
{
	struct load_waiter **pp = &ld->waiters, *w;

	ld->wtail = &ld->waiters;
	while ((w = *pp)) {
		if (!ld->err && !range_done(ld, w->first, w->last)) {
			ld->wtail = &w->next;
			pp = &w->next;
			continue;
		}
		*pp = w->next;
		w->err = ld->err;
		atomic_fetch_sub(&p->reads_waiting, 1);
		if (w->done) {
			w->next = *ready;
			*ready = w;
		} else {
			w->finished = true;
		}
	}
}

/* Answer the waiters take_ready() gave back. No lock held. */
static void call_ready(struct pipeline *p, struct loading *ld, struct load_waiter *w)
{
	while (w) {
		struct load_waiter *next = w->next;

		if (!w->err)
			counter_add(&p->mem_bytes_out, w->len);
		w->done(w->arg, w->err ? NULL : ld->buf + w->off, w->err);
		free(w);
		w = next;
	}
}

static void load_finish(struct pipeline *p, struct loading *ld);

/* Fetch pieces [i, i + count) (BUSY, claimed by this thread) and answer the waiters they
 * complete; the thread that fetches the last piece admits the block first. */
static void fetch_pieces(struct pipeline *p, struct loading *ld, uint32_t i, uint32_t count,
			 bool wanted)
{
	uint64_t off = (uint64_t)i * ld->piece, run = (uint64_t)count * ld->piece;
	size_t len = ld->a.size - off < run ? (size_t)(ld->a.size - off) : (size_t)run;
	struct load_waiter *ready = NULL;
	ssize_t n;

	/* a piece a reader waits for is foreground IO, the rest runs behind the readers' */
	io_set_background(in_worker && !wanted);
	n = tier_read(ld->lh, ld->buf + off, len, off);
	io_set_background(in_worker);

	pthread_mutex_lock(&ld->lock);
	if (n == (ssize_t)len) {
		for (uint32_t k = i; k < i + count; k++)
			ld->state[k] = P_DONE;
		ld->ndone += count;
		if (ld->ndone == ld->npieces && !ld->closing) {
			/* the last piece: admit the block before any read of it is answered, so
			 * that a reader who has all its bytes finds the block in memory */
			ld->closing = true;
			pthread_mutex_unlock(&ld->lock);
			load_finish(p, ld); /* answers the waiters */
			return;
		}
	} else {
		for (uint32_t k = i; k < i + count; k++)
			ld->state[k] = P_TODO;
		if (!ld->err) {
			ld->err = n < 0 ? (int)n : -EIO;
			atomic_fetch_add(&p->load_errors, 1);
		}
	}
	take_ready(p, ld, &ready);
	pthread_cond_broadcast(&ld->cond);
	pthread_mutex_unlock(&ld->lock);
	call_ready(p, ld, ready);
}

/* Admit the fetched block into memory (or fail the load) and answer the reads still waiting:
 * by the thread that fetched the last piece, or after an error by the last one out. */
static void load_finish(struct pipeline *p, struct loading *ld)
{
	struct load_waiter *ready = NULL;
	struct block_attr now;
	struct tier_handle *rd = NULL;
	int rc = 0;

	/* every piece must be in before the block is offered to memory */
	pthread_mutex_lock(&ld->lock);
	for (uint32_t i = 0; i < ld->npieces && rc == 0; i++)
		if (ld->state[i] != P_DONE)
			rc = ld->err ? ld->err : -EIO;
	pthread_mutex_unlock(&ld->lock);
	if (rc == 0) {
		struct block_meta m = { .size = ld->a.size, .mtime = ld->a.mtime,
					.deadline = ld->a.deadline, .layout = NULL };

		pthread_mutex_lock(stripe_of(p, &ld->node.id));
		if (p->below->ops->lookup(p->below, &ld->node.id, &now) == 0 &&
		    now.version == ld->a.version) {
			m.deadline = now.deadline; /* a TTL set or cleared while we read it */
			rc = p->cache->ops->commit(ld->r, &m, TIER_COMMIT_LOADED | TIER_COMMIT_PIN,
						   &rd);
		} else {
			rc = -ESTALE; /* replaced or removed while we read it */
		}
		pthread_mutex_unlock(stripe_of(p, &ld->node.id));
	}
	if (rc == 0) {
		atomic_fetch_add(&p->loads, 1);
		histogram_observe(&p->load_hist, mono_ns() - ld->t0);
	} else if (rc != -EEXIST && rc != -ESTALE && !ld->err) {
		atomic_fetch_add(&p->load_errors, 1); /* admission failed (fetch errors count above) */
	}
	pthread_mutex_lock(&p->lock);
	if (ld->listed) {
		idmap_remove(&p->loading, &ld->node);
		ld->listed = false;
	}
	pthread_mutex_unlock(&p->lock);
	pthread_mutex_lock(&ld->lock);
	if (rc == 0) {
		ld->r = NULL; /* it is the cache's block now; rd pins it for our readers */
		ld->rd = rd;
	}
	/* refused (a newer version arrived) or stale: the readers keep their private copy */
	ld->finished = true;
	take_ready(p, ld, &ready); /* reads that came while it was being admitted */
	pthread_cond_broadcast(&ld->cond);
	pthread_mutex_unlock(&ld->lock);
	call_ready(p, ld, ready);
}

/*
 * A thread stops fetching ld (runners already counted down, ld->lock held, released here,
 * with its reference): the last one out, once no piece is left to fetch, admits the block.
 * While pieces are left, a pass of the load is queued or running (load_requeue()).
 */
static void runner_exit(struct pipeline *p, struct loading *ld)
{
	bool last = ld->runners == 0 && !ld->closing;

	for (uint32_t i = 0; last && !ld->err && i < ld->npieces; i++)
		last = ld->state[i] != P_TODO;
	if (last)
		ld->closing = true;
	pthread_mutex_unlock(&ld->lock);
	if (last)
		load_finish(p, ld);
	load_put(p, ld);
}

/* Is a load other than ld waiting in the queue? (Only workers give way to it.) */
static bool other_load_queued(struct pipeline *p, const struct loading *ld)
{
	bool other = false;

	if (!in_worker || !atomic_load_explicit(&p->lqueued, memory_order_relaxed))
		return false;
	pthread_mutex_lock(&p->qlock);
	for (const struct loading *q = p->lhead; q && !other; q = q->qnext)
		other = q != ld;
	pthread_mutex_unlock(&p->qlock);
	return other;
}

/* A runner left ld for a queued load: queue ld again behind it (unless a pass of it is still
 * queued), handing on the runner's reference. */
static void load_requeue(struct pipeline *p, struct loading *ld)
{
	bool queued;

	pthread_mutex_lock(&p->qlock);
	queued = ld->inq;
	if (!queued) {
		ld->qnext = NULL;
		ld->passes = 1;
		ld->inq = true;
		if (p->ltail)
			p->ltail->qnext = ld;
		else
			p->lhead = ld;
		p->ltail = ld;
		p->queued++;
		atomic_fetch_add(&p->lqueued, 1);
		pthread_cond_signal(&p->qcond);
	}
	pthread_mutex_unlock(&p->qlock);
	if (queued)
		load_put(p, ld);
}

/*
 * A runner: fetch pieces until none is left to take; the last one out admits the block. When
 * only pieces nobody waits for are left and another load is queued (a reader opened another
 * block: its first read should not wait for the whole of this one), the runner queues this
 * load again behind it and leaves.
 */
static void load_run(struct pipeline *p, struct loading *ld)
{
	bool wanted;
	uint32_t count;
	unsigned fetched = 0;
	int i;

	/* give the first read a moment to say where the reader is */
	pthread_mutex_lock(&ld->lock);
	while (!ld->hinted && ld->npieces && mono_ns() < ld->t0 + HINT_WAIT_NS) {
		int64_t until = ld->t0 + HINT_WAIT_NS; /* ld->cond runs on the monotonic clock */
		struct timespec ts = { .tv_sec = until / 1000000000,
				       .tv_nsec = until % 1000000000 };

		pthread_cond_timedwait(&ld->cond, &ld->lock, &ts);
	}
	if (!ld->hinted) {
		ld->hinted = true; /* from now on the start stays put */
		ld->cursor = ld->start;
	}
	if (ld->closing) {
		/* the other runners fetched it all and it is being admitted (or was) */
		pthread_mutex_unlock(&ld->lock);
		load_put(p, ld);
		return;
	}
	ld->runners++;
	for (;;) {
		bool other;

		/* at least one piece a pass: two loads never just hand the turn back and forth */
		pthread_mutex_unlock(&ld->lock);
		other = fetched && other_load_queued(p, ld);
		pthread_mutex_lock(&ld->lock);
		i = claim_piece(ld, !other, &wanted, &count);
		if (i < 0)
			break;
		pthread_mutex_unlock(&ld->lock);
		fetch_pieces(p, ld, (uint32_t)i, count, wanted);
		fetched++;
		pthread_mutex_lock(&ld->lock);
	}
	ld->runners--;
	if (i == CLAIM_YIELD) {
		/* pieces are left: a pass must stay queued (the fetcher never takes them) */
		pthread_mutex_unlock(&ld->lock);
		load_requeue(p, ld);
		return;
	}
	runner_exit(p, ld);
}

/* The fetcher's part: the pieces of ld that readers wait for, and nothing else. */
static void load_fetch_wanted(struct pipeline *p, struct loading *ld)
{
	bool wanted;
	uint32_t count;
	int i;

	pthread_mutex_lock(&ld->lock);
	if (ld->closing) {
		pthread_mutex_unlock(&ld->lock);
		load_put(p, ld);
		return;
	}
	ld->runners++;
	while ((i = claim_piece(ld, false, &wanted, &count)) >= 0) {
		pthread_mutex_unlock(&ld->lock);
		fetch_pieces(p, ld, (uint32_t)i, count, true);
		pthread_mutex_lock(&ld->lock);
	}
	ld->runners--;
	runner_exit(p, ld);
}

/* Queue ld for `passes` runners (each holds a reference taken by the caller). */
static void enqueue_load(struct pipeline *p, struct loading *ld, unsigned passes)
{
	pthread_mutex_lock(&p->qlock);
	ld->qnext = NULL;
	ld->passes = passes;
	ld->inq = true;
	if (p->ltail)
		p->ltail->qnext = ld;
	else
		p->lhead = ld;
	p->ltail = ld;
	p->queued++;
	atomic_fetch_add(&p->lqueued, 1);
	if (passes > 1)
		pthread_cond_broadcast(&p->qcond);
	else
		pthread_cond_signal(&p->qcond);
	pthread_mutex_unlock(&p->qlock);
}

/*
 * A new load of the block below behind lh, or NULL if memory has no room for it: room made
 * at once, or (wait) also room that dirty blocks leave once dumped, within dirty_wait.
 */
static struct loading *load_new(struct pipeline *p, const struct blockid *id,
				struct tier_handle *lh, bool wait)
{
	struct loading *ld = calloc(1, sizeof(*ld));
	struct block_layout lay;
	pthread_condattr_t ca;
	uint64_t pieces;

	if (!ld)
		return NULL;
	ld->node.id = *id;
	ld->lh = lh;
	ld->t0 = mono_ns();
	p->below->ops->stat(lh, &ld->a);
	ld->piece = PIECE;
	/* one piece per stored chunk, so that each piece decodes exactly one. One piece for all:
	 * a block checked as a whole (reading a part of it reads all of it first, then that part
	 * again from the disk: pieces would read it twice, in a queue one deep), and a block
	 * the daemon loads for itself (a prefetch: nobody waits for a first piece, and one read
	 * of all its stored bytes lands straight in memory, as deep as the disk takes it; its
	 * chunks are then decoded one after the other, by the worker that read them) */
	if (p->below->ops->layout && p->below->ops->layout(lh, &lay) == 0) {
		ld->decode = lay.codec != CODEC_RAW;
		if (ld->a.size && (lay.whole || wait))
			ld->piece = ld->a.size;
		else if (lay.nchunks && lay.chunk_size >= (64u << 10))
			ld->piece = lay.chunk_size;
	}
	pieces = (ld->a.size + ld->piece - 1) / ld->piece;
	if (pieces > MAX_PIECES) {
		ld->piece = (ld->a.size + MAX_PIECES - 1) / MAX_PIECES;
		ld->piece = (ld->piece + 4095) & ~(uint64_t)4095;
		pieces = (ld->a.size + ld->piece - 1) / ld->piece;
	}
	ld->npieces = (uint32_t)pieces;
	ld->state = calloc(pieces ? pieces : 1, 1);
	if (!ld->state ||
	    p->cache->ops->reserve(p->cache, id,
				   (wait ? 0 : TIER_RESERVE_NOWAIT) | TIER_RESERVE_OVERWRITE,
				   ld->a.size, &ld->r) ||
	    p->cache->ops->truncate(ld->r, ld->a.size)) {
		if (ld->r)
			p->cache->ops->abort(ld->r);
		free(ld->state);
		free(ld);
		return NULL;
	}
	ld->buf = (char *)tier_data(ld->r);
	ld->wtail = &ld->waiters;
	pthread_mutex_init(&ld->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* a wall-clock step never stalls it */
	pthread_cond_init(&ld->cond, &ca);
	pthread_condattr_destroy(&ca);
	return ld;
}

/* Queue the runners' job, once. */
static void load_kick(struct pipeline *p, struct loading *ld)
{
	unsigned passes = p->nthreads < LOAD_RUNNERS ? p->nthreads : LOAD_RUNNERS;
	bool kick;

	if (ld->decode && passes > p->ndumpers)
		passes = p->ndumpers; /* no more decode at once */
	if (passes > ld->npieces)
		passes = ld->npieces ? ld->npieces : 1;
	pthread_mutex_lock(&ld->lock);
	kick = !ld->queued;
	ld->queued = true;
	pthread_mutex_unlock(&ld->lock);
	if (!kick)
		return;
	pthread_mutex_lock(&p->lock);
	ld->refs += (int)passes; /* the runners' */
	pthread_mutex_unlock(&p->lock);
	enqueue_load(p, ld, passes);
}

/* The first read tells the runners where to start: its piece. ld->lock held. */
static void load_hint(struct loading *ld, uint32_t first)
{
	if (!ld->hinted) {
		ld->hinted = true;
		ld->start = ld->cursor = first;
		pthread_cond_broadcast(&ld->cond);
	}
}

/*
 * The load of id in flight that a reader may join, or NULL. A load whose version is no longer
 * the one below (the block was removed or replaced since it started) leaves the map: it goes
 * on for the readers it has, but nobody joins it any more. p->lock held.
 */
static struct loading *find_load(struct pipeline *p, const struct blockid *id)
{
	struct idnode *n = idmap_find(&p->loading, id);
	struct block_attr a;

	if (!n)
		return NULL;
	if (p->below->ops->lookup(p->below, id, &a) == 0 && a.version == LD(n)->a.version)
		return LD(n);
	idmap_remove(&p->loading, n);
	LD(n)->listed = false;
	return NULL;
}

/* The block below is read straight by its reader, in the reader's requests, which the disk
 * tier reads ahead of: a handle opened again without TIER_OPEN_RUNS in place of lh. */
static int open_direct(struct pipeline *p, const struct blockid *id, struct tier_handle *lh,
		       struct tier_handle **direct)
{
	tier_close(lh);
	return p->below->ops->open(p->below, id, 0, direct);
}

static int load_join_or_new(struct pipeline *p, const struct blockid *id, bool wait,
			    struct loading **out, struct tier_handle **direct);

int load_open(struct pipeline *p, const struct blockid *id, bool wait, struct loading **out,
	      struct tier_handle **direct)
{
	int rc = load_join_or_new(p, id, wait, out, direct);

	if (rc == 0 && *out && !wait)
		atomic_fetch_add(&(*out)->readers, 1);
	return rc;
}

void load_put_reader(struct pipeline *p, struct loading *ld)
{
	atomic_fetch_sub(&ld->readers, 1);
	load_put(p, ld);
}

static int load_join_or_new(struct pipeline *p, const struct blockid *id, bool wait,
			    struct loading **out, struct tier_handle **direct)
{
	struct tier_handle *lh;
	struct loading *ld, *joined;
	int rc;

	*out = NULL;
	*direct = NULL;
	pthread_mutex_lock(&p->lock);
	joined = find_load(p, id);
	if (joined) {
		joined->refs++;
		*out = joined;
	}
	pthread_mutex_unlock(&p->lock);
	if (joined)
		return 0;

	/* the runners read it in runs of pieces, several at once (RUN_BYTES) */
	rc = p->below->ops->open(p->below, id, p->cache ? TIER_OPEN_RUNS : 0, &lh);
	if (rc)
		return rc;
	ld = p->cache ? load_new(p, id, lh, wait) : NULL;
	if (!ld) {
		/* no room in memory that could be made without waiting */
		atomic_fetch_add(&p->streamed, 1);
		return open_direct(p, id, lh, direct);
	}
	if (!p->started || wait)
		ld->hinted = true; /* no reader to say where to start: from the first piece */
	if (!p->started)
		ld->queued = true; /* loaded whole below; set before anyone joins */
	pthread_mutex_lock(&p->lock);
	joined = find_load(p, id);
	if (joined) {
		/* another reader started the same load meanwhile: join it */
		joined->refs++;
		*out = joined;
	} else if (idmap_insert(&p->loading, &ld->node) == 0) {
		ld->listed = true;
		ld->refs = 1; /* the reader; the worker's job takes its own when queued */
		*out = ld;
	}
	pthread_mutex_unlock(&p->lock);
	if (*out != ld) {
		ld->lh = NULL;
		load_free(p, ld);
		if (*out) {
			tier_close(lh);
			return 0;
		}
		return open_direct(p, id, lh, direct); /* no memory to track the load */
	}
	if (!p->started) {
		/* no workers: load it whole now */
		pthread_mutex_lock(&p->lock);
		ld->refs++;
		pthread_mutex_unlock(&p->lock);
		load_run(p, ld);
		return 0;
	}
	load_kick(p, ld); /* an open loads the block */
	return 0;
}

/*
 * A prefetch keeps up to PREFETCH_LOADS loads (PREFETCH_BYTES of blocks) in flight, so that
 * the workers, the disk tier's read-ahead and the IO engine always have the next block's
 * pieces to fetch while the one before is checked and admitted. Its own reads (the header of
 * each block it opens) are background IO: as foreground reads, each stopped the workers'
 * submissions until it was answered, behind the 16 MiB they had in the disk's queue, so the
 * queue drained to nothing once per block (docs/BENCHMARKS.md "Reads the disk takes as they
 * are cut").
 */
#define PREFETCH_LOADS 8
#define PREFETCH_BYTES (256ull << 20)

size_t jobs_prefetch(struct pipeline *p, const struct blockid *ids, size_t n)
{
	struct loading *win[PREFETCH_LOADS];
	unsigned head = 0, cnt = 0;
	uint64_t bytes = 0;
	size_t loaded = 0;

	io_set_background(true);
	for (size_t i = 0;; i++) {
		while (cnt && (i == n || cnt == PREFETCH_LOADS || bytes >= PREFETCH_BYTES)) {
			struct loading *ld = win[head];

			loaded += load_wait(ld) == 0;
			bytes -= ld->a.size;
			load_put(p, ld);
			head = (head + 1) % PREFETCH_LOADS;
			cnt--;
		}
		if (i == n)
			break;
		struct loading *ld;
		struct tier_handle *direct;

		/* in memory already (committed, or loaded), or not anywhere */
		if (p->cache->ops->lookup(p->cache, &ids[i], NULL) == 0 ||
		    load_open(p, &ids[i], true, &ld, &direct))
			continue;
		if (direct) {
			tier_close(direct); /* no room that could be made: it stays on disk */
			continue;
		}
		win[(head + cnt) % PREFETCH_LOADS] = ld;
		cnt++;
		bytes += ld->a.size;
	}
	io_set_background(in_worker);
	return loaded;
}

int load_wait(struct loading *ld)
{
	int rc;

	pthread_mutex_lock(&ld->lock);
	while (!ld->finished && !ld->err)
		pthread_cond_wait(&ld->cond, &ld->lock);
	rc = ld->err;
	pthread_mutex_unlock(&ld->lock);
	return rc;
}

int load_start(struct pipeline *p, struct loading *ld)
{
	load_kick(p, ld);
	return load_wait(ld);
}

/*
 * Leave w waiting for its pieces, unless they are in or the load failed: 1 (in), 0 (w waits),
 * or the load's error. The first read tells the runners where to start. ld->lock held.
 */
static int add_waiter(struct pipeline *p, struct loading *ld, struct load_waiter *w)
{
	load_hint(ld, w->first);
	if (ld->err)
		return ld->err;
	/* bytes in are answered at once, except while the block is being admitted: then by
	 * load_finish(), once it is in memory */
	if (range_done(ld, w->first, w->last) && (ld->finished || !ld->closing))
		return 1;
	/* the load was queued at open: its runners (or one still fetching) will answer w */
	w->next = NULL;
	*ld->wtail = w;
	ld->wtail = &w->next;
	atomic_fetch_add(&p->reads_waiting, 1);
	return 0;
}

static void waiter_init(const struct loading *ld, struct load_waiter *w, uint64_t off, size_t len)
{
	w->first = (uint32_t)(off / ld->piece);
	w->last = (uint32_t)((off + len - 1) / ld->piece);
	w->off = off;
	w->len = len;
}

/* Wait in this thread until [off, off + len) is in. 0 or the load's error. */
static int wait_range(struct pipeline *p, struct loading *ld, uint64_t off, size_t len)
{
	struct load_waiter w = { 0 };
	bool urgent = fetcher_ref(p, ld);
	int rc;

	waiter_init(ld, &w, off, len);
	pthread_mutex_lock(&ld->lock);
	rc = add_waiter(p, ld, &w);
	pthread_mutex_unlock(&ld->lock);
	if (urgent && rc == 0)
		load_urgent(p, ld);
	else if (urgent)
		load_put(p, ld);
	pthread_mutex_lock(&ld->lock);
	while (rc == 0 && !w.finished)
		pthread_cond_wait(&ld->cond, &ld->lock);
	if (rc == 0)
		rc = w.err;
	pthread_mutex_unlock(&ld->lock);
	return rc < 0 ? rc : 0;
}

ssize_t load_read(struct pipeline *p, struct loading *ld, void *buf, size_t len, uint64_t off)
{
	int rc;

	if (off >= ld->a.size || len == 0)
		return 0;
	if (len > ld->a.size - off)
		len = (size_t)(ld->a.size - off);
	rc = wait_range(p, ld, off, len);
	if (rc)
		return rc;
	memcpy(buf, ld->buf + off, len);
	return (ssize_t)len;
}

const void *load_map(struct pipeline *p, struct loading *ld, uint64_t off, size_t len)
{
	if (off + len > ld->a.size || len == 0)
		return len == 0 ? ld->buf : NULL;
	return wait_range(p, ld, off, len) ? NULL : ld->buf + off;
}

int load_map_start(struct pipeline *p, struct loading *ld, uint64_t off, size_t len,
		   tier_map_fn done, void *arg, const void **out)
{
	struct load_waiter *w;
	bool urgent;
	int rc;

	if (len == 0 || off > ld->a.size || len > ld->a.size - off)
		return -EINVAL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	waiter_init(ld, w, off, len);
	w->done = done;
	w->arg = arg;
	urgent = fetcher_ref(p, ld);
	pthread_mutex_lock(&ld->lock);
	rc = add_waiter(p, ld, w);
	pthread_mutex_unlock(&ld->lock);
	if (rc == 0) {
		/* w belongs to the load now and may have been answered already, and the caller's
		 * handle closed: only the fetcher's reference keeps ld */
		if (urgent)
			load_urgent(p, ld);
		return 0;
	}
	if (urgent)
		load_put(p, ld);
	free(w);
	if (rc == 1) {
		*out = ld->buf + off;
		counter_add(&p->mem_bytes_out, len);
	}
	return rc;
}

const void *load_data(struct loading *ld)
{
	const void *d;

	pthread_mutex_lock(&ld->lock);
	d = ld->finished && !ld->err ? ld->buf : NULL;
	pthread_mutex_unlock(&ld->lock);
	return d;
}

int load_backing(struct loading *ld)
{
	struct tier_handle *rd;

	pthread_mutex_lock(&ld->lock);
	rd = ld->finished && !ld->err ? ld->rd : NULL;
	pthread_mutex_unlock(&ld->lock);
	/* rd lives as long as the load, which the caller holds */
	return rd && rd->tier->ops->backing ? rd->tier->ops->backing(rd) : -ENOTSUP;
}

void load_stat(struct loading *ld, struct block_attr *attr)
{
	*attr = ld->a;
	attr->where |= TIER_MEM;
}
