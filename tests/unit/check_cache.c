/*
 * The memory tier beyond the contract (tiers/cache.c): capacity, eviction order, pins,
 * dirty blocks, loaded admissions, accounting, and many threads on a small pool.
 * What must hold whatever the replacement policy (pins, dirty blocks, capacity) runs once
 * per policy; the eviction order has one test per policy.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/buf.h"
#include "src/clock.h"
#include "tests/unit/tier_util.h"
#include "tests/unit/unit.h"
#include "tiers/cache.h"

#define KB 1024ULL
/* Loop tests run once per replacement policy: _i is an enum ucm_policy. */
#define NPOLICIES 3
#define BLK (16 * KB) /* a block of exactly four pages */

static struct blockid bid(int n)
{
	return ut_id(7000 + (uint64_t)n);
}

static void put_blk(struct tier *t, int n, unsigned cflags)
{
	struct blockid id = bid(n);

	ck_assert_int_eq(tu_put(t, &id, 1, BLK, 0, cflags, 0), 0);
}

static bool present(struct tier *t, int n)
{
	struct blockid id = bid(n);

	return tu_lookup(t, &id, NULL) == 0;
}

static struct tier_usage usage(struct tier *t)
{
	struct tier_usage u;

	ck_assert_int_eq(t->ops->usage(t, &u), 0);
	return u;
}

static uint64_t version_of(struct tier *t, int n)
{
	struct blockid id = bid(n);
	struct block_attr a;

	ck_assert_int_eq(tu_lookup(t, &id, &a), 0);
	return a.version;
}

/* --- core -------------------------------------------------------------------------------- */

START_TEST(test_cache_reserve_beyond_capacity)
{
	struct tier *t = tu_cache_policy(64 * KB, 0, (enum ucm_policy)_i);
	struct blockid a = bid(1), b = bid(2);
	struct tier_handle *h, *h2;

	ck_assert_int_eq(t->ops->reserve(t, &a, 0, 128 * KB, &h), -ENOSPC);
	ck_assert_int_eq(t->ops->reserve(t, &a, 0, 64 * KB + 1, &h), -ENOSPC);
	ck_assert_int_eq(usage(t).used, 0);
	ck_assert_int_eq(t->ops->reserve(t, &a, 0, 64 * KB, &h), 0);
	/* a reservation holds its room: it is never evicted */
	ck_assert_int_eq(t->ops->reserve(t, &b, 0, 4 * KB, &h2), -ENOSPC);
	ck_assert_int_eq(t->ops->reserve(t, &b, TIER_RESERVE_NOWAIT, 1, &h2), -ENOSPC);
	t->ops->abort(h);
	ck_assert_int_eq(usage(t).used, 0);
	ck_assert_int_eq(t->ops->reserve(t, &b, 0, 4 * KB, &h2), 0);
	t->ops->abort(h2);
	tier_destroy(t);
}
END_TEST

START_TEST(test_cache_write_beyond_capacity)
{
	struct tier *t = tu_cache(64 * KB, 0);
	struct blockid a = bid(1);
	struct tier_handle *h;

	ck_assert_int_eq(t->ops->reserve(t, &a, 0, 0, &h), 0);
	ck_assert_int_eq(tu_write(h, &a, 1, 0, 60 * KB), (ssize_t)(60 * KB));
	ck_assert_int_eq(tu_write(h, &a, 1, 60 * KB, 8 * KB), -ENOSPC);
	ck_assert_uint_le(usage(t).used, 64 * KB);
	ck_assert_int_eq(t->ops->truncate(h, 65 * KB), -ENOSPC);
	t->ops->abort(h);
	ck_assert_int_eq(usage(t).used, 0);
	tier_destroy(t);
}
END_TEST

START_TEST(test_cache_evicts_lru)
{
	struct tier *t = tu_cache(4 * BLK, 0);
	struct blockid a = bid(0);
	struct tier_handle *h;

	for (int i = 0; i < 4; i++)
		put_blk(t, i, 0); /* 0, 1, 2, 3 */
	ck_assert_uint_eq(usage(t).used, 4 * BLK);
	ck_assert_int_eq(t->ops->touch(t, &a), 0); /* 0 is now the most recent */
	put_blk(t, 4, 0);                          /* evicts 1 */
	ck_assert(present(t, 0) && !present(t, 1) && present(t, 2) && present(t, 3));
	ck_assert(present(t, 4));
	/* a read is a use too */
	{
		struct blockid id = bid(2);

		ck_assert_int_eq(t->ops->open(t, &id, 0, &h), 0);
		tier_close(h);
	}
	put_blk(t, 5, 0); /* evicts 3 */
	ck_assert(present(t, 0) && present(t, 2) && !present(t, 3) && present(t, 4));
	put_blk(t, 6, 0); /* evicts 0 */
	ck_assert(!present(t, 0) && present(t, 2) && present(t, 4) && present(t, 5));
	ck_assert(present(t, 6));
	ck_assert_uint_eq(usage(t).blocks, 4);
	ck_assert_uint_le(usage(t).used, 4 * BLK);
	for (int i = 2; i <= 6; i++)
		if (i != 3) {
			struct blockid id = bid(i);

			tu_expect(t, &id, 1, BLK);
		}
	tier_destroy(t);
}
END_TEST

START_TEST(test_cache_fifo_order)
{
	struct tier *t = tu_cache_policy(4 * BLK, 0, POLICY_FIFO);
	struct blockid b0 = bid(0), b1 = bid(1);
	struct tier_handle *h;

	for (int i = 0; i < 4; i++)
		put_blk(t, i, 0);
	ck_assert_int_eq(t->ops->touch(t, &b0), 0); /* a use does not reorder */
	put_blk(t, 4, 0);
	ck_assert(!present(t, 0) && present(t, 1) && present(t, 2) && present(t, 3));
	/* a read (a pin and its end) does not reorder either: commit order decides */
	ck_assert_int_eq(t->ops->open(t, &b1, 0, &h), 0);
	tier_close(h);
	put_blk(t, 5, 0);
	ck_assert(!present(t, 1) && present(t, 2) && present(t, 3) && present(t, 4));
	put_blk(t, 6, 0);
	ck_assert(!present(t, 2) && present(t, 3));
	tier_destroy(t);
}
END_TEST

