/*
 * The pipeline (tiers/pipeline.c) over a cache and a posix tier: write sessions and their
 * completeness rules, size limits, exclusive and replacing reservations, spills, dumps,
 * loads and removal across both tiers (DESIGN.md sections 3 and 5).
 *
 * Commits pass meta == NULL, as the FS layer does: the pipeline decides size and times.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/clock.h"
#include "src/units.h"
#include "tests/unit/tier_util.h"
#include "tests/unit/unit.h"
#include "tiers/pipeline.h"
#include "tiers/posix_header.h"

#define KB 1024ULL
#define MB (1024 * KB)

static struct tu_stack st;

static struct tier *open_stack(uint64_t cache, const struct tu_stack_config *extra)
{
	struct tu_stack_config c = { .cache_capacity = cache, .posix = true };

	if (extra) {
		c = *extra;
		c.cache_capacity = cache;
	}
	c.compress = c.posix; /* as the daemon stacks it: zstd over the disk tier */
	tu_stack_open(&st, &c);
	return st.t;
}

static void teardown(void)
{
	if (st.t)
		tu_stack_close(&st);
}

static struct tier *P(void)
{
	return st.t;
}

/* Reserve, write (id, seed) of size bytes, commit as the FS does. */
static int pput(const struct blockid *id, uint64_t seed, uint64_t size, unsigned rflags)
{
	struct tier_handle *h;
	ssize_t n;
	int rc = P()->ops->reserve(P(), id, rflags, 0, &h);

	if (rc)
		return rc;
	n = tu_write(h, id, seed, 0, size);
	if (n < 0) {
		P()->ops->abort(h);
		return (int)n;
	}
	return P()->ops->commit(h, NULL, 0, NULL);
}

static int commit(struct tier_handle *h, unsigned flags)
{
	return h->tier->ops->commit(h, NULL, flags, NULL);
}

static struct pipeline_counters counters(void)
{
	struct pipeline_counters c;

	pipeline_counters(P(), &c);
	return c;
}

static bool in_cache(const struct blockid *id, struct block_attr *a)
{
	return tu_lookup(st.cache, id, a) == 0;
}

static bool on_disk(const struct blockid *id, struct block_attr *a)
{
	return tu_lookup(st.below, id, a) == 0;
}

/* Read a block straight from the disk tier and compare. */
static void expect_on_disk(const struct blockid *id, uint64_t seed, uint64_t size)
{
	ck_assert_msg(on_disk(id, NULL), "%s is not on disk", ut_hex(id));
	tu_expect(st.below, id, seed, size);
}

/* Forget id in memory only (an eviction). */
static void evict(const struct blockid *id)
{
	struct block_attr a;

	ck_assert_msg(!in_cache(id, &a) || !a.dirty, "evicting a dirty block");
	st.cache->ops->remove(st.cache, id);
}

/* --- write sessions ---------------------------------------------------------------------- */

START_TEST(test_pipeline_write_read)
{
	struct tier *t = open_stack(64 * MB, NULL);
	struct blockid id = ut_id(1);
	struct block_attr a;
	int64_t before = wall_ns();

	ck_assert_int_eq(pput(&id, 1, 300000, 0), 0);
	ck_assert_int_eq(tu_lookup(t, &id, &a), 0);
	ck_assert_uint_eq(a.size, 300000);
	ck_assert_int_ge(a.mtime, before);
	ck_assert_int_le(a.mtime, wall_ns());
	ck_assert(a.where & TIER_MEM);
	tu_expect(t, &id, 1, 300000);
	ck_assert_uint_eq(counters().commits_ok, 1);
}
END_TEST

START_TEST(test_pipeline_shared_reservation)
{
	struct tier *t = open_stack(64 * MB, NULL);
	struct blockid id = ut_id(2);
	struct tier_handle *h1, *h2;
	struct block_attr a;

	ck_assert_int_eq(t->ops->reserve(t, &id, 0, 0, &h1), 0);
	ck_assert_int_eq(t->ops->reserve(t, &id, 0, 0, &h2), 0);
	ck_assert_int_eq(tu_write(h1, &id, 1, 0, 50000), 50000);
	ck_assert_int_eq(tu_write(h2, &id, 1, 50000, 50000), 50000);
	/* one reservation: each writer sees the other's bytes */
	tu_check_read(h2, &id, 1, 100000, 0, 100000);
	ck_assert_int_eq(h1->tier->ops->stat(h1, &a), 0);
	ck_assert_uint_eq(a.size, 100000);
	/* the first close: complete now, but not published while a writer remains */
	ck_assert_int_eq(commit(h1, 0), 0);
	ck_assert_int_eq(tu_lookup(t, &id, NULL), -ENOENT);
	ck_assert_int_eq(commit(h2, 0), 0);
	ck_assert_int_eq(tu_lookup(t, &id, &a), 0);
	ck_assert_uint_eq(a.size, 100000);
	tu_expect(t, &id, 1, 100000);
}
END_TEST

START_TEST(test_pipeline_shared_each_close_judged)
{
	struct tier *t = open_stack(64 * MB, NULL);
	struct blockid id = ut_id(3), id2 = ut_id(4);
	struct tier_handle *h1, *h2;

	/* incomplete at the first close (-EIO), completed by the other writer: published */
	ck_assert_int_eq(t->ops->reserve(t, &id, 0, 0, &h1), 0);
	ck_assert_int_eq(t->ops->reserve(t, &id, 0, 0, &h2), 0);
	ck_assert_int_eq(tu_write(h1, &id, 1, 0, 100), 100);
	ck_assert_int_eq(tu_write(h1, &id, 1, 200, 100), 100);
	ck_assert_int_eq(commit(h1, 0), -EIO);
	ck_assert_int_eq(tu_lookup(t, &id, NULL), -ENOENT);
	ck_assert_int_eq(tu_write(h2, &id, 1, 100, 100), 100);
	ck_assert_int_eq(commit(h2, 0), 0);
	tu_expect(t, &id, 1, 300);

	/* complete at the first close, a hole made by the last writer: nothing published */
	ck_assert_int_eq(t->ops->reserve(t, &id2, 0, 0, &h1), 0);
	ck_assert_int_eq(t->ops->reserve(t, &id2, 0, 0, &h2), 0);
	ck_assert_int_eq(tu_write(h1, &id2, 1, 0, 100), 100);
	ck_assert_int_eq(commit(h1, 0), 0);
	ck_assert_int_eq(tu_write(h2, &id2, 1, 500, 100), 100);
	ck_assert_int_eq(commit(h2, 0), -EIO);
	ck_assert_int_eq(tu_lookup(t, &id2, NULL), -ENOENT);
	/* the session is gone: a new writer starts afresh */
	ck_assert_int_eq(t->ops->reserve(t, &id2, TIER_RESERVE_EXCL, 0, &h1), 0);
	t->ops->abort(h1);
}
END_TEST

