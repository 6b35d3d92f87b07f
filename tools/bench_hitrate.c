/*
 * ucm-bench hit-rate phase (bench_phases.h): how well each replacement policy of the memory
 * tier keeps the blocks that are read again, against the best any policy could do.
 *
 * One seeded Zipf read stream (exponent HR_ZIPF) over a working set of twice the memory
 * tier's capacity, of HR_BLOCK blocks of KV-like data, is replayed through a real mount once
 * per policy (-o policy=clock|lru|fifo, a fresh daemon each, on one store where every block
 * is already durable, so the memory tier starts empty). Each access is what an engine does:
 * open(O_RDONLY|O_DIRECT), one pread of the whole block (checked against what was written),
 * close. The hit ratio is the delta of ucmfs_tier_hits_total{tier="mem"} over hits + misses
 * in /.ucm/stats across the stream.
 *
 * The floor of every row is Belady's OPT on the same trace at the same capacity in blocks
 * (evict the resident block whose next use is furthest away): the hit ratio of a policy that
 * knows the future, which no policy can beat. The same trace is also replayed in-process
 * through the daemon's own policy code (tiers/cache_policy_*.c), driven the way the cache
 * drives it on a read (a hit is a use: touched; a miss evicts the victim and admits the
 * block), as a cross-check of the mount's figure.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tiers/cache_policy.h"
#include "tools/bench_phases.h"

#define HR_BLOCK MiB
#define HR_ZIPF 0.99
#define HR_NPOL 3

static const char *const POLICIES[HR_NPOL] = { "clock", "lru", "fifo" };
static const struct cache_policy_ops *const POLICY_OPS[HR_NPOL] = {
	&cache_policy_clock, &cache_policy_lru, &cache_policy_fifo
};

struct trace {
	uint32_t *blk;   /* block index of each access */
	uint64_t n;      /* accesses */
	uint32_t blocks; /* working set */
	uint32_t cap;    /* memory tier capacity in blocks */
};

/* --- the trace --------------------------------------------------------------------------- */

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double uniform01(uint64_t *s)
{
	return (double)(splitmix(s) >> 11) * 0x1.0p-53;
}

/* A Zipf(s) stream over t->blocks blocks: rank k is drawn with weight 1/k^s; the ranks are
 * shuffled over the block indices, so that popularity has nothing to do with write order. */
static int trace_make(struct trace *t, double s, uint64_t seed)
{
	double *cdf = malloc(t->blocks * sizeof(*cdf));
	uint32_t *perm = malloc(t->blocks * sizeof(*perm));
	uint64_t rng = seed * 0x2545f4914f6cdd1dull + 17;
	double sum = 0;

	t->blk = malloc(t->n * sizeof(*t->blk));
	if (!cdf || !perm || !t->blk) {
		free(cdf);
		free(perm);
		free(t->blk);
		t->blk = NULL;
		return bench_fail(ENOMEM, "hit-rate trace");
	}
	for (uint32_t k = 0; k < t->blocks; k++) {
		sum += pow(k + 1.0, -s);
		cdf[k] = sum;
		perm[k] = k;
	}
	for (uint32_t k = t->blocks - 1; k > 0; k--) {
		uint32_t j = (uint32_t)(splitmix(&rng) % (k + 1));
		uint32_t x = perm[k];

		perm[k] = perm[j];
		perm[j] = x;
	}
	for (uint64_t i = 0; i < t->n; i++) {
		double u = uniform01(&rng) * sum;
		uint32_t lo = 0, hi = t->blocks - 1;

		while (lo < hi) {
			uint32_t mid = (lo + hi) / 2;

			if (cdf[mid] > u)
				hi = mid;
			else
				lo = mid + 1;
		}
		t->blk[i] = perm[lo];
	}
	free(cdf);
	free(perm);
	return 0;
}

/* --- simulations ------------------------------------------------------------------------- */

/* Belady's OPT: on a miss with a full memory, evict the block used again furthest ahead.
 * Hits, or UINT64_MAX if out of memory. */
