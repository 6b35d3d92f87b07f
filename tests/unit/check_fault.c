/*
 * Fault injection (tests/unit/fault_tier.h): every failure point of a scripted workload, one
 * at a time, so that every cleanup path of the pipeline and the tiers below it runs.
 *
 * The workload drives a pipeline (memory cache over compress over posix, as the daemon
 * stacks it) the way the FS layer does: it writes blocks of several sizes (empty, tiny, one
 * partial chunk, several chunks, one that outgrows the 1 MiB memory budget and spills to
 * disk, one too large for memory from the start), commits them as a flush and a release do
 * (TIER_COMMIT_TRY, then a final commit), reads them back (some were evicted: loads from
 * disk), replaces two (one copying the old bytes, one truncating), sets a TTL, removes one,
 * syncs them all, reopens the store (recovery) and reads everything again.
 *
 * Suites and what they fail:
 *   fault_tier   the fault tier and the allocation wrappers themselves
 *   fault_disk   a fault tier between compress and posix
 *   fault_below  a fault tier in place of the whole disk side (over compress over posix)
 *   fault_mem    a fault tier over the memory tier
 *   fault_alloc  the Nth allocation (malloc family, mmap, mremap) of the workload, counted
 *                on every thread (FA_ALL_THREADS): the stack has no worker threads there, so
 *                only the store's scan threads at recovery share the count
 * For N = 1, 2, ... each runs the workload with call N failing, until N is past the last
 * call the workload makes, and prints how many fault points it covered. For every N:
 *   - each operation that fails returns an error tier.h allows for it (see ALLOWED below);
 *   - every block reads back byte-exact as one of the versions the model allows (the last
 *     committed one; the one before it if the replacing commit failed; absent if its first
 *     commit failed; after a recovery, an older one if its sync failed), never a mix, and
 *     a successful read settles which;
 *   - after the fault is disarmed the stack works again: new writes, replacements, syncs
 *     and a second recovery succeed, and every block survives them exactly;
 *   - nothing leaks: the heap bytes that the tier and util libraries hold return to where
 *     they were (fault_alloc_in_use(): works without a sanitizer, and names the call sites
 *     of what leaked), no temp file of a reservation is left in the store; under ASan,
 *     LeakSanitizer checks too at the test's exit;
 *   - nothing hangs: a watchdog aborts with the fault point when one run takes too long.
 * Test cases: `core` (no worker threads: fault point N is the same call in every run;
 * -EIO, -ENOSPC and -ENOMEM at each), `concurrency` (dump and load workers: N counts the
 * calls of every thread; one error per point, in turn), `random` (each counted call fails
 * with probability 0.03; several seeds), `errors` (cases the loops found, as named tests).
 *
 * Without the fixes reported with this suite (pipeline.c pipe_commit, pipe_open, pipe_sync;
 * pipeline_jobs.c dump, load_open; posix.c posix_commit and the start scan; idmap.c
 * idmap_reserve) these fail: fault_disk core, concurrency and errors
 * (test_fault_disk_open_joins_stale_load); fault_below core and both errors tests; fault_mem
 * core and errors (test_fault_mem_open_fails_dirty_block); fault_alloc core.
 *
 * Knobs (environment): UCM_FAULT_SCALE=k multiplies block sizes and the memory budget (1);
 * UCM_FAULT_ONLY=N runs fault point N alone; UCM_FAULT_VERBOSE=1 prints every point;
 * UCM_FAULT_SEEDS=n random seeds (8); UCM_FAULT_KEEP_GOING=1 prints every violation and
 * fails at the end instead of at the first. Errors of the code under test are logged with
 * UCM_TEST_LOG=N.
 */
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "src/clock.h"
#include "src/units.h"
#include "tests/unit/fault_tier.h"
#include "tests/unit/tier_util.h"
#include "tests/unit/unit.h"
#include "tiers/cache.h"
#include "tiers/compress.h"
#include "tiers/pipeline.h"
#include "tiers/posix.h"

#define KB 1024ULL
#define MB (1024 * KB)

Suite *fault_tier_suite(void);
Suite *fault_disk_suite(void);
Suite *fault_below_suite(void);
Suite *fault_mem_suite(void);
Suite *fault_alloc_suite(void);

/* --- knobs ------------------------------------------------------------------------------- */

static uint64_t env_u64(const char *name, uint64_t dflt)
{
	const char *v = getenv(name);

	return v && *v ? strtoull(v, NULL, 0) : dflt;
}

static uint64_t scale(void)
{
	uint64_t k = env_u64("UCM_FAULT_SCALE", 1);

	return k ? k : 1;
}

/* UCM_FAULT_KEEP_GOING=1: print every violation and fail at the end of the loop */
static bool keep_going(void)
{
	return env_u64("UCM_FAULT_KEEP_GOING", 0) != 0;
}

static unsigned violations;

static bool verbose(void)
{
	return env_u64("UCM_FAULT_VERBOSE", 0) != 0;
}

/* --- the stack --------------------------------------------------------------------------- */

enum where { AT_NONE, AT_DISK, AT_BELOW, AT_MEM };

/* One run of the workload: the stack, the fault it carries, what it met. */
struct run {
	enum where where;
	bool threads;          /* pipeline_start(): dump and load workers */
	bool alloc;            /* allocation faults instead of a fault tier */
	struct fault_plan plan;
	char dir[PATH_MAX];    /* the STORE */
	struct tier *t;        /* the pipeline */
	struct tier *fault;    /* the fault tier in it, or NULL */
	/* the fault tiers of earlier instances of the stack (before a reopen) */
	uint64_t calls_before; /* counted calls */
	uint64_t faults_before;
	uint64_t reopens;
	bool armed;            /* r->fault is armed */
	bool done;             /* the workload is over: never arm again */
	/* what happened */
	unsigned errors;       /* operations that failed */
	bool fired;            /* the planned fault happened */
	char first_err[160];   /* the first failed operation */
	char site[96];         /* allocation faults: where the failed allocation was made */
	const char *phase;     /* the workload's step now (for messages) */
	char msg[1024];        /* the first violation, or "" */
};