START_TEST(test_pipeline_holes_publish_nothing)
{
	struct tier *t = open_stack(64 * MB, NULL);
	struct blockid id = ut_id(5);
	struct tier_handle *h;

	ck_assert_int_eq(t->ops->reserve(t, &id, 0, 0, &h), 0);
	ck_assert_int_eq(tu_write(h, &id, 1, 0, 1000), 1000);
	ck_assert_int_eq(tu_write(h, &id, 1, 2000, 1000), 1000);
	ck_assert_int_eq(commit(h, 0), -EIO);
	tu_settle(t);
	ck_assert_int_eq(tu_lookup(t, &id, NULL), -ENOENT);
	ck_assert(!in_cache(&id, NULL));
	ck_assert(!on_disk(&id, NULL));
	ck_assert_uint_eq(counters().commits_incomplete, 1);
	ck_assert_uint_eq(counters().commits_ok, 0);
	/* a hole at the start */
	ck_assert_int_eq(t->ops->reserve(t, &id, 0, 0, &h), 0);
	ck_assert_int_eq(tu_write(h, &id, 1, 1, 1000), 1000);
	ck_assert_int_eq(commit(h, 0), -EIO);
	ck_assert_int_eq(tu_lookup(t, &id, NULL), -ENOENT);
}
END_TEST

START_TEST(test_pipeline_declared_size)
{
	struct tier *t = open_stack(64 * MB, NULL);
	struct blockid a = ut_id(6), b = ut_id(7), c = ut_id(8);
	struct tier_handle *h;
	struct block_attr at;

	/* ftruncate declares the size: all of it must be written */
	ck_assert_int_eq(t->ops->reserve(t, &a, 0, 0, &h), 0);
	ck_assert_int_eq(t->ops->truncate(h, 10000), 0);
	ck_assert_int_eq(h->tier->ops->stat(h, &at), 0);
	ck_assert_uint_eq(at.size, 10000);
	ck_assert_int_eq(tu_write(h, &a, 1, 0, 5000), 5000);
	ck_assert_int_eq(commit(h, 0), -EIO);
	ck_assert_int_eq(tu_lookup(t, &a, NULL), -ENOENT);
	/* declared after writing, then written to the end */
	ck_assert_int_eq(t->ops->reserve(t, &b, 0, 0, &h), 0);
	ck_assert_int_eq(tu_write(h, &b, 1, 0, 5000), 5000);
	ck_assert_int_eq(t->ops->truncate(h, 10000), 0);
	ck_assert_int_eq(tu_write(h, &b, 1, 5000, 5000), 5000);
	ck_assert_int_eq(commit(h, 0), 0);
	tu_expect(t, &b, 1, 10000);
	/* a declared size below what was written cuts it */
	ck_assert_int_eq(t->ops->reserve(t, &c, 0, 0, &h), 0);
	ck_assert_int_eq(tu_write(h, &c, 1, 0, 9000), 9000);
	ck_assert_int_eq(t->ops->truncate(h, 3000), 0);
	ck_assert_int_eq(commit(h, 0), 0);
	tu_expect(t, &c, 1, 3000);
}
END_TEST

START_TEST(test_pipeline_nothing_written_is_empty)
{
	struct tier *t = open_stack(64 * MB, NULL);
	struct blockid id = ut_id(9);
	struct tier_handle *h;
	struct block_attr a;

	/* touch NEWID */
	ck_assert_int_eq(t->ops->reserve(t, &id, 0, 0, &h), 0);
	ck_assert_int_eq(commit(h, 0), 0);
	ck_assert_int_eq(tu_lookup(t, &id, &a), 0);
	ck_assert_uint_eq(a.size, 0);
	tu_settle(t);
	ck_assert(on_disk(&id, &a));
	ck_assert_uint_eq(a.size, 0);
	/* and it reads back from disk */
	evict(&id);
	tu_expect(t, &id, 1, 0);
	expect_on_disk(&id, 1, 0);
}
END_TEST

START_TEST(test_pipeline_commit_try_keeps_handle)
{
	struct tier *t = open_stack(64 * MB, NULL);
	struct blockid id = ut_id(10), id2 = ut_id(11);
	struct tier_handle *h;

	ck_assert_int_eq(t->ops->reserve(t, &id, 0, 0, &h), 0);
	ck_assert_int_eq(tu_write(h, &id, 1, 0, 100), 100);
	ck_assert_int_eq(tu_write(h, &id, 1, 200, 100), 100);
	ck_assert_int_eq(commit(h, TIER_COMMIT_TRY), -EIO);
	ck_assert_int_eq(tu_lookup(t, &id, NULL), -ENOENT);
	/* the handle is still the writer's */
	tu_check_read(h, &id, 1, 300, 0, 100);
	ck_assert_int_eq(tu_write(h, &id, 1, 100, 100), 100);
	ck_assert_int_eq(commit(h, TIER_COMMIT_TRY), 0);
	tu_expect(t, &id, 1, 300);
	/* TRY then abort leaves nothing */
	ck_assert_int_eq(t->ops->reserve(t, &id2, 0, 0, &h), 0);
	ck_assert_int_eq(t->ops->truncate(h, 1000), 0);
	ck_assert_int_eq(commit(h, TIER_COMMIT_TRY), -EIO);
	t->ops->abort(h);
	ck_assert_int_eq(tu_lookup(t, &id2, NULL), -ENOENT);
	ck_assert_int_eq(t->ops->reserve(t, &id2, TIER_RESERVE_EXCL, 0, &h), 0);
	t->ops->abort(h);
}
END_TEST

START_TEST(test_pipeline_block_size)
{
	struct tu_stack_config c = { .posix = true, .block_size = 8192 };
	struct tier *t = open_stack(64 * MB, &c);
	struct blockid id = ut_id(12), short_id = ut_id(13), decl = ut_id(14);
	struct tier_handle *h;
	char byte = 1;

	ck_assert_int_eq(t->ops->reserve(t, &id, 0, 0, &h), 0);
	ck_assert_int_eq(tu_write(h, &id, 1, 0, 8192), 8192);
	ck_assert_int_eq(h->tier->ops->write(h, &byte, 1, 8192), -EFBIG);
	ck_assert_int_eq(tu_write(h, &id, 1, 8000, 193), -EFBIG);
	ck_assert_int_eq(t->ops->truncate(h, 8193), -EFBIG);
	ck_assert_int_eq(commit(h, 0), 0);
	tu_expect(t, &id, 1, 8192);
	/* with block_size, a block is exactly that size */
	ck_assert_int_eq(pput(&short_id, 1, 4096, 0), -EIO);
	ck_assert_int_eq(tu_lookup(t, &short_id, NULL), -ENOENT);
	ck_assert_int_eq(t->ops->reserve(t, &decl, 0, 0, &h), 0);
	ck_assert_int_eq(t->ops->truncate(h, 8192), 0);
	ck_assert_int_eq(commit(h, 0), -EIO); /* declared, not written */
	ck_assert_int_eq(t->ops->reserve(t, &decl, 0, 0, &h), 0);
	ck_assert_int_eq(commit(h, 0), -EIO); /* not even an empty block */
}
END_TEST