START_TEST(test_cache_clock_second_chance)
{
	struct tier *t = tu_cache_policy(4 * BLK, 0, POLICY_CLOCK);
	struct blockid b1 = bid(1);

	for (int i = 0; i < 4; i++)
		put_blk(t, i, 0);
	put_blk(t, 4, 0); /* every bit set: one sweep clears them, the oldest goes */
	ck_assert(!present(t, 0) && present(t, 1) && present(t, 2) && present(t, 3));
	ck_assert_int_eq(t->ops->touch(t, &b1), 0); /* 1 gets a second chance */
	put_blk(t, 5, 0);
	ck_assert_msg(present(t, 1), "a block used since the last sweep was evicted");
	ck_assert(!present(t, 2) && present(t, 3) && present(t, 4) && present(t, 5));
	tier_destroy(t);
}
END_TEST

START_TEST(test_cache_unknown_policy)
{
	struct cache_config cc = { .capacity = 1 << 20, .policy = (enum ucm_policy)42 };
	struct tier *t = NULL;

	ck_assert_int_eq(cache_create(&cc, &t), -EINVAL);
}
END_TEST

START_TEST(test_cache_pinned_never_evicted)
{
	struct tier *t = tu_cache_policy(4 * BLK, 0, (enum ucm_policy)_i);
	struct tier_handle *pin[4], *h;
	struct blockid id;

	put_blk(t, 0, 0);
	id = bid(0);
	ck_assert_int_eq(t->ops->open(t, &id, 0, &pin[0]), 0);
	/* 0 is the oldest, yet pinned: the others go first, however many come */
	for (int i = 1; i < 20; i++) {
		put_blk(t, i, 0);
		ck_assert_msg(present(t, 0), "pinned block evicted at %d", i);
	}
	tu_check_read(pin[0], &id, 1, BLK, 0, BLK);
	/* every block pinned: no room at all */
	for (int i = 1; i < 4; i++) {
		struct blockid p = bid(16 + i);

		ck_assert_int_eq(t->ops->open(t, &p, 0, &pin[i]), 0);
	}
	id = bid(99);
	ck_assert_int_eq(t->ops->reserve(t, &id, 0, BLK, &h), -ENOSPC);
	ck_assert_int_eq(tu_put(t, &id, 1, BLK, 0, 0, 0), -ENOSPC);
	for (int i = 0; i < 4; i++) {
		struct blockid p = i ? bid(16 + i) : bid(0);
		struct block_attr a;

		ck_assert_int_eq(tu_lookup(t, &p, &a), 0);
		ck_assert_uint_eq(a.pins, 1);
	}
	/* one unpin makes room, and that block is the one to go */
	tier_close(pin[2]);
	ck_assert_int_eq(tu_put(t, &id, 1, BLK, 0, 0, 0), 0);
	ck_assert(!present(t, 18));
	ck_assert(present(t, 0) && present(t, 17) && present(t, 19));
	tier_close(pin[0]);
	tier_close(pin[1]);
	tier_close(pin[3]);
	tier_destroy(t);
}
END_TEST

START_TEST(test_cache_two_pins)
{
	struct tier *t = tu_cache_policy(4 * BLK, 0, (enum ucm_policy)_i);
	struct tier_handle *p1, *p2;
	struct blockid id = bid(0);
	struct block_attr a;

	put_blk(t, 0, 0);
	ck_assert_int_eq(t->ops->open(t, &id, 0, &p1), 0);
	ck_assert_int_eq(t->ops->open(t, &id, 0, &p2), 0);
	ck_assert_int_eq(tu_lookup(t, &id, &a), 0);
	ck_assert_uint_eq(a.pins, 2);
	tier_close(p1);
	for (int i = 1; i < 8; i++) {
		put_blk(t, i, 0);
		ck_assert(present(t, 0)); /* still pinned by p2 */
	}
	ck_assert_int_eq(tu_lookup(t, &id, &a), 0);
	ck_assert_uint_eq(a.pins, 1);
	tier_close(p2);
	ck_assert_int_eq(tu_lookup(t, &id, &a), 0);
	ck_assert_uint_eq(a.pins, 0);
	/* evictable again: gone once enough newer blocks came (CLOCK gives it one more round
	 * for the read) */
	for (int i = 8; i < 16; i++)
		put_blk(t, i, 0);
	ck_assert(!present(t, 0));
	tier_destroy(t);
}
END_TEST

START_TEST(test_cache_internal_refs_do_not_pin)
{
	struct tier *t = tu_cache_policy(4 * BLK, 0, (enum ucm_policy)_i);
	struct tier_handle *in;
	struct blockid id = bid(0);
	struct block_attr a;

	put_blk(t, 0, 0);
	ck_assert_int_eq(t->ops->open(t, &id, TIER_OPEN_INTERNAL, &in), 0);
	ck_assert_int_eq(tu_lookup(t, &id, &a), 0);
	ck_assert_uint_eq(a.pins, 0); /* not a pin: readers see none */
	/* but while it is held, evicting it would free nothing: others go first, and room
	 * that only it could give is not there */
	for (int i = 1; i <= 3; i++)
		put_blk(t, i, 0);
	ck_assert(present(t, 0));
	ck_assert_int_eq(tu_put(t, &(struct blockid){ .b = { 0xee } }, 1, BLK, 0, 0, 0), 0);
	ck_assert(present(t, 0));
	tu_check_read(in, &id, 1, BLK, 0, BLK);
	tier_close(in);
	/* once let go it is evictable like any other */
	for (int i = 4; i <= 8; i++)
		put_blk(t, i, 0);
	ck_assert(!present(t, 0));
	ck_assert_uint_le(usage(t).used, 4 * BLK);
	tier_destroy(t);
}
END_TEST