static void violation(struct run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Record a broken rule (the first one is reported; never fails the test while a fault is
 * armed, since check itself allocates). */
static void violation(struct run *r, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (r->msg[0])
		return;
	va_start(ap, fmt);
	n = vsnprintf(r->msg, sizeof(r->msg), fmt, ap);
	va_end(ap);
	if (n > 0 && (size_t)n < sizeof(r->msg))
		snprintf(r->msg + n, sizeof(r->msg) - (size_t)n, " [in: %s]", r->phase);
}

/* Build the pipeline over r->dir with the fault tier at r->where (disarmed). 0 or -errno;
 * nothing is left on failure. */
static int stack_open(struct run *r)
{
	uint64_t k = scale();
	struct posix_config xc = { .root = r->dir, .layout = LAYOUT_NATIVE };
	struct compress_config zc = { .zstd = true, .level = 1 };
	/* dirty blocks only become clean by a worker's dump: without workers, never wait */
	struct cache_config cc = { .capacity = 1 * MB * k, .policy = POLICY_LRU,
				   .dirty_wait_ms = r->threads ? 200 : 0 };
	struct pipeline_config pc = { .max_block = 64 * MB * k, .default_ttl_ms = TTL_NONE,
				      .dump_threads = 2 };
	struct tier *disk, *below, *cache;
	int rc;

	r->fault = NULL;
	rc = posix_create(&xc, &disk);
	if (rc)
		return rc;
	if (r->where == AT_DISK) {
		rc = fault_tier_create(disk, &disk);
		if (rc)
			return rc;
		r->fault = disk;
	}
	rc = compress_create(&zc, disk, &below);
	if (rc)
		return rc;
	if (r->where == AT_BELOW) {
		rc = fault_tier_create(below, &below);
		if (rc)
			return rc;
		r->fault = below;
	}
	rc = cache_create(&cc, &cache);
	if (rc) {
		tier_destroy(below);
		return rc;
	}
	if (r->where == AT_MEM) {
		rc = fault_tier_create(cache, &cache);
		if (rc) {
			tier_destroy(below);
			return rc;
		}
		r->fault = cache;
	}
	pc.cache = cache;
	pc.below = below;
	rc = pipeline_create(&pc, &r->t);
	if (rc)
		return rc;
	if (r->threads) {
		rc = pipeline_start(r->t);
		if (rc) {
			tier_destroy(r->t);
			r->t = NULL;
			return rc;
		}
	}
	return 0;
}

/* Arm the fault tier of a (re)opened stack with what is left of the plan. */
static void stack_arm(struct run *r)
{
	struct fault_plan p = r->plan;

	if (!r->fault || r->done)
		return;
	if (p.nth && (r->faults_before || p.nth <= r->calls_before))
		p.nth = 0; /* fired (or passed) in an earlier instance */
	else if (p.nth)
		p.nth -= r->calls_before;
	p.seed += r->reopens * 0x9e3779b97f4a7c15ULL;
	fault_arm(r->fault, &p);
	r->armed = true;
}

/* Disarm the fault tier and add up what it counted. */
static void stack_disarm(struct run *r)
{
	struct fault_stats st;

	if (!r->fault || !r->armed)
		return;
	fault_disarm(r->fault);
	fault_get_stats(r->fault, &st);
	r->calls_before += st.calls;
	r->faults_before += st.faults;
	r->armed = false;
}

static void stack_close(struct run *r)
{
	stack_disarm(r);
	tier_destroy(r->t);
	r->t = NULL;
	r->fault = NULL;
}

/* --- the model --------------------------------------------------------------------------- */

#define NBLOCKS 10
#define MAXV 6

/* A version of a block: its content is ut_fill(id, seed); size 0 with !present = absent. */
struct version {
	bool present;
	uint64_t seed, size;
};

struct mblock {
	struct blockid id;
	struct version may[MAXV]; /* what a read may find now */
	int nmay;
	struct version hist[MAXV]; /* every version committed or possibly committed */
	int nhist;
	bool synced;               /* the live version is known to be safe below */
	int ttl;                   /* 0 none, 1 set, -1 unknown */
};

static struct mblock blk[NBLOCKS];
static char *wbuf, *rbuf;
#define PIECE_MAX (256 * KB)
static uint64_t rbuf_len;

static void model_reset(void)
{
	memset(blk, 0, sizeof(blk));
	for (int i = 0; i < NBLOCKS; i++) {
		blk[i].id = ut_id(0xfa17000 + (uint64_t)i);
		blk[i].nmay = 1; /* absent */
		blk[i].nhist = 1;
	}
}

static void add_may(struct mblock *b, struct version v)
{
	for (int i = 0; i < b->nmay; i++)
		if (b->may[i].present == v.present && b->may[i].seed == v.seed &&
		    b->may[i].size == v.size)
			return;
	if (b->nmay < MAXV)
		b->may[b->nmay++] = v;
}

static void add_hist(struct mblock *b, struct version v)
{
	for (int i = 0; i < b->nhist; i++)
		if (b->hist[i].present == v.present && b->hist[i].seed == v.seed)
			return;
	if (b->nhist < MAXV)
		b->hist[b->nhist++] = v;
}

static void settle(struct mblock *b, struct version v)
{
	b->may[0] = v;
	b->nmay = 1;
}

static bool may_absent(const struct mblock *b)
{
	for (int i = 0; i < b->nmay; i++)
		if (!b->may[i].present)
			return true;
	return false;
}

static bool may_present(const struct mblock *b)
{
	return b->nmay > 1 || b->may[0].present;
}

/* --- errors tier.h allows ---------------------------------------------------------------- */

/*
 * What each pipeline op may fail with: tier.h's list (first), then what the code also
 * returns, accepted here and tallied apart (documentation fixes for tier.h): truncate
 * -EIO/-ENOMEM (posix and cache return them), read -ENOMEM (compress and posix allocate to
 * read), set_ttl -EIO/-ENOMEM (the disk tier's set_deadline), sync -ENOSPC (pipe_sync passes
 * a dump's on). Each list ends with 0; tier.h's part ends at the first 1.
 */
static const int ALLOWED_RESERVE[] = { -ENOSPC, -ENOMEM, -EIO, 0 };
static const int ALLOWED_WRITE[] = { -ENOSPC, -EIO, -ENOMEM, 0 };
static const int ALLOWED_TRUNCATE[] = { -ENOSPC, 1, -EIO, -ENOMEM, 0 };
static const int ALLOWED_COMMIT[] = { -EIO, -ENOSPC, -ENOMEM, 0 };
static const int ALLOWED_OPEN[] = { -EIO, -ENOMEM, -ENOSPC, 0 };
static const int ALLOWED_READ[] = { -EIO, 1, -ENOMEM, 0 };
static const int ALLOWED_TTL[] = { 1, -EIO, -ENOMEM, 0 };
static const int ALLOWED_SYNC[] = { -EIO, 1, -ENOSPC, 0 };
static const int ALLOWED_CREATE[] = { -ENOMEM, -EIO, 0 };

/* Errors met beyond tier.h's lists, by op and error (printed by the loops). */
static struct {
	const char *op;
	long rc;
	unsigned n;
} beyond[16];

static void tally_beyond(const char *op, long rc)
{
	for (unsigned i = 0; i < sizeof(beyond) / sizeof(beyond[0]); i++) {
		if (!beyond[i].op) {
			beyond[i].op = op;
			beyond[i].rc = rc;
		}
		if (!strcmp(beyond[i].op, op) && beyond[i].rc == rc) {
			beyond[i].n++;
			return;
		}
	}
}

static void print_beyond(const char *label)
{
	for (unsigned i = 0; i < sizeof(beyond) / sizeof(beyond[0]) && beyond[i].op; i++)
		printf("%s: %s returned %ld (%s) %u times: not in tier.h's list\n", label,
		       beyond[i].op, beyond[i].rc, strerror((int)-beyond[i].rc), beyond[i].n);
	memset(beyond, 0, sizeof(beyond));
}

/* An operation failed with rc: count it and check rc is one `allowed` lists. */
static void failed(struct run *r, const char *op, const struct blockid *id, long rc,
		   const int *allowed)
{
	bool ok = false, documented = true;

	for (const int *a = allowed; *a; a++) {
		if (*a == 1)
			documented = false;
		else if (rc == *a)
			break;
	}
	for (const int *a = allowed; *a; a++)
		ok |= rc == *a;
	if (ok && !documented)
		tally_beyond(op, rc);
	if (!r->errors++)
		snprintf(r->first_err, sizeof(r->first_err), "%s %s = %ld", op,
			 id ? ut_hex(id) : "", rc);
	if (!ok)
		violation(r, "%s %s failed with %ld (%s), which it may not return", op,
			  id ? ut_hex(id) : "", rc, strerror((int)-rc));
}

/* --- workload steps ---------------------------------------------------------------------- */

enum { MODE_PLAIN, MODE_TRY }; /* commit as a release does / as a flush, then a release */

/*
 * Write version (seed, size) of block b: reserve (rflags, size hint), optionally truncate
 * to size first, write in pieces, commit. Updates the model. 0 or the error.
 */
static int put(struct run *r, struct mblock *b, uint64_t seed, uint64_t size, uint64_t hint,
	       uint64_t piece, unsigned rflags, bool trunc_first, int mode)
{
	struct tier *t = r->t;
	struct version v = { .present = true, .seed = seed, .size = size };
	struct tier_handle *h;
	int rc;

	rc = t->ops->reserve(t, &b->id, rflags, hint, &h);
	if (rc) {
		failed(r, "reserve", &b->id, rc, ALLOWED_RESERVE);
		return rc;
	}
	if (trunc_first) {
		rc = h->tier->ops->truncate(h, size);
		if (rc) {
			failed(r, "truncate", &b->id, rc, ALLOWED_TRUNCATE);
			t->ops->abort(h);
			return rc;
		}
	}
	for (uint64_t off = 0; off < size; off += piece) {
		size_t n = (size_t)(size - off < piece ? size - off : piece);
		ssize_t w;

		ut_fill(&b->id, seed, wbuf, n, off);
		w = h->tier->ops->write(h, wbuf, n, off);
		if (w < 0) {
			failed(r, "write", &b->id, w, ALLOWED_WRITE);
			t->ops->abort(h);
			return (int)w;
		}
		if ((size_t)w != n) {
			violation(r, "write %s: %zd of %zu bytes", ut_hex(&b->id), w, n);
			t->ops->abort(h);
			return -EIO;
		}
	}
	if (mode == MODE_TRY) {
		struct pipeline_counters before, after;

		pipeline_counters(t, &before);
		rc = h->tier->ops->commit(h, NULL, TIER_COMMIT_TRY, NULL);
		pipeline_counters(t, &after);
		if (rc == -EIO && after.commits_failed != before.commits_failed) {
			/* tier.h: -EIO with TIER_COMMIT_TRY leaves the handle with us; but the
			 * pipeline counted a finished commit, so it has freed it: touching it again
			 * would be a use after free. Leave it (a leak, not a crash). */
			violation(r, "commit(TRY) %s of a complete block failed -EIO and gave the "
				  "handle back (tier.h: the caller keeps it)", ut_hex(&b->id));
			return rc;
		}
		if (rc == -EIO) /* kept: the release commits for good */
			rc = h->tier->ops->commit(h, NULL, 0, NULL);
	} else {
		rc = h->tier->ops->commit(h, NULL, 0, NULL);
	}
	if (rc) {
		failed(r, "commit", &b->id, rc, ALLOWED_COMMIT);
		return rc;
	}
	add_hist(b, v);
	settle(b, v);
	b->synced = false;
	b->ttl = 0;
	return 0;
}

/* The hashes of the versions met so far (the same ones every run): comparing a block read
 * whole with its content is then one hash, not ut_diff()'s byte-by-byte walk. */
static struct {
	struct blockid id;
	uint64_t seed, size, hash;
} known[64];
static int nknown;
static char *ebuf; /* scratch for the content of a version */

static uint64_t content_hash(const struct mblock *b, const struct version *v)
{
	for (int i = 0; i < nknown; i++)
		if (blockid_eq(&known[i].id, &b->id) && known[i].seed == v->seed &&
		    known[i].size == v->size)
			return known[i].hash;
	ut_fill(&b->id, v->seed, ebuf, (size_t)v->size, 0);
	if (nknown == (int)(sizeof(known) / sizeof(known[0])))
		nknown = 0;
	known[nknown].id = b->id;
	known[nknown].seed = v->seed;
	known[nknown].size = v->size;
	known[nknown].hash = XXH3_64bits(ebuf, (size_t)v->size);
	return known[nknown++].hash;
}

/* Is buf (the whole block, v->size bytes) version v? */
static bool matches(const struct mblock *b, const struct version *v, const char *buf)
{
	return v->present && XXH3_64bits(buf, (size_t)v->size) == content_hash(b, v);
}

/*
 * Open b and read it whole (pieces that straddle the 256 KiB chunks, one past the end, and
 * a mapped range), compare with the versions the model allows, and settle the model on the
 * one found. 0, -ENOENT, or the error.
 */
static int check_block(struct run *r, struct mblock *b)
{
	struct tier *t = r->t;
	struct tier_handle *h;
	struct block_attr a;
	struct version found = { 0 };
	uint64_t piece = 192 * KB, got = 0;
	int rc, cand = -1;

	rc = t->ops->open(t, &b->id, 0, &h);
	if (rc == -ENOENT) {
		if (!may_absent(b))
			violation(r, "block %s lost: open = -ENOENT, expected version seed %llu",
				  ut_hex(&b->id), (unsigned long long)b->may[0].seed);
		settle(b, found);
		return rc;
	}
	if (rc) {
		failed(r, "open", &b->id, rc, ALLOWED_OPEN);
		return rc;
	}
	h->tier->ops->stat(h, &a);
	for (int i = 0; i < b->nmay && cand < 0; i++)
		if (b->may[i].present && b->may[i].size == a.size)
			cand = i;
	if (cand < 0) {
		violation(r, "block %s: size %llu is none of the versions it may have",
			  ut_hex(&b->id), (unsigned long long)a.size);
		tier_close(h);
		return -EILSEQ;
	}
	if (a.size + piece > rbuf_len) {
		violation(r, "block %s larger than the read buffer", ut_hex(&b->id));
		tier_close(h);
		return -EILSEQ;
	}
	while (got <= a.size) {
		ssize_t n = tier_read(h, rbuf + got, piece, got);

		if (n < 0) {
			failed(r, "read", &b->id, n, ALLOWED_READ);
			tier_close(h);
			return (int)n;
		}
		if ((uint64_t)n != (a.size - got < piece ? a.size - got : piece)) {
			violation(r, "block %s: read at %llu gave %zd bytes of %llu", ut_hex(&b->id),
				  (unsigned long long)got, n, (unsigned long long)a.size);
			tier_close(h);
			return -EILSEQ;
		}
		if (n == 0)
			break;
		got += (uint64_t)n;
	}
	/* the first version of that size whose bytes match */
	for (int i = cand; i < b->nmay; i++) {
		if (b->may[i].size == a.size && matches(b, &b->may[i], rbuf)) {
			found = b->may[i];
			break;
		}
	}
	if (!found.present) {
		long long bad = ut_diff(&b->id, b->may[cand].seed, rbuf, (size_t)a.size, 0);

		violation(r, "block %s: wrong bytes (first at %lld of %llu)", ut_hex(&b->id), bad,
			  (unsigned long long)a.size);
		tier_close(h);
		return -EILSEQ;
	}
	if (h->tier->ops->map && a.size > 3) {
		uint64_t off = a.size / 3, len = a.size / 3;
		const char *m = h->tier->ops->map(h, off, (size_t)len);

		if (m && memcmp(m, rbuf + off, (size_t)len))
			violation(r, "block %s: wrong bytes mapped", ut_hex(&b->id));
	}
	tier_close(h);
	settle(b, found);
	return 0;
}

static void check_all(struct run *r)
{
	for (int i = 0; i < NBLOCKS; i++)
		check_block(r, &blk[i]);
}

static void remove_block(struct run *r, struct mblock *b)
{
	int rc = r->t->ops->remove(r->t, &b->id);

	if (rc && rc != -ENOENT)
		violation(r, "remove %s = %d", ut_hex(&b->id), rc);
	else if (rc == 0 && !may_present(b))
		violation(r, "remove %s = 0 for an absent block", ut_hex(&b->id));
	else if (rc == -ENOENT && !may_absent(b))
		violation(r, "remove %s = -ENOENT for a live block", ut_hex(&b->id));
	settle(b, (struct version){ 0 });
	add_hist(b, (struct version){ 0 });
	b->synced = true; /* gone from both tiers at once: must stay gone after a recovery */
	b->ttl = 0;
}

static void set_ttl(struct run *r, struct mblock *b, int64_t ms)
{
	int rc = r->t->ops->set_ttl(r->t, &b->id, ms);

	if (rc == -ENOENT) {
		if (!may_absent(b))
			violation(r, "set_ttl %s = -ENOENT for a live block", ut_hex(&b->id));
		return;
	}
	if (rc) {
		failed(r, "set_ttl", &b->id, rc, ALLOWED_TTL);
		b->ttl = -1;
		return;
	}
	b->ttl = 1;
}

/* Make every live block safe below. */
static void sync_all(struct run *r)
{
	for (int i = 0; i < NBLOCKS; i++) {
		struct mblock *b = &blk[i];
		int rc = r->t->ops->sync(r->t, &b->id);

		if (rc == -ENOENT) {
			if (!may_absent(b))
				violation(r, "sync %s = -ENOENT for a live block", ut_hex(&b->id));
			continue;
		}
		if (rc) {
			failed(r, "sync", &b->id, rc, ALLOWED_SYNC);
			continue;
		}
		if (!may_present(b))
			violation(r, "sync %s = 0 for an absent block", ut_hex(&b->id));
		b->synced = true;
	}
}

/*
 * Close the stack and open it again over the same STORE (recovery). A block that was not
 * synced may come back as any version that was below, or absent. 0 or the error of the
 * second attempt (a first failure is a fault point like any other).
 */
static int reopen(struct run *r)
{
	int rc;

	stack_close(r);
	for (int i = 0; i < NBLOCKS; i++) {
		if (blk[i].synced)
			continue;
		for (int k = 0; k < blk[i].nhist; k++)
			add_may(&blk[i], blk[i].hist[k]);
		add_may(&blk[i], (struct version){ 0 });
	}
	r->reopens++;
	for (int attempt = 0; attempt < 2; attempt++) {
		rc = stack_open(r);
		if (rc == 0)
			break;
		failed(r, "create", NULL, rc, ALLOWED_CREATE);
	}
	if (rc) {
		violation(r, "the store cannot be opened again: %d", rc);
		return rc;
	}
	stack_arm(r);
	return 0;
}

static int temp_found;

static int count_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_F && strstr(path + ftw->base, ".tmp"))
		temp_found++;
	return 0;
}