START_TEST(test_pipeline_max_block)
{
	struct tu_stack_config c = { .posix = true, .max_block = 10000 };
	struct tier *t = open_stack(64 * MB, &c);
	struct blockid id = ut_id(15);
	struct tier_handle *h;
	char buf[16] = { 0 };

	ck_assert_int_eq(t->ops->reserve(t, &id, 0, 0, &h), 0);
	ck_assert_int_eq(tu_write(h, &id, 1, 0, 9999), 9999);
	ck_assert_int_eq(h->tier->ops->write(h, buf, 2, 9999), -EFBIG);
	ck_assert_int_eq(h->tier->ops->write(h, buf, 1, 10000), -EFBIG);
	ck_assert_int_eq(h->tier->ops->write(h, buf, 10, UINT64_MAX - 5), -EFBIG);
	ck_assert_int_eq(t->ops->truncate(h, 10001), -EFBIG);
	ck_assert_int_eq(tu_write(h, &id, 1, 9999, 1), 1);
	ck_assert_int_eq(t->ops->truncate(h, 10000), 0);
	ck_assert_int_eq(commit(h, 0), 0);
	tu_expect(t, &id, 1, 10000);
}
END_TEST

START_TEST(test_pipeline_exclusive)
{
	struct tier *t = open_stack(64 * MB, NULL);
	struct blockid id = ut_id(16), other = ut_id(17);
	struct tier_handle *h, *x;

	ck_assert_int_eq(t->ops->reserve(t, &id, 0, 0, &h), 0);
	/* O_EXCL on a reserved id */
	ck_assert_int_eq(t->ops->reserve(t, &id, TIER_RESERVE_EXCL, 0, &x), -EEXIST);
	ck_assert_int_eq(tu_write(h, &id, 1, 0, 1000), 1000);
	ck_assert_int_eq(commit(h, 0), 0);
	/* on a committed id: in memory, then only on disk */
	ck_assert_int_eq(t->ops->reserve(t, &id, TIER_RESERVE_EXCL, 0, &x), -EEXIST);
	tu_settle(t);
	evict(&id);
	ck_assert_int_eq(t->ops->reserve(t, &id, TIER_RESERVE_EXCL, 0, &x), -EEXIST);
	tu_expect(t, &id, 1, 1000); /* the failed attempts changed nothing */
	/* on a free id */
	ck_assert_int_eq(t->ops->reserve(t, &other, TIER_RESERVE_EXCL, 0, &x), 0);
	t->ops->abort(x);
	/* after unlink */
	ck_assert_int_eq(t->ops->remove(t, &id), 0);
	ck_assert_int_eq(t->ops->reserve(t, &id, TIER_RESERVE_EXCL, 0, &x), 0);
	t->ops->abort(x);
}
END_TEST

START_TEST(test_pipeline_replacement_copies_old)
{
	struct tier *t = open_stack(64 * MB, NULL);
	struct blockid id = ut_id(18);
	struct tier_handle *reader, *h;
	struct block_attr a;
	char *buf = malloc(20000);

	ck_assert_ptr_nonnull(buf);
	ck_assert_int_eq(pput(&id, 1, 20000, 0), 0);
	ck_assert_int_eq(t->ops->open(t, &id, 0, &reader), 0);
	/* the writer starts with the committed bytes */
	ck_assert_int_eq(t->ops->reserve(t, &id, 0, 0, &h), 0);
	ck_assert_int_eq(h->tier->ops->stat(h, &a), 0);
	ck_assert_uint_eq(a.size, 20000);
	tu_check_read(h, &id, 1, 20000, 0, 20000);
	ck_assert_int_eq(tu_write(h, &id, 2, 0, 100), 100);
	/* readers keep the old version until the commit, and after it if already open */
	tu_expect(t, &id, 1, 20000);
	ck_assert_int_eq(commit(h, 0), 0);
	tu_check_read(reader, &id, 1, 20000, 0, 20000);
	tier_close(reader);
	ck_assert_int_eq(t->ops->open(t, &id, 0, &reader), 0);
	ck_assert_int_eq(tier_read(reader, buf, 20000, 0), 20000);
	ck_assert_int_eq(ut_diff(&id, 2, buf, 100, 0), -1);
	ck_assert_int_eq(ut_diff(&id, 1, buf + 100, 19900, 100), -1);
	tier_close(reader);
	/* O_TRUNC: nothing copied */
	ck_assert_int_eq(t->ops->reserve(t, &id, TIER_RESERVE_TRUNC, 0, &h), 0);
	ck_assert_int_eq(h->tier->ops->stat(h, &a), 0);
	ck_assert_uint_eq(a.size, 0);
	ck_assert_int_eq(tu_write(h, &id, 3, 0, 50), 50);
	ck_assert_int_eq(commit(h, 0), 0);
	tu_expect(t, &id, 3, 50);
	tu_settle(t);
	expect_on_disk(&id, 3, 50);
	free(buf);
}
END_TEST

START_TEST(test_pipeline_replacement_of_disk_only_block)
{
	struct tier *t = open_stack(64 * MB, NULL);
	struct blockid id = ut_id(19);
	struct tier_handle *h;
	char *buf = malloc(300000);

	ck_assert_ptr_nonnull(buf);
	ck_assert_int_eq(pput(&id, 1, 300000, 0), 0);
	tu_settle(t);
	evict(&id);
	ck_assert_int_eq(t->ops->reserve(t, &id, 0, 0, &h), 0);
	ck_assert_int_eq(tu_write(h, &id, 2, 299000, 1000), 1000);
	ck_assert_int_eq(commit(h, 0), 0);
	tu_settle(t);
	evict(&id);
	ck_assert_int_eq(t->ops->open(t, &id, 0, &h), 0);
	ck_assert_int_eq(tier_read(h, buf, 300000, 0), 300000);
	ck_assert_int_eq(ut_diff(&id, 1, buf, 299000, 0), -1);
	ck_assert_int_eq(ut_diff(&id, 2, buf + 299000, 1000, 299000), -1);
	tier_close(h);
	free(buf);
}
END_TEST

/* --- tiers: spill, dump, load, remove ---------------------------------------------------- */

START_TEST(test_pipeline_spilled_reservation_reads_back)
{
	struct tier *t = open_stack(1 * MB, NULL);
	struct blockid id = ut_id(22);
	struct tier_handle *h;
	const uint64_t size = 3 * MB + 5;

	/* O_RDWR on a block too big for memory: the writer reads back what it wrote */
	ck_assert_int_eq(t->ops->reserve(t, &id, 0, 0, &h), 0);
	ck_assert_int_eq(tu_write(h, &id, 1, 0, size), (ssize_t)size);
	ck_assert_uint_ge(counters().spills, 1);
	tu_check_read(h, &id, 1, size, 0, 4096);
	tu_check_read(h, &id, 1, size, 2 * MB + 3, 100000);
	tu_check_read(h, &id, 1, size, 0, size);
	ck_assert_int_eq(commit(h, 0), 0);
	tu_expect(t, &id, 1, size);
}
END_TEST