START_TEST(test_cache_commit_pin)
{
	struct tier *t = tu_cache_policy(4 * BLK, 0, (enum ucm_policy)_i);
	struct blockid id = bid(0), id2 = bid(1);
	struct tier_handle *h, *rd = NULL;
	struct block_meta m = tu_meta(BLK, 0);
	struct block_attr a;

	ck_assert_int_eq(t->ops->reserve(t, &id, 0, BLK, &h), 0);
	ck_assert_int_eq(tu_write(h, &id, 1, 0, BLK), (ssize_t)BLK);
	ck_assert_int_eq(t->ops->commit(h, &m, TIER_COMMIT_PIN, &rd), 0);
	ck_assert_ptr_nonnull(rd);
	ck_assert_int_eq(tu_lookup(t, &id, &a), 0);
	ck_assert_uint_eq(a.pins, 1);
	for (int i = 2; i < 10; i++)
		put_blk(t, i, 0);
	ck_assert_msg(present(t, 0), "a block pinned by its commit was evicted");
	tu_check_read(rd, &id, 1, BLK, 0, BLK);
	tier_close(rd);
	ck_assert_int_eq(tu_lookup(t, &id, &a), 0);
	ck_assert_uint_eq(a.pins, 0);

	/* without TIER_COMMIT_PIN: an internal reference */
	ck_assert_int_eq(t->ops->reserve(t, &id2, 0, BLK, &h), 0);
	ck_assert_int_eq(tu_write(h, &id2, 1, 0, BLK), (ssize_t)BLK);
	ck_assert_int_eq(t->ops->commit(h, &m, 0, &rd), 0);
	ck_assert_ptr_nonnull(rd);
	ck_assert_int_eq(tu_lookup(t, &id2, &a), 0);
	ck_assert_uint_eq(a.pins, 0);
	tier_close(rd);
	tier_destroy(t);
}
END_TEST

START_TEST(test_cache_dirty_never_evicted)
{
	struct tier *t = tu_cache_policy(4 * BLK, 0, (enum ucm_policy)_i);
	struct blockid e = bid(10), b1 = bid(1);
	struct tier_handle *h;
	uint64_t v1;

	for (int i = 0; i < 4; i++)
		put_blk(t, i, TIER_COMMIT_DIRTY);
	ck_assert_uint_eq(usage(t).dirty_blocks, 4);
	{
		struct block_attr a;

		ck_assert_int_eq(tu_lookup(t, &b1, &a), 0);
		ck_assert(a.dirty);
	}
	ck_assert_int_eq(t->ops->reserve(t, &e, 0, BLK, &h), -ENOSPC);
	ck_assert_int_eq(t->ops->reserve(t, &e, TIER_RESERVE_NOWAIT, BLK, &h), -ENOSPC);
	v1 = version_of(t, 1);
	/* the wrong version is not cleaned */
	ck_assert_int_eq(t->ops->mark_clean(t, &b1, v1 + 1000), -ENOENT);
	ck_assert_int_eq(t->ops->reserve(t, &e, 0, BLK, &h), -ENOSPC);
	ck_assert_int_eq(t->ops->mark_clean(t, &b1, v1), 0);
	ck_assert_int_eq(t->ops->mark_clean(t, &b1, v1), 0); /* twice is fine */
	ck_assert_uint_eq(usage(t).dirty_blocks, 3);
	{
		struct block_attr a;

		ck_assert_int_eq(tu_lookup(t, &b1, &a), 0);
		ck_assert(!a.dirty);
	}
	/* the only clean block is the one that goes */
	ck_assert_int_eq(tu_put(t, &e, 1, BLK, 0, 0, 0), 0);
	ck_assert(!present(t, 1));
	ck_assert(present(t, 0) && present(t, 2) && present(t, 3) && present(t, 10));
	ck_assert_int_eq(t->ops->mark_clean(t, &b1, v1), -ENOENT);
	/* dirty blocks can still be removed */
	{
		struct blockid b0 = bid(0);

		ck_assert_int_eq(t->ops->remove(t, &b0), 0);
		ck_assert_uint_eq(usage(t).dirty_blocks, 2);
	}
	tier_destroy(t);
}
END_TEST

struct cleaner {
	struct tier *t;
	struct blockid id;
	uint64_t version;
	unsigned delay_ms;
};

static void *clean_later(void *arg)
{
	struct cleaner *c = arg;

	ut_sleep_ms(c->delay_ms);
	c->t->ops->mark_clean(c->t, &c->id, c->version);
	return NULL;
}

START_TEST(test_cache_reserve_waits_for_clean)
{
	struct tier *t = tu_cache_policy(4 * BLK, 5000, (enum ucm_policy)_i);
	struct blockid e = bid(10);
	struct cleaner c;
	pthread_t th;

	for (int i = 0; i < 4; i++)
		put_blk(t, i, TIER_COMMIT_DIRTY);
	c.t = t;
	c.id = bid(2);
	c.version = version_of(t, 2);
	c.delay_ms = 150;
	/* NOWAIT fails at once */
	{
		struct tier_handle *h;

		ck_assert_int_eq(t->ops->reserve(t, &e, TIER_RESERVE_NOWAIT, BLK, &h), -ENOSPC);
	}
	ck_assert_int_eq(pthread_create(&th, NULL, clean_later, &c), 0);
	/* a waiting reservation succeeds once a dirty block becomes clean */
	ck_assert_int_eq(tu_put(t, &e, 1, BLK, 0, 0, 0), 0);
	pthread_join(th, NULL);
	ck_assert(!present(t, 2));
	ck_assert(present(t, 10));
	tier_destroy(t);
}
END_TEST

START_TEST(test_cache_dirty_wait_gives_up)
{
	struct tier *t = tu_cache_policy(4 * BLK, 200, (enum ucm_policy)_i);
	struct blockid e = bid(10);
	struct tier_handle *h;

	for (int i = 0; i < 4; i++)
		put_blk(t, i, TIER_COMMIT_DIRTY);
	ck_assert_int_eq(t->ops->reserve(t, &e, 0, BLK, &h), -ENOSPC);
	for (int i = 0; i < 4; i++)
		ck_assert(present(t, i));
	tier_destroy(t);
}
END_TEST

START_TEST(test_cache_commit_loaded)
{
	struct tier *t = tu_cache(1024 * KB, 0);
	struct blockid id = bid(0), fresh = bid(1);
	struct block_attr a1, a2;
	uint64_t used;

	ck_assert_int_eq(tu_put(t, &id, 1, 40000, 0, 0, 0), 0);
	ck_assert_int_eq(tu_lookup(t, &id, &a1), 0);
	used = usage(t).used;
	/* a load finishing after a newer commit must not replace it */
	ck_assert_int_eq(tu_put(t, &id, 2, 30000, 0, TIER_COMMIT_LOADED, 0), -EEXIST);
	ck_assert_int_eq(tu_lookup(t, &id, &a2), 0);
	ck_assert_uint_eq(a2.version, a1.version);
	tu_expect(t, &id, 1, 40000);
	ck_assert_uint_eq(usage(t).used, used); /* the loaded copy was dropped */
	/* absent: a loaded block is admitted (clean, evictable) */
	ck_assert_int_eq(tu_put(t, &fresh, 3, 5000, 0, TIER_COMMIT_LOADED, 0), 0);
	tu_expect(t, &fresh, 3, 5000);
	ck_assert_int_eq(tu_lookup(t, &fresh, &a2), 0);
	ck_assert(!a2.dirty);
	tier_destroy(t);
}
END_TEST

