/*
 * client-test MNT [CASE...]: the C client (ucmfs.h) against a real mount. Prints `ok CASE` or
 * `FAIL CASE: reason` per case; exit status 1 if any failed. tests/mount/clients.py mounts
 * ucmfs with a small mem_size (so that blocks reach disk-only) and runs it.
 */
#include "ucmfs.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct ucmfs *u;
static char failure[512];

#define MiB (1u << 20)

#define CHECK(cond, ...)                                                        \
	do {                                                                    \
		if (!(cond)) {                                                  \
			snprintf(failure, sizeof(failure), __VA_ARGS__);        \
			return false;                                           \
		}                                                               \
	} while (0)

static uint64_t rng_state;

static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static void fresh_id(ucmfs_id id)
{
	for (int i = 0; i < UCMFS_ID_LEN; i++)
		id[i] = (uint8_t)rng();
}

static char *pattern(size_t n, uint64_t seed)
{
	char *b = malloc(n ? n : 1);
	uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;

	for (size_t i = 0; b && i < n; i++) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		b[i] = (char)s;
	}
	return b;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* --- cases ----------------------------------------------------------------------------- */

static bool t_roundtrip(void)
{
	size_t n = 4 * MiB + 123;
	char *a = pattern(n, 1), *b = pattern(n, 2), *got = malloc(n + 10);
	struct ucmfs_info in;
	ucmfs_id id;
	ssize_t r;
	int rc;

	fresh_id(id);
	CHECK(a && b && got, "out of memory");
	rc = ucmfs_put(u, id, a, n, NULL);
	CHECK(rc == 0, "put: %d", rc);
	r = ucmfs_get(u, id, got, n + 10, 0, 0);
	CHECK(r == (ssize_t)n, "get returned %zd, want %zu", r, n);
	CHECK(!memcmp(got, a, n), "get: bytes differ");
	r = ucmfs_get(u, id, got, n, 0, UCMFS_GET_DIRECT);
	CHECK(r == (ssize_t)n && !memcmp(got, a, n), "direct get: %zd", r);
	r = ucmfs_get(u, id, got, 1000, n - 500, 0);
	CHECK(r == 500 && !memcmp(got, a + n - 500, 500), "get at the end: %zd", r);
	/* the kernel releases a closed descriptor after close() returns: its pin goes soon */
	for (double t0 = now();;) {
		rc = ucmfs_stat(u, id, &in);
		if (rc || in.pins == 0 || now() - t0 > 5)
			break;
		usleep(10000);
	}
	CHECK(rc == 0 && in.size == n, "stat: %d, size %llu", rc, (unsigned long long)in.size);
	CHECK(in.ttl_ms == UCMFS_TTL_NONE && in.pins == 0 && !strncmp(in.tier, "mem", 3),
	      "stat: ttl %lld pins %u tier %s", (long long)in.ttl_ms, in.pins, in.tier);
	/* content addressing: a second put of the same id writes nothing */
	rc = ucmfs_put(u, id, b, n, NULL);
	CHECK(rc == 1, "put of a stored id: %d, want 1", rc);
	r = ucmfs_get(u, id, got, n, 0, 0);
	CHECK(r == (ssize_t)n && !memcmp(got, a, n), "a second put changed the block");
	/* unless asked to replace it */
	struct ucmfs_put_opts o = { .flags = UCMFS_PUT_REPLACE | UCMFS_PUT_DURABLE };

	rc = ucmfs_put(u, id, b, n / 2, &o);
	CHECK(rc == 0, "replace: %d", rc);
	r = ucmfs_get(u, id, got, n, 0, 0);
	CHECK(r == (ssize_t)(n / 2) && !memcmp(got, b, n / 2), "replace: got %zd bytes", r);
	/* an empty block */
	fresh_id(id);
	CHECK(ucmfs_put(u, id, "", 0, NULL) == 0, "put of an empty block");
	CHECK(ucmfs_get(u, id, got, 10, 0, 0) == 0, "empty block: bytes read");
	free(a);
	free(b);
	free(got);
	return true;
}

