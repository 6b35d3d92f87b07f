/*
 * The peer (tiers/peer.c) at the tier level: where each block lands, when a write moves,
 * that one version lives across branches, and that ops by id reach the branch that holds it.
 *
 * The peer of these cases has two branches: 0, a memory-only pipeline; 1, memory over a
 * posix store (a directory the cases look into to see what reached the disk).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/units.h"
#include "tests/unit/tier_util.h"
#include "tests/unit/unit.h"
#include "tiers/peer.h"

struct pfix {
	struct tier *t;
	struct tu_stack mem, disk;
};

static void peer_open_fx(struct pfix *f, enum peer_route route, uint64_t bound, int64_t ttl)
{
	/* not started: the peer starts its branches, as the daemon does */
	struct tu_stack_config mc = { .cache_capacity = 32ULL << 20, .default_ttl_ms = ttl,
				      .no_start = true };
	struct tu_stack_config dc = { .cache_capacity = 32ULL << 20, .posix = true,
				      .compress = true, .default_ttl_ms = ttl, .no_start = true };
	struct peer_config pc = { .route = route, .n = 2, .bound = { bound },
				  .default_ttl_ms = ttl ? ttl : TTL_NONE };

	tu_stack_open(&f->mem, &mc);
	tu_stack_open(&f->disk, &dc);
	pc.branch[0] = f->mem.t;
	pc.branch[1] = f->disk.t;
	ck_assert_int_eq(peer_create(&pc, &f->t), 0);
	ck_assert_int_eq(tier_start(f->t), 0);
}

static void peer_close_fx(struct pfix *f)
{
	tier_destroy(f->t);
	f->mem.t = f->disk.t = NULL;
}

static bool on_disk(struct pfix *f, const struct blockid *id)
{
	char path[PATH_MAX];

	tu_settle(f->t);
	tu_block_path(f->disk.dir, LAYOUT_NATIVE, id, path, sizeof(path));
	return access(path, F_OK) == 0;
}

static struct blockid pid(unsigned i)
{
	struct blockid id = { { 0 } };

	id.b[0] = 0x5e;
	id.b[15] = (uint8_t)i;
	id.b[14] = (uint8_t)(i >> 8);
	return id;
}

/* Reserve id, optionally give it a TTL before or after its bytes, commit. */
static int put_ttl(struct tier *t, const struct blockid *id, uint64_t seed, uint64_t size,
		   int64_t ttl_ms, bool before)
{
	struct block_meta meta = tu_meta(size, 0);
	struct tier_handle *h;
	int rc = t->ops->reserve(t, id, TIER_RESERVE_TRUNC, 0, &h);

	if (rc)
		return rc;
	if (before && ttl_ms)
		ck_assert_int_eq(t->ops->set_ttl(t, id, ttl_ms), 0);
	ck_assert_int_eq(tu_write(h, id, seed, 0, size), (ssize_t)size);
	if (!before && ttl_ms)
		ck_assert_int_eq(t->ops->set_ttl(t, id, ttl_ms), 0);
	return t->ops->commit(h, &meta, 0, NULL);
}

static uint64_t published(struct tier *t, int b)
{
	struct peer_counters c;

	peer_counters(t, &c);
	return c.routed[b];
}

static uint64_t moved(struct tier *t)
{
	struct peer_counters c;

	peer_counters(t, &c);
	return c.moved;
}

START_TEST(test_peer_ttl_route)
{
	struct pfix f;
	struct blockid a = pid(1), b = pid(2), c = pid(3);
	struct block_attr attr;

	peer_open_fx(&f, ROUTE_TTL, 10000, 0);
	ck_assert_int_eq(put_ttl(f.t, &a, 1, 300000, 5000, true), 0);
	ck_assert_int_eq(put_ttl(f.t, &b, 2, 300000, 5000, false), 0);
	ck_assert_int_eq(put_ttl(f.t, &c, 3, 300000, 0, false), 0);
	tu_expect(f.t, &a, 1, 300000);
	tu_expect(f.t, &b, 2, 300000);
	tu_expect(f.t, &c, 3, 300000);
	/* the short-lived ones are in the memory branch, with their TTL; never on disk */
	ck_assert_int_eq(tu_lookup(f.mem.t, &a, &attr), 0);
	ck_assert(attr.deadline != 0);
	ck_assert_int_eq(tu_lookup(f.mem.t, &b, NULL), 0);
	ck_assert_int_eq(tu_lookup(f.disk.t, &a, NULL), -ENOENT);
	ck_assert_int_eq(tu_lookup(f.disk.t, &b, NULL), -ENOENT);
	ck_assert(!on_disk(&f, &a) && !on_disk(&f, &b));
	/* no TTL: the last branch, down to its disk */
	ck_assert_int_eq(tu_lookup(f.disk.t, &c, &attr), 0);
	ck_assert_int_eq(attr.deadline, 0);
	ck_assert(on_disk(&f, &c));
	ck_assert_uint_eq(published(f.t, 0), 2);
	ck_assert_uint_eq(published(f.t, 1), 1);
	/* a TTL before the bytes places the write in its branch; after them, it moves once */
	ck_assert_uint_eq(moved(f.t), 1);
	/* a TTL of 10 s is not below the bound */
	ck_assert_int_eq(put_ttl(f.t, &a, 4, 1000, 10000, true), 0);
	ck_assert_int_eq(tu_lookup(f.disk.t, &a, NULL), 0);
	ck_assert_int_eq(tu_lookup(f.mem.t, &a, NULL), -ENOENT); /* one version */
	tu_expect(f.t, &a, 4, 1000);
	peer_close_fx(&f);
}
END_TEST