/* Every temp file left in the STORE (a reservation that was never given back). */
static int count_temp(const char *dir)
{
	temp_found = 0;
	nftw(dir, count_one, 16, FTW_PHYS);
	return temp_found;
}

/* The scripted workload; block sizes scale with UCM_FAULT_SCALE. */
static void workload(struct run *r)
{
	uint64_t k = scale();

	r->phase = "first writes";
	put(r, &blk[0], 1, 1000, 1000, 64 * KB, 0, false, MODE_TRY);
	put(r, &blk[1], 1, 0, 0, 64 * KB, 0, false, MODE_TRY);
	put(r, &blk[2], 1, 70000 * k, 70000 * k, 64 * KB, 0, false, MODE_TRY);
	put(r, &blk[3], 1, 600 * KB * k, 600 * KB * k, 128 * KB, 0, false, MODE_PLAIN);
	/* no size hint, 1.2 MiB > the 1 MiB budget: outgrows memory and spills */
	put(r, &blk[4], 1, 1200 * KB * k, 0, 100 * KB, 0, false, MODE_TRY);
	put(r, &blk[5], 1, 300 * KB * k, 300 * KB * k, 64 * KB, 0, false, MODE_TRY);
	r->phase = "first reads";
	check_all(r);
	r->phase = "replacements";
	/* replace copying the old bytes (then truncated and rewritten), and truncating */
	put(r, &blk[2], 2, 200 * KB * k, 0, 64 * KB, 0, true, MODE_TRY);
	put(r, &blk[3], 2, 900 * KB * k, 900 * KB * k, 256 * KB, TIER_RESERVE_TRUNC, false,
	    MODE_TRY);
	set_ttl(r, &blk[0], 3600 * 1000);
	remove_block(r, &blk[1]);
	/* too large for memory from the start: reserved below */
	put(r, &blk[6], 1, 1100 * KB * k, 1100 * KB * k, 256 * KB, 0, false, MODE_TRY);
	r->phase = "second reads";
	check_all(r);
	r->phase = "syncs";
	sync_all(r);
	r->phase = "recovery";
	if (reopen(r))
		return;
	r->phase = "reads after recovery";
	check_all(r);
	r->phase = "writes after recovery";
	remove_block(r, &blk[4]);
	put(r, &blk[7], 1, 5000, 5000, 64 * KB, 0, false, MODE_TRY);
	check_block(r, &blk[7]);
}

/* After the fault: everything works again, and survives one more recovery exactly. */
static void afterwards(struct run *r)
{
	uint64_t k = scale();
	int rc, ntemp;

	r->phase = "after the fault: reads";
	if (!r->t && reopen(r))
		return;
	check_all(r); /* settles every block on what it is now */
	r->phase = "after the fault: writes";
	rc = put(r, &blk[8], 1, 5000, 5000, 64 * KB, 0, false, MODE_TRY);
	if (rc)
		violation(r, "after the fault: a new block cannot be written: %d", rc);
	rc = put(r, &blk[5], 7, 400 * KB * k, 400 * KB * k, 64 * KB, TIER_RESERVE_TRUNC, false,
		 MODE_TRY);
	if (rc)
		violation(r, "after the fault: a block cannot be replaced: %d", rc);
	if (check_block(r, &blk[8]) || check_block(r, &blk[5]))
		violation(r, "after the fault: a block just written is unreadable");
	r->phase = "after the fault: syncs";
	tu_settle(r->t);
	ntemp = count_temp(r->dir);
	if (ntemp)
		violation(r, "after the fault: %d temp file(s) of reservations never given back",
			  ntemp);
	for (int i = 0; i < NBLOCKS; i++) {
		blk[i].synced = false;
		rc = r->t->ops->sync(r->t, &blk[i].id);
		if (rc == 0 && blk[i].may[0].present)
			blk[i].synced = true;
		else if (rc != (blk[i].may[0].present ? 0 : -ENOENT))
			violation(r, "after the fault: sync %s = %d", ut_hex(&blk[i].id), rc);
	}
	r->phase = "after the fault: recovery";
	if (reopen(r))
		return;
	for (int i = 0; i < NBLOCKS; i++) {
		struct block_attr a;

		rc = check_block(r, &blk[i]);
		if (rc && rc != -ENOENT)
			violation(r, "after recovery: block %s = %d", ut_hex(&blk[i].id), rc);
		if (rc == 0 && blk[i].ttl == 1 &&
		    (tu_lookup(r->t, &blk[i].id, &a) || a.deadline <= mono_ns()))
			violation(r, "after recovery: block %s lost its TTL", ut_hex(&blk[i].id));
	}
}

/* --- the watchdog ------------------------------------------------------------------------ */

static char watch_msg[256];

static void watchdog(int sig)
{
	ssize_t n = write(2, watch_msg, strlen(watch_msg));

	(void)sig;
	(void)n;
	abort();
}