static uint64_t sim_opt(const struct trace *t)
{
	uint64_t *next = malloc(t->n * sizeof(*next));
	uint64_t *seen = malloc(t->blocks * sizeof(*seen));
	uint64_t *use = malloc(t->blocks * sizeof(*use)); /* next use of each resident block */
	uint32_t *res = malloc(t->cap * sizeof(*res));     /* resident blocks */
	char *in = calloc(t->blocks, 1);
	uint64_t hits = 0;
	uint32_t nres = 0;

	if (!next || !seen || !use || !res || !in) {
		hits = UINT64_MAX;
		goto out;
	}
	for (uint32_t b = 0; b < t->blocks; b++)
		seen[b] = UINT64_MAX;
	for (uint64_t i = t->n; i-- > 0;) {
		next[i] = seen[t->blk[i]];
		seen[t->blk[i]] = i;
	}
	for (uint64_t i = 0; i < t->n; i++) {
		uint32_t b = t->blk[i];

		if (in[b]) {
			hits++;
		} else if (nres < t->cap) {
			res[nres++] = b;
			in[b] = 1;
		} else {
			uint32_t far = 0;

			for (uint32_t k = 1; k < nres; k++)
				if (use[res[k]] > use[res[far]])
					far = k;
			in[res[far]] = 0;
			res[far] = b;
			in[b] = 1;
		}
		use[b] = next[i];
	}
out:
	free(next);
	free(seen);
	free(use);
	free(res);
	free(in);
	return hits;
}

struct sim_ent {
	struct policy_entry pe;
	uint32_t block;
	bool resident;
};

static bool sim_any(struct policy_entry *e, void *arg)
{
	(void)e;
	(void)arg;
	return true;
}

/*
 * The trace through a policy of the daemon, with t->cap blocks of room, the way the cache
 * drives it: a hit is a use (touched); a miss evicts the policy's victim when memory is full,
 * then admits the block (a load). Hits, or UINT64_MAX if out of memory.
 */
static uint64_t sim_policy(const struct trace *t, const struct cache_policy_ops *ops)
{
	struct sim_ent *e = calloc(t->blocks, sizeof(*e));
	uint64_t hits = 0;
	uint32_t used = 0;
	void *priv;

	if (!e || ops->create(&priv)) {
		free(e);
		return UINT64_MAX;
	}
	for (uint32_t b = 0; b < t->blocks; b++)
		e[b].block = b;
	for (uint64_t i = 0; i < t->n; i++) {
		struct sim_ent *x = &e[t->blk[i]];

		if (x->resident) {
			hits++;
			ops->touched(priv, &x->pe);
			continue;
		}
		if (used == t->cap) {
			struct policy_entry *v = ops->victim(priv, sim_any, NULL);
			struct sim_ent *y = (struct sim_ent *)((char *)v - offsetof(struct sim_ent, pe));

			ops->removed(priv, v);
			y->resident = false;
			used--;
		}
		x->resident = true;
		used++;
		ops->admitted(priv, &x->pe);
	}
	ops->destroy(priv);
	free(e);
	return hits;
}

/* --- the mount --------------------------------------------------------------------------- */

struct hr_stats {
	double hits, misses, loads, streamed;
};

/* The memory tier's counters from /.ucm/stats. 0 or -errno (recorded). */
static int stats_read(struct hr_stats *s)
{
	static const char *const names[] = { "ucmfs_tier_hits_total{tier=\"mem\"}",
					     "ucmfs_tier_misses_total{tier=\"mem\"}",
					     "ucmfs_loads_total", "ucmfs_streamed_opens_total" };
	double v[4];
	int rc = stats_values(R.ucm_mnt, names, v, 4);

	if (rc == 0)
		*s = (struct hr_stats){ .hits = v[0], .misses = v[1], .loads = v[2],
					.streamed = v[3] };
	return rc;
}