START_TEST(test_pipeline_compressed_on_disk)
{
	struct tier *t = open_stack(64 * MB, NULL);
	struct blockid id = ut_id(23);
	const uint64_t size = 2 * MB + 12345;
	struct block_attr a;
	struct tier_handle *h;
	uint64_t seed = 4;

	ck_assert_int_eq(pput(&id, 1, size, 0), 0);
	t->ops->drain(t);
	/* bf16-like bytes are stored compressed, in chunks */
	ck_assert(on_disk(&id, &a));
	ck_assert_uint_eq(a.size, size);
	ck_assert_uint_ne(a.codec, CODEC_RAW);
	ck_assert_uint_lt(a.stored, size * 9 / 10);
	ck_assert_int_eq(tu_lookup(t, &id, &a), 0);
	ck_assert_uint_ne(a.codec, CODEC_RAW);
	/* read back from disk: whole, and piece by piece across chunk boundaries */
	evict(&id);
	tu_expect(t, &id, 1, size);
	ck_assert_int_eq(st.below->ops->open(st.below, &id, 0, &h), 0);
	tu_check_read(h, &id, 1, size, 256 * KB - 10, 20);
	tu_check_read(h, &id, 1, size, 0, 1);
	tu_check_read(h, &id, 1, size, size - 7, 100);
	for (int i = 0; i < 50; i++) {
		uint64_t off = ut_rand(&seed) % size, len = ut_rand(&seed) % (600 * KB);

		tu_check_read(h, &id, 1, size, off, len);
	}
	tier_close(h);
}
END_TEST

START_TEST(test_pipeline_spill_large_block)
{
	struct tier *t = open_stack(1 * MB, NULL);
	struct blockid id = ut_id(20), decl = ut_id(21);
	struct tier_handle *h;
	struct tier_usage u;

	/* bigger than the whole memory tier: spilled to disk while being written */
	ck_assert_int_eq(pput(&id, 1, 3 * MB + 123, 0), 0);
	ck_assert_uint_ge(counters().spills, 1);
	expect_on_disk(&id, 1, 3 * MB + 123);
	tu_expect(t, &id, 1, 3 * MB + 123);
	/* a declared size that does not fit */
	ck_assert_int_eq(t->ops->reserve(t, &decl, 0, 0, &h), 0);
	ck_assert_int_eq(tu_write(h, &decl, 2, 0, 1000), 1000);
	ck_assert_int_eq(t->ops->truncate(h, 2 * MB), 0);
	ck_assert_int_eq(tu_write(h, &decl, 2, 1000, 2 * MB - 1000), (ssize_t)(2 * MB - 1000));
	ck_assert_int_eq(commit(h, 0), 0);
	tu_expect(t, &decl, 2, 2 * MB);
	tu_settle(t);
	ck_assert_int_eq(st.cache->ops->usage(st.cache, &u), 0);
	ck_assert_uint_le(u.used, 1 * MB);
	ck_assert_uint_eq(u.dirty_blocks, 0);
}
END_TEST

START_TEST(test_pipeline_drain_puts_all_on_disk)
{
	struct tier *t = open_stack(64 * MB, NULL);
	enum { N = 40 };

	for (int i = 0; i < N; i++) {
		struct blockid id = ut_id(100 + (uint64_t)i);

		ck_assert_int_eq(pput(&id, 1, 1000 + (uint64_t)i * 5000, 0), 0);
	}
	t->ops->drain(t);
	for (int i = 0; i < N; i++) {
		struct blockid id = ut_id(100 + (uint64_t)i);
		struct block_attr a;

		expect_on_disk(&id, 1, 1000 + (uint64_t)i * 5000);
		ck_assert(in_cache(&id, &a));
		ck_assert_msg(!a.dirty, "%s still dirty after drain", ut_hex(&id));
		ck_assert_int_eq(tu_lookup(t, &id, &a), 0);
		ck_assert_uint_eq(a.where, TIER_MEM | TIER_DISK);
		ck_assert_uint_gt(a.stored, 0);
	}
	ck_assert_uint_ge(counters().dumps, N);
	ck_assert_uint_eq(counters().dump_queue, 0);
	ck_assert_uint_eq(counters().load_queue, 0);
	ck_assert_uint_eq(counters().dump_errors, 0);
}
END_TEST

START_TEST(test_pipeline_evicted_block_loads_back)
{
	struct tier *t = open_stack(256 * KB, NULL);
	enum { N = 20 };
	int evicted = 0;

	for (int i = 0; i < N; i++) {
		struct blockid id = ut_id(200 + (uint64_t)i);

		ck_assert_int_eq(pput(&id, 1, 60000 + (uint64_t)i, 0), 0);
	}
	t->ops->drain(t);
	for (int i = 0; i < N; i++) {
		struct blockid id = ut_id(200 + (uint64_t)i);

		ck_assert_int_eq(tu_lookup(t, &id, NULL), 0);
		evicted += !in_cache(&id, NULL);
	}
	ck_assert_int_ge(evicted, N - 4); /* 256K holds at most four of them */
	for (int i = 0; i < N; i++) {
		struct blockid id = ut_id(200 + (uint64_t)i);

		tu_expect(t, &id, 1, 60000 + (uint64_t)i);
		/* a load is admitted by its worker after the reader has its bytes; until then it
		 * holds its memory, and the next load, which may not wait for room, would be
		 * streamed from below instead */
		t->ops->drain(t);
	}
	ck_assert_uint_ge(counters().loads, (uint64_t)evicted);
	ck_assert_uint_eq(counters().load_errors, 0);
	/* the last one read was admitted to memory */
	{
		struct blockid id = ut_id(200 + N - 1);

		ck_assert(in_cache(&id, NULL));
	}
}
END_TEST

/*
 * A prefetch of many blocks that are only on disk (and ids that are nowhere, and one already
 * in memory) loads every one of them into memory, byte-exact, and counts what it loaded; in
 * a cache that holds only some of them, the last ones listed are in memory at the end and
 * none is lost from disk.
 */
START_TEST(test_pipeline_prefetch_many)
{
	const uint64_t size = 300 * KB + 17;
	enum { N = 24 };
	struct tier *t = open_stack(_i ? 6 * MB : 64 * MB, NULL);
	struct blockid ids[N + 2];
	size_t loaded;

	for (int i = 0; i < N; i++) {
		ids[i] = ut_id(900 + (uint64_t)i);
		ck_assert_int_eq(pput(&ids[i], 3, size + (uint64_t)i, 0), 0);
	}
	ids[N] = ut_id(899);      /* never written */
	ids[N + 1] = ut_id(900);  /* listed twice */
	t->ops->drain(t);
	for (int i = 0; i < N; i++) /* safe on disk: out of memory, as if evicted */
		st.cache->ops->remove(st.cache, &ids[i]);
	ck_assert(!in_cache(&ids[0], NULL));
	loaded = t->ops->prefetch(t, ids, N + 2);
	if (_i == 0) {
		ck_assert_uint_eq(loaded, N);
		for (int i = 0; i < N; i++)
			ck_assert_msg(in_cache(&ids[i], NULL), "block %d not in memory", i);
	} else {
		ck_assert_uint_ge(loaded, 6);
		ck_assert(in_cache(&ids[N - 1], NULL));
	}
	for (int i = 0; i < N; i++)
		tu_expect(t, &ids[i], 3, size + (uint64_t)i);
	ck_assert_uint_eq(counters().load_errors, 0);
}
END_TEST