static void watch(unsigned seconds, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Abort with the message if not called again (or with 0) within `seconds`. */
static void watch(unsigned seconds, const char *fmt, ...)
{
	va_list ap;

	if (!seconds) {
		alarm(0);
		return;
	}
	va_start(ap, fmt);
	vsnprintf(watch_msg, sizeof(watch_msg), fmt, ap);
	va_end(ap);
	signal(SIGALRM, watchdog);
	alarm(seconds);
}

static unsigned watch_seconds(void)
{
	uint64_t m = env_u64("CK_TIMEOUT_MULTIPLIER", 1);

	return (unsigned)(30 * (m ? m : 1));
}

/* --- one run, and the loops over fault points -------------------------------------------- */

static void buffers(void)
{
	uint64_t k = scale();

	rbuf_len = 1200 * KB * k + PIECE_MAX + 1;
	if (!wbuf) {
		wbuf = malloc(PIECE_MAX);
		rbuf = malloc(rbuf_len);
		ebuf = malloc(rbuf_len);
	}
	ck_assert_ptr_nonnull(wbuf);
	ck_assert_ptr_nonnull(rbuf);
	ck_assert_ptr_nonnull(ebuf);
}

/*
 * Run the workload once with r->plan armed (or, with r->alloc, allocation r->plan.nth
 * failing), then check everything works after it. Fails the test on a violation, naming
 * the fault point. Returns the number of calls (allocations) the workload counted.
 */
static uint64_t run_once(struct run *r, const char *label)
{
	uint64_t counted;
	int rc;

	buffers();
	model_reset();
	ut_mkdtemp(r->dir, sizeof(r->dir));
	r->t = NULL;
	r->calls_before = r->faults_before = r->reopens = 0;
	r->armed = r->done = false;
	r->errors = 0;
	r->fired = false;
	r->first_err[0] = r->msg[0] = '\0';
	r->phase = "start";
	snprintf(r->site, sizeof(r->site), "-");
	rc = stack_open(r);
	ck_assert_msg(rc == 0, "cannot build the stack: %d", rc);
	watch(watch_seconds(), "check_fault: %s: fault point %llu hangs (no progress in %u s)\n",
	      label, (unsigned long long)r->plan.nth, watch_seconds());
	if (r->alloc) {
		fault_alloc_arm(r->plan.nth, FA_ALL_THREADS);
		workload(r);
		counted = fault_alloc_disarm();
		r->fired = fault_alloc_fired();
		fault_alloc_fired_site(r->site, sizeof(r->site));
	} else {
		stack_arm(r);
		workload(r);
		stack_disarm(r);
		counted = r->calls_before;
		r->fired = r->faults_before > 0;
	}
	r->done = true;
	afterwards(r);
	if (r->t)
		stack_close(r);
	watch(0, " ");
	ut_rmtree(r->dir);
	if (verbose())
		printf("%s: point %llu: %s%s%s\n", label, (unsigned long long)r->plan.nth,
		       r->fired ? "fired" : "not reached", r->errors ? ", first failure: " : "",
		       r->first_err);
	if (r->msg[0] && keep_going()) {
		printf("%s, fault point %llu (%s %s)%s%s: %s\n", label,
		       (unsigned long long)r->plan.nth, r->alloc ? "allocation at" : "err",
		       r->alloc ? r->site : strerror(-r->plan.err),
		       r->errors ? "; first failure: " : "", r->first_err, r->msg);
		violations++;
		return counted;
	}
	ck_assert_msg(!r->msg[0], "%s, fault point %llu (%s %s)%s%s: %s", label,
		      (unsigned long long)r->plan.nth, r->alloc ? "allocation at" : "err",
		      r->alloc ? r->site : strerror(-r->plan.err),
		      r->errors ? "; first failure: " : "", r->first_err, r->msg);
	return counted;
}

/* Heap bytes the wrapped call sites hold (see fault_alloc_in_use()); between runs the
 * stack, its zstd contexts and its threads are gone, the test's buffers stay. */
static int64_t in_use(void)
{
	return fault_alloc_in_use();
}

struct loop_result {
	uint64_t points;   /* fault points run */
	uint64_t calls;    /* calls counted by a run without a fault */
	uint64_t visible;  /* runs in which some operation failed */
};

/*
 * Fault point N = 1, 2, ... of the workload until N is past its last counted call, for each
 * error of errs (tier faults) or once (allocation faults).
 */
static struct loop_result fault_loop(const char *label, enum where where, bool threads,
				     bool alloc, unsigned ops)
{
	static const int errs[] = { -EIO, -ENOSPC, -ENOMEM };
	struct loop_result res = { 0 };
	struct run r = { .where = where, .threads = threads, .alloc = alloc };
	uint64_t only = env_u64("UCM_FAULT_ONLY", 0);
	/* the deterministic loop tries each error at each point; the threaded one (slower, its
	 * points move with the scheduling) one error per point, in turn */
	int nerrs = alloc || threads ? 1 : 3;
	int64_t base;

	r.plan.ops = ops;
	/* a run without a fault: how many calls, and the heap a run leaves behind (none) */
	res.calls = run_once(&r, label);
	run_once(&r, label);
	printf("%s: %llu counted calls per run\n", label, (unsigned long long)res.calls);
	fflush(stdout);
	base = in_use();
	for (int e = 0; e < nerrs; e++) {
		for (uint64_t n = only ? only : 1;; n++) {
			uint64_t mark = fault_alloc_mark();
			char leaks[512];
			int64_t now;

			r.plan.nth = n;
			r.plan.err = threads ? errs[n % 3] : errs[e];
			run_once(&r, label);
			if (!r.fired)
				break;
			res.points++;
			res.visible += r.errors > 0;
			now = in_use();
			if (now != base && keep_going()) {
				fault_alloc_report(mark, leaks, sizeof(leaks));
				printf("%s, fault point %llu (%s %s): %lld bytes leaked (%s)\n", label,
				       (unsigned long long)n, alloc ? "allocation at" : "err",
				       alloc ? r.site : strerror(-r.plan.err),
				       (long long)(now - base), leaks);
				violations++;
				base = now;
			} else if (now != base) {
				fault_alloc_report(mark, leaks, sizeof(leaks));
				ck_abort_msg("%s, fault point %llu (%s %s): %lld bytes leaked (%s)%s%s",
					     label, (unsigned long long)n,
					     alloc ? "allocation at" : "err",
					     alloc ? r.site : strerror(-r.plan.err),
					     (long long)(now - base), leaks,
					     r.errors ? "; first failure: " : "", r.first_err);
			}
			if (only)
				break;
		}
	}
	printf("%s: %llu fault points covered (%llu counted calls per run, %s); "
	       "%llu made an operation fail, the rest were absorbed\n",
	       label, (unsigned long long)res.points, (unsigned long long)res.calls,
	       alloc ? "allocations" : threads ? "errors in turn" : "3 errors each",
	       (unsigned long long)res.visible);
	print_beyond(label);
	fflush(stdout);
	ck_assert_msg(!violations, "%s: %u violations (printed above)", label, violations);
	return res;
}

/* Faults at random: each counted call fails with probability p; several seeds
 * (UCM_FAULT_ONLY=s runs seed s alone; a message names a seed as "fault point 0, seed s"). */
static void random_loop(const char *label, enum where where, bool threads)
{
	static const int errs[] = { -EIO, -ENOSPC, -ENOMEM };
	uint64_t seeds = env_u64("UCM_FAULT_SEEDS", 8), faults = 0;
	uint64_t only = env_u64("UCM_FAULT_ONLY", 0);
	struct run r = { .where = where, .threads = threads };
	char seeded[96];

	for (uint64_t s = only ? only : 1; s <= (only ? only : seeds); s++) {
		r.plan = (struct fault_plan){ .probability = 0.03, .seed = s,
					      .err = errs[s % 3] };
		snprintf(seeded, sizeof(seeded), "%s, seed %llu", label, (unsigned long long)s);
		run_once(&r, seeded);
		faults += r.faults_before;
	}
	printf("%s: %llu seeds, %llu faults injected at random\n", label,
	       only ? 1ULL : (unsigned long long)seeds, (unsigned long long)faults);
	print_beyond(label);
	fflush(stdout);
	ck_assert_msg(!violations, "%s: %u violations (printed above)", label, violations);
}

/* --- fault_tier: the wrapper itself ------------------------------------------------------ */

static struct tier *fault_over_cache(uint64_t capacity)
{
	struct tier *t = NULL;

	ck_assert_int_eq(fault_tier_create(tu_cache(capacity, 0), &t), 0);
	return t;
}

START_TEST(test_fault_tier_forwards)
{
	struct tier *t = fault_over_cache(4 * MB);
	struct blockid id = ut_id(1);
	struct fault_stats st;

	ck_assert(fault_is(t));
	ck_assert(!fault_is(fault_inner(t)));
	ck_assert_ptr_null(t->ops->layout); /* the cache has none: neither has its wrapper */
	ck_assert_ptr_nonnull(t->ops->data);
	ck_assert_int_eq(tu_put(t, &id, 5, 300 * KB, 0, 0, 0), 0);
	tu_expect(t, &id, 5, 300 * KB);
	ck_assert_int_eq(tu_lookup(t, &id, NULL), 0);
	ck_assert_int_eq(t->ops->remove(t, &id), 0);
	ck_assert_int_eq(tu_lookup(t, &id, NULL), -ENOENT);
	fault_get_stats(t, &st);
	ck_assert_uint_eq(st.seen[FOP_RESERVE], 1);
	ck_assert_uint_eq(st.seen[FOP_COMMIT], 1);
	ck_assert_uint_eq(st.seen[FOP_OPEN], 1);
	ck_assert_uint_eq(st.seen[FOP_CLOSE], 1);
	ck_assert_uint_eq(st.faults, 0);
	tier_destroy(t);
}
END_TEST

START_TEST(test_fault_tier_nth)
{
	struct tier *t = fault_over_cache(4 * MB);
	struct blockid id = ut_id(2);
	struct fault_stats st;

	/* the calls counted are reserve, write, commit: the 3rd (the commit) fails */
	fault_arm(t, &(struct fault_plan){ .nth = 3, .err = -ENOSPC });
	ck_assert_int_eq(tu_put(t, &id, 1, 1000, 0, 0, 0), -ENOSPC);
	fault_get_stats(t, &st);
	ck_assert_uint_eq(st.calls, 3);
	ck_assert_uint_eq(st.faults, 1);
	ck_assert_int_eq(st.first_op, FOP_COMMIT);
	ck_assert_int_eq(st.first_err, -ENOSPC);
	ck_assert_int_eq(tu_lookup(t, &id, NULL), -ENOENT); /* nothing published */
	/* the next calls go through */
	ck_assert_int_eq(tu_put(t, &id, 1, 1000, 0, 0, 0), 0);
	/* a read fails -EIO whatever the plan asks: tier.h lets read return nothing else */
	fault_arm(t, &(struct fault_plan){ .ops = FAULT_BIT(FOP_READ), .nth = 1,
					   .err = -ENOMEM });
	ck_assert_int_eq(tu_try_read(t, &id, 1, 1000), -EIO);
	ck_assert_int_eq(tu_try_read(t, &id, 1, 1000), 0);
	/* a burst: every counted call from the 2nd on */
	fault_arm(t, &(struct fault_plan){ .ops = FAULT_BIT(FOP_OPEN), .nth = 2,
					   .times = UINT32_MAX, .err = -ENOMEM });
	ck_assert_int_eq(tu_try_read(t, &id, 1, 1000), 0);
	ck_assert_int_eq(tu_try_read(t, &id, 1, 1000), -ENOMEM);
	ck_assert_int_eq(tu_try_read(t, &id, 1, 1000), -ENOMEM);
	fault_disarm(t);
	ck_assert_int_eq(tu_try_read(t, &id, 1, 1000), 0);
	ck_assert_int_eq(fault_error_for(FOP_TRUNCATE, -EIO), -ENOSPC);
	ck_assert_int_eq(fault_error_for(FOP_SYNC, -ENOSPC), -EIO);
	ck_assert_str_eq(fault_op_name(FOP_SET_DEADLINE), "set_deadline");
	tier_destroy(t);
}
END_TEST

/* The same seed fails the same calls. */
static uint64_t random_pattern(uint64_t seed)
{
	struct tier *t = fault_over_cache(4 * MB);
	struct blockid id = ut_id(3);
	uint64_t bits = 0;

	ck_assert_int_eq(tu_put(t, &id, 1, 100, 0, 0, 0), 0);
	fault_arm(t, &(struct fault_plan){ .ops = FAULT_BIT(FOP_OPEN), .probability = 0.5,
					   .seed = seed });
	for (int i = 0; i < 64; i++)
		if (tu_try_read(t, &id, 1, 100))
			bits |= 1ULL << i;
	tier_destroy(t);
	return bits;
}

START_TEST(test_fault_tier_random)
{
	uint64_t a = random_pattern(42), b = random_pattern(42), c = random_pattern(43);

	ck_assert_uint_eq(a, b);
	ck_assert_uint_ne(a, c);
	ck_assert_uint_ne(a, 0);
	ck_assert_uint_ne(a, UINT64_MAX);
}
END_TEST

START_TEST(test_fault_tier_delay)
{
	struct tier *t = fault_over_cache(4 * MB);
	struct blockid id = ut_id(4);
	struct fault_stats st;
	int64_t t0;

	ck_assert_int_eq(tu_put(t, &id, 1, 100, 0, 0, 0), 0);
	/* a delay may hit ops that cannot fail, such as lookup */
	fault_arm(t, &(struct fault_plan){ .action = FAULT_DELAY, .ops = FAULT_BIT(FOP_LOOKUP),
					   .nth = 2, .delay_ns = 50000000 });
	t0 = mono_ns();
	ck_assert_int_eq(tu_lookup(t, &id, NULL), 0);
	ck_assert_int_lt(mono_ns() - t0, 40000000);
	t0 = mono_ns();
	ck_assert_int_eq(tu_lookup(t, &id, NULL), 0);
	ck_assert_int_ge(mono_ns() - t0, 50000000);
	fault_get_stats(t, &st);
	ck_assert_int_eq(st.first_op, FOP_LOOKUP);
	ck_assert_int_eq(st.first_err, 0);
	tier_destroy(t);
}
END_TEST

/* A failed commit gives the handle back, except a LOADED admission's and TRY's -EIO. */
START_TEST(test_fault_tier_commit_ownership)
{
	char dir[PATH_MAX];
	struct tier *t = NULL;
	struct tier_handle *h, *rd;
	struct blockid id = ut_id(5);
	struct block_meta m = tu_meta(4096, 0);

	ut_mkdtemp(dir, sizeof(dir));
	ck_assert_int_eq(fault_tier_create(tu_posix(dir, LAYOUT_NATIVE), &t), 0);
	/* given back: the temp file is gone with it */
	ck_assert_int_eq(t->ops->reserve(t, &id, 0, 4096, &h), 0);
	ck_assert_int_eq(tu_write(h, &id, 1, 0, 4096), 4096);
	fault_arm(t, &(struct fault_plan){ .ops = FAULT_BIT(FOP_COMMIT), .nth = 1 });
	ck_assert_int_eq(t->ops->commit(h, &m, 0, NULL), -EIO);
	ck_assert_int_eq(count_temp(dir), 0);
	/* kept with TIER_COMMIT_TRY and -EIO: the caller commits (or aborts) it later */
	ck_assert_int_eq(t->ops->reserve(t, &id, 0, 4096, &h), 0);
	ck_assert_int_eq(tu_write(h, &id, 1, 0, 4096), 4096);
	fault_arm(t, &(struct fault_plan){ .ops = FAULT_BIT(FOP_COMMIT), .nth = 1 });
	ck_assert_int_eq(t->ops->commit(h, &m, TIER_COMMIT_TRY, NULL), -EIO);
	ck_assert_int_eq(count_temp(dir), 1);
	ck_assert_int_eq(t->ops->commit(h, &m, 0, &rd), 0);
	ck_assert_ptr_nonnull(rd);
	ck_assert_ptr_eq(rd->tier, t);
	tu_check_read(rd, &id, 1, 4096, 0, 4096);
	tier_close(rd);
	tier_destroy(t);
	/* kept with TIER_COMMIT_LOADED, whatever the error */
	t = fault_over_cache(MB);
	ck_assert_int_eq(t->ops->reserve(t, &id, 0, 4096, &h), 0);
	ck_assert_int_eq(tu_write(h, &id, 1, 0, 4096), 4096);
	fault_arm(t, &(struct fault_plan){ .ops = FAULT_BIT(FOP_COMMIT), .nth = 1,
					   .err = -ENOMEM });
	ck_assert_int_eq(t->ops->commit(h, &m, TIER_COMMIT_LOADED | TIER_COMMIT_PIN, &rd),
			 -ENOMEM);
	ck_assert_ptr_null(rd);
	tu_check_read(h, &id, 1, 4096, 0, 4096); /* still readable: the caller's */
	t->ops->abort(h);
	tier_destroy(t);
	ut_rmtree(dir);
}
END_TEST

/* The allocation wrappers fail the Nth allocation of this file's own calls too. */
START_TEST(test_fault_tier_alloc)
{
	void *a, *b, *c;
	int64_t before, after;
	uint64_t counted;
	bool fired;

	a = malloc(16);
	free(a);
	if (!fault_alloc_available())
		return; /* linked without the --wrap flags: nothing to test */
	fault_alloc_arm(2, FA_THIS_THREAD);
	before = in_use();
	a = malloc(64);
	b = calloc(1, 64);
	c = realloc(NULL, 64);
	fired = fault_alloc_fired();
	counted = fault_alloc_disarm(); /* before any ck_assert: check allocates too */
	free(a);
	free(c);
	after = in_use();
	ck_assert(fired);
	ck_assert_uint_eq(counted, 3);
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_null(b);
	ck_assert_ptr_nonnull(c);
	ck_assert_int_eq(after, before);
}
END_TEST

Suite *fault_tier_suite(void)
{
	Suite *s = suite_create("fault_tier");
	TCase *tc = ut_tcase("core", UT_TIMEOUT);

	tcase_add_test(tc, test_fault_tier_forwards);
	tcase_add_test(tc, test_fault_tier_nth);
	tcase_add_test(tc, test_fault_tier_random);
	tcase_add_test(tc, test_fault_tier_delay);
	tcase_add_test(tc, test_fault_tier_commit_ownership);
	tcase_add_test(tc, test_fault_tier_alloc);
	suite_add_tcase(s, tc);
	return s;
}

/* --- errors: the cases the loops found, as named regressions -------------------------- */

/* A stack of the daemon's shape with a fault tier over the memory tier and one over the
 * whole disk side, for the cases that need both. Threads as asked. */
struct two {
	char dir[PATH_MAX];
	struct tier *t, *mem, *below;
};

/* A pipeline of memory (`mem` bytes) over zstd over a native store, with `workers` threads
 * that dump (0: not started) and `loaders` in all (at least `workers`); below is
 * a fault tier above the compression, mem one around the cache. hurry: an fsync behind other
 * dumps hurries them (the daemon's sync_compress=defer). */
static void two_open_recode(struct two *w, unsigned workers, unsigned loaders, uint64_t mem,
			    bool fresh_dir, bool hurry, int64_t recode_delay_ms)
{
	struct compress_config zc = { .zstd = true, .level = 1 };
	struct cache_config cc = { .capacity = mem, .policy = POLICY_LRU,
				   .dirty_wait_ms = workers ? 200 : 0 };
	struct pipeline_config pc = { .max_block = 64 * MB, .default_ttl_ms = TTL_NONE,
				      .dump_threads = workers ? workers : 2, .load_threads = loaders,
				      .hurry = hurry, .recode_delay_ms = recode_delay_ms };
	struct tier *disk, *below;

	if (fresh_dir)
		ut_mkdtemp(w->dir, sizeof(w->dir));
	disk = tu_posix(w->dir, LAYOUT_NATIVE);
	ck_assert_int_eq(compress_create(&zc, disk, &below), 0);
	ck_assert_int_eq(fault_tier_create(below, &w->below), 0);
	ck_assert_int_eq(fault_tier_create(tu_cache_policy(cc.capacity, cc.dirty_wait_ms,
							   POLICY_LRU), &w->mem), 0);
	pc.cache = w->mem;
	pc.below = w->below;
	ck_assert_int_eq(pipeline_create(&pc, &w->t), 0);
	if (workers)
		ck_assert_int_eq(pipeline_start(w->t), 0);
}

/* As two_open_recode(), hurried blocks encoded again 1 s after (the pipeline's default). */
static void two_open_workers(struct two *w, unsigned workers, unsigned loaders, uint64_t mem,
			     bool fresh_dir, bool hurry)
{
	two_open_recode(w, workers, loaders, mem, fresh_dir, hurry, 0);
}

static void two_open_hurry(struct two *w, unsigned workers, uint64_t mem, bool fresh_dir,
			   bool hurry)
{
	two_open_workers(w, workers, 0, mem, fresh_dir, hurry);
}

static void two_open_with(struct two *w, unsigned workers, uint64_t mem, bool fresh_dir)
{
	two_open_hurry(w, workers, mem, fresh_dir, false);
}

static void two_open(struct two *w, bool threads, bool fresh_dir)
{
	two_open_with(w, threads ? 2 : 0, MB, fresh_dir);
}

static void two_close(struct two *w, bool rm)
{
	tier_destroy(w->t);
	w->t = w->mem = w->below = NULL;
	if (rm)
		ut_rmtree(w->dir);
}

/* Reserve, write whole and commit (TIER_COMMIT_TRY, then final, as the FS does). */
static int two_put(struct tier *t, const struct blockid *id, uint64_t seed, uint64_t size,
		   uint64_t hint)
{
	struct tier_handle *h;
	int rc = t->ops->reserve(t, id, 0, hint, &h);

	if (rc)
		return rc;
	if (tu_write(h, id, seed, 0, size) < 0) {
		t->ops->abort(h);
		return -EIO;
	}
	rc = h->tier->ops->commit(h, NULL, TIER_COMMIT_TRY, NULL);
	return rc == -EIO ? h->tier->ops->commit(h, NULL, 0, NULL) : rc;
}

/* Every call of op on the tier below the pipeline takes delay_ns longer from now on. */
static void slow_below(struct two *w, enum fault_op op, int64_t delay_ns)
{
	fault_arm(w->below, &(struct fault_plan){ .action = FAULT_DELAY, .ops = FAULT_BIT(op),
						  .nth = 1, .times = UINT32_MAX,
						  .delay_ns = delay_ns });
}

/* Stop slowing the tier below and return how many commits it has seen in all. */
static uint64_t commits_below(struct two *w)
{
	struct fault_stats st;

	fault_disarm(w->below);
	fault_get_stats(w->below, &st);
	return st.seen[FOP_COMMIT];
}

/*
 * tier.h: "-EIO with TIER_COMMIT_TRY" leaves the handle with the caller (fs/fs.c keeps it and
 * commits it again at release). A complete block whose publication fails -EIO (here: the
 * disk tier's commit of a block that went straight to disk) must keep the handle too.
 * Without the fix in pipe_commit() the pipeline frees it: the FS's second commit is a use
 * after free.
 */
START_TEST(test_fault_below_try_commit_keeps_handle)
{
	struct two w;
	struct blockid id = ut_id(71);
	struct pipeline_counters before, after;
	struct tier_handle *h;
	int rc;

	two_open(&w, false, true);
	/* larger than memory: reserved below, published by the disk tier's commit */
	ck_assert_int_eq(w.t->ops->reserve(w.t, &id, 0, 2 * MB, &h), 0);
	ck_assert_int_eq(tu_write(h, &id, 1, 0, 2 * MB), (ssize_t)(2 * MB));
	fault_arm(w.below, &(struct fault_plan){ .ops = FAULT_BIT(FOP_COMMIT), .nth = 1 });
	pipeline_counters(w.t, &before);
	rc = h->tier->ops->commit(h, NULL, TIER_COMMIT_TRY, NULL);
	pipeline_counters(w.t, &after);
	ck_assert_int_eq(rc, -EIO);
	/* a finished commit is counted when the handle is given back: it must not be yet */
	ck_assert_msg(after.commits_failed == before.commits_failed &&
		      after.commits_incomplete == before.commits_incomplete,
		      "commit(TRY) = -EIO gave the handle back (tier.h: the caller keeps it)");
	fault_disarm(w.below);
	ck_assert_int_eq(h->tier->ops->commit(h, NULL, 0, NULL), -EIO); /* the release */
	ck_assert_int_eq(tu_lookup(w.t, &id, NULL), -ENOENT);
	ck_assert_int_eq(two_put(w.t, &id, 2, 2 * MB, 2 * MB), 0);
	tu_expect(w.t, &id, 2, 2 * MB);
	two_close(&w, true);
}
END_TEST

/*
 * The dump of an empty block declares its size with truncate(); when that fails, dump()
 * must abort the reservation below (it leaked it: a handle, a compress writer and a temp
 * file in the STORE until the next start).
 */
START_TEST(test_fault_below_empty_block_dump_fails)
{
	struct two w;
	struct blockid id = ut_id(72);
	struct fault_stats st;

	two_open(&w, false, true);
	fault_arm(w.below, &(struct fault_plan){ .ops = FAULT_BIT(FOP_TRUNCATE), .nth = 1 });
	ck_assert_int_eq(two_put(w.t, &id, 1, 0, 0), 0); /* the dump runs inline and fails */
	fault_get_stats(w.below, &st);
	ck_assert_uint_eq(st.faults, 1);
	fault_disarm(w.below);
	ck_assert_int_eq(count_temp(w.dir), 0);
	tu_expect(w.t, &id, 1, 0);
	ck_assert_int_eq(w.t->ops->sync(w.t, &id), 0); /* written below now */
	two_close(&w, false);
	two_open(&w, false, false);
	tu_expect(w.t, &id, 1, 0);
	two_close(&w, true);
}
END_TEST

/*
 * A replacement written straight to disk whose commit fails must leave the old version: the
 * pipeline removed it from memory before the disk tier's commit, so an old version that was
 * only in memory (its dump had failed) was lost with the failed replacement.
 */
START_TEST(test_fault_below_failed_replacement_keeps_old)
{
	struct two w;
	struct blockid id = ut_id(75);
	struct tier_handle *h;

	two_open(&w, false, true);
	/* version 1 stays in memory only: its dump fails */
	fault_arm(w.below, &(struct fault_plan){ .ops = FAULT_BIT(FOP_RESERVE), .nth = 1 });
	ck_assert_int_eq(two_put(w.t, &id, 1, 5000, 5000), 0);
	/* version 2, larger than memory, reserved below; its commit there fails */
	fault_arm(w.below, &(struct fault_plan){ .ops = FAULT_BIT(FOP_COMMIT), .nth = 1 });
	ck_assert_int_eq(w.t->ops->reserve(w.t, &id, TIER_RESERVE_TRUNC, 2 * MB, &h), 0);
	ck_assert_int_eq(tu_write(h, &id, 2, 0, 2 * MB), (ssize_t)(2 * MB));
	ck_assert_int_eq(h->tier->ops->commit(h, NULL, 0, NULL), -EIO);
	fault_disarm(w.below);
	ck_assert_int_eq(tu_try_read(w.t, &id, 1, 5000), 0);
	ck_assert_int_eq(w.t->ops->sync(w.t, &id), 0);
	two_close(&w, false);
	two_open(&w, false, false);
	tu_expect(w.t, &id, 1, 5000);
	two_close(&w, true);
}
END_TEST

/*
 * A block that is only in memory (its dump failed) and that the memory tier cannot open
 * (-ENOMEM): open must say so, not -ENOENT (the block exists: lookup finds it), and sync
 * must fail rather than try again forever (it spun in pipe_sync()'s loop).
 */
START_TEST(test_fault_mem_open_fails_dirty_block)
{
	struct two w;
	struct blockid id = ut_id(73);
	struct tier_handle *h;
	int rc;

	two_open(&w, false, true);
	/* every dump fails: the block stays dirty, in memory only */
	fault_arm(w.below, &(struct fault_plan){ .ops = FAULT_BIT(FOP_RESERVE), .nth = 1,
						 .times = UINT32_MAX });
	ck_assert_int_eq(two_put(w.t, &id, 1, 5000, 5000), 0);
	fault_disarm(w.below);
	ck_assert_int_eq(tu_lookup(w.t, &id, NULL), 0);
	fault_arm(w.mem, &(struct fault_plan){ .ops = FAULT_BIT(FOP_OPEN), .nth = 1,
					       .times = UINT32_MAX, .err = -ENOMEM });
	rc = w.t->ops->open(w.t, &id, 0, &h);
	if (rc == 0)
		tier_close(h);
	ck_assert_msg(rc == -ENOMEM, "open of a block memory cannot open = %d, want -ENOMEM", rc);
	watch(watch_seconds(), "check_fault: sync spins while memory cannot open the block\n");
	rc = w.t->ops->sync(w.t, &id);
	watch(0, " ");
	ck_assert_int_eq(rc, -EIO);
	fault_disarm(w.mem);
	ck_assert_int_eq(w.t->ops->sync(w.t, &id), 0);
	tu_expect(w.t, &id, 1, 5000);
	two_close(&w, true);
}
END_TEST

/*
 * When the memory tier holds a newer version than the disk (its dump has not happened or
 * failed) and cannot open it, open must fail, not serve the older version from disk (found
 * by fault_mem random: a replaced block read back as its previous version).
 */
START_TEST(test_fault_mem_open_fails_newer_version)
{
	struct two w;
	struct blockid id = ut_id(76);
	struct tier_handle *h;
	int rc;

	two_open(&w, false, true);
	ck_assert_int_eq(two_put(w.t, &id, 1, 5000, 5000), 0); /* version 1 on disk too */
	fault_arm(w.below, &(struct fault_plan){ .ops = FAULT_BIT(FOP_RESERVE), .nth = 1 });
	ck_assert_int_eq(two_put(w.t, &id, 2, 6000, 6000), 0); /* version 2 in memory only */
	fault_arm(w.mem, &(struct fault_plan){ .ops = FAULT_BIT(FOP_OPEN), .nth = 1 });
	rc = w.t->ops->open(w.t, &id, 0, &h);
	if (rc == 0) {
		struct block_attr a;

		h->tier->ops->stat(h, &a);
		tier_close(h);
		ck_abort_msg("open while memory cannot open version 2 = 0, size %llu (version 1 "
			     "is 5000 bytes): want -EIO", (unsigned long long)a.size);
	}
	ck_assert_int_eq(rc, -EIO);
	fault_disarm(w.mem);
	tu_expect(w.t, &id, 2, 6000);
	two_close(&w, true);
}
END_TEST

/*
 * A reader that opens a block while an older load of it is still in flight must not join
 * that load if the block was removed or replaced since: it read the removed bytes, or the
 * old version after a replacement committed (found by the threaded loop, fault_disk
 * threads). Disk reads are slowed down so the load is still in flight.
 */
START_TEST(test_fault_disk_open_joins_stale_load)
{
	struct two w;
	struct blockid id = ut_id(74);
	struct tier_handle *h1, *h2;
	int rc;

	two_open(&w, true, true);
	ck_assert_int_eq(two_put(w.t, &id, 1, 600 * KB, 600 * KB), 0);
	tu_settle(w.t);
	two_close(&w, false);
	two_open(&w, true, false); /* memory is empty: the block is only on disk */
	slow_below(&w, FOP_READ, 100000000);
	ck_assert_int_eq(w.t->ops->open(w.t, &id, 0, &h1), 0); /* a load starts */
	ck_assert_int_eq(w.t->ops->remove(w.t, &id), 0);
	rc = w.t->ops->open(w.t, &id, 0, &h2);
	if (rc == 0)
		tier_close(h2);
	ck_assert_msg(rc == -ENOENT, "open after remove = %d (joined the old load)", rc);
	/* replaced, straight to disk (larger than memory), while the old load goes on */
	ck_assert_int_eq(two_put(w.t, &id, 2, 2 * MB, 2 * MB), 0);
	rc = tu_try_read(w.t, &id, 2, 2 * MB);
	ck_assert_msg(rc == 0, "read after a replacement = %d (joined the old load)", rc);
	tier_close(h1);
	fault_disarm(w.below);
	tu_settle(w.t);
	tu_expect(w.t, &id, 2, 2 * MB);
	two_close(&w, true);
}
END_TEST

/*
 * An fsync of a block whose dump a worker is writing waits for that dump instead of writing
 * the block a second time beside it (it used to: twice the compression and the disk writes
 * for a block fsynced while its dump ran).
 */
START_TEST(test_fault_disk_sync_waits_for_dump)
{
	struct two w;
	struct blockid id = ut_id(75);
	uint64_t commits;

	two_open(&w, true, true);
	slow_below(&w, FOP_WRITE, 300000000);
	ck_assert_int_eq(two_put(w.t, &id, 1, 900 * KB, 900 * KB), 0); /* its dump is queued */
	ut_sleep_ms(50); /* a worker is writing it */
	ck_assert_int_eq(w.t->ops->sync(w.t, &id), 0);
	tu_settle(w.t);
	commits = commits_below(&w);
	ck_assert_msg(commits == 1, "the block was written below %llu times",
		      (unsigned long long)commits);
	tu_expect(w.t, &id, 1, 900 * KB);
	two_close(&w, true);
}
END_TEST

/*
 * A worker whose next queued dump is of a block an fsync is writing goes on with the dump
 * after it instead of waiting for the fsync. One worker, each write below slowed to 300 ms:
 * the worker dumps c (one write) while a, 3 MB (three writes), and b queue behind it; an fsync
 * of a starts at once. When the fsync returns (~950 ms), b is on disk (written ~300-600 ms);
 * a worker that waited for a's dump would write b only after it (~950-1250 ms).
 */
START_TEST(test_fault_disk_worker_passes_synced_dump)
{
	struct two w;
	struct blockid a = ut_id(76), b = ut_id(77), c = ut_id(78);
	uint64_t commits;

	two_open_with(&w, 1, 8 * MB, true);
	slow_below(&w, FOP_WRITE, 300000000);
	ck_assert_int_eq(two_put(w.t, &c, 1, 100 * KB, 100 * KB), 0);
	ut_sleep_ms(20); /* the worker is writing c */
	ck_assert_int_eq(two_put(w.t, &a, 2, 3 * MB, 3 * MB), 0);
	ck_assert_int_eq(two_put(w.t, &b, 3, 100 * KB, 100 * KB), 0);
	ck_assert_int_eq(w.t->ops->sync(w.t, &a), 0);
	ck_assert_msg(tu_lookup(w.below, &b, NULL) == 0,
		      "the worker waited for the fsync's dump before writing the next block");
	tu_settle(w.t);
	commits = commits_below(&w);
	ck_assert_msg(commits == 3, "%llu blocks written below for 3", (unsigned long long)commits);
	tu_expect(w.t, &a, 2, 3 * MB);
	tu_expect(w.t, &b, 3, 100 * KB);
	tu_expect(w.t, &c, 1, 100 * KB);
	two_close(&w, true);
}
END_TEST

/* Wait (up to 20 s) until the pipeline has written n hurried blocks again. */
static void wait_recompressed(struct tier *t, uint64_t n)
{
	int64_t until = mono_ns() + 20 * 1000000000LL;
	struct pipeline_counters c;

	for (;;) {
		pipeline_counters(t, &c);
		if (c.recompressed >= n || mono_ns() > until)
			break;
		ut_sleep_ms(20);
	}
	ck_assert_msg(c.recompressed >= n, "%llu blocks written again, compressed, of %llu",
		      (unsigned long long)c.recompressed, (unsigned long long)n);
	ck_assert_uint_eq(c.recompress_pending, 0);
}

/*
 * An fsync that comes while other dumps are being written does not also wait for its block's
 * compression: the block goes below as it is, reads back whole, and is written again,
 * compressed, once nobody waits. One worker, each write below slowed to 50 ms: the worker
 * dumps a (3 MB: three writes) while b waits in the queue; the fsync of b writes b itself,
 * uncompressed, and the worker stores the rest of a uncompressed too while the fsync waits.
 * With hurry off (sync_compress=inline) the same fsync writes b compressed.
 */
START_TEST(test_fault_below_fsync_behind_dumps_hurries)
{
	for (int hurry = 1; hurry >= 0; hurry--) {
		struct two w;
		struct blockid a = ut_id(81), b = ut_id(82);
		struct pipeline_counters c;
		struct block_attr at;

		two_open_hurry(&w, 1, 16 * MB, true, hurry);
		slow_below(&w, FOP_WRITE, 50000000);
		ck_assert_int_eq(two_put(w.t, &a, 1, 3 * MB, 3 * MB), 0);
		ck_assert_int_eq(two_put(w.t, &b, 2, 2 * MB, 2 * MB), 0);
		ck_assert_int_eq(w.t->ops->sync(w.t, &b), 0);
		ck_assert_int_eq(tu_lookup(w.below, &b, &at), 0);
		pipeline_counters(w.t, &c);
		if (!hurry) {
			ck_assert_uint_lt(at.stored, 2 * MB * 9 / 10);
			tu_settle(w.t);
			pipeline_counters(w.t, &c);
			ck_assert_uint_eq(c.dumps_hurried, 0);
			ck_assert_uint_eq(c.recompress_pending, 0);
			two_close(&w, true);
			continue;
		}
		ck_assert_uint_ge(at.stored, 2 * MB); /* raw (and its header): no zstd */
		ck_assert_uint_ge(c.dumps_hurried, 1);
		tu_expect(w.below, &b, 2, 2 * MB);
		fault_disarm(w.below);
		tu_settle(w.t);
		pipeline_counters(w.t, &c);
		ck_assert_uint_eq(c.dumps_hurried, 2); /* a from the moment b's fsync waited */
		wait_recompressed(w.t, 2);
		ck_assert_int_eq(tu_lookup(w.below, &b, &at), 0);
		ck_assert_uint_lt(at.stored, 2 * MB * 9 / 10);
		ck_assert_int_eq(tu_lookup(w.below, &a, &at), 0);
		ck_assert_uint_lt(at.stored, 3 * MB * 9 / 10);
		tu_expect(w.below, &a, 1, 3 * MB);
		tu_expect(w.below, &b, 2, 2 * MB);
		tu_expect(w.t, &b, 2, 2 * MB);
		two_close(&w, true);
	}
}
END_TEST

/*
 * A hurried block that is removed, or replaced, before it is written again stays removed, or
 * replaced: writing it again must not bring the old bytes back.
 */
START_TEST(test_fault_below_hurried_block_removed_or_replaced)
{
	struct two w;
	struct blockid a = ut_id(83), b = ut_id(84);
	struct pipeline_counters c;

	/* the rewrites wait 3 s: b is removed and a replaced before either may run (with the
	 * default 1 s, a run under ASan once rewrote a first: its dump ended first) */
	two_open_recode(&w, 1, 0, 16 * MB, true, true, 3000);
	slow_below(&w, FOP_WRITE, 50000000);
	ck_assert_int_eq(two_put(w.t, &a, 1, 3 * MB, 3 * MB), 0);
	ck_assert_int_eq(two_put(w.t, &b, 2, 2 * MB, 2 * MB), 0);
	ck_assert_int_eq(w.t->ops->sync(w.t, &b), 0);
	fault_disarm(w.below);
	pipeline_counters(w.t, &c);
	ck_assert_uint_ge(c.recompress_pending, 1); /* b's rewrite waits */
	ck_assert_int_eq(w.t->ops->remove(w.t, &b), 0);
	/* no other dump runs while the new version's fsync waits: it is not hurried */
	tu_settle(w.t);
	ck_assert_int_eq(two_put(w.t, &a, 3, 3 * MB, 3 * MB), 0); /* a new version of a */
	ck_assert_int_eq(w.t->ops->sync(w.t, &a), 0);
	ut_sleep_ms(3500); /* past the delay of a rewrite */
	tu_settle(w.t);
	pipeline_counters(w.t, &c);
	ck_assert_uint_eq(c.recompress_pending, 0);
	ck_assert_uint_eq(c.recompressed, 0);
	ck_assert_int_eq(tu_lookup(w.t, &b, NULL), -ENOENT);
	ck_assert_int_eq(tu_lookup(w.below, &b, NULL), -ENOENT);
	tu_expect(w.below, &a, 3, 3 * MB);
	tu_expect(w.t, &a, 3, 3 * MB);
	two_close(&w, true);
}
END_TEST

/*
 * A rewrite is idle work: an fsync that comes while one runs is not hurried for it (its block
 * is stored compressed), and the rewrite gives way and is done later.
 */
START_TEST(test_fault_below_rewrite_gives_way_to_fsync)
{
	struct two w;
	struct blockid a = ut_id(85), b = ut_id(86), c = ut_id(87);
	struct pipeline_counters pc;
	struct block_attr at;
	int64_t until;

	two_open_hurry(&w, 1, 16 * MB, true, true);
	slow_below(&w, FOP_WRITE, 50000000);
	ck_assert_int_eq(two_put(w.t, &a, 1, 3 * MB, 3 * MB), 0);
	ck_assert_int_eq(two_put(w.t, &b, 2, 2 * MB, 2 * MB), 0);
	ck_assert_int_eq(w.t->ops->sync(w.t, &b), 0);
	tu_settle(w.t);
	/* the first rewrite starts a second later, and takes at least 100 ms */
	until = mono_ns() + 10 * 1000000000LL;
	do {
		pipeline_counters(w.t, &pc);
	} while (pc.recompress_pending == 2 && mono_ns() < until);
	ck_assert_uint_eq(pc.recompress_pending, 1);
	ck_assert_uint_eq(pc.recompressed, 0);
	ck_assert_int_eq(two_put(w.t, &c, 3, 1 * MB, 1 * MB), 0);
	ck_assert_int_eq(w.t->ops->sync(w.t, &c), 0);
	ck_assert_int_eq(tu_lookup(w.below, &c, &at), 0);
	ck_assert_uint_lt(at.stored, MB * 9 / 10);
	fault_disarm(w.below);
	wait_recompressed(w.t, 2);
	pipeline_counters(w.t, &pc);
	ck_assert_uint_eq(pc.dumps_hurried, 2);
	tu_expect(w.below, &a, 1, 3 * MB);
	tu_expect(w.below, &b, 2, 2 * MB);
	tu_expect(w.below, &c, 3, 1 * MB);
	two_close(&w, true);
}
END_TEST

/* An fsync in a thread of its own. */
struct bg_sync {
	struct tier *t;
	struct blockid id;
	int rc;
};

static void *bg_sync_run(void *arg)
{
	struct bg_sync *s = arg;

	s->rc = s->t->ops->sync(s->t, &s->id);
	return NULL;
}

/*
 * An fsync waits for the flush below as well as for its block's dump, and dumps that start
 * while it waits there are hurried too: a writer's loop of fsyncs comes to those blocks next,
 * and each flush then finds more of them on disk. One worker, each write and sync below
 * slowed to 200 ms. The worker dumps x (2 MB: two writes, until 400 ms); 100 ms in, a, b and
 * c are written and a is fsynced: the fsync writes a itself (until 300 ms), then waits in its
 * flush (until 500 ms), and the worker, done with x, dumps b (c queued behind it) uncompressed.
 * Hurried blocks are written again, compressed, later.
 */
START_TEST(test_fault_below_dumps_hurried_while_fsync_flushes)
{
	struct two w;
	struct blockid x = ut_id(87), a = ut_id(88), b = ut_id(89), c = ut_id(90);
	struct bg_sync s = { .id = a };
	struct pipeline_counters pc;
	struct block_attr at;
	pthread_t th;

	two_open_recode(&w, 1, 0, 16 * MB, true, true, 3000);
	fault_arm(w.below, &(struct fault_plan){ .action = FAULT_DELAY,
						 .ops = FAULT_BIT(FOP_WRITE) | FAULT_BIT(FOP_SYNC),
						 .nth = 1, .times = UINT32_MAX, .delay_ns = 200000000 });
	ck_assert_int_eq(two_put(w.t, &x, 4, 2 * MB, 2 * MB), 0);
	ut_sleep_ms(100);
	ck_assert_int_eq(two_put(w.t, &a, 1, 1 * MB, 1 * MB), 0);
	ck_assert_int_eq(two_put(w.t, &b, 2, 2 * MB, 2 * MB), 0);
	ck_assert_int_eq(two_put(w.t, &c, 3, 1 * MB, 1 * MB), 0);
	s.t = w.t;
	ck_assert_int_eq(pthread_create(&th, NULL, bg_sync_run, &s), 0);
	pthread_join(th, NULL);
	ck_assert_int_eq(s.rc, 0);
	fault_disarm(w.below);
	tu_settle(w.t);
	ck_assert_int_eq(tu_lookup(w.below, &b, &at), 0);
	ck_assert_uint_ge(at.stored, 2 * MB); /* raw (and its header): no zstd */
	pipeline_counters(w.t, &pc);
	ck_assert_uint_ge(pc.dumps_hurried, 2); /* a, b (and x from its second write) */
	wait_recompressed(w.t, pc.dumps_hurried);
	ck_assert_int_eq(tu_lookup(w.below, &b, &at), 0);
	ck_assert_uint_lt(at.stored, 2 * MB * 9 / 10);
	tu_expect(w.below, &x, 4, 2 * MB);
	tu_expect(w.below, &a, 1, 1 * MB);
	tu_expect(w.below, &b, 2, 2 * MB);
	tu_expect(w.below, &c, 3, 1 * MB);
	two_close(&w, true);
}
END_TEST

/* One read answered later by map_start(). */
struct later {
	pthread_mutex_t *lock;
	pthread_cond_t *cond;
	int *answered;
	const char *data;
	int err;
	bool called;
};

static void later_done(void *arg, const void *data, int err)
{
	struct later *l = arg;

	pthread_mutex_lock(l->lock);
	ck_assert_msg(!l->called, "a read was answered twice");
	l->called = true;
	l->data = data;
	l->err = err;
	(*l->answered)++;
	pthread_cond_broadcast(l->cond);
	pthread_mutex_unlock(l->lock);
}

/* Wait until `want` reads are answered (the disk is slowed down, not stopped). */
static void later_wait(pthread_mutex_t *lock, pthread_cond_t *cond, int *answered, int want)
{
	int64_t until = mono_ns() + 30 * 1000000000LL;

	pthread_mutex_lock(lock);
	while (*answered < want && mono_ns() < until) {
		struct timespec ts = { .tv_sec = 0, .tv_nsec = 0 };

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		pthread_cond_timedwait(cond, lock, &ts);
	}
	ck_assert_int_eq(*answered, want);
	pthread_mutex_unlock(lock);
}

/*
 * At most dump_threads workers compress or decode at once: with one dumper writing slowly
 * and a block queued behind it, one dump runs at a time (the other workers only load blocks
 * stored raw), and a reader of a block only on disk gets it meanwhile, byte-exact, without
 * waiting for the dumps (the fetcher decodes what readers wait for).
 */
START_TEST(test_fault_below_loads_beside_slow_dumps)
{
	struct two w;
	struct blockid a = ut_id(91), b = ut_id(92), c = ut_id(93);
	struct fault_stats st;
	struct pipeline_counters pc;
	struct block_attr at;

	two_open_workers(&w, 1, 3, 16 * MB, true, false);
	ck_assert_int_eq(two_put(w.t, &c, 3, 3 * MB + 5, 3 * MB + 5), 0);
	tu_settle(w.t);
	two_close(&w, false);
	two_open_workers(&w, 1, 3, 16 * MB, false, false); /* c is only on disk */
	slow_below(&w, FOP_WRITE, 300000000);
	ck_assert_int_eq(two_put(w.t, &a, 1, 2 * MB, 2 * MB), 0);
	ck_assert_int_eq(two_put(w.t, &b, 2, 2 * MB, 2 * MB), 0);
	ut_sleep_ms(50);
	tu_expect(w.t, &c, 3, 3 * MB + 5); /* loaded while a's writes crawl */
	fault_get_stats(w.below, &st);
	pipeline_counters(w.t, &pc);
	ck_assert_uint_eq(pc.dumps, 0);
	ck_assert_uint_eq(pc.loads, 1);
	ck_assert_uint_eq(st.seen[FOP_RESERVE], 1); /* b's dump waits for the dumper */
	ck_assert_int_ne(tu_lookup(w.below, &b, &at), 0);
	fault_disarm(w.below);
	tu_settle(w.t);
	tu_expect(w.below, &a, 1, 2 * MB);
	tu_expect(w.below, &b, 2, 2 * MB);
	two_close(&w, true);
}
END_TEST

/*
 * Reads of a block that is being loaded from a slow disk do not wait in the thread that
 * asks (fs/fs.c's session threads): map_start() leaves each one waiting on the load and
 * returns; the worker that fetches a read's last piece answers it with the right bytes. A
 * failing disk answers every waiting read with its error.
 */
START_TEST(test_fault_disk_reads_answered_later)
{
	enum { R = 6 };
	const uint64_t size = 768 * KB, part = size / R; /* memory holds 1 MiB */
	pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
	struct blockid id = ut_id(75), id2 = ut_id(76);
	struct later l[R];
	struct pipeline_counters c;
	struct tier_handle *h;
	int answered = 0;
	char *want = malloc(size);
	struct two w;

	ck_assert_ptr_nonnull(want);
	ut_fill(&id, 1, want, size, 0);
	two_open(&w, true, true);
	ck_assert_int_eq(two_put(w.t, &id, 1, size, size), 0);
	ck_assert_int_eq(two_put(w.t, &id2, 2, size, size), 0);
	tu_settle(w.t);
	two_close(&w, false);
	two_open(&w, true, false); /* memory is empty: the blocks are only on disk */
	slow_below(&w, FOP_READ, 500000000);
	ck_assert_int_eq(w.t->ops->open(w.t, &id, 0, &h), 0);
	/* last part first: the runners fetch what readers wait for, in their order */
	for (int i = R - 1; i >= 0; i--) {
		const void *data = NULL;
		int rc;

		l[i] = (struct later){ .lock = &lock, .cond = &cond, .answered = &answered };
		rc = h->tier->ops->map_start(h, (uint64_t)i * part, part, later_done, &l[i], &data);
		ck_assert_msg(rc == 0, "map_start of part %d = %d: not left waiting", i, rc);
	}
	/* every disk read takes 500 ms: nobody could have been answered yet */
	pthread_mutex_lock(&lock);
	ck_assert_int_eq(answered, 0);
	pthread_mutex_unlock(&lock);
	pipeline_counters(w.t, &c);
	ck_assert_uint_eq(c.reads_waiting, R);
	later_wait(&lock, &cond, &answered, R);
	for (int i = 0; i < R; i++) {
		ck_assert_int_eq(l[i].err, 0);
		ck_assert_ptr_nonnull(l[i].data);
		ck_assert_msg(!memcmp(l[i].data, want + i * part, part), "part %d: wrong bytes", i);
	}
	pipeline_counters(w.t, &c);
	ck_assert_uint_eq(c.reads_waiting, 0);
	tier_close(h);
	tu_settle(w.t); /* the load admitted: its memory can be evicted for the next one */

	/* a dead disk: the waiting reads get its error */
	fault_arm(w.below, &(struct fault_plan){ .ops = FAULT_BIT(FOP_READ), .nth = 1,
						       .times = UINT32_MAX, .err = -EIO });
	answered = 0;
	ck_assert_int_eq(w.t->ops->open(w.t, &id2, 0, &h), 0);
	for (int i = 0; i < 2; i++) {
		const void *data = NULL;
		int rc;

		l[i] = (struct later){ .lock = &lock, .cond = &cond, .answered = &answered };
		rc = h->tier->ops->map_start(h, (uint64_t)i * part, part, later_done, &l[i], &data);
		if (rc < 0) { /* the load failed before this read came */
			ck_assert_int_eq(rc, -EIO);
			later_done(&l[i], NULL, rc);
		} else {
			ck_assert_int_eq(rc, 0);
		}
	}
	later_wait(&lock, &cond, &answered, 2);
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(l[i].err, -EIO);
		ck_assert_ptr_null(l[i].data);
	}
	tier_close(h);
	fault_disarm(w.below);
	two_close(&w, true);
	free(want);
}
END_TEST