START_TEST(test_cache_expired_pinned_waits_for_unpin)
{
	struct tier *t = tu_cache_policy(4 * BLK, 0, (enum ucm_policy)_i);
	struct blockid id = bid(0);
	struct tier_handle *h;
	uint64_t used;

	put_blk(t, 0, 0);
	put_blk(t, 1, 0);
	ck_assert_int_eq(t->ops->open(t, &id, 0, &h), 0);
	ck_assert_int_eq(t->ops->set_deadline(t, &id, mono_ns() + 20 * 1000000LL), 0);
	ut_sleep_ms(40);
	ck_assert_int_eq(tu_lookup(t, &id, NULL), -ENOENT); /* invisible at once */
	tu_check_read(h, &id, 1, BLK, 0, BLK);               /* the reader keeps reading */
	used = usage(t).used;
	ck_assert_uint_eq(used, 2 * BLK);
	tier_close(h);
	ck_assert_int_eq(tu_lookup(t, &id, NULL), -ENOENT);
	ck_assert_uint_eq(usage(t).used, BLK); /* reclaimed at the unpin */
	ck_assert_uint_eq(usage(t).blocks, 1);
	tier_destroy(t);
}
END_TEST

START_TEST(test_cache_expired_evicted_first)
{
	/* DESIGN.md: "lazy TTL expiry (expired blocks are evicted first ...)" */
	struct tier *t = tu_cache_policy(4 * BLK, 0, (enum ucm_policy)_i);
	struct blockid young = bid(3);

	for (int i = 0; i < 4; i++)
		put_blk(t, i, 0);
	/* 3 is the most recently used but has expired; 0 is the least recent and live */
	ck_assert_int_eq(t->ops->set_deadline(t, &young, mono_ns() + 10 * 1000000LL), 0);
	ut_sleep_ms(30);
	put_blk(t, 4, 0);
	ck_assert_msg(present(t, 0), "a live block was evicted while an expired one stayed");
	ck_assert(present(t, 1) && present(t, 2) && present(t, 4));
	ck_assert_uint_le(usage(t).used, 4 * BLK);
	tier_destroy(t);
}
END_TEST

/* Write (id, seed 1) of `size` bytes in pieces into a reservation made without a hint. */
static void put_pieces(struct tier *t, const struct blockid *id, uint64_t size, uint64_t piece)
{
	struct tier_handle *h;
	struct block_meta m = tu_meta(size, 0);

	ck_assert_int_eq(t->ops->reserve(t, id, 0, 0, &h), 0);
	for (uint64_t off = 0; off < size; off += piece) {
		uint64_t len = size - off < piece ? size - off : piece;

		ck_assert_int_eq(tu_write(h, id, 1, off, len), (ssize_t)len);
	}
	ck_assert_int_eq(t->ops->commit(h, &m, 0, NULL), 0);
	tu_expect(t, id, 1, size);
}

START_TEST(test_cache_changed_deadlines)
{
	/* a deadline that was moved, cleared, or belonged to a replaced version is not an
	 * expiry: only blocks whose current deadline has passed go before the policy's pick */
	struct tier *t = tu_cache_policy(5 * BLK, 0, (enum ucm_policy)_i);
	struct blockid b1 = bid(1), b2 = bid(2), b3 = bid(3);
	int64_t soon = mono_ns() + 500 * 1000000LL; /* room for 2000 changes on a slow build */

	for (int i = 0; i < 4; i++)
		put_blk(t, i, 0);
	ck_assert_int_eq(t->ops->set_deadline(t, &b1, soon), 0);
	ck_assert_int_eq(t->ops->set_deadline(t, &b1, mono_ns() + 3600 * 1000000000LL), 0);
	ck_assert_int_eq(t->ops->set_deadline(t, &b2, soon), 0);
	ck_assert_int_eq(t->ops->set_deadline(t, &b2, 0), 0);
	ck_assert_int_eq(t->ops->set_deadline(t, &b3, soon), 0);
	ck_assert_int_eq(tu_put(t, &b3, 2, BLK, 0, 0, 0), 0); /* a new version, no deadline */
	/* many changes of one block's deadline */
	for (int i = 0; i < 2000; i++)
		ck_assert_int_eq(t->ops->set_deadline(t, &b2, soon + i), 0);
	ck_assert_int_eq(t->ops->set_deadline(t, &b2, 0), 0);
	while (mono_ns() < soon + 2000 + 20 * 1000000LL)
		ut_sleep_ms(10);
	ck_assert(present(t, 0) && present(t, 1) && present(t, 2) && present(t, 3));
	put_blk(t, 4, 0); /* the last free room */
	ck_assert_uint_eq(usage(t).blocks, 5);
	/* one more: the policy's victim (0, the oldest, whatever the policy) goes, and none
	 * of the blocks whose deadline changed was taken for expired */
	put_blk(t, 5, 0);
	ck_assert_uint_eq(usage(t).blocks, 5);
	ck_assert_msg(present(t, 1) && present(t, 2) && present(t, 3),
		      "a block whose deadline had been moved or cleared was expired");
	ck_assert(!present(t, 0) && present(t, 4) && present(t, 5));
	ck_assert_uint_le(usage(t).used, 5 * BLK);
	tu_expect(t, &b3, 2, BLK);
	tier_destroy(t);
}
END_TEST