static bool t_missing(void)
{
	struct ucmfs_info in;
	char buf[16];
	ucmfs_id id;

	fresh_id(id);
	CHECK(ucmfs_get(u, id, buf, sizeof(buf), 0, 0) == -ENOENT, "get of a missing id");
	CHECK(ucmfs_stat(u, id, &in) == -ENOENT, "stat of a missing id");
	CHECK(ucmfs_set_ttl(u, id, 1000) == -ENOENT, "set_ttl of a missing id");
	CHECK(ucmfs_get_shard(u, id, 0, 8, buf, 0) == -ENOENT, "get_shard of a missing id");
	CHECK(ucmfs_id_parse("0123", 4, id) == -EINVAL, "parse of a short id");
	CHECK(ucmfs_id_parse("0123456789ABCDEF0123456789abcdef", 32, id) == -EINVAL,
	      "parse of uppercase hex");
	return true;
}

static bool t_shards(void)
{
	const size_t shard = 256 * 1024, nshards = 8, n = shard * nshards + 100;
	char *a = pattern(n, 3), *got = malloc(shard);
	struct ucmfs_writer *w;
	ucmfs_id id, id2;
	int rc;

	CHECK(a && got, "out of memory");
	fresh_id(id);
	CHECK(ucmfs_put(u, id, a, n, NULL) == 0, "put");
	for (size_t i = nshards; i-- > 0;) {
		rc = ucmfs_get_shard(u, id, i, shard, got, 0);
		CHECK(rc == 0, "get_shard %zu: %d", i, rc);
		CHECK(!memcmp(got, a + i * shard, shard), "shard %zu: bytes differ", i);
	}
	rc = ucmfs_get_shard(u, id, nshards, shard, got, 0);
	CHECK(rc == -EIO, "a shard cut by the end of the block: %d, want -EIO", rc);
	rc = ucmfs_get_shard(u, id, nshards + 1, shard, got, 0);
	CHECK(rc == -ENXIO, "a shard past the end: %d, want -ENXIO", rc);

	/* written shard by shard, last shard first, then published */
	fresh_id(id2);
	rc = ucmfs_writer_begin(u, id2, shard * nshards, NULL, &w);
	CHECK(rc == 0 && w, "writer_begin: %d", rc);
	for (size_t i = nshards; i-- > 0;) {
		rc = ucmfs_writer_write(w, a + i * shard, shard, i * shard);
		CHECK(rc == 0, "writer_write shard %zu: %d", i, rc);
		if (i == nshards / 2) {
			struct ucmfs_lookup_result r;

			CHECK(ucmfs_lookup(u, (const ucmfs_id *)&id2, 1, &r, NULL) == 0 && r.hits == 0,
			      "a block being written is visible");
		}
	}
	CHECK(ucmfs_writer_write(w, a, 10, shard * nshards - 5) == -EFBIG,
	      "a write past the declared size");
	rc = ucmfs_writer_commit(w);
	CHECK(rc == 0, "writer_commit: %d", rc);
	for (size_t i = 0; i < nshards; i++) {
		CHECK(ucmfs_get_shard(u, id2, i, shard, got, 0) == 0, "written shard %zu", i);
		CHECK(!memcmp(got, a + i * shard, shard), "written shard %zu: bytes differ", i);
	}

	/* a shard missing: the commit fails and publishes nothing */
	fresh_id(id2);
	CHECK(ucmfs_writer_begin(u, id2, shard * 2, NULL, &w) == 0, "writer_begin");
	CHECK(ucmfs_writer_write(w, a, shard, shard) == 0, "writer_write");
	rc = ucmfs_writer_commit(w);
	CHECK(rc == -EIO, "commit of an incomplete block: %d, want -EIO", rc);
	CHECK(ucmfs_get(u, id2, got, 1, 0, 0) == -ENOENT, "an incomplete block was published");

	/* abort, even once every byte is written, publishes nothing */
	fresh_id(id2);
	CHECK(ucmfs_writer_begin(u, id2, shard, NULL, &w) == 0, "writer_begin");
	CHECK(ucmfs_writer_write(w, a, shard, 0) == 0, "writer_write");
	ucmfs_writer_abort(w);
	CHECK(ucmfs_get(u, id2, got, 1, 0, 0) == -ENOENT, "an aborted block was published");
	free(a);
	free(got);
	return true;
}