START_TEST(test_peer_size_route)
{
	struct pfix f;
	struct blockid small = pid(1), edge = pid(2), big = pid(3);

	peer_open_fx(&f, ROUTE_SIZE, 64 << 10, 0);
	ck_assert_int_eq(tu_put(f.t, &small, 1, 1000, 0, 0, 0), 0);
	ck_assert_int_eq(tu_put(f.t, &edge, 2, 64 << 10, 0, 0, 0), 0);
	ck_assert_int_eq(tu_put(f.t, &big, 3, (64 << 10) + 1, 0, 0, 0), 0);
	ck_assert_int_eq(tu_lookup(f.mem.t, &small, NULL), 0);
	ck_assert_int_eq(tu_lookup(f.mem.t, &edge, NULL), 0);
	ck_assert_int_eq(tu_lookup(f.disk.t, &big, NULL), 0);
	tu_expect(f.t, &small, 1, 1000);
	tu_expect(f.t, &edge, 2, 64 << 10);
	tu_expect(f.t, &big, 3, (64 << 10) + 1);
	/* a replacement that grows past the bound moves the block, one version stays */
	ck_assert_int_eq(tu_put(f.t, &small, 4, 1 << 20, TIER_RESERVE_TRUNC, 0, 0), 0);
	ck_assert_int_eq(tu_lookup(f.mem.t, &small, NULL), -ENOENT);
	tu_expect(f.t, &small, 4, 1 << 20);
	peer_close_fx(&f);
}
END_TEST

/* What names a committed id goes to its branch; a TTL set after the commit does not move it. */
START_TEST(test_peer_ops_reach_holder)
{
	struct pfix f;
	struct blockid a = pid(1), s = pid(2), ids[3] = { pid(1), pid(2), pid(9) };
	uint8_t hit[3] = { 0 };
	struct block_attr attr;
	struct blockid *l;
	size_t n;

	peer_open_fx(&f, ROUTE_TTL, 10000, 0);
	ck_assert_int_eq(put_ttl(f.t, &a, 1, 4096, 0, false), 0);
	ck_assert_int_eq(put_ttl(f.t, &s, 2, 4096, 3000, true), 0);
	ck_assert_int_eq(f.t->ops->set_ttl(f.t, &a, 2000), 0);
	ck_assert_int_eq(tu_lookup(f.disk.t, &a, &attr), 0);
	ck_assert(attr.deadline != 0);
	ck_assert_int_eq(tu_lookup(f.mem.t, &a, NULL), -ENOENT);
	f.t->ops->present(f.t, ids, 3, hit);
	ck_assert(hit[0] && hit[1] && !hit[2]);
	l = tu_list(f.t, blockid_shard(&a), &n);
	ck_assert_uint_eq(n, 2);
	free(l);
	ck_assert_int_eq(f.t->ops->touch(f.t, &s), 0);
	ck_assert_int_eq(f.t->ops->sync(f.t, &a), 0);
	ck_assert_uint_eq(f.t->ops->prefetch(f.t, ids, 3), 0); /* both already in memory */
	ck_assert_int_eq(f.t->ops->remove(f.t, &s), 0);
	ck_assert_int_eq(f.t->ops->remove(f.t, &a), 0);
	ck_assert_int_eq(f.t->ops->remove(f.t, &a), -ENOENT);
	ck_assert_int_eq(tu_lookup(f.t, &a, NULL), -ENOENT);
	ck_assert_int_eq(tu_lookup(f.t, &s, NULL), -ENOENT);
	peer_close_fx(&f);
}
END_TEST