START_TEST(test_cache_many_expired_reclaimed)
{
	/* expired blocks are reclaimed before live ones, however many there are */
	struct tier *t = tu_cache_policy(64 * BLK, 0, (enum ucm_policy)_i);
	int64_t soon = mono_ns() + 500 * 1000000LL; /* room for 2000 changes on a slow build */

	for (int i = 0; i < 64; i++) {
		struct blockid id = bid(i);

		put_blk(t, i, 0);
		if (i % 2)
			ck_assert_int_eq(t->ops->set_deadline(t, &id, soon + i), 0);
	}
	while (mono_ns() < soon + 100 * 1000000LL)
		ut_sleep_ms(10);
	/* 32 new blocks fit in the room of the 32 expired ones */
	for (int i = 100; i < 132; i++)
		put_blk(t, i, 0);
	for (int i = 0; i < 64; i += 2)
		ck_assert_msg(present(t, i), "live block %d evicted while expired ones stayed", i);
	ck_assert_uint_eq(usage(t).blocks, 64);
	tier_destroy(t);
}
END_TEST

START_TEST(test_cache_accounting)
{
	struct tier *t = tu_cache(4096 * KB, 0);
	struct blockid a = bid(0), b = bid(1);
	struct tier_handle *h, *old;

	ck_assert_uint_eq(usage(t).capacity, 4096 * KB);
	/* small pieces, no size hint: the buffer grows geometrically, the slack is given
	 * back at commit */
	put_pieces(t, &a, 1000001, 1000);
	ck_assert_uint_eq(usage(t).used, buf_round(1000001));
	put_pieces(t, &b, 5000, 100);
	ck_assert_uint_eq(usage(t).used, buf_round(1000001) + buf_round(5000));
	ck_assert_uint_eq(usage(t).blocks, 2);
	/* a replacement frees the old buffer once its last reader is gone */
	ck_assert_int_eq(t->ops->open(t, &b, 0, &old), 0);
	ck_assert_int_eq(tu_put(t, &b, 2, 9000, 0, 0, 0), 0);
	ck_assert_uint_eq(usage(t).used, buf_round(1000001) + buf_round(5000) + buf_round(9000));
	tier_close(old);
	ck_assert_uint_eq(usage(t).used, buf_round(1000001) + buf_round(9000));
	/* a reservation counts while it lives */
	ck_assert_int_eq(t->ops->reserve(t, &b, 0, 100 * KB, &h), 0);
	ck_assert_uint_eq(usage(t).used, buf_round(1000001) + buf_round(9000) + 100 * KB);
	t->ops->abort(h);
	ck_assert_int_eq(t->ops->remove(t, &a), 0);
	ck_assert_int_eq(t->ops->remove(t, &b), 0);
	ck_assert_uint_eq(usage(t).used, 0);
	ck_assert_uint_eq(usage(t).blocks, 0);
	tier_destroy(t);
}
END_TEST

START_TEST(test_cache_data_aligned)
{
	struct tier *t = tu_cache(1024 * KB, 0);
	struct blockid id = bid(0);
	struct tier_handle *h;
	const void *p;

	ck_assert_int_eq(tu_put(t, &id, 1, 100000, 0, 0, 0), 0);
	ck_assert_int_eq(t->ops->open(t, &id, 0, &h), 0);
	p = tier_data(h);
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq((uintptr_t)p % 4096, 0);
	ck_assert_int_eq(ut_diff(&id, 1, p, 100000, 0), -1);
	tier_close(h);
	tier_destroy(t);
}
END_TEST