/*
 * A load fetches a block in pieces of the stored chunk size, whatever it is: smaller than the
 * load's default piece (a store written with small chunks) or larger (the chunks of a block
 * of more than 330 x 256 KiB). Each loads back whole, admitted, without a load error.
 */
START_TEST(test_pipeline_loads_any_chunk_size)
{
	static const uint32_t chunks[] = { 64 * KB, 128 * KB, 512 * KB, 1 * MB };
	const uint64_t size = 3 * MB + 5000;

	for (size_t k = 0; k < sizeof(chunks) / sizeof(chunks[0]); k++) {
		struct tu_stack_config c = { .posix = true, .chunk_size = chunks[k] };
		struct blockid id = ut_id(400 + k);
		struct tier *t = open_stack(8 * MB, &c);

		ck_assert_int_eq(pput(&id, 7, size, 0), 0);
		t->ops->drain(t);
		evict(&id);
		tu_expect(t, &id, 7, size);
		t->ops->drain(t);
		ck_assert_msg(in_cache(&id, NULL), "chunks of %u: the load was not admitted",
			      chunks[k]);
		ck_assert_uint_eq(counters().load_errors, 0);
		tu_stack_close(&st);
		st.t = NULL;
	}
}
END_TEST

START_TEST(test_pipeline_streams_when_memory_pinned)
{
	struct tier *t = open_stack(128 * KB, NULL);
	struct blockid a = ut_id(30), b = ut_id(31), c = ut_id(32);
	struct tier_handle *hb, *hc;

	ck_assert_int_eq(pput(&a, 1, 60000, 0), 0);
	ck_assert_int_eq(pput(&b, 1, 60000, 0), 0);
	ck_assert_int_eq(pput(&c, 1, 60000, 0), 0);
	t->ops->drain(t);
	/* memory full of pinned blocks */
	ck_assert_int_eq(t->ops->open(t, &b, 0, &hb), 0);
	ck_assert_int_eq(t->ops->open(t, &c, 0, &hc), 0);
	evict(&a);
	/* reads still work, streamed from disk */
	tu_expect(t, &a, 1, 60000);
	ck_assert_uint_ge(counters().streamed_opens, 1);
	tu_check_read(hb, &b, 1, 60000, 0, 60000);
	tu_check_read(hc, &c, 1, 60000, 0, 60000);
	tier_close(hb);
	tier_close(hc);
}
END_TEST

START_TEST(test_pipeline_remove_both_tiers)
{
	struct tier *t = open_stack(64 * MB, NULL);
	struct blockid id = ut_id(40);
	char path[PATH_MAX];
	struct stat sb;

	ck_assert_int_eq(pput(&id, 1, 5000, 0), 0);
	t->ops->drain(t);
	ck_assert(in_cache(&id, NULL) && on_disk(&id, NULL));
	ck_assert_int_eq(t->ops->remove(t, &id), 0);
	ck_assert(!in_cache(&id, NULL));
	ck_assert(!on_disk(&id, NULL));
	ck_assert_int_eq(tu_lookup(t, &id, NULL), -ENOENT);
	tu_block_path(st.dir, LAYOUT_NATIVE, &id, path, sizeof(path));
	ck_assert_int_eq(stat(path, &sb), -1);
	ck_assert_int_eq(t->ops->remove(t, &id), -ENOENT);
	/* a disk-only block too */
	ck_assert_int_eq(pput(&id, 2, 5000, 0), 0);
	t->ops->drain(t);
	evict(&id);
	ck_assert_int_eq(t->ops->remove(t, &id), 0);
	ck_assert(!on_disk(&id, NULL));
	ck_assert_int_eq(tu_lookup(t, &id, NULL), -ENOENT);
}
END_TEST

START_TEST(test_pipeline_remove_races_dump)
{
	/* a dump that finishes after an unlink must not bring the block back */
	struct tier *t = open_stack(64 * MB, NULL);

	for (int i = 0; i < 100; i++) {
		struct blockid id = ut_id(1000 + (uint64_t)i);

		ck_assert_int_eq(pput(&id, 1, 200000, 0), 0);
		ck_assert_int_eq(t->ops->remove(t, &id), 0);
	}
	t->ops->drain(t);
	for (int i = 0; i < 100; i++) {
		struct blockid id = ut_id(1000 + (uint64_t)i);

		ck_assert_msg(!on_disk(&id, NULL), "removed block %d came back on disk", i);
		ck_assert_int_eq(tu_lookup(t, &id, NULL), -ENOENT);
	}
}
END_TEST

START_TEST(test_pipeline_replace_races_dump)
{
	/* the disk must end with the last version, whatever order the dumps finish in */
	struct tier *t = open_stack(64 * MB, NULL);

	for (int i = 0; i < 50; i++) {
		struct blockid id = ut_id(2000 + (uint64_t)i);

		ck_assert_int_eq(pput(&id, 1, 300000, 0), 0);
		ck_assert_int_eq(pput(&id, 2, 1000 + (uint64_t)i, TIER_RESERVE_TRUNC), 0);
	}
	t->ops->drain(t);
	for (int i = 0; i < 50; i++) {
		struct blockid id = ut_id(2000 + (uint64_t)i);

		expect_on_disk(&id, 2, 1000 + (uint64_t)i);
	}
}
END_TEST

START_TEST(test_pipeline_durable_commits)
{
	struct tu_stack_config c = { .posix = true, .durable = true };
	struct tier *t = open_stack(64 * MB, &c);
	struct blockid id = ut_id(50);

	/* durable: on disk when the commit returns */
	ck_assert_int_eq(pput(&id, 1, 70000, 0), 0);
	expect_on_disk(&id, 1, 70000);
	(void)t;
}
END_TEST

