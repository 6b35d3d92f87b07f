/*
 * ucm-bench-cache: what a memory hit costs inside the daemon, without FUSE.
 *
 *   ucm-bench-cache [--iters N] [--trials N]
 *
 * For each policy and for 1,000 and 100,000 resident blocks: cache_create(), commit that many
 * 4 KiB blocks (clean, so every one is in the policy), then time, on one thread in a tight
 * loop of N iterations (default 1,000,000) over ids drawn at random from the resident set:
 *   lookup       tier_ops.lookup(), the attributes of a committed block (a LOOKUP or stat);
 *   open+close   tier_ops.open() then close(): a pin and its release, what every read of a
 *                block costs the memory tier (the policy takes the block out, then back in).
 * Prints `cache lookup  <ns> ns/op` and `cache open+close <ns> ns/op` under a line naming the
 * policy and the number of blocks: the median of --trials runs (default 5). Nothing is
 * subtracted: the loop reads a precomputed sequence of ids. Exit status 1 if a call failed.
 * See docs/BENCHMARKS.md ("Memory hit cost").
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tiers/cache.h"

#define BLOCK 4096
#define MAX_TRIALS 64

static const struct {
	const char *name;
	enum ucm_policy policy;
} POLICIES[] = { { "clock", POLICY_CLOCK }, { "lru", POLICY_LRU }, { "fifo", POLICY_FIFO } };

static const unsigned SETS[] = { 1000, 100000 };

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, unsigned n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n & 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Commit n clean blocks of BLOCK bytes with ids ids[0..n-1]. 0 or -errno. */
static int fill(struct tier *t, const struct blockid *ids, unsigned n)
{
	static char data[BLOCK];
	struct block_meta meta = { .size = BLOCK, .mtime = 1, .deadline = 0, .layout = NULL };

	memset(data, 0x5a, sizeof(data));
	for (unsigned i = 0; i < n; i++) {
		struct tier_handle *h;
		int rc = t->ops->reserve(t, &ids[i], 0, BLOCK, &h);

		if (rc)
			return rc;
		if (t->ops->write(h, data, BLOCK, 0) != BLOCK) {
			t->ops->abort(h);
			return -EIO;
		}
		rc = t->ops->commit(h, &meta, 0, NULL);
		if (rc)
			return rc;
	}
	return 0;
}

/* One timed loop over the access sequence; ns per op, or a negative errno. */
static double run_lookup(struct tier *t, const struct blockid *ids, const uint32_t *seq,
			 unsigned iters)
{
	struct block_attr a;
	double t0 = now_ns();

	for (unsigned i = 0; i < iters; i++)
		if (t->ops->lookup(t, &ids[seq[i]], &a))
			return -ENOENT;
	return (now_ns() - t0) / iters;
}

static double run_open_close(struct tier *t, const struct blockid *ids, const uint32_t *seq,
			     unsigned iters)
{
	double t0 = now_ns();

	for (unsigned i = 0; i < iters; i++) {
		struct tier_handle *h;

		if (t->ops->open(t, &ids[seq[i]], 0, &h))
			return -ENOENT;
		t->ops->close(h);
	}
	return (now_ns() - t0) / iters;
}

/* Both figures for one policy and one resident set size. 0 or -errno. */
static int measure(const char *pname, enum ucm_policy policy, unsigned n, unsigned iters,
		   unsigned trials)
{
	struct cache_config cfg = { .capacity = (uint64_t)n * BLOCK + (1u << 20),
				    .policy = policy, .dirty_wait_ms = 0 };
	struct blockid *ids = malloc(n * sizeof(*ids));
	uint32_t *seq = malloc(iters * sizeof(*seq));
	double lk[MAX_TRIALS], oc[MAX_TRIALS];
	uint64_t rng = 0x5eed + n;
	struct tier *t = NULL;
	int rc = -ENOMEM;

	if (!ids || !seq)
		goto out;
	for (unsigned i = 0; i < n; i++) {
		uint64_t a = splitmix(&rng), b = splitmix(&rng);

		memcpy(ids[i].b, &a, 8);
		memcpy(ids[i].b + 8, &b, 8);
	}
	for (unsigned i = 0; i < iters; i++)
		seq[i] = (uint32_t)(splitmix(&rng) % n);
	rc = cache_create(&cfg, &t);
	if (rc)
		goto out;
	rc = fill(t, ids, n);
	if (rc)
		goto out;
	/* one untimed pass of each, so that every id's entry is warm in the CPU caches as in
	 * a daemon that has been serving these blocks */
	if (run_lookup(t, ids, seq, iters) < 0 || run_open_close(t, ids, seq, iters) < 0) {
		rc = -ENOENT;
		goto out;
	}
	for (unsigned k = 0; k < trials; k++) {
		lk[k] = run_lookup(t, ids, seq, iters);
		oc[k] = run_open_close(t, ids, seq, iters);
		if (lk[k] < 0 || oc[k] < 0) {
			rc = -ENOENT;
			goto out;
		}
	}
	printf("policy=%s, %u resident blocks of 4K, %u ops, median of %u:\n", pname, n, iters,
	       trials);
	printf("cache lookup  %.1f ns/op\n", median(lk, trials));
	printf("cache open+close %.1f ns/op\n", median(oc, trials));
	rc = 0;
out:
	tier_destroy(t);
	free(ids);
	free(seq);
	return rc;
}

int main(int argc, char **argv)
{
	unsigned long iters = 1000000, trials = 5;
	int failures = 0;

	for (int i = 1; i < argc; i++) {
		char *end = NULL;

		if (!strcmp(argv[i], "--iters") && i + 1 < argc)
			iters = strtoul(argv[++i], &end, 10);
		else if (!strcmp(argv[i], "--trials") && i + 1 < argc)
			trials = strtoul(argv[++i], &end, 10);
		if (!end || *end || !iters || iters > 100000000 || !trials ||
		    trials > MAX_TRIALS) {
			fprintf(stderr, "usage: ucm-bench-cache [--iters N] [--trials 1..%d]\n",
				MAX_TRIALS);
			return 2;
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (size_t p = 0; p < sizeof(POLICIES) / sizeof(POLICIES[0]); p++) {
		for (size_t s = 0; s < sizeof(SETS) / sizeof(SETS[0]); s++) {
			int rc = measure(POLICIES[p].name, POLICIES[p].policy, SETS[s],
					 (unsigned)iters, (unsigned)trials);

			if (rc) {
				fprintf(stderr, "ucm-bench-cache: policy=%s, %u blocks: %s\n",
					POLICIES[p].name, SETS[s], strerror(-rc));
				failures++;
			}
		}
	}
	return failures ? 1 : 0;
}
