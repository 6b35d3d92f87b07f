/*
 * Internals shared by tiers/pipeline.c (the tier ops and write sessions) and
 * tiers/pipeline_jobs.c (background work: dumps, loads, the TTL sweep).
 */
#ifndef UCM_PIPELINE_INT_H
#define UCM_PIPELINE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "src/extents.h"
#include "src/idmap.h"
#include "src/metrics.h"
#include "tiers/pipeline.h"

#define NSTRIPES 64
#define MAX_WORKERS 64
#define COPY_CHUNK (1u << 20)

#define RECODE_DELAY_NS 1000000000LL /* default of pipeline_config.recode_delay_ms */

struct session;
struct loading;
struct dump_job;

enum { PH_READ, PH_WRITE, PH_LOADING };

/* A handle of the pipeline. */
struct pphandle {
	struct tier_handle base;
	int kind;
	struct tier_handle *in;      /* PH_READ: the cache's or below's handle */
	struct session *s;           /* PH_WRITE */
	struct loading *ld;          /* PH_LOADING: the load it reads through */
};

struct pipeline {
	struct tier tier;
	struct tier *cache, *below;
	uint64_t limit;              /* largest block: block_size or max_block */
	uint64_t block_size;
	int64_t default_ttl_ms;
	bool durable;
	bool shared;                 /* other hosts change the store below: drop_stale() */

	pthread_mutex_t lock;
	struct idmap sessions;       /* write sessions; protected by lock */
	struct idmap loading;        /* loads in flight (single-flight); protected by lock */

	pthread_mutex_t stripe[NSTRIPES];
	pthread_rwlock_t usage_lock;  /* shared: publishing below; exclusive: counting blocks */

	/* Background work. Workers take loads before dumps (a reader waits for a load, nobody
	 * waits for a dump). qcond wakes workers only: a signal must reach one. */
	pthread_mutex_t qlock;
	pthread_cond_t qcond;
	pthread_cond_t qidle;        /* a job finished */
	struct loading *lhead, *ltail; /* load queue; protected by qlock */
	atomic_uint lqueued;           /* loads in that queue: read without qlock by dumps */
	struct dump_job *dhead, *dtail; /* dump queue; protected by qlock */
	struct dump_job *drun;       /* taken by workers, until their dump() returns; qlock */
	struct loading *uhead, *utail; /* loads with pieces readers wait for, for the fetcher;
					  protected by qlock */
	pthread_cond_t ucond;        /* wakes the fetcher */
	unsigned queued, running;    /* jobs; protected by qlock */
	unsigned running_loads;      /* of those running, loads; protected by qlock */
	unsigned running_cpu;        /* of those running, dumps, rewrites and loads of encoded
				      * blocks (by workers): at most ndumpers; qlock */
	unsigned fetches;            /* of both, the fetcher's (loads too); protected by qlock */
	struct dump_job *parked;     /* dumps that kept failing (a full or read-only disk): tried
	                              * again every PARK_RETRY_NS, after any dump that works, and
	                              * once more at drain; protected by qlock */
	int64_t park_retry;          /* when the sweeper tries them again; protected by qlock */
	struct dump_claim *dumping;  /* ids being written below now (dump()); qlock */
	struct recode *rhead, *rtail; /* hurried blocks to write again when idle; qlock */
	unsigned nrecode;            /* in that list; qlock */
	bool hurry;                  /* waited dumps may be hurried (pipeline_config) */
	int64_t recode_delay_ns;     /* a hurried block is encoded again this long after */
	atomic_uint waiters;         /* callers waiting for a block to be durable: a durable
	                              * close, an fsync (its dump and the flush below) */
	bool final;                  /* draining for exit: a failed dump is not parked; qlock */
	bool stuck;                  /* told the cache that dumps are parked; qlock */
	bool stop;                   /* protected by qlock */
	unsigned nthreads;           /* workers */
	unsigned ndumpers;           /* of them, how many compress or decode at once at most */
	pthread_t threads[MAX_WORKERS];
	pthread_t sweeper;           /* reclaims expired blocks every SWEEP_MS */
	pthread_t fetcher;           /* fetches the pieces readers wait for */
	bool fetching;               /* the fetcher runs */
	pthread_cond_t sweep_cond;   /* wakes the sweeper to stop */
	bool started, sweeping;
	bool launched;               /* pipeline_start() ran: a second call does nothing */