/* A read answered later whose callback closes the block: the reply was its last use. */
struct closing_read {
	struct later l;
	struct tier_handle *h;
	const char *want;
	size_t len;
	bool same;
};

static void closing_done(void *arg, const void *data, int err)
{
	struct closing_read *c = arg;

	c->same = data && !memcmp(data, c->want, c->len);
	tier_close(c->h); /* as a FUSE release may, the moment the reply is out */
	later_done(&c->l, data, err);
}

/*
 * The reader's handle may be closed by the callback, in the thread that fetched the bytes,
 * while map_start() has not returned yet: the load must not be touched through the reader's
 * reference after its waiter is added (it is freed with the handle).
 */
START_TEST(test_fault_disk_callback_closes_block)
{
	enum { N = 64 };
	const size_t size = 256 * KB; /* one piece */
	pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
	char *want = malloc(size);
	int answered = 0, later = 0;
	struct two w;

	ck_assert_ptr_nonnull(want);
	two_open(&w, true, true);
	for (int i = 0; i < N; i++) {
		struct blockid id = ut_id(200 + i);

		ck_assert_int_eq(two_put(w.t, &id, 100 + i, size, size), 0);
	}
	tu_settle(w.t);
	two_close(&w, false);
	two_open(&w, true, false); /* the blocks are only on disk */
	for (int i = 0; i < N; i++) {
		struct blockid id = ut_id(200 + i);
		struct closing_read c = { .l = { .lock = &lock, .cond = &cond,
						 .answered = &answered },
					  .want = want, .len = size };
		const void *data = NULL;
		int rc;

		ut_fill(&id, 100 + i, want, size, 0);
		ck_assert_int_eq(w.t->ops->open(w.t, &id, 0, &c.h), 0);
		rc = c.h->tier->ops->map_start(c.h, 0, size, closing_done, &c, &data);
		if (rc == 1) /* in before the read asked */
			closing_done(&c, data, 0);
		else
			ck_assert_int_eq(rc, 0);
		later += rc == 0;
		later_wait(&lock, &cond, &answered, i + 1);
		ck_assert_int_eq(c.l.err, 0);
		ck_assert_msg(c.same, "block %d: wrong bytes", i);
		/* the load admitted and unpinned: the next one finds room in memory (else it
		 * would be streamed past memory, and map_start() would say -ENOTSUP) */
		tu_settle(w.t);
	}
	ck_assert_msg(later > 0, "no read of a cold block was left waiting");
	tu_settle(w.t);
	two_close(&w, true);
	free(want);
}
END_TEST