START_TEST(test_cache_truncate_grows_with_zeros)
{
	struct tier *t = tu_cache(1024 * KB, 0);
	struct blockid id = bid(0);
	struct tier_handle *h;
	struct block_meta m = tu_meta(20000, 0);
	char buf[20000];

	ck_assert_int_eq(t->ops->reserve(t, &id, 0, 0, &h), 0);
	ck_assert_int_eq(tu_write(h, &id, 1, 0, 12000), 12000);
	ck_assert_int_eq(t->ops->truncate(h, 100), 0); /* shrink: bytes past 100 are gone */
	ck_assert_int_eq(t->ops->truncate(h, 20000), 0);
	ck_assert_int_eq(t->ops->commit(h, &m, 0, NULL), 0);
	ck_assert_int_eq(t->ops->open(t, &id, 0, &h), 0);
	ck_assert_int_eq(tier_read(h, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
	ck_assert_int_eq(ut_diff(&id, 1, buf, 100, 0), -1);
	for (size_t i = 100; i < sizeof(buf); i++)
		ck_assert_msg(buf[i] == 0, "byte %zu is %d after truncate", i, buf[i]);
	tier_close(h);
	tier_destroy(t);
}
END_TEST

/*
 * A block written into a full cache takes over the buffer of the block evicted for it (no
 * fresh memory to fault in), and none of that block's bytes shows through: a hole reads as
 * zeros. Huge-page sized, as KV blocks are.
 */
START_TEST(test_cache_evicted_buffer_reused)
{
	const uint64_t size = 4096 * KB;
	struct tier *t = tu_cache(2 * size, 0);
	struct blockid a = bid(0), b = bid(1), c = bid(2);
	struct block_meta m = tu_meta(size, 0);
	struct tier_handle *h;
	const char *old, *p;

	ck_assert_int_eq(tu_put(t, &a, 1, size, 0, 0, 0), 0);
	ck_assert_int_eq(tu_put(t, &b, 2, size, 0, 0, 0), 0);
	ck_assert_int_eq(t->ops->open(t, &a, 0, &h), 0);
	old = tier_data(h);
	tier_close(h);
	ck_assert_int_eq(t->ops->touch(t, &b), 0); /* a is the coldest */
	ck_assert_double_eq(tu_metric(t, "ucmfs_mem_buffers_reused_total"), 0);

	ck_assert_int_eq(t->ops->reserve(t, &c, 0, size, &h), 0);
	ck_assert_msg(!present(t, 0), "no block was evicted for the third one");
	ck_assert_int_eq(tu_write(h, &c, 3, 0, 1000), 1000);
	ck_assert_int_eq(tu_write(h, &c, 3, size - 1000, 1000), 1000);
	ck_assert_int_eq(t->ops->commit(h, &m, 0, NULL), 0);
	ck_assert_double_eq(tu_metric(t, "ucmfs_mem_buffers_reused_total"), 1);
	ck_assert_uint_eq(usage(t).used, 2 * size);

	ck_assert_int_eq(t->ops->open(t, &c, 0, &h), 0);
	p = tier_data(h);
	ck_assert_ptr_eq(p, old);
	ck_assert_int_eq(ut_diff(&c, 3, p, 1000, 0), -1);
	ck_assert_int_eq(ut_diff(&c, 3, p + size - 1000, 1000, size - 1000), -1);
	for (uint64_t i = 1000; i < size - 1000; i++)
		ck_assert_msg(p[i] == 0, "byte %llu of the hole is %d: the evicted block's",
			      (unsigned long long)i, p[i]);
	tier_close(h);
	tu_expect(t, &b, 2, size);
	tier_destroy(t);
}
END_TEST

/* --- block memory in files (buf_use_files(): passthrough) -------------------------------- */

static bool have_files;

static void files_setup(void)
{
	have_files = ut_use_file_buffers("cache");
}

/* Open id, map its backing file (as a passthrough reader would) and close it again: the
 * mapping, of size bytes; *data: the block's buffer. */
static char *map_block(struct tier *t, const struct blockid *id, uint64_t size,
		       const char **data)
{
	struct tier_handle *h;
	char *map;
	int fd;

	ck_assert_int_eq(t->ops->open(t, id, 0, &h), 0);
	*data = tier_data(h);
	fd = t->ops->backing(h);
	ck_assert_int_ge(fd, 0);
	map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(map, MAP_FAILED);
	close(fd);
	tier_close(h);
	return map;
}

/* A committed block's backing file reads as exactly its bytes; a reservation and a block
 * too small for a file of its own have none. */
START_TEST(test_cache_backing_reads_the_block)
{
	const uint64_t size = 3 * 1024 * KB + 5;
	struct tier *t = tu_cache(16 * 1024 * KB, 0);
	struct blockid a = bid(0), b = bid(1), c = bid(2);
	struct tier_handle *h;
	struct stat st;
	char *back = malloc(size);
	int fd;

	if (!have_files)
		goto out;
	ck_assert_int_eq(tu_put(t, &a, 1, size, 0, 0, 0), 0);
	ck_assert_int_eq(tu_put(t, &b, 2, BLK, 0, 0, 0), 0);
	ck_assert_int_eq(t->ops->open(t, &a, 0, &h), 0);
	fd = t->ops->backing(h);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_uint_eq((uint64_t)st.st_size, size);
	ck_assert_int_eq(pread(fd, back, size, 0), (ssize_t)size);
	ck_assert_int_eq(ut_diff(&a, 1, back, size, 0), -1);
	close(fd);
	tier_close(h);
	ck_assert_int_eq(t->ops->open(t, &b, 0, &h), 0);
	ck_assert_int_eq(t->ops->backing(h), -ENOTSUP);
	tier_close(h);
	ck_assert_int_eq(t->ops->reserve(t, &c, 0, size, &h), 0);
	ck_assert_int_eq(t->ops->backing(h), -ENOTSUP);
	t->ops->abort(h);
out:
	free(back);
	tier_destroy(t);
}
END_TEST

/* A block whose file was handed out and mapped is evicted: its buffer is not given to the
 * next reservation (which would write into the mapped file), and the mapping keeps its
 * bytes. */
START_TEST(test_cache_exposed_buffer_never_reused)
{
	const uint64_t size = 4096 * KB;
	struct tier *t = tu_cache(2 * size, 0);
	struct blockid a = bid(0), b = bid(1), c = bid(2);
	struct block_meta m = tu_meta(size, 0);
	struct tier_handle *h;
	const char *old;
	char *map;

	if (!have_files) {
		tier_destroy(t);
		return;
	}
	ck_assert_int_eq(tu_put(t, &a, 1, size, 0, 0, 0), 0);
	ck_assert_int_eq(tu_put(t, &b, 2, size, 0, 0, 0), 0);
	map = map_block(t, &a, size, &old);
	ck_assert_int_eq(t->ops->touch(t, &b), 0); /* a is the coldest */
	ck_assert_int_eq(t->ops->reserve(t, &c, 0, size, &h), 0);
	ck_assert_msg(!present(t, 0), "no block was evicted for the third one");
	ck_assert_int_eq(tu_write(h, &c, 3, 0, size), (ssize_t)size);
	ck_assert_int_eq(t->ops->commit(h, &m, 0, NULL), 0);
	ck_assert_double_eq(tu_metric(t, "ucmfs_mem_buffers_reused_total"), 0);
	ck_assert_int_eq(t->ops->open(t, &c, 0, &h), 0);
	ck_assert_msg(tier_data(h) != old || ut_diff(&a, 1, map, size, 0) == -1,
		      "the evicted block's file was written by the next reservation");
	tier_close(h);
	ck_assert_int_eq(ut_diff(&a, 1, map, size, 0), -1);
	ck_assert_double_eq(tu_metric(t, "ucmfs_mem_buffers_reclaimed_total"), 0);
	munmap(map, size);
	tu_expect(t, &c, 3, size);
	tier_destroy(t);
}
END_TEST

/* A block whose file was handed out, read and let go by everyone: once it is removed, its
 * buffer goes back to the pool and the next block of its size is written into it. */
START_TEST(test_cache_exposed_buffer_reclaimed)
{
	const uint64_t size = 4096 * KB;
	struct tier *t = tu_cache(4 * size, 0);
	struct blockid a = bid(0), c = bid(2);
	struct block_meta m = tu_meta(size, 0);
	struct tier_handle *h;
	const char *old, *data;
	char *map;

	if (!have_files) {
		tier_destroy(t);
		return;
	}
	ck_assert_int_eq(tu_put(t, &a, 1, size, 0, 0, 0), 0);
	map = map_block(t, &a, size, &old);
	ck_assert_int_eq(ut_diff(&a, 1, map, size, 0), -1);
	munmap(map, size);
	ck_assert_int_eq(t->ops->remove(t, &a), 0);
	ck_assert_double_eq(tu_metric(t, "ucmfs_mem_buffers_reclaimed_total"), 1);
	ck_assert_int_eq(t->ops->reserve(t, &c, 0, size, &h), 0);
	ck_assert_int_eq(tu_write(h, &c, 3, 0, size), (ssize_t)size);
	ck_assert_int_eq(t->ops->commit(h, &m, 0, NULL), 0);
	ck_assert_double_eq(tu_metric(t, "ucmfs_mem_buffers_reused_total"), 1);
	/* and its file can be handed out again, whole */
	map = map_block(t, &c, size, &data);
	ck_assert_ptr_eq(data, old);
	ck_assert_int_eq(ut_diff(&c, 3, map, size, 0), -1);
	munmap(map, size);
	tier_destroy(t);
}
END_TEST

/* --- memory ready before it is needed ---------------------------------------------------- */

static void wait_metric(struct tier *t, const char *name, double at_least)
{
	for (int i = 0; i < 2000 && tu_metric(t, name) < at_least; i++)
		ut_sleep_ms(5);
	ck_assert_msg(tu_metric(t, name) >= at_least, "%s stayed at %.0f, below %.0f", name,
		      tu_metric(t, name), at_least);
}

/*
 * The prefaulter fills the pool up to `prefault` bytes with buffers of the size it was told
 * (or learnt from the first block committed), holding no block (usage shows nothing used);
 * a load of that size then takes one of them instead of fresh memory, and blocks of another
 * size still find room (pooled buffers are freed for them).
 */
START_TEST(test_cache_prefault_fills_pool)
{
	const uint64_t size = 1024 * KB, cap = 12 * 1024 * KB;
	struct cache_config cc = { .capacity = cap, .policy = POLICY_LRU,
				   .prefault = _i ? cap : 8 * size, .size_hint = _i ? 0 : size };
	struct tier *t = NULL;
	struct blockid a = bid(0), b = bid(1), c = bid(3);
	struct tier_handle *h;
	struct block_meta m = tu_meta(size, 0);

	ck_assert_int_eq(cache_create(&cc, &t), 0);
	ck_assert_int_eq(cache_start(t, 0), 0);
	if (!_i) {
		/* what is still to do, read before what was done (one shrinks, the other grows):
		 * together the whole amount, but for the one buffer being faulted in */
		double pending = tu_metric(t, "ucmfs_mem_prefault_pending_bytes");

		ck_assert_double_ge(pending + tu_metric(t, "ucmfs_mem_prefaulted_bytes_total"),
				    7.0 * size);
	}
	if (_i) /* no size given: none is prefaulted before a block shows one */
		ck_assert_int_eq(tu_put(t, &b, 2, size, 0, 0, 0), 0);
	wait_metric(t, "ucmfs_mem_prefaulted_bytes_total", _i ? (double)(cap - size) : 8.0 * size);
	ck_assert_uint_eq(usage(t).used, _i ? size : 0);
	/* and says that it is done: what a service waits for before it sends load */
	ck_assert_double_eq(tu_metric(t, "ucmfs_mem_prefault_pending_bytes"), 0);
	ck_assert_int_eq(t->ops->reserve(t, &a, TIER_RESERVE_OVERWRITE, size, &h), 0);
	ck_assert_int_eq(tu_write(h, &a, 1, 0, size), (ssize_t)size);
	ck_assert_int_eq(t->ops->commit(h, &m, 0, NULL), 0);
	ck_assert_double_ge(tu_metric(t, "ucmfs_mem_buffers_reused_total"), 1);
	tu_expect(t, &a, 1, size);
	/* another size: the pool gives its memory up for it */
	ck_assert_int_eq(tu_put(t, &c, 3, 3 * size + 5, 0, 0, 0), 0);
	tu_expect(t, &c, 3, 3 * size + 5);
	tier_destroy(t); /* stops the prefaulter */
}
END_TEST

/* --- concurrency ------------------------------------------------------------------------- */

#define POOL_IDS 24
#define POOL_THREADS 8

static uint64_t pool_size(int k)
{
	return 1 + (uint64_t)k * 2711 % 60000;
}

struct pool_worker {
	struct tier *t;
	int n, iters;
	uint64_t reads, puts, nospc;
	char err[256];
};

#define POOL_FAIL(w, ...)                                                                     \
	do {                                                                                  \
		snprintf((w)->err, sizeof((w)->err), __VA_ARGS__);                            \
		return NULL;                                                                  \
	} while (0)

static void *pool_worker(void *arg)
{
	struct pool_worker *w = arg;
	struct tier *t = w->t;
	uint64_t seed = 77 + (uint64_t)w->n;
	struct tier_handle *held = NULL;
	int held_k = 0;
	char *buf = malloc(64 * KB);

	if (!buf)
		POOL_FAIL(w, "malloc");
	for (int it = 0; it < w->iters; it++) {
		int k = (int)(ut_rand(&seed) % POOL_IDS);
		struct blockid id = ut_id(900 + (uint64_t)k);
		uint64_t size = pool_size(k), r = ut_rand(&seed) % 16;
		struct tier_handle *h;
		ssize_t n;
		int rc;

		if (r < 6) { /* write the block (content derived from the id) */
			unsigned cf = r == 0 ? TIER_COMMIT_DIRTY : 0;

			rc = t->ops->reserve(t, &id, 0, r == 1 ? 0 : size, &h);
			if (rc == -ENOSPC) {
				w->nospc++;
				continue;
			}
			if (rc)
				POOL_FAIL(w, "reserve: %d", rc);
			n = tu_write(h, &id, 9, 0, size);
			if (n == -ENOSPC) {
				t->ops->abort(h);
				w->nospc++;
				continue;
			}
			if (n != (ssize_t)size)
				POOL_FAIL(w, "write: %zd", n);
			{
				struct block_meta m = tu_meta(size, 0);
				struct block_attr a;

				rc = t->ops->commit(h, &m, cf, NULL);
				if (rc)
					POOL_FAIL(w, "commit: %d", rc);
				/* "write it below" at once, else dirty blocks fill the pool */
				if (cf && t->ops->lookup(t, &id, &a) == 0)
					t->ops->mark_clean(t, &id, a.version);
			}
			w->puts++;
		} else if (r < 12) { /* read it whole, at some offset, or through data() */
			rc = t->ops->open(t, &id, 0, &h);
			if (rc == -ENOENT)
				continue;
			if (rc)
				POOL_FAIL(w, "open: %d", rc);
			n = tier_read(h, buf, 64 * KB, 0);
			if (n != (ssize_t)size)
				POOL_FAIL(w, "read %s: %zd bytes, want %llu", ut_hex(&id), n,
					  (unsigned long long)size);
			if (ut_diff(&id, 9, buf, size, 0) >= 0)
				POOL_FAIL(w, "read %s: wrong bytes", ut_hex(&id));
			if (tier_data(h) && ut_diff(&id, 9, tier_data(h), size, 0) >= 0)
				POOL_FAIL(w, "data %s: wrong bytes", ut_hex(&id));
			w->reads++;
			if (!held && r == 11) { /* keep a pin across other operations */
				held = h;
				held_k = k;
			} else {
				tier_close(h);
			}
		} else if (r < 14) {
			rc = t->ops->remove(t, &id);
			if (rc && rc != -ENOENT)
				POOL_FAIL(w, "remove: %d", rc);
		} else if (r == 14) {
			rc = t->ops->touch(t, &id);
			if (rc && rc != -ENOENT)
				POOL_FAIL(w, "touch: %d", rc);
		} else if (held) {
			struct blockid hid = ut_id(900 + (uint64_t)held_k);

			n = tier_read(held, buf, 64 * KB, 0);
			if (n != (ssize_t)pool_size(held_k) ||
			    ut_diff(&hid, 9, buf, (size_t)n, 0) >= 0)
				POOL_FAIL(w, "pinned %s changed under its reader", ut_hex(&hid));
			tier_close(held);
			held = NULL;
		}
		if (it % 64 == 0) {
			struct tier_usage u;

			t->ops->usage(t, &u);
			if (u.used > u.capacity)
				POOL_FAIL(w, "used %llu > capacity %llu",
					  (unsigned long long)u.used, (unsigned long long)u.capacity);
		}
	}
	tier_close(held);
	free(buf);
	return NULL;
}

START_TEST(test_cache_threads_small_pool)
{
	struct tier *t = tu_cache_policy(512 * KB, 0, (enum ucm_policy)_i);
	struct pool_worker w[POOL_THREADS];
	pthread_t th[POOL_THREADS];
	struct tier_usage u;
	uint64_t reads = 0, puts = 0;

	for (int i = 0; i < POOL_THREADS; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].t = t;
		w[i].n = i;
		w[i].iters = 4000;
		ck_assert_int_eq(pthread_create(&th[i], NULL, pool_worker, &w[i]), 0);
	}
	for (int i = 0; i < POOL_THREADS; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < POOL_THREADS; i++) {
		ck_assert_msg(w[i].err[0] == '\0', "thread %d: %s", i, w[i].err);
		reads += w[i].reads;
		puts += w[i].puts;
	}
	ck_assert_uint_gt(reads, 1000);
	ck_assert_uint_gt(puts, 1000);
	/* every block left is intact, and removing them all gives every byte back */
	for (int k = 0; k < POOL_IDS; k++) {
		struct blockid id = ut_id(900 + (uint64_t)k);

		if (tu_lookup(t, &id, NULL) == 0) {
			tu_expect(t, &id, 9, pool_size(k));
			ck_assert_int_eq(t->ops->remove(t, &id), 0);
		}
	}
	ck_assert_int_eq(t->ops->usage(t, &u), 0);
	ck_assert_uint_eq(u.blocks, 0);
	ck_assert_uint_eq(u.used, 0);
	ck_assert_uint_eq(u.dirty_blocks, 0);
	tier_destroy(t);
}
END_TEST

Suite *cache_suite(void)
{
	Suite *s = suite_create("cache");
	TCase *core = ut_tcase("core", UT_TIMEOUT), *errors = ut_tcase("errors", UT_TIMEOUT);
	TCase *conc = ut_tcase("concurrency", UT_TIMEOUT_SLOW);

	tcase_add_test(core, test_cache_evicts_lru);
	tcase_add_test(core, test_cache_evicted_buffer_reused);
	tcase_add_test(core, test_cache_fifo_order);
	tcase_add_test(core, test_cache_clock_second_chance);
	tcase_add_test(errors, test_cache_unknown_policy);
	tcase_add_loop_test(core, test_cache_pinned_never_evicted, 0, NPOLICIES);
	tcase_add_loop_test(core, test_cache_two_pins, 0, NPOLICIES);
	tcase_add_loop_test(core, test_cache_internal_refs_do_not_pin, 0, NPOLICIES);
	tcase_add_loop_test(core, test_cache_commit_pin, 0, NPOLICIES);
	tcase_add_loop_test(core, test_cache_dirty_never_evicted, 0, NPOLICIES);
	tcase_add_loop_test(core, test_cache_reserve_waits_for_clean, 0, NPOLICIES);
	tcase_add_test(core, test_cache_commit_loaded);
	tcase_add_loop_test(core, test_cache_expired_pinned_waits_for_unpin, 0, NPOLICIES);
	tcase_add_loop_test(core, test_cache_expired_evicted_first, 0, NPOLICIES);
	tcase_add_loop_test(core, test_cache_changed_deadlines, 0, NPOLICIES);
	tcase_add_loop_test(core, test_cache_many_expired_reclaimed, 0, NPOLICIES);
	tcase_add_test(core, test_cache_accounting);
	tcase_add_test(core, test_cache_data_aligned);
	tcase_add_test(core, test_cache_truncate_grows_with_zeros);
	tcase_add_loop_test(core, test_cache_prefault_fills_pool, 0, 2);
	tcase_add_loop_test(errors, test_cache_reserve_beyond_capacity, 0, NPOLICIES);
	tcase_add_test(errors, test_cache_write_beyond_capacity);
	tcase_add_loop_test(errors, test_cache_dirty_wait_gives_up, 0, NPOLICIES);
	tcase_add_loop_test(conc, test_cache_threads_small_pool, 0, NPOLICIES);
	suite_add_tcase(s, core);
	suite_add_tcase(s, errors);
	suite_add_tcase(s, conc);
	/* memory in files: what passthrough relies on, and the core cases again on it */
	TCase *files = ut_tcase("files", UT_TIMEOUT);

	tcase_add_checked_fixture(files, files_setup, NULL);
	tcase_add_test(files, test_cache_backing_reads_the_block);
	tcase_add_test(files, test_cache_exposed_buffer_never_reused);
	tcase_add_test(files, test_cache_exposed_buffer_reclaimed);
	tcase_add_test(files, test_cache_evicted_buffer_reused);
	tcase_add_test(files, test_cache_accounting);
	tcase_add_test(files, test_cache_data_aligned);
	tcase_add_test(files, test_cache_truncate_grows_with_zeros);
	suite_add_tcase(s, files);
	return s;
}