START_TEST(test_pipeline_fsync_before_close)
{
	struct tier *t = open_stack(64 * MB, NULL);
	struct blockid a = ut_id(51), b = ut_id(52);
	struct tier_handle *h;

	/* write, fsync, close: the close returns once the block is on disk */
	ck_assert_int_eq(t->ops->reserve(t, &a, 0, 0, &h), 0);
	ck_assert_int_eq(tu_write(h, &a, 1, 0, 70000), 70000);
	ck_assert_int_eq(t->ops->set_durable(h), 0);
	ck_assert_int_eq(commit(h, 0), 0);
	expect_on_disk(&a, 1, 70000);
	ck_assert_int_eq(t->ops->reserve(t, &b, 0, 0, &h), 0);
	ck_assert_int_eq(tu_write(h, &b, 1, 0, 70000), 70000);
	ck_assert_int_eq(commit(h, TIER_COMMIT_DURABLE), 0);
	expect_on_disk(&b, 1, 70000);
	/* fsync of a committed block */
	{
		struct blockid c = ut_id(53);

		ck_assert_int_eq(pput(&c, 1, 7000, 0), 0);
		ck_assert_int_eq(t->ops->sync(t, &c), 0);
		expect_on_disk(&c, 1, 7000);
		ck_assert_int_eq(t->ops->sync(t, &(struct blockid){ .b = { 1 } }), -ENOENT);
	}
}
END_TEST

START_TEST(test_pipeline_ttl)
{
	struct tier *t = open_stack(64 * MB, NULL);
	struct blockid a = ut_id(60), b = ut_id(61);
	struct tier_handle *h;
	struct block_attr at;
	int64_t t0, t1;

	/* a TTL set while writing counts from the commit */
	ck_assert_int_eq(t->ops->reserve(t, &a, 0, 0, &h), 0);
	ck_assert_int_eq(tu_write(h, &a, 1, 0, 5000), 5000);
	ck_assert_int_eq(t->ops->set_ttl(t, &a, 1000), 0);
	ut_sleep_ms(20);
	t0 = mono_ns();
	ck_assert_int_eq(commit(h, 0), 0);
	t1 = mono_ns();
	ck_assert_int_eq(tu_lookup(t, &a, &at), 0);
	ck_assert_int_ge(at.deadline, t0 + 1000 * 1000000LL);
	ck_assert_int_le(at.deadline, t1 + 1000 * 1000000LL);
	/* on a committed block: from now; TTL_NONE clears it */
	ck_assert_int_eq(pput(&b, 1, 5000, 0), 0);
	t0 = mono_ns();
	ck_assert_int_eq(t->ops->set_ttl(t, &b, 1000), 0);
	ck_assert_int_eq(tu_lookup(t, &b, &at), 0);
	ck_assert_int_ge(at.deadline, t0 + 1000 * 1000000LL);
	ck_assert_int_eq(t->ops->set_ttl(t, &b, TTL_NONE), 0);
	ck_assert_int_eq(tu_lookup(t, &b, &at), 0);
	ck_assert_int_eq(at.deadline, 0);
	t->ops->drain(t);
	while (mono_ns() < t1 + 1100 * 1000000LL)
		ut_sleep_ms(50);
	ck_assert_int_eq(tu_lookup(t, &a, NULL), -ENOENT);
	ck_assert(!on_disk(&a, NULL)); /* the disk copy carries the deadline too */
	ck_assert_int_eq(t->ops->open(t, &a, 0, &h), -ENOENT);
	ck_assert_int_eq(tu_lookup(t, &b, NULL), 0);
	ck_assert_int_eq(t->ops->set_ttl(t, &a, 1000), -ENOENT);
}
END_TEST

START_TEST(test_pipeline_default_ttl)
{
	struct tu_stack_config c = { .posix = true, .default_ttl_ms = 200 };
	struct tier *t = open_stack(64 * MB, &c);
	struct blockid a = ut_id(62), b = ut_id(63);
	struct tier_handle *h;

	ck_assert_int_eq(pput(&a, 1, 5000, 0), 0);
	/* a TTL set on the writer wins over the default */
	ck_assert_int_eq(t->ops->reserve(t, &b, 0, 0, &h), 0);
	ck_assert_int_eq(tu_write(h, &b, 1, 0, 5000), 5000);
	ck_assert_int_eq(t->ops->set_ttl(t, &b, TTL_NONE), 0);
	ck_assert_int_eq(commit(h, 0), 0);
	t->ops->drain(t);
	ut_sleep_ms(300);
	ck_assert_int_eq(tu_lookup(t, &a, NULL), -ENOENT);
	ck_assert(!on_disk(&a, NULL));
	ck_assert_int_eq(tu_lookup(t, &b, NULL), 0);
	ck_assert(on_disk(&b, NULL));
}
END_TEST

START_TEST(test_pipeline_list_merges_tiers)
{
	struct tier *t = open_stack(64 * MB, NULL);
	const unsigned S = 0x2b2;
	size_t n;
	struct blockid *l;

	for (int i = 0; i < 12; i++) {
		struct blockid id = ut_id_in_shard(S, (uint64_t)i);

		ck_assert_int_eq(pput(&id, 1, 1000, 0), 0);
	}
	t->ops->drain(t);
	for (int i = 0; i < 4; i++) { /* disk only */
		struct blockid id = ut_id_in_shard(S, (uint64_t)i);

		evict(&id);
	}
	l = tu_list(t, S, &n);
	ck_assert_uint_eq(n, 12); /* each once, wherever it lives */
	for (size_t i = 1; i < n; i++)
		ck_assert_int_lt(blockid_cmp(&l[i - 1], &l[i]), 0); /* in id order */
	free(l);
	{
		struct tier_usage u;

		ck_assert_int_eq(t->ops->usage(t, &u), 0);
		ck_assert_uint_eq(u.blocks, 12);
	}
}
END_TEST

/* --- errors ------------------------------------------------------------------------------ */

START_TEST(test_pipeline_memory_only_enospc)
{
	struct tu_stack_config c = { .posix = false };
	struct tier *t = open_stack(64 * KB, &c);
	struct blockid a = ut_id(70), b = ut_id(71);
	struct tier_handle *h, *pin;

	/* no disk to spill to */
	ck_assert_int_eq(t->ops->reserve(t, &a, 0, 0, &h), 0);
	ck_assert_int_eq(tu_write(h, &a, 1, 0, 128 * KB), -ENOSPC);
	t->ops->abort(h);
	/* memory full of pins */
	ck_assert_int_eq(pput(&a, 1, 64 * KB, 0), 0);
	ck_assert_int_eq(t->ops->open(t, &a, 0, &pin), 0);
	ck_assert_int_eq(pput(&b, 1, 4 * KB, 0), -ENOSPC);
	ck_assert_int_eq(tu_lookup(t, &b, NULL), -ENOENT);
	tier_close(pin);
	ck_assert_int_eq(pput(&b, 1, 4 * KB, 0), 0); /* STORE none: memory evicts */
	tu_expect(t, &b, 1, 4 * KB);
}
END_TEST