static int hr_start(const char *store, uint64_t mem, const char *policy, const char *log)
{
	char opts[1400], m[32];
	char *argv[] = { R.ucmfs, "-f", "-o", opts, (char *)store, R.mnt, NULL };

	/* ours last, so that they win over --opts: the phase is about these two */
	snprintf(opts, sizeof(opts), "%s%smem_size=%s%s%s", R.c.opts ? R.c.opts : "",
		 R.c.opts ? "," : "", size_label(mem, m, sizeof(m)), policy ? ",policy=" : "",
		 policy ? policy : "");
	return daemon_start(&R.ucm, argv, R.mnt, log);
}

/* Replay the trace on the mount: open O_DIRECT, read and check the block, close. */
static int replay(const struct trace *t, const struct wl *w)
{
	char path[PATH_MAX], name[33];
	char *buf = bench_alloc(w->bsize);
	int rc = 0;

	if (!buf)
		return bench_fail(ENOMEM, "read buffer");
	for (uint64_t i = 0; i < t->n && !rc; i++) {
		uint32_t b = t->blk[i];
		ssize_t n;
		int fd;

		block_name(name, w->salt, b);
		snprintf(path, sizeof(path), "%s/%s", w->dir, name);
		fd = open(path, O_RDONLY | O_DIRECT);
		if (fd < 0) {
			rc = bench_fail(errno, "open %s (access %llu)", path, (unsigned long long)i);
			break;
		}
		do
			n = pread(fd, buf, w->bsize, 0);
		while (n < 0 && errno == EINTR);
		if (n < 0)
			rc = bench_fail(errno, "pread %s", path);
		else if ((uint64_t)n != w->bsize)
			rc = bench_fail(0, "pread %s: %zd bytes instead of %llu", path, n,
					(unsigned long long)w->bsize);
		else if (memcmp(buf, pool_block(w->pool, b), w->bsize))
			rc = bench_fail(0, "%s: the bytes read differ from those written", path);
		close(fd);
	}
	free(buf);
	return rc;
}

/* One policy on the mount: a fresh daemon on store, the trace, the counters' deltas. */
static void hr_mount(const struct trace *t, const struct wl *w, const char *store, int pol,
		     struct fig *f)
{
	struct hr_stats a = { 0 }, b = { 0 };
	char log[PATH_MAX + 32], note[300];
	double hits, misses;
	int rc;

	snprintf(log, sizeof(log), "%s/ucmfs-hitrate-%s.log", R.tmp, POLICIES[pol]);
	rc = hr_start(store, (uint64_t)t->cap * w->bsize, POLICIES[pol], log);
	if (rc == 0)
		rc = stats_read(&a);
	if (rc == 0)
		rc = replay(t, w);
	if (rc == 0)
		rc = stats_read(&b);
	if (R.ucm.pid) {
		int st = daemon_stop(&R.ucm);

		rc = rc ? rc : st;
	}
	hits = b.hits - a.hits;
	misses = b.misses - a.misses;
	if (rc == 0 && hits + misses <= 0)
		rc = bench_fail(0, "policy=%s: no opens counted by the memory tier", POLICIES[pol]);
	fig_set(f, rc, rc ? 0 : 100.0 * hits / (hits + misses));
	if (rc)
		return;
	note[0] = 0;
	/* what would make the figure not comparable with the simulations */
	if (hits + misses != (double)t->n)
		snprintf(note, sizeof(note), "%.0f hits + %.0f misses counted for %llu opens",
			 hits, misses, (unsigned long long)t->n);
	else if (b.streamed > a.streamed)
		snprintf(note, sizeof(note), "%.0f opens streamed from disk (not admitted)",
			 b.streamed - a.streamed);
	else if (b.loads - a.loads != misses)
		snprintf(note, sizeof(note), "%.0f loads for %.0f misses", b.loads - a.loads,
			 misses);
	if (note[0])
		fig_note(f, note);
}

/* --- the phase --------------------------------------------------------------------------- */

/* Write the working set through a daemon with room for all of it, make it durable, stop. */
static int hr_write(const struct wl *w, const char *store)
{
	char log[PATH_MAX + 32];
	double secs;
	int rc, st;

	snprintf(log, sizeof(log), "%s/ucmfs-hitrate-write.log", R.tmp);
	rc = hr_start(store, 2 * w->n * w->bsize + 64 * MiB, NULL, log);
	if (rc)
		return rc;
	rc = wl_write(w, WM_DIRECT, &secs);
	if (rc == 0)
		rc = wl_sync(w);
	st = daemon_stop(&R.ucm);
	return rc ? rc : st;
}