	atomic_uint_fast64_t commits_ok, commits_incomplete, commits_failed;
	atomic_uint_fast64_t dumps, dump_errors, loads, load_errors, spills, streamed;
	atomic_uint_fast64_t dump_yields; /* loads a worker ran between the pieces of a dump */
	atomic_uint_fast64_t dumps_hurried, recodes, recodes_dropped;
	atomic_uint reads_waiting;   /* reads waiting for pieces of a load */
	counter_t mem_bytes_out;     /* bytes readers got from memory */
	counter_t stale_dropped;     /* shared: copies in memory another host replaced/removed */
	struct histogram load_hist, dump_hist;
	_Atomic int64_t last_commit; /* see commit_time() */
};

static inline struct pipeline *pipe_of(struct tier *t)
{
	return t->priv;
}

static inline pthread_mutex_t *stripe_of(struct pipeline *p, const struct blockid *id)
{
	return &p->stripe[blockid_hash(id) % NSTRIPES];
}

/* --- tiers/pipeline_jobs.c --------------------------------------------------------------- */

/* Start and stop the workers and the sweeper. */
int jobs_start(struct pipeline *p);
void jobs_stop(struct pipeline *p);
/* Wait until no job is queued or running. */
void jobs_drain(struct pipeline *p);
/* Jobs queued or running; *loads (if set): how many of them are loads. */
unsigned jobs_pending(struct pipeline *p, unsigned *loads);

/* Write the cache's version `version` of id below and mark it clean; consumes rd. One dump
 * of an id runs at a time. 0 (also when it was replaced or removed meanwhile, or written by
 * the dump it waited for) or the tier's error. */
int dump(struct pipeline *p, struct tier_handle *rd, const struct blockid *id, uint64_t version,
	 unsigned how);
#define DUMP_DURABLE 1u /* commit durable (TIER_COMMIT_DURABLE) */
#define DUMP_WAITED 2u  /* the caller waits for it: hurried if other dumps keep the CPU busy */
#define DUMP_RECODE 4u  /* write a clean version again, encoded (a hurried dump stored it raw) */
/* A caller starts or stops waiting for a block to be durable (p->waiters): while anyone
 * waits, dumps are hurried and every worker may take one (they need no CPU then). */
void dump_wait_begin(struct pipeline *p);
void dump_wait_end(struct pipeline *p);
/* Queue that (or do it now if there are no workers). */
void enqueue_dump(struct pipeline *p, struct tier_handle *rd, const struct blockid *id,
		  uint64_t version);

/*
 * Open id from below for reading through the memory tier. Joins the load of id in flight or
 * starts one (workers fetch the pieces readers wait for first, then the rest).
 * Returns 0 with *ld (a reference) or, when memory has no room for it, with *direct (a
 * handle that reads straight from below); -ENOENT; -EIO. A reader takes only the room that
 * can be made at once; the daemon's own opens (wait: prefetch, replacement) also wait for
 * dirty blocks to be dumped, as a writer does.
 */
int load_open(struct pipeline *p, const struct blockid *id, bool wait, struct loading **ld,
	      struct tier_handle **direct);
/* Load the blocks of ids that are only below into memory, several at once; returns once
 * every load is done. How many were loaded. */
size_t jobs_prefetch(struct pipeline *p, const struct blockid *ids, size_t n);
/* Wait until the load has been admitted to memory (or failed). 0 or its error. */
int load_wait(struct loading *ld);
/* Make sure the load runs to the end (it starts at the first read), then load_wait(). */
int load_start(struct pipeline *p, struct loading *ld);
ssize_t load_read(struct pipeline *p, struct loading *ld, void *buf, size_t len, uint64_t off);
/* The bytes, once the whole block is in memory; NULL before. */
const void *load_data(struct loading *ld);
/* Bytes [off, off+len) once fetched (see tier_ops.map); NULL on a fetch error. */
const void *load_map(struct pipeline *p, struct loading *ld, uint64_t off, size_t len);
/* The same without waiting (see tier_ops.map_start): 1 with *out, 0 (done() will be called
 * by the worker that fetches the last piece of the range), or -errno. */
int load_map_start(struct pipeline *p, struct loading *ld, uint64_t off, size_t len,
		   tier_map_fn done, void *arg, const void **out);
/* The cache's backing file of the block once the load has been admitted (tier_ops.backing),
 * else -ENOTSUP. */
int load_backing(struct loading *ld);
void load_stat(struct loading *ld, struct block_attr *attr);
void load_put(struct pipeline *p, struct loading *ld);
/* The same for a reference load_open() gave a reader (wait false): while readers hold a load,
 * the runners fetch its pieces as foreground IO, not only those a read waits for. */
void load_put_reader(struct pipeline *p, struct loading *ld);

#endif