/* --- the loops --------------------------------------------------------------------------- */

START_TEST(test_fault_disk_every_call)
{
	fault_loop("fault_disk", AT_DISK, false, false, 0);
}
END_TEST

START_TEST(test_fault_disk_every_call_threads)
{
	fault_loop("fault_disk threads", AT_DISK, true, false, 0);
}
END_TEST

START_TEST(test_fault_disk_random)
{
	random_loop("fault_disk random", AT_DISK, true);
}
END_TEST

START_TEST(test_fault_below_every_call)
{
	fault_loop("fault_below", AT_BELOW, false, false, 0);
}
END_TEST

START_TEST(test_fault_below_every_call_threads)
{
	fault_loop("fault_below threads", AT_BELOW, true, false, 0);
}
END_TEST

START_TEST(test_fault_below_random)
{
	random_loop("fault_below random", AT_BELOW, true);
}
END_TEST

START_TEST(test_fault_mem_every_call)
{
	fault_loop("fault_mem", AT_MEM, false, false, 0);
}
END_TEST

START_TEST(test_fault_mem_every_call_threads)
{
	fault_loop("fault_mem threads", AT_MEM, true, false, 0);
}
END_TEST

START_TEST(test_fault_mem_random)
{
	random_loop("fault_mem random", AT_MEM, true);
}
END_TEST