START_TEST(test_pipeline_corrupt_disk_copy)
{
	struct tier *t = open_stack(64 * MB, NULL);
	struct blockid id = ut_id(80);
	struct tier_handle *h;
	char path[PATH_MAX];
	unsigned char c;
	int fd, rc;

	ck_assert_int_eq(pput(&id, 1, 50000, 0), 0);
	t->ops->drain(t);
	evict(&id);
	tu_block_path(st.dir, LAYOUT_NATIVE, &id, path, sizeof(path));
	fd = open(path, O_RDWR);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, &c, 1, DISK_HEADER_SIZE + 1234), 1);
	c ^= 0x01;
	ck_assert_int_eq(pwrite(fd, &c, 1, DISK_HEADER_SIZE + 1234), 1);
	close(fd);
	/* never served: the read fails -EIO (an open streams, so it may itself succeed), and
	 * the block is quarantined: gone from every lookup */
	rc = t->ops->open(t, &id, 0, &h);
	if (rc == 0) {
		char *buf = malloc(50000);

		ck_assert_ptr_nonnull(buf);
		ck_assert_int_eq(tier_read(h, buf, 50000, 0), -EIO);
		free(buf);
		tier_close(h);
	} else {
		ck_assert_int_eq(rc, -EIO);
	}
	t->ops->drain(t);
	ck_assert_int_eq(tu_lookup(t, &id, NULL), -ENOENT);
	ck_assert_uint_ge(counters().load_errors, 1);
}
END_TEST

/* --- concurrency ------------------------------------------------------------------------- */

#define PT_THREADS 6
#define PT_IDS 12

static uint64_t pt_size(int k)
{
	return 1 + (uint64_t)k * 48611 % 400000;
}

struct pt_worker {
	int n;
	char err[256];
};

static void *pt_run(void *arg)
{
	struct pt_worker *w = arg;
	struct tier *t = P();
	uint64_t seed = 1000 + (uint64_t)w->n;

	for (int it = 0; it < 300; it++) {
		int k = (int)(ut_rand(&seed) % PT_IDS);
		struct blockid id = ut_id(5000 + (uint64_t)k);
		uint64_t r = ut_rand(&seed) % 10, size = pt_size(k);
		int rc;

		if (r < 4) {
			/* writers of one id share a session: split the block in two halves */
			struct tier_handle *h;
			uint64_t half = size / 2;

			rc = t->ops->reserve(t, &id, TIER_RESERVE_TRUNC, 0, &h);
			if (rc) {
				snprintf(w->err, sizeof(w->err), "reserve: %d", rc);
				return NULL;
			}
			if (tu_write(h, &id, 7, r % 2 ? 0 : half, r % 2 ? half : size - half) < 0 ||
			    tu_write(h, &id, 7, r % 2 ? half : 0, r % 2 ? size - half : half) < 0) {
				snprintf(w->err, sizeof(w->err), "write failed");
				return NULL;
			}
			rc = commit(h, 0);
			if (rc) {
				snprintf(w->err, sizeof(w->err), "commit %s: %d", ut_hex(&id), rc);
				return NULL;
			}
		} else if (r < 8) {
			rc = tu_try_read(t, &id, 7, size);
			if (rc && rc != -ENOENT) {
				snprintf(w->err, sizeof(w->err), "read %s: %d", ut_hex(&id), rc);
				return NULL;
			}
		} else if (r == 8) {
			rc = t->ops->remove(t, &id);
			if (rc && rc != -ENOENT) {
				snprintf(w->err, sizeof(w->err), "remove: %d", rc);
				return NULL;
			}
		} else {
			t->ops->touch(t, &id);
		}
	}
	return NULL;
}

#define PR_THREADS 6

struct pr_reader {
	struct tier_handle *h;
	struct blockid id;
	uint64_t size;
	int n;
	char err[256];
};

static void *pr_run(void *arg)
{
	struct pr_reader *r = arg;
	uint64_t seed = 99 + (uint64_t)r->n;
	char *buf = malloc(r->size);

	if (!buf)
		return NULL;
	for (int i = 0; i < 600 && !r->err[0]; i++) {
		uint64_t off = ut_rand(&seed) % r->size, len = 1 + ut_rand(&seed) % (16 * KB);
		ssize_t want = (ssize_t)(len < r->size - off ? len : r->size - off);
		ssize_t n = tier_read(r->h, buf, len, off);

		if (n != want || ut_diff(&r->id, 1, buf, (size_t)want, off) >= 0)
			snprintf(r->err, sizeof(r->err), "read(%llu, %llu) = %zd: wrong",
				 (unsigned long long)off, (unsigned long long)len, n);
	}
	free(buf);
	return NULL;
}

START_TEST(test_pipeline_parallel_reads_from_disk)
{
	/* tier.h: reads of one read handle may run in parallel (kernel readahead); here on a
	 * compressed block on disk, small reads each decoding (part of) a chunk */
	struct tier *t = open_stack(64 * MB, NULL);
	struct blockid id = ut_id(90);
	const uint64_t size = 3 * MB + 77;
	struct pr_reader r[PR_THREADS];
	pthread_t th[PR_THREADS];
	struct tier_handle *h;
	struct block_attr a;

	ck_assert_int_eq(pput(&id, 1, size, 0), 0);
	t->ops->drain(t);
	ck_assert(on_disk(&id, &a));
	ck_assert_uint_ne(a.codec, CODEC_RAW);
	ck_assert_int_eq(st.below->ops->open(st.below, &id, 0, &h), 0);
	for (int i = 0; i < PR_THREADS; i++) {
		memset(&r[i], 0, sizeof(r[i]));
		r[i].h = h;
		r[i].id = id;
		r[i].size = size;
		r[i].n = i;
		ck_assert_int_eq(pthread_create(&th[i], NULL, pr_run, &r[i]), 0);
	}
	for (int i = 0; i < PR_THREADS; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < PR_THREADS; i++)
		ck_assert_msg(r[i].err[0] == '\0', "thread %d: %s", i, r[i].err);
	tier_close(h);
	(void)t;
}
END_TEST

/* Two threads open the same block on disk at once, one for the daemon's own use. */
struct race_open {
	pthread_barrier_t *bar;
	struct blockid id;
	unsigned flags;
	uint64_t size;
};

static void *race_open_run(void *arg)
{
	struct race_open *r = arg;
	struct tier_handle *h;

	pthread_barrier_wait(r->bar);
	if (P()->ops->open(P(), &r->id, r->flags, &h) == 0) {
		struct block_attr a;

		h->tier->ops->stat(h, &a);
		ck_assert_uint_eq(a.size, r->size);
		tier_close(h);
	}
	return NULL;
}

/*
 * Without workers a load runs whole in the thread that started it; a second opener that joins
 * it (a daemon-internal open waits for the load) must not queue a pass nobody would run: the
 * drain that follows would never end (the test's timeout) and the load would leak.
 */