/* An incomplete write is not moved: its branch refuses it, nothing is published anywhere. */
START_TEST(test_peer_incomplete_not_moved)
{
	struct pfix f;
	struct blockid a = pid(1);
	struct block_meta meta = tu_meta(8192, 0);
	struct tier_handle *h;

	peer_open_fx(&f, ROUTE_TTL, 10000, 0);
	ck_assert_int_eq(f.t->ops->reserve(f.t, &a, 0, 0, &h), 0);
	ck_assert_int_eq(f.t->ops->truncate(h, 8192), 0);
	ck_assert_int_eq(tu_write(h, &a, 1, 0, 4096), 4096);
	ck_assert_int_eq(f.t->ops->set_ttl(f.t, &a, 1000), 0);
	/* TRY keeps the handle usable; the rest written, it publishes, in the short branch */
	ck_assert_int_eq(f.t->ops->commit(h, &meta, TIER_COMMIT_TRY, NULL), -EIO);
	ck_assert_int_eq(tu_lookup(f.t, &a, NULL), -ENOENT);
	ck_assert_int_eq(f.t->ops->commit(h, &meta, 0, NULL), -EIO);
	ck_assert_int_eq(tu_lookup(f.t, &a, NULL), -ENOENT);
	ck_assert_uint_eq(published(f.t, 0) + published(f.t, 1), 0);
	peer_close_fx(&f);
}
END_TEST

/* Writers of one id share its branch; the last close routes; EXCL sees every branch. */
START_TEST(test_peer_writers_share)
{
	struct pfix f;
	struct blockid a = pid(1);
	struct block_meta meta = tu_meta(8192, 0);
	struct tier_handle *h1, *h2, *h3;

	peer_open_fx(&f, ROUTE_TTL, 10000, 0);
	ck_assert_int_eq(f.t->ops->reserve(f.t, &a, 0, 0, &h1), 0);
	ck_assert_int_eq(f.t->ops->reserve(f.t, &a, 0, 0, &h2), 0);
	ck_assert_int_eq(f.t->ops->reserve(f.t, &a, TIER_RESERVE_EXCL, 0, &h3), -EEXIST);
	ck_assert_int_eq(tu_write(h1, &a, 1, 0, 4096), 4096);
	ck_assert_int_eq(tu_write(h2, &a, 1, 4096, 4096), 4096);
	ck_assert_int_eq(f.t->ops->set_ttl(f.t, &a, 500), 0);
	ck_assert_int_eq(f.t->ops->commit(h1, &meta, 0, NULL), 0);
	ck_assert_int_eq(tu_lookup(f.t, &a, NULL), -ENOENT); /* not before the last close */
	ck_assert_int_eq(f.t->ops->commit(h2, &meta, 0, NULL), 0);
	ck_assert_int_eq(tu_lookup(f.mem.t, &a, NULL), 0);
	tu_expect(f.t, &a, 1, 8192);
	ck_assert_int_eq(f.t->ops->reserve(f.t, &a, TIER_RESERVE_EXCL, 0, &h3), -EEXIST);
	peer_close_fx(&f);
}
END_TEST

/* The mount's ttl= routes blocks that were given none; TTL_NONE given on the write sends a
 * block to the last branch. */
START_TEST(test_peer_default_ttl)
{
	struct pfix f;
	struct blockid a = pid(1), b = pid(2);

	peer_open_fx(&f, ROUTE_TTL, 10000, 2000);
	ck_assert_int_eq(put_ttl(f.t, &a, 1, 4096, 0, false), 0);
	ck_assert_int_eq(tu_lookup(f.mem.t, &a, NULL), 0);
	ck_assert_int_eq(put_ttl(f.t, &b, 2, 4096, TTL_NONE, true), 0);
	ck_assert_int_eq(tu_lookup(f.disk.t, &b, NULL), 0);
	ck_assert(on_disk(&f, &b) && !on_disk(&f, &a));
	peer_close_fx(&f);
}
END_TEST

Suite *peer_suite(void)
{
	Suite *s = suite_create("peer");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_peer_ttl_route);
	tcase_add_test(tc, test_peer_size_route);
	tcase_add_test(tc, test_peer_ops_reach_holder);
	tcase_add_test(tc, test_peer_incomplete_not_moved);
	tcase_add_test(tc, test_peer_writers_share);
	tcase_add_test(tc, test_peer_default_ttl);
	suite_add_tcase(s, tc);
	return s;
}