START_TEST(test_fault_alloc_every_allocation)
{
	if (!fault_alloc_available()) {
		printf("fault_alloc: linked without the --wrap flags: skipped\n");
		return;
	}
	fault_loop("fault_alloc", AT_NONE, false, true, 0);
}
END_TEST

static Suite *loop_suite(const char *name, const TTest *every, const TTest *threads,
			 const TTest *random, const TTest *const *errors)
{
	Suite *s = suite_create(name);
	TCase *tc = ut_tcase("core", UT_TIMEOUT_SLOW);

	tcase_add_test(tc, every);
	suite_add_tcase(s, tc);
	if (errors && errors[0]) {
		tc = ut_tcase("errors", UT_TIMEOUT);
		for (; *errors; errors++)
			tcase_add_test(tc, *errors);
		suite_add_tcase(s, tc);
	}
	if (threads) {
		tc = ut_tcase("concurrency", UT_TIMEOUT_SLOW);
		tcase_add_test(tc, threads);
		suite_add_tcase(s, tc);
	}
	if (random) {
		tc = ut_tcase("random", UT_TIMEOUT_SLOW);
		tcase_add_test(tc, random);
		suite_add_tcase(s, tc);
	}
	return s;
}

Suite *fault_disk_suite(void)
{
	const TTest *errors[] = { test_fault_disk_open_joins_stale_load,
				  test_fault_disk_reads_answered_later,
				  test_fault_disk_callback_closes_block,
				  test_fault_disk_sync_waits_for_dump,
				  test_fault_disk_worker_passes_synced_dump, NULL };

	return loop_suite("fault_disk", test_fault_disk_every_call,
			  test_fault_disk_every_call_threads, test_fault_disk_random, errors);
}

Suite *fault_below_suite(void)
{
	const TTest *errors[] = { test_fault_below_try_commit_keeps_handle,
				  test_fault_below_empty_block_dump_fails,
				  test_fault_below_failed_replacement_keeps_old,
				  test_fault_below_fsync_behind_dumps_hurries,
				  test_fault_below_hurried_block_removed_or_replaced,
				  test_fault_below_rewrite_gives_way_to_fsync,
				  test_fault_below_dumps_hurried_while_fsync_flushes,
				  test_fault_below_loads_beside_slow_dumps, NULL };

	return loop_suite("fault_below", test_fault_below_every_call,
			  test_fault_below_every_call_threads, test_fault_below_random, errors);
}

Suite *fault_mem_suite(void)
{
	const TTest *errors[] = { test_fault_mem_open_fails_dirty_block,
				  test_fault_mem_open_fails_newer_version, NULL };

	return loop_suite("fault_mem", test_fault_mem_every_call,
			  test_fault_mem_every_call_threads, test_fault_mem_random, errors);
}

Suite *fault_alloc_suite(void)
{
	return loop_suite("fault_alloc", test_fault_alloc_every_allocation, NULL, NULL, NULL);
}