START_TEST(test_pipeline_no_workers_joined_load)
{
	struct tu_stack_config c = { .posix = true, .no_start = true };
	struct tier *t = open_stack(64 * MB, &c);
	enum { N = 1000 };
	pthread_barrier_t bar;

	pthread_barrier_init(&bar, NULL, 2);
	for (int i = 0; i < N; i++) {
		struct blockid id = ut_id(500 + i);

		ck_assert_int_eq(pput(&id, 3, 4 * KB, 0), 0);
	}
	t->ops->drain(t);
	for (int i = 0; i < N; i++) {
		struct race_open r[2] = {
			{ .bar = &bar, .id = ut_id(500 + i), .flags = 0, .size = 4 * KB },
			{ .bar = &bar, .id = ut_id(500 + i), .flags = TIER_OPEN_INTERNAL,
			  .size = 4 * KB },
		};
		pthread_t th[2];

		evict(&r[0].id);
		for (int k = 0; k < 2; k++)
			ck_assert_int_eq(pthread_create(&th[k], NULL, race_open_run, &r[k]), 0);
		for (int k = 0; k < 2; k++)
			pthread_join(th[k], NULL);
		t->ops->drain(t);
		tu_expect(t, &r[0].id, 3, 4 * KB);
	}
	pthread_barrier_destroy(&bar);
}
END_TEST

START_TEST(test_pipeline_threads)
{
	struct tier *t = open_stack(512 * KB, NULL);
	struct pt_worker w[PT_THREADS];
	pthread_t th[PT_THREADS];

	for (int i = 0; i < PT_THREADS; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].n = i;
		ck_assert_int_eq(pthread_create(&th[i], NULL, pt_run, &w[i]), 0);
	}
	for (int i = 0; i < PT_THREADS; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < PT_THREADS; i++)
		ck_assert_msg(w[i].err[0] == '\0', "thread %d: %s", i, w[i].err);
	t->ops->drain(t);
	/* what is live is intact in both tiers */
	for (int k = 0; k < PT_IDS; k++) {
		struct blockid id = ut_id(5000 + (uint64_t)k);

		if (tu_lookup(t, &id, NULL))
			continue;
		tu_expect(t, &id, 7, pt_size(k));
		expect_on_disk(&id, 7, pt_size(k));
	}
	ck_assert_uint_eq(counters().dump_errors, 0);
}
END_TEST

#define HF_IDS 12

/* One writer of the fsync race: its ids (every other one), written, then fsynced one by one,
 * twice, the second time with new content. */
static void *hf_run(void *arg)
{
	int me = *(int *)arg;

	for (uint64_t round = 0; round < 2; round++) {
		for (int k = me; k < HF_IDS; k += 2) {
			struct blockid id = ut_id(6000 + (uint64_t)k);

			ck_assert_int_eq(pput(&id, 10 + round, MB, 0), 0);
		}
		for (int k = me; k < HF_IDS; k += 2) {
			struct blockid id = ut_id(6000 + (uint64_t)k);

			ck_assert_int_eq(P()->ops->sync(P(), &id), 0);
		}
	}
	return NULL;
}

/*
 * Two writers each write and fsync their blocks, twice over, while the workers dump them:
 * fsyncs that find other dumps running hurry them (stored raw), and every hurried block still
 * in memory is written again compressed. In the end every block has its last content in both
 * tiers and is stored compressed; a rewrite never brought back the first round's bytes.
 */
START_TEST(test_pipeline_fsyncs_hurry_and_recompress)
{
	struct tu_stack_config c = { .posix = true, .hurry = true };
	struct tier *t = open_stack(64 * MB, &c);
	int me[2] = { 0, 1 };
	pthread_t th[2];
	int64_t until;

	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, hf_run, &me[i]), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	until = mono_ns() + 60 * 1000000000LL;
	while (mono_ns() < until && counters().recompress_pending) /* every fsync returned */
		ut_sleep_ms(20);

	ck_assert_uint_eq(counters().recompress_pending, 0);
	t->ops->drain(t);
	for (int k = 0; k < HF_IDS; k++) {
		struct blockid id = ut_id(6000 + (uint64_t)k);
		struct block_attr a;

		tu_expect(t, &id, 11, MB);
		expect_on_disk(&id, 11, MB);
		ck_assert(on_disk(&id, &a));
		ck_assert_msg(a.stored < MB * 9 / 10, "block %d stored with %llu bytes of %llu", k,
			      (unsigned long long)a.stored, (unsigned long long)MB);
	}
	ck_assert_uint_eq(counters().dump_errors, 0);
}
END_TEST

Suite *pipeline_suite(void)
{
	Suite *s = suite_create("pipeline");
	TCase *core = ut_tcase("core", UT_TIMEOUT), *errors = ut_tcase("errors", UT_TIMEOUT);
	TCase *conc = ut_tcase("concurrency", UT_TIMEOUT_SLOW);

	tcase_add_checked_fixture(core, NULL, teardown);
	tcase_add_checked_fixture(errors, NULL, teardown);
	tcase_add_checked_fixture(conc, NULL, teardown);
	tcase_add_test(core, test_pipeline_write_read);
	tcase_add_test(core, test_pipeline_shared_reservation);
	tcase_add_test(core, test_pipeline_shared_each_close_judged);
	tcase_add_test(core, test_pipeline_declared_size);
	tcase_add_test(core, test_pipeline_nothing_written_is_empty);
	tcase_add_test(core, test_pipeline_commit_try_keeps_handle);
	tcase_add_test(core, test_pipeline_replacement_copies_old);
	tcase_add_test(core, test_pipeline_replacement_of_disk_only_block);
	tcase_add_test(core, test_pipeline_spill_large_block);
	tcase_add_test(core, test_pipeline_spilled_reservation_reads_back);
	tcase_add_test(core, test_pipeline_compressed_on_disk);
	tcase_add_test(core, test_pipeline_drain_puts_all_on_disk);
	tcase_add_test(core, test_pipeline_evicted_block_loads_back);
	tcase_add_loop_test(core, test_pipeline_prefetch_many, 0, 2);
	tcase_add_test(core, test_pipeline_loads_any_chunk_size);
	tcase_add_test(core, test_pipeline_streams_when_memory_pinned);
	tcase_add_test(core, test_pipeline_remove_both_tiers);
	tcase_add_test(core, test_pipeline_remove_races_dump);
	tcase_add_test(core, test_pipeline_replace_races_dump);
	tcase_add_test(core, test_pipeline_durable_commits);
	tcase_add_test(core, test_pipeline_fsync_before_close);
	tcase_add_test(core, test_pipeline_ttl);
	tcase_add_test(core, test_pipeline_default_ttl);
	tcase_add_test(core, test_pipeline_list_merges_tiers);
	tcase_add_test(errors, test_pipeline_holes_publish_nothing);
	tcase_add_test(errors, test_pipeline_block_size);
	tcase_add_test(errors, test_pipeline_max_block);
	tcase_add_test(errors, test_pipeline_exclusive);
	tcase_add_test(errors, test_pipeline_memory_only_enospc);
	tcase_add_test(errors, test_pipeline_corrupt_disk_copy);
	tcase_add_test(conc, test_pipeline_threads);
	tcase_add_test(conc, test_pipeline_parallel_reads_from_disk);
	tcase_add_test(conc, test_pipeline_no_workers_joined_load);
	tcase_add_test(conc, test_pipeline_fsyncs_hurry_and_recompress);
	suite_add_tcase(s, core);
	suite_add_tcase(s, errors);
	suite_add_tcase(s, conc);
	return s;
}