static bool t_lookup(void)
{
	enum { N = 10000 };
	ucmfs_id *ids = calloc(N + 30005, sizeof(*ids));
	uint8_t *hits = malloc(N + 30005);
	struct ucmfs_lookup_result r;
	int rc;

	CHECK(ids && hits, "out of memory");
	for (int i = 0; i < N + 30005; i++)
		fresh_id(ids[i]);
	/* present: 0, 1, 3 and N-1 */
	for (int i = 0; i < N; i++)
		if (i == 0 || i == 1 || i == 3 || i == N - 1)
			CHECK(ucmfs_put(u, ids[i], "x", 1, NULL) == 0, "put %d", i);
	rc = ucmfs_lookup(u, ids, 5, &r, hits);
	CHECK(rc == 0, "lookup: %d", rc);
	CHECK(r.prefix == 2 && r.last == 3 && r.hits == 3, "5 ids: prefix %zu last %lld hits %zu",
	      r.prefix, (long long)r.last, r.hits);
	CHECK(hits[0] && hits[1] && !hits[2] && hits[3] && !hits[4], "5 ids: wrong hit mask");
	rc = ucmfs_lookup(u, ids, N, &r, hits);
	CHECK(rc == 0 && r.prefix == 2 && r.last == N - 1 && r.hits == 4,
	      "%d ids: rc %d prefix %zu last %lld hits %zu", N, rc, r.prefix, (long long)r.last,
	      r.hits);
	rc = ucmfs_lookup(u, ids + 4, 1, &r, NULL);
	CHECK(rc == 0 && r.prefix == 0 && r.last == -1 && r.hits == 0, "a miss: %d", rc);
	rc = ucmfs_lookup(u, ids, 0, &r, NULL);
	CHECK(rc == 0 && r.prefix == 0 && r.last == -1, "no ids: %d", rc);
	/* more ids than one query file holds: answered in batches, in order */
	memcpy(ids[N + 30003], ids[3], sizeof(ucmfs_id));
	rc = ucmfs_lookup(u, ids + N - 1, 30006, &r, hits);
	CHECK(rc == 0 && r.prefix == 1 && r.last == 30004 && r.hits == 2 && hits[30004],
	      "30006 ids: rc %d prefix %zu last %lld hits %zu", rc, r.prefix, (long long)r.last,
	      r.hits);
	free(ids);
	free(hits);
	return true;
}

static bool t_ttl(void)
{
	struct ucmfs_put_opts o = { .ttl_ms = 60000 };
	struct ucmfs_info in;
	ucmfs_id id[3];
	double t;
	int rc;

	for (int i = 0; i < 3; i++)
		fresh_id(id[i]);
	CHECK(ucmfs_put(u, id[0], "abc", 3, &o) == 0, "put with a TTL");
	CHECK(ucmfs_stat(u, id[0], &in) == 0 && in.ttl_ms > 50000 && in.ttl_ms <= 60000,
	      "ttl after put: %lld", (long long)in.ttl_ms);
	o.ttl_ms = 1000;
	CHECK(ucmfs_put(u, id[1], "abc", 3, &o) == 0, "put with a TTL");
	CHECK(ucmfs_put(u, id[2], "abc", 3, NULL) == 0, "put");
	/* extend: the TTL'd block gets the later deadline, the other keeps none */
	rc = ucmfs_extend_ttl(u, id, 3, 30000);
	CHECK(rc == 0, "extend_ttl: %d", rc);
	CHECK(ucmfs_stat(u, id[0], &in) == 0 && in.ttl_ms > 50000, "extend shortened a TTL: %lld",
	      (long long)in.ttl_ms);
	CHECK(ucmfs_stat(u, id[1], &in) == 0 && in.ttl_ms > 20000 && in.ttl_ms <= 30000,
	      "extended ttl: %lld", (long long)in.ttl_ms);
	CHECK(ucmfs_stat(u, id[2], &in) == 0 && in.ttl_ms == UCMFS_TTL_NONE,
	      "extend gave a TTL to a block without one: %lld", (long long)in.ttl_ms);
	CHECK(ucmfs_extend_ttl(u, id, 3, 0) == -EINVAL, "extend by 0");
	/* set: clear, then a short one that expires */
	CHECK(ucmfs_set_ttl(u, id[0], UCMFS_TTL_NONE) == 0, "clear the ttl");
	CHECK(ucmfs_stat(u, id[0], &in) == 0 && in.ttl_ms == UCMFS_TTL_NONE, "cleared ttl: %lld",
	      (long long)in.ttl_ms);
	CHECK(ucmfs_set_ttl(u, id[0], 200) == 0, "set a ttl");
	t = now();
	while (ucmfs_stat(u, id[0], &in) == 0 && now() - t < 5)
		usleep(20000);
	CHECK(now() - t >= 0.15, "the block expired after %.3f s, before its TTL", now() - t);
	CHECK(ucmfs_stat(u, id[0], &in) == -ENOENT, "still there 5 s after a TTL of 200 ms");
	return true;
}