static void sim_fig(struct fig *f, uint64_t hits, const struct trace *t)
{
	if (hits == UINT64_MAX)
		fig_set(f, bench_fail(ENOMEM, "simulation"), 0);
	else
		fig_set(f, 0, 100.0 * (double)hits / (double)t->n);
}

void run_hitrate(void)
{
	struct fig mnt[HR_NPOL], sim[HR_NPOL], opt = FIG_NONE;
	struct trace t = { 0 };
	char store[PATH_MAX + 16], fig[96], fl[96], id[40], b[16];
	struct pool p;
	struct wl w;
	int rc;

	for (int i = 0; i < HR_NPOL; i++)
		mnt[i] = sim[i] = (struct fig)FIG_NONE;
	/* 64 MiB of memory (16 MiB with --quick), twice that of blocks */
	t.cap = R.c.quick ? 16 : 64;
	t.blocks = 2 * t.cap;
	t.n = R.c.quick ? 3000 : 20000;
	phase_start("hit rate: trace and simulations");
	rc = trace_make(&t, HR_ZIPF, R.c.seed);
	if (rc == 0) {
		sim_fig(&opt, sim_opt(&t), &t);
		for (int i = 0; i < HR_NPOL; i++) {
			sim_fig(&sim[i], sim_policy(&t, POLICY_OPS[i]), &t);
		}
	} else {
		fig_set(&opt, rc, 0);
	}

	/* a distinct content per block (128 MiB, 32 with --quick), so that a block served in
	 * place of another cannot pass the check */
	rc = pool_make(&p, HR_BLOCK, t.blocks, R.c.seed + 77);
	w = (struct wl){ .dir = R.mnt, .pool = &p, .salt = R.c.seed * 7919 + 77, .n = t.blocks,
			 .bsize = HR_BLOCK };
	if (rc == 0 && !t.blk)
		rc = -EINVAL; /* no trace: already recorded */
	if (rc == 0 && R.c.mnt) {
		for (int i = 0; i < HR_NPOL; i++)
			fig_skip(&mnt[i], "--mnt: the phase needs fresh daemons with policy=");
	} else if (rc == 0) {
		phase_start("hit rate: writing the working set");
		snprintf(store, sizeof(store), "%s/store-hitrate", R.tmp);
		rc = hr_write(&w, store);
		for (int i = 0; i < HR_NPOL; i++) {
			char what[64];

			snprintf(what, sizeof(what), "hit rate: policy=%s", POLICIES[i]);
			phase_start(what);
			if (rc)
				fig_set(&mnt[i], rc, 0);
			else
				hr_mount(&t, &w, store, i, &mnt[i]);
		}
		if (!R.c.keep)
			rm_rf(store);
	} else {
		for (int i = 0; i < HR_NPOL; i++)
			fig_set(&mnt[i], rc, 0);
	}
	if (p.buf)
		pool_free(&p);

	snprintf(fl, sizeof(fl), "Belady (OPT), %u of %u blocks", t.cap, t.blocks);
	size_label(HR_BLOCK, b, sizeof(b));
	for (int i = 0; i < HR_NPOL; i++) {
		snprintf(id, sizeof(id), "hitrate.%s", POLICIES[i]);
		snprintf(fig, sizeof(fig), "hit ratio %s, mem tier, policy=%s", b, POLICIES[i]);
		emit(id, HR_BLOCK, fig, &mnt[i], "%", ROW_RATE, fl, &opt);
	}
	for (int i = 0; i < HR_NPOL; i++) {
		snprintf(id, sizeof(id), "hitrate.sim_%s", POLICIES[i]);
		snprintf(fig, sizeof(fig), "hit ratio, %s as ucmfs runs it, simulated",
			 POLICIES[i]);
		emit(id, HR_BLOCK, fig, &sim[i], "%", ROW_RATE, fl, &opt);
	}
	free(t.blk);
}