/* Needs a mount with a small mem_size (tests/mount/clients.py: 16M) and a STORE. */
static bool t_prefetch(void)
{
	enum { NB = 10 };
	size_t n = 4 * MiB;
	char *a = pattern(n, 9), *got = malloc(n);
	struct ucmfs_prefetch *p;
	struct ucmfs_info in;
	ucmfs_id ids[NB + 1];
	double t;
	int rc;

	CHECK(a && got, "out of memory");
	for (int i = 0; i < NB; i++) {
		fresh_id(ids[i]);
		a[0] = (char)i;
		CHECK(ucmfs_put(u, ids[i], a, n, NULL) == 0, "put %d", i);
	}
	fresh_id(ids[NB]); /* never stored */
	/* the first blocks leave memory once they are on disk and room is needed */
	t = now();
	while (now() - t < 20 && ucmfs_stat(u, ids[0], &in) == 0 && strcmp(in.tier, "disk"))
		usleep(20000);
	CHECK(ucmfs_stat(u, ids[0], &in) == 0 && !strcmp(in.tier, "disk"),
	      "block 0 is still in %s after 10 blocks of 4 MiB in 16 MiB of memory", in.tier);
	rc = ucmfs_prefetch_start(u, ids, 1, &p);
	CHECK(rc == 0, "prefetch_start: %d", rc);
	rc = ucmfs_prefetch_wait(p, 20000);
	ucmfs_prefetch_free(p);
	CHECK(rc == 0, "prefetch_wait: %d", rc);
	CHECK(ucmfs_stat(u, ids[0], &in) == 0 && !strncmp(in.tier, "mem", 3),
	      "after the prefetch block 0 is in %s", in.tier);
	a[0] = 0;
	CHECK(ucmfs_get(u, ids[0], got, n, 0, 0) == (ssize_t)n && !memcmp(got, a, n),
	      "prefetched block: bytes differ");
	/* a missing id among them is no error; the call returns once the daemon is done */
	rc = ucmfs_prefetch(u, ids, NB + 1, 20000);
	CHECK(rc == 0, "prefetch of %d ids: %d", NB + 1, rc);
	free(a);
	free(got);
	return true;
}

static const struct {
	const char *name;
	bool (*fn)(void);
} cases[] = {
	{ "roundtrip", t_roundtrip }, { "missing", t_missing }, { "shards", t_shards },
	{ "lookup", t_lookup },	      { "ttl", t_ttl },		{ "prefetch", t_prefetch },
};

int main(int argc, char **argv)
{
	int failed = 0, rc;

	if (argc < 2) {
		fprintf(stderr, "usage: client-test MNT [CASE...]\n");
		return 2;
	}
	rc = ucmfs_open(argv[1], &u);
	if (rc) {
		printf("FAIL open: ucmfs_open(%s): %s\n", argv[1], strerror(-rc));
		return 1;
	}
	rng_state = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ 0x5bd1e995;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bool want = argc == 2;

		for (int k = 2; k < argc; k++)
			want |= !strcmp(argv[k], cases[i].name);
		if (!want)
			continue;
		failure[0] = '\0';
		if (cases[i].fn()) {
			printf("ok %s\n", cases[i].name);
		} else {
			printf("FAIL %s: %s\n", cases[i].name, failure);
			failed++;
		}
		fflush(stdout);
	}
	ucmfs_close(u);
	return failed ? 1 : 0;
}
