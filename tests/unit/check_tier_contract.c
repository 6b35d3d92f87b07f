/*
 * The tier contract (tiers/tier.h), run against every tier implementation.
 *
 * Each case is a check test whose loop index selects a factory from `factories`; suite k
 * ("tier_<name>") runs every case against factory k. A new tier gets the whole suite by
 * adding one line to `factories` (and its suite name to tests/unit/meson.build).
 *
 * Factories: the memory tier, the disk tier in both layouts and with both IO engines, the
 * compress stage and the stripe over disk tiers on their own, pipelines stacked by hand
 * (roomy, tight, memory only), the stacks the daemon builds from its options
 * (topology_build), with either engine, and the example store built as a plugin
 * (tiers/example/dirstore.c, loaded by tiers/plugin.c). Other factories come from
 * tier_contract_suite_for() (tests/unit/tier_contract.h): ucm-tier-check runs the same
 * cases against any store built as a plugin.
 *
 * The cases use only what every tier promises: a commit publishes exactly the bytes
 * written (contract cases write whole blocks, so a tier that checks completeness agrees),
 * replacements start with TIER_RESERVE_TRUNC, deadlines are set with set_deadline(). They
 * call only the ops tier.h requires of a store, and optional ones (drain) only if present.
 * What built-in tiers report beyond that (block_attr.where) is checked of them alone.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/clock.h"
#include "src/options.h"
#include "tests/unit/tier_contract.h"
#include "tests/unit/tier_util.h"
#include "tests/unit/unit.h"
#include "tiers/compress.h"
#include "tiers/pipeline.h"
#include "tiers/topology.h"
#include "tiers/stripe.h"

struct tier_factory {
	const char *name;
	void (*open)(struct tfix *fx);
	unsigned flags; /* TC_* */
};

static void open_cache(struct tfix *fx)
{
	fx->t = tu_cache(64ULL << 20, 0);
}

static void open_posix(struct tfix *fx, enum ucm_layout layout)
{
	ut_mkdtemp(fx->dir, sizeof(fx->dir));
	fx->t = tu_posix(fx->dir, layout);
}

/* reads through libaio with O_DIRECT: every odd size goes through the alignment rules */
static void open_posix_native_aio(struct tfix *fx)
{
	ut_mkdtemp(fx->dir, sizeof(fx->dir));
	fx->t = tu_posix_io(fx->dir, LAYOUT_NATIVE, true);
}

static void open_posix_ucm_aio(struct tfix *fx)
{
	ut_mkdtemp(fx->dir, sizeof(fx->dir));
	fx->t = tu_posix_io(fx->dir, LAYOUT_UCM, true);
}

static void open_posix_native(struct tfix *fx)
{
	open_posix(fx, LAYOUT_NATIVE);
}

static void open_posix_ucm(struct tfix *fx)
{
	open_posix(fx, LAYOUT_UCM);
}

/* zstd over a posix tier (written directly, blocks pass through raw) */
static void open_compress(struct tfix *fx)
{
	struct compress_config zc = { .zstd = true, .level = 1 };

	open_posix(fx, LAYOUT_NATIVE);
	ck_assert_int_eq(compress_create(&zc, fx->t, &fx->t), 0);
}

/* two posix directories, blocks spread by id */
static void open_stripe(struct tfix *fx)
{
	struct tier *dirs[2];
	char sub[PATH_MAX];

	ut_mkdtemp(fx->dir, sizeof(fx->dir));
	for (int i = 0; i < 2; i++) {
		snprintf(sub, sizeof(sub), "%s/d%d", fx->dir, i);
		dirs[i] = tu_posix(sub, LAYOUT_NATIVE);
	}
	ck_assert_int_eq(stripe_create(dirs, 2, &fx->t), 0);
}

static void open_stack(struct tfix *fx, uint64_t cache, bool posix)
{
	struct tu_stack_config c = { .cache_capacity = cache, .posix = posix };

	tu_stack_open(&fx->stack, &c);
	fx->t = fx->stack.t;
}

/* cache over posix */
static void open_pipeline(struct tfix *fx)
{
	open_stack(fx, 64ULL << 20, true);
}

/* a memory tier smaller than some blocks: exercises eviction, loads and spills */
static void open_pipeline_tight(struct tfix *fx)
{
	open_stack(fx, 256ULL << 10, true);
}

/* STORE none */
static void open_pipeline_mem(struct tfix *fx)
{
	open_stack(fx, 64ULL << 20, false);
}

/* The stack the daemon builds from its command line (topology_build), over a fresh STORE
 * (nstores directories under fx->dir, made if it is not yet; none: STORE none). */
static void open_built(struct tfix *fx, const char *opts, int nstores)
{
	char store[PATH_MAX * 2] = "", sub[PATH_MAX];
	char *argv[] = { "ucmfs", "-o", (char *)opts, store, "/mnt", NULL };
	struct ucm_options o;
	char msg[512];

	if (!fx->dir[0])
		ut_mkdtemp(fx->dir, sizeof(fx->dir));
	if (!nstores)
		snprintf(store, sizeof(store), "none");
	for (int i = 0; i < nstores; i++) {
		snprintf(sub, sizeof(sub), "%s%s/s%d", i ? ":" : "", fx->dir, i);
		strncat(store, sub, sizeof(store) - strlen(store) - 1);
	}
	ck_assert_msg(options_parse(&o, 5, argv, msg, sizeof(msg)) == 0, "%s", msg);
	ck_assert_int_eq(topology_build(&o, &fx->t, NULL), 0);
	options_free(&o);
	ck_assert_int_eq(tier_start(fx->t), 0);
}

static void open_built_default(struct tfix *fx)
{
	open_built(fx, "mem_size=64M,io=psync", 1);
}

static void open_built_tight(struct tfix *fx)
{
	open_built(fx, "mem_size=1M,io=psync,policy=lru", 1);
}

static void open_built_stripe(struct tfix *fx)
{
	open_built(fx, "mem_size=4M,io=psync,policy=fifo", 3);
}

static void open_built_ucm(struct tfix *fx)
{
	open_built(fx, "mem_size=64M,io=psync,layout=ucm", 1);
}

/* the daemon's default engine, with loads (compressed chunks at any offset) through it */
static void open_built_aio(struct tfix *fx)
{
	open_built(fx, "mem_size=1M,io=aio,io_depth=3,policy=lru", 1);
}

static void open_built_aio_ucm(struct tfix *fx)
{
	open_built(fx, "mem_size=1M,io=aio,layout=ucm", 1);
}

/* a topology file: a peer by size, small blocks to memory alone, the rest through a tight
 * memory tier to disk (moves at commit, loads, evictions, all through one tier) */
static void open_peer(struct tfix *fx)
{
	char file[PATH_MAX + 16], opts[PATH_MAX + 64];
	FILE *f;

	ut_mkdtemp(fx->dir, sizeof(fx->dir));
	snprintf(file, sizeof(file), "%s/t.json", fx->dir);
	f = fopen(file, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "{\"peer\": {\"route\": \"size\", \"bounds\": [\"64K\"], \"branches\": [\n"
		   "  {\"pipe\": [{\"tier\": \"cache\", \"mem_size\": \"16M\"}]},\n"
		   "  {\"pipe\": [{\"tier\": \"cache\", \"mem_size\": \"1M\"}, \"compress\",\n"
		   "            {\"tier\": \"posix\", \"path\": \"%s/s\"}]}]}}\n", fx->dir);
	ck_assert_int_eq(fclose(f), 0);
	snprintf(opts, sizeof(opts), "io=psync,policy=lru,topology=%s", file);
	open_built(fx, opts, 0);
}

#ifdef UCM_DIRSTORE_SO
/* the example store, loaded from the build directory as the daemon loads a plugin */
static void open_dirstore(struct tfix *fx)
{
	fx->t = tu_plugin_store(UCM_DIRSTORE_SO, NULL, 0, fx->dir, sizeof(fx->dir));
}
#endif

static const struct tier_factory factories[] = {
	{ "cache", open_cache },
	{ "posix_native", open_posix_native },
	{ "posix_ucm", open_posix_ucm },
	{ "compress", open_compress },
	{ "stripe", open_stripe },
	{ "pipeline", open_pipeline },
	{ "pipeline_tight", open_pipeline_tight },
	{ "pipeline_mem", open_pipeline_mem },
	{ "built", open_built_default },
	{ "built_tight", open_built_tight },
	{ "built_stripe", open_built_stripe },
	{ "built_ucm", open_built_ucm },
	{ "posix_native_aio", open_posix_native_aio },
	{ "posix_ucm_aio", open_posix_ucm_aio },
	{ "built_aio", open_built_aio },
	{ "built_aio_ucm", open_built_aio_ucm },
	{ "peer", open_peer },
#ifdef UCM_DIRSTORE_SO
	{ "dirstore", open_dirstore, TC_STORE },
#endif
};

#define NFACTORIES (sizeof(factories) / sizeof(factories[0]))

/* Factories of tier_contract_suite_for(), numbered after the table's. */
#define MAX_EXTRA 4
static struct tier_factory extra[MAX_EXTRA];
static unsigned nextra;

/* The tier of factory k (the loop index of the case) for one test case. */
static struct tier *fx_open(struct tfix *fx, int k)
{
	const struct tier_factory *f;

	memset(fx, 0, sizeof(*fx));
	ck_assert_int_lt(k, (int)(NFACTORIES + nextra));
	f = k < (int)NFACTORIES ? &factories[k] : &extra[k - (int)NFACTORIES];
	fx->flags = f->flags;
	f->open(fx);
	ck_assert_ptr_nonnull(fx->t);
	return fx->t;
}

static void fx_close(struct tfix *fx)
{
	tier_destroy(fx->t);
	fx->t = NULL;
}

#define SIZES_N 9
static const uint64_t sizes[SIZES_N] = { 1, 100, 4095, 4096, 4097, 65536, 100001,
					 (1 << 20) + 5, 3 * (1 << 20) + 4097 };

/* --- core -------------------------------------------------------------------------------- */

START_TEST(test_tier_write_commit_read)
{
	struct tfix fx;
	struct tier *t = fx_open(&fx, _i);

	for (int i = 0; i < SIZES_N; i++) {
		struct blockid id = ut_id(100 + i);
		struct block_attr a;
		int64_t before = wall_ns(), after;

		ck_assert_int_eq(tu_put(t, &id, 1, sizes[i], 0, 0, 0), 0);
		after = wall_ns();
		ck_assert_int_eq(tu_lookup(t, &id, &a), 0);
		ck_assert_uint_eq(a.size, sizes[i]);
		ck_assert_int_ge(a.mtime, before - 1000000000);
		ck_assert_int_le(a.mtime, after + 1000000000);
		ck_assert_int_eq(a.deadline, 0);
		if (!(fx.flags & TC_STORE))
			ck_assert_uint_ne(a.where, 0);
		tu_expect(t, &id, 1, sizes[i]);
	}
	/* written in odd pieces */
	{
		struct blockid id = ut_id(99);

		ck_assert_int_eq(tu_put_chunked(t, &id, 5, 300007, 1001, 0, 0, 0), 0);
		tu_expect(t, &id, 5, 300007);
	}
	/* all still readable after every other write */
	for (int i = 0; i < SIZES_N; i++) {
		struct blockid id = ut_id(100 + i);

		tu_expect(t, &id, 1, sizes[i]);
	}
	fx_close(&fx);
}
END_TEST

START_TEST(test_tier_out_of_order_writes)
{
	struct tfix fx;
	struct tier *t = fx_open(&fx, _i);
	struct blockid id = ut_id(7);
	struct tier_handle *h;
	struct block_meta m = tu_meta(200000, 0);
	const uint64_t piece = 10000;

	ck_assert_int_eq(t->ops->reserve(t, &id, 0, 0, &h), 0);
	/* back to front, then overlapping rewrites of the same bytes */
	for (uint64_t off = 200000; off > 0; off -= piece)
		ck_assert_int_eq(tu_write(h, &id, 3, off - piece, piece), (ssize_t)piece);
	ck_assert_int_eq(tu_write(h, &id, 3, 5000, 30000), 30000);
	ck_assert_int_eq(tu_write(h, &id, 3, 0, 1), 1);
	ck_assert_int_eq(t->ops->commit(h, &m, 0, NULL), 0);
	tu_expect(t, &id, 3, 200000);
	fx_close(&fx);
}
END_TEST

START_TEST(test_tier_reservation_invisible)
{
	struct tfix fx;
	struct tier *t = fx_open(&fx, _i);
	struct blockid id = ut_id_in_shard(0x321, 1);
	struct tier_handle *h, *r;
	struct tier_usage u;
	struct block_meta m = tu_meta(50000, 0);
	size_t n;
	struct blockid *l;

	ck_assert_int_eq(t->ops->reserve(t, &id, 0, 50000, &h), 0);
	ck_assert_int_eq(tu_write(h, &id, 9, 0, 50000), 50000);
	ck_assert_int_eq(tu_lookup(t, &id, NULL), -ENOENT);
	ck_assert_int_eq(t->ops->open(t, &id, 0, &r), -ENOENT);
	ck_assert_int_eq(t->ops->open(t, &id, TIER_OPEN_INTERNAL, &r), -ENOENT);
	l = tu_list(t, 0x321, &n);
	ck_assert_uint_eq(n, 0);
	free(l);
	ck_assert_int_eq(t->ops->usage(t, &u), 0);
	ck_assert_uint_eq(u.blocks, 0);

	ck_assert_int_eq(t->ops->commit(h, &m, 0, NULL), 0);
	ck_assert_int_eq(tu_lookup(t, &id, NULL), 0);
	tu_expect(t, &id, 9, 50000);
	l = tu_list(t, 0x321, &n);
	ck_assert_uint_eq(n, 1);
	ck_assert(blockid_eq(&l[0], &id));
	free(l);
	fx_close(&fx);
}
END_TEST

START_TEST(test_tier_abort_leaves_nothing)
{
	struct tfix fx;
	struct tier *t = fx_open(&fx, _i);
	struct blockid id = ut_id_in_shard(0x777, 2), other = ut_id(3);
	struct tier_handle *h;
	struct tier_usage before, after;
	size_t n;
	struct blockid *l;

	ck_assert_int_eq(tu_put(t, &other, 1, 10000, 0, 0, 0), 0);
	tu_settle(t);
	ck_assert_int_eq(t->ops->usage(t, &before), 0);
	ck_assert_int_eq(t->ops->reserve(t, &id, 0, 0, &h), 0);
	ck_assert_int_eq(tu_write(h, &id, 9, 0, 123456), 123456);
	t->ops->abort(h);
	tu_settle(t);
	ck_assert_int_eq(tu_lookup(t, &id, NULL), -ENOENT);
	l = tu_list(t, 0x777, &n);
	ck_assert_uint_eq(n, 0);
	free(l);
	ck_assert_int_eq(t->ops->usage(t, &after), 0);
	ck_assert_uint_eq(after.blocks, before.blocks);
	ck_assert_uint_eq(after.used, before.used);
	/* the id can be written afresh */
	ck_assert_int_eq(tu_put(t, &id, 2, 777, 0, 0, 0), 0);
	tu_expect(t, &id, 2, 777);
	tu_expect(t, &other, 1, 10000);
	fx_close(&fx);
}
END_TEST

START_TEST(test_tier_remove)
{
	struct tfix fx;
	struct tier *t = fx_open(&fx, _i);
	struct blockid id = ut_id_in_shard(0x100, 1), keep = ut_id_in_shard(0x100, 2);
	struct tier_handle *h;
	size_t n;
	struct blockid *l;

	ck_assert_int_eq(tu_put(t, &id, 1, 40000, 0, 0, 0), 0);
	ck_assert_int_eq(tu_put(t, &keep, 1, 40000, 0, 0, 0), 0);
	ck_assert_int_eq(t->ops->remove(t, &id), 0);
	ck_assert_int_eq(tu_lookup(t, &id, NULL), -ENOENT);
	ck_assert_int_eq(t->ops->open(t, &id, 0, &h), -ENOENT);
	ck_assert_int_eq(t->ops->remove(t, &id), -ENOENT);
	tu_settle(t);
	ck_assert_int_eq(tu_lookup(t, &id, NULL), -ENOENT); /* no late resurrection */
	l = tu_list(t, 0x100, &n);
	ck_assert_uint_eq(n, 1);
	ck_assert(blockid_eq(&l[0], &keep));
	free(l);
	tu_expect(t, &keep, 1, 40000);
	/* and it can come back */
	ck_assert_int_eq(tu_put(t, &id, 4, 1000, 0, 0, 0), 0);
	tu_expect(t, &id, 4, 1000);
	fx_close(&fx);
}
END_TEST

START_TEST(test_tier_remove_keeps_open_reader)
{
	struct tfix fx;
	struct tier *t = fx_open(&fx, _i);
	struct blockid id = ut_id(11);
	struct tier_handle *h;
	const uint64_t size = 3 * 4096 + 5;

	ck_assert_int_eq(tu_put(t, &id, 1, size, 0, 0, 0), 0);
	ck_assert_int_eq(t->ops->open(t, &id, 0, &h), 0);
	ck_assert_int_eq(t->ops->remove(t, &id), 0);
	ck_assert_int_eq(tu_lookup(t, &id, NULL), -ENOENT);
	tu_check_read(h, &id, 1, size, 0, size);
	tu_check_read(h, &id, 1, size, 4000, 300);
	/* a new version beside the open old one */
	ck_assert_int_eq(tu_put(t, &id, 2, 100, 0, 0, 0), 0);
	tu_check_read(h, &id, 1, size, 0, size);
	tier_close(h);
	tu_expect(t, &id, 2, 100);
	fx_close(&fx);
}
END_TEST

START_TEST(test_tier_replace_keeps_open_reader)
{
	struct tfix fx;
	struct tier *t = fx_open(&fx, _i);
	struct blockid id = ut_id(12);
	struct tier_handle *old, *h;
	struct block_attr a1, a2, s;
	struct block_meta m = tu_meta(30000, 0);

	ck_assert_int_eq(tu_put(t, &id, 1, 50000, 0, 0, 0), 0);
	ck_assert_int_eq(tu_lookup(t, &id, &a1), 0);
	ck_assert_int_eq(t->ops->open(t, &id, 0, &old), 0);
	ck_assert_int_eq(t->ops->reserve(t, &id, TIER_RESERVE_TRUNC, 0, &h), 0);
	ck_assert_int_eq(tu_write(h, &id, 2, 0, 30000), 30000);
	/* until the commit, everyone sees the old version */
	tu_expect(t, &id, 1, 50000);
	ck_assert_int_eq(t->ops->commit(h, &m, 0, NULL), 0);
	ck_assert_int_eq(tu_lookup(t, &id, &a2), 0);
	ck_assert_uint_eq(a2.size, 30000);
	ck_assert_uint_ne(a1.version, a2.version);
	tu_expect(t, &id, 2, 30000);
	/* the reader opened before keeps the old bytes */
	ck_assert_int_eq(old->tier->ops->stat(old, &s), 0);
	ck_assert_uint_eq(s.size, 50000);
	tu_check_read(old, &id, 1, 50000, 0, 50000);
	tu_check_read(old, &id, 1, 50000, 29000, 2000);
	tier_close(old);
	tu_expect(t, &id, 2, 30000);
	fx_close(&fx);
}
END_TEST

START_TEST(test_tier_touch)
{
	struct tfix fx;
	struct tier *t = fx_open(&fx, _i);
	struct blockid id = ut_id(13), absent = ut_id(14);
	struct block_attr a1, a2;

	ck_assert_int_eq(tu_put(t, &id, 1, 5000, 0, 0, 0), 0);
	tu_settle(t);
	ck_assert_int_eq(tu_lookup(t, &id, &a1), 0);
	ut_sleep_ms(5);
	ck_assert_int_eq(t->ops->touch(t, &id), 0);
	ck_assert_int_eq(tu_lookup(t, &id, &a2), 0);
	ck_assert_msg(a2.atime > a1.atime, "touch did not move atime (%lld -> %lld)",
		      (long long)a1.atime, (long long)a2.atime);
	ck_assert_uint_eq(a2.version, a1.version);
	ck_assert_int_eq(a2.mtime, a1.mtime);
	ck_assert_int_eq(t->ops->touch(t, &absent), -ENOENT);
	tu_expect(t, &id, 1, 5000);
	fx_close(&fx);
}
END_TEST

START_TEST(test_tier_deadline)
{
	struct tfix fx;
	struct tier *t = fx_open(&fx, _i);
	struct blockid id = ut_id_in_shard(0x0d0, 1), cleared = ut_id_in_shard(0x0d0, 2);
	struct blockid later = ut_id_in_shard(0x0d0, 3);
	struct tier_handle *h;
	struct block_attr a;
	int64_t dl;
	size_t n;
	struct blockid *l;
	int rc;

	ck_assert_int_eq(tu_put(t, &id, 1, 6000, 0, 0, 0), 0);
	ck_assert_int_eq(tu_put(t, &cleared, 1, 6000, 0, 0, 0), 0);
	ck_assert_int_eq(tu_put(t, &later, 1, 6000, 0, 0, 0), 0);
	tu_settle(t);
	dl = mono_ns() + 1000 * 1000000LL;
	ck_assert_int_eq(t->ops->set_deadline(t, &id, dl), 0);
	ck_assert_int_eq(t->ops->set_deadline(t, &cleared, dl), 0);
	ck_assert_int_eq(t->ops->set_deadline(t, &cleared, 0), 0);
	ck_assert_int_eq(t->ops->set_deadline(t, &later, mono_ns() + 3600 * 1000000000LL), 0);
	/* alive until the deadline (a machine too slow to get here in time proves nothing) */
	rc = tu_lookup(t, &id, &a);
	ck_assert_msg(rc == 0 || mono_ns() >= dl, "block gone before its deadline");
	if (rc == 0)
		ck_assert_int_le(llabs(a.deadline - dl), 1000000);
	ck_assert_int_eq(tu_lookup(t, &cleared, &a), 0);
	ck_assert_int_eq(a.deadline, 0);

	while (mono_ns() < dl + 20 * 1000000LL)
		ut_sleep_ms(20);
	ck_assert_int_eq(tu_lookup(t, &id, NULL), -ENOENT);
	ck_assert_int_eq(t->ops->open(t, &id, 0, &h), -ENOENT);
	ck_assert_int_eq(t->ops->open(t, &id, TIER_OPEN_INTERNAL, &h), -ENOENT);
	l = tu_list(t, 0x0d0, &n);
	ck_assert_uint_eq(n, 2);
	ck_assert(!blockid_eq(&l[0], &id) && !blockid_eq(&l[1], &id));
	free(l);
	tu_expect(t, &cleared, 1, 6000);
	tu_expect(t, &later, 1, 6000);
	/* an expired id can be written again */
	ck_assert_int_eq(tu_put(t, &id, 2, 10, 0, 0, 0), 0);
	tu_expect(t, &id, 2, 10);
	ck_assert_int_eq(tu_lookup(t, &id, &a), 0);
	ck_assert_int_eq(a.deadline, 0);
	fx_close(&fx);
}
END_TEST

static int cmp_id(const void *a, const void *b)
{
	return blockid_cmp(a, b);
}

START_TEST(test_tier_list_shard)
{
	struct tfix fx;
	struct tier *t = fx_open(&fx, _i);
	const unsigned S = 0x5a5;
	struct blockid want[6], got_sorted[16];
	struct tier_handle *h;
	struct blockid pending = ut_id_in_shard(S, 100), gone = ut_id_in_shard(S, 101);
	size_t n;
	struct blockid *l;

	for (int i = 0; i < 6; i++) {
		want[i] = ut_id_in_shard(S, (uint64_t)i);
		ck_assert_int_eq(tu_put(t, &want[i], 1, 1000 * (uint64_t)i, 0, 0, 0), 0);
	}
	for (int i = 0; i < 4; i++) {
		struct blockid o = ut_id_in_shard(S + 1, (uint64_t)i);
		struct blockid p = ut_id_in_shard(S - 1, (uint64_t)i);

		ck_assert_int_eq(tu_put(t, &o, 1, 100, 0, 0, 0), 0);
		ck_assert_int_eq(tu_put(t, &p, 1, 100, 0, 0, 0), 0);
	}
	ck_assert_int_eq(tu_put(t, &gone, 1, 100, 0, 0, 0), 0);
	ck_assert_int_eq(t->ops->remove(t, &gone), 0);
	ck_assert_int_eq(t->ops->reserve(t, &pending, 0, 0, &h), 0);
	ck_assert_int_eq(tu_write(h, &pending, 1, 0, 100), 100);
	/* one version replaced by another is listed once */
	ck_assert_int_eq(tu_put(t, &want[2], 7, 333, TIER_RESERVE_TRUNC, 0, 0), 0);

	l = tu_list(t, S, &n);
	ck_assert_uint_eq(n, 6);
	memcpy(got_sorted, l, n * sizeof(*l));
	free(l);
	qsort(got_sorted, n, sizeof(*got_sorted), cmp_id);
	qsort(want, 6, sizeof(*want), cmp_id);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(blockid_eq(&got_sorted[i], &want[i]), "listed %s, want %s",
			      ut_hex(&got_sorted[i]), ut_hex(&want[i]));
	l = tu_list(t, S + 1, &n);
	ck_assert_uint_eq(n, 4);
	free(l);
	l = tu_list(t, 0xfff, &n);
	ck_assert_uint_eq(n, 0);
	free(l);
	t->ops->abort(h);
	fx_close(&fx);
}
END_TEST

static int stop_at_first(const struct blockid *id, void *arg)
{
	(void)id;
	++*(int *)arg;
	return 1;
}

START_TEST(test_tier_list_shard_stops)
{
	struct tfix fx;
	struct tier *t = fx_open(&fx, _i);
	int calls = 0;

	for (int i = 0; i < 10; i++) {
		struct blockid id = ut_id_in_shard(0xabc, (uint64_t)i);

		ck_assert_int_eq(tu_put(t, &id, 1, 10, 0, 0, 0), 0);
	}
	ck_assert_int_eq(t->ops->list_shard(t, 0xabc, stop_at_first, &calls), 0);
	ck_assert_int_eq(calls, 1);
	fx_close(&fx);
}
END_TEST

START_TEST(test_tier_usage_counts_blocks)
{
	struct tfix fx;
	struct tier *t = fx_open(&fx, _i);
	struct tier_usage u;

	ck_assert_int_eq(t->ops->usage(t, &u), 0);
	ck_assert_uint_eq(u.blocks, 0);
	for (int i = 0; i < 10; i++) {
		struct blockid id = ut_id(500 + i);

		ck_assert_int_eq(tu_put(t, &id, 1, 20000, 0, 0, 0), 0);
	}
	tu_settle(t);
	ck_assert_int_eq(t->ops->usage(t, &u), 0);
	ck_assert_uint_eq(u.blocks, 10);
	ck_assert_uint_gt(u.used, 0);
	ck_assert_uint_ge(u.capacity, u.used);
	for (int i = 0; i < 3; i++) {
		struct blockid id = ut_id(500 + i);

		ck_assert_int_eq(t->ops->remove(t, &id), 0);
	}
	/* a replacement does not count twice */
	{
		struct blockid id = ut_id(505);

		ck_assert_int_eq(tu_put(t, &id, 2, 20000, TIER_RESERVE_TRUNC, 0, 0), 0);
	}
	tu_settle(t);
	ck_assert_int_eq(t->ops->usage(t, &u), 0);
	ck_assert_uint_eq(u.blocks, 7);
	fx_close(&fx);
}
END_TEST

START_TEST(test_tier_read_any_offset)
{
	struct tfix fx;
	struct tier *t = fx_open(&fx, _i);
	struct blockid id = ut_id(21);
	const uint64_t size = (1 << 20) + 2 * 4096 + 77;
	const uint64_t offs[] = { 0, 1, 511, 512, 4095, 4096, 4097, 65535, 1 << 20, size - 4096,
				  size - 1, size, size + 1, size + 4096, 1ULL << 40 };
	const uint64_t lens[] = { 0, 1, 7, 512, 4096, 4097, 131072, size, size + 100 };
	struct tier_handle *h;
	uint64_t seed = 5;

	ck_assert_int_eq(tu_put(t, &id, 8, size, 0, 0, 0), 0);
	/* a handle whose first read is a small one in the middle */
	ck_assert_int_eq(t->ops->open(t, &id, 0, &h), 0);
	tu_check_read(h, &id, 8, size, 12345, 10);
	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++)
		for (size_t j = 0; j < sizeof(lens) / sizeof(lens[0]); j++)
			tu_check_read(h, &id, 8, size, offs[i], lens[j]);
	for (int k = 0; k < 200; k++) {
		uint64_t off = ut_rand(&seed) % (size + 10), len = ut_rand(&seed) % 300000;

		tu_check_read(h, &id, 8, size, off, len);
	}
	tier_close(h);
	/* a handle whose first read is the last byte */
	ck_assert_int_eq(t->ops->open(t, &id, 0, &h), 0);
	tu_check_read(h, &id, 8, size, size - 1, 1);
	tier_close(h);
	/* one whose first read is whole */
	ck_assert_int_eq(t->ops->open(t, &id, 0, &h), 0);
	tu_check_read(h, &id, 8, size, 0, size);
	tu_check_read(h, &id, 8, size, 99, 1);
	tier_close(h);
	fx_close(&fx);
}
END_TEST

START_TEST(test_tier_zero_length_block)
{
	struct tfix fx;
	struct tier *t = fx_open(&fx, _i);
	struct blockid id = ut_id_in_shard(0x042, 0);
	struct tier_handle *h;
	struct block_attr a;
	struct block_meta m = tu_meta(0, 0);
	char buf[16];
	size_t n;
	struct blockid *l;

	ck_assert_int_eq(t->ops->reserve(t, &id, 0, 0, &h), 0);
	ck_assert_int_eq(t->ops->commit(h, &m, 0, NULL), 0);
	ck_assert_int_eq(tu_lookup(t, &id, &a), 0);
	ck_assert_uint_eq(a.size, 0);
	ck_assert_int_eq(t->ops->open(t, &id, 0, &h), 0);
	ck_assert_int_eq(tier_read(h, buf, sizeof(buf), 0), 0);
	ck_assert_int_eq(tier_read(h, buf, sizeof(buf), 100), 0);
	ck_assert_int_eq(h->tier->ops->stat(h, &a), 0);
	ck_assert_uint_eq(a.size, 0);
	tier_close(h);
	l = tu_list(t, 0x042, &n);
	ck_assert_uint_eq(n, 1);
	free(l);
	/* replaced by a non-empty block and back */
	ck_assert_int_eq(tu_put(t, &id, 1, 5000, TIER_RESERVE_TRUNC, 0, 0), 0);
	tu_expect(t, &id, 1, 5000);
	ck_assert_int_eq(tu_put(t, &id, 1, 0, TIER_RESERVE_TRUNC, 0, 0), 0);
	tu_settle(t);
	tu_expect(t, &id, 1, 0);
	fx_close(&fx);
}
END_TEST

START_TEST(test_tier_truncate_shrinks)
{
	struct tfix fx;
	struct tier *t = fx_open(&fx, _i);
	struct blockid id = ut_id(31);
	struct tier_handle *h;
	struct block_meta m = tu_meta(100, 0);

	ck_assert_int_eq(t->ops->reserve(t, &id, 0, 0, &h), 0);
	ck_assert_int_eq(tu_write(h, &id, 4, 0, 8192), 8192);
	ck_assert_int_eq(t->ops->truncate(h, 100), 0);
	ck_assert_int_eq(t->ops->commit(h, &m, 0, NULL), 0);
	tu_expect(t, &id, 4, 100);
	fx_close(&fx);
}
END_TEST

START_TEST(test_tier_reservation_reads_back)
{
	struct tfix fx;
	struct tier *t = fx_open(&fx, _i);
	struct blockid id = ut_id(32);
	struct tier_handle *h;
	struct block_meta m = tu_meta(40000, 0);
	struct block_attr a;

	ck_assert_int_eq(t->ops->reserve(t, &id, 0, 0, &h), 0);
	ck_assert_int_eq(tu_write(h, &id, 4, 0, 40000), 40000);
	/* a writer reads back its own reservation's bytes (O_RDWR) */
	tu_check_read(h, &id, 4, 40000, 0, 40000);
	tu_check_read(h, &id, 4, 40000, 39990, 100);
	ck_assert_int_eq(h->tier->ops->stat(h, &a), 0);
	ck_assert_uint_eq(a.size, 40000);
	ck_assert_int_eq(t->ops->commit(h, &m, 0, NULL), 0);
	fx_close(&fx);
}
END_TEST

START_TEST(test_tier_commit_returns_reader)
{
	struct tfix fx;
	struct tier *t = fx_open(&fx, _i);
	struct blockid id = ut_id(33);
	struct tier_handle *h, *rd = (struct tier_handle *)&fx;
	struct block_meta m = tu_meta(70000, 0);

	ck_assert_int_eq(t->ops->reserve(t, &id, 0, 0, &h), 0);
	ck_assert_int_eq(tu_write(h, &id, 6, 0, 70000), 70000);
	ck_assert_int_eq(t->ops->commit(h, &m, 0, &rd), 0);
	ck_assert_ptr_ne(rd, (struct tier_handle *)&fx); /* *rd is always set */
	if (rd) {
		/* the published version, readable even after it is removed */
		ck_assert_int_eq(t->ops->remove(t, &id), 0);
		tu_check_read(rd, &id, 6, 70000, 0, 70000);
		tier_close(rd);
	}
	fx_close(&fx);
}
END_TEST

START_TEST(test_tier_stat_handles)
{
	struct tfix fx;
	struct tier *t = fx_open(&fx, _i);
	struct blockid id = ut_id(34);
	struct tier_handle *h;
	struct block_attr look, st;

	ck_assert_int_eq(tu_put(t, &id, 1, 12345, 0, 0, 0), 0);
	ck_assert_int_eq(tu_lookup(t, &id, &look), 0);
	ck_assert_int_eq(t->ops->open(t, &id, 0, &h), 0);
	ck_assert_int_eq(h->tier->ops->stat(h, &st), 0);
	ck_assert_uint_eq(st.size, 12345);
	ck_assert_uint_eq(st.version, look.version);
	if (!(fx.flags & TC_STORE))
		ck_assert_uint_ne(st.where, 0);
	tier_close(h);
	fx_close(&fx);
}
END_TEST

/* --- errors ------------------------------------------------------------------------------ */

START_TEST(test_tier_absent_ids)
{
	struct tfix fx;
	struct tier *t = fx_open(&fx, _i);
	struct blockid id = ut_id(40), other = ut_id(41);
	struct tier_handle *h;

	ck_assert_int_eq(tu_put(t, &other, 1, 10, 0, 0, 0), 0);
	ck_assert_int_eq(tu_lookup(t, &id, NULL), -ENOENT);
	ck_assert_int_eq(t->ops->open(t, &id, 0, &h), -ENOENT);
	ck_assert_int_eq(t->ops->open(t, &id, TIER_OPEN_INTERNAL, &h), -ENOENT);
	ck_assert_int_eq(t->ops->remove(t, &id), -ENOENT);
	ck_assert_int_eq(t->ops->touch(t, &id), -ENOENT);
	ck_assert_int_eq(t->ops->set_deadline(t, &id, mono_ns() + 1000000000), -ENOENT);
	ck_assert_int_eq(tu_lookup(t, &id, NULL), -ENOENT); /* set_deadline made nothing */
	fx_close(&fx);
}
END_TEST

/* A block whose deadline has passed: the fixture for the expired-is-absent cases. */
static struct tier *expired_block(struct tfix *fx, int k, struct blockid *id)
{
	struct tier *t = fx_open(fx, k);

	*id = ut_id_in_shard(0xe0e, 1);
	ck_assert_int_eq(tu_put(t, id, 1, 3000, 0, 0, 0), 0);
	tu_settle(t);
	ck_assert_int_eq(t->ops->set_deadline(t, id, mono_ns() + 50 * 1000000LL), 0);
	ut_sleep_ms(80);
	return t;
}

START_TEST(test_tier_expired_lookup_open_list)
{
	struct tfix fx;
	struct blockid id;
	struct tier *t = expired_block(&fx, _i, &id);
	struct tier_handle *h;
	size_t n;
	struct blockid *l;

	ck_assert_int_eq(tu_lookup(t, &id, NULL), -ENOENT);
	ck_assert_int_eq(t->ops->open(t, &id, 0, &h), -ENOENT);
	l = tu_list(t, 0xe0e, &n);
	ck_assert_uint_eq(n, 0);
	free(l);
	fx_close(&fx);
}
END_TEST

START_TEST(test_tier_expired_touch)
{
	struct tfix fx;
	struct blockid id;
	struct tier *t = expired_block(&fx, _i, &id);

	/* "An expired block is treated as absent by every op" */
	ck_assert_int_eq(t->ops->touch(t, &id), -ENOENT);
	ck_assert_int_eq(tu_lookup(t, &id, NULL), -ENOENT);
	fx_close(&fx);
}
END_TEST

START_TEST(test_tier_expired_set_deadline)
{
	struct tfix fx;
	struct blockid id;
	struct tier *t = expired_block(&fx, _i, &id);

	/* a new deadline must not bring an expired block back */
	ck_assert_int_eq(t->ops->set_deadline(t, &id, 0), -ENOENT);
	ck_assert_int_eq(tu_lookup(t, &id, NULL), -ENOENT);
	fx_close(&fx);
}
END_TEST

START_TEST(test_tier_expired_remove)
{
	struct tfix fx;
	struct blockid id;
	struct tier *t = expired_block(&fx, _i, &id);

	ck_assert_int_eq(t->ops->remove(t, &id), -ENOENT);
	ck_assert_int_eq(tu_lookup(t, &id, NULL), -ENOENT);
	fx_close(&fx);
}
END_TEST

/* --- concurrency ------------------------------------------------------------------------- */

#define THREADS 4
#define SHARED_IDS 8

struct worker {
	struct tier *t;
	int n;
	int errors;
	char what[256];
};

/* Shared ids always get the same content (content addressing), so any reader can check. */
static uint64_t shared_size(int k)
{
	return 1000 + (uint64_t)k * 37000;
}

static void *contract_worker(void *arg)
{
	struct worker *w = arg;
	struct tier *t = w->t;
	uint64_t seed = (uint64_t)w->n * 1000 + 1;

	for (int i = 0; i < 40 && !w->errors; i++) {
		struct blockid own = ut_id(10000 + (uint64_t)w->n * 100 + (uint64_t)i);
		int k = (int)(ut_rand(&seed) % SHARED_IDS);
		struct blockid shared = ut_id(20000 + (uint64_t)k);
		uint64_t size = ut_rand(&seed) % 200000;
		int rc;

		rc = tu_put(t, &own, 3, size, 0, 0, 0);
		if (rc == 0)
			rc = tu_try_read(t, &own, 3, size);
		if (rc) {
			snprintf(w->what, sizeof(w->what), "own %s: %d", ut_hex(&own), rc);
			w->errors++;
			break;
		}
		rc = tu_put(t, &shared, 4, shared_size(k), 0, 0, 0);
		if (rc) {
			snprintf(w->what, sizeof(w->what), "put shared %s: %d", ut_hex(&shared),
				 rc);
			w->errors++;
			break;
		}
		/* another thread may be removing it: a miss is fine, wrong bytes are not */
		k = (int)(ut_rand(&seed) % SHARED_IDS);
		shared = ut_id(20000 + (uint64_t)k);
		rc = tu_try_read(t, &shared, 4, shared_size(k));
		if (rc && rc != -ENOENT) {
			snprintf(w->what, sizeof(w->what), "read shared %s: %d", ut_hex(&shared),
				 rc);
			w->errors++;
			break;
		}
		if (ut_rand(&seed) % 4 == 0) {
			rc = t->ops->remove(t, &shared);
			if (rc && rc != -ENOENT) {
				snprintf(w->what, sizeof(w->what), "remove %s: %d", ut_hex(&shared),
					 rc);
				w->errors++;
			}
		}
		if (i % 2)
			t->ops->remove(t, &own);
	}
	return NULL;
}

START_TEST(test_tier_parallel_writers_readers)
{
	struct tfix fx;
	struct tier *t = fx_open(&fx, _i);
	struct worker w[THREADS];
	pthread_t th[THREADS];

	for (int i = 0; i < THREADS; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].t = t;
		w[i].n = i;
		ck_assert_int_eq(pthread_create(&th[i], NULL, contract_worker, &w[i]), 0);
	}
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < THREADS; i++)
		ck_assert_msg(w[i].errors == 0, "thread %d: %s", i, w[i].what);
	tu_settle(t);
	/* what is left is intact */
	for (int i = 0; i < THREADS; i++) {
		for (int j = 0; j < 40; j += 2) {
			struct blockid own = ut_id(10000 + (uint64_t)i * 100 + (uint64_t)j);
			struct block_attr a;

			if (tu_lookup(t, &own, &a) == 0)
				ck_assert_int_eq(tu_try_read(t, &own, 3, a.size), 0);
		}
	}
	for (int k = 0; k < SHARED_IDS; k++) {
		struct blockid shared = ut_id(20000 + (uint64_t)k);
		int rc = tu_try_read(t, &shared, 4, shared_size(k));

		ck_assert_msg(rc == 0 || rc == -ENOENT, "shared %d: %d", k, rc);
	}
	fx_close(&fx);
}
END_TEST

/* tier.h: "reads of one read handle may run in parallel" (kernel readahead) */
struct shared_reader {
	struct tier_handle *h;
	struct blockid id;
	uint64_t size;
	int n;
	char err[256];
};

static void *read_shared(void *arg)
{
	struct shared_reader *r = arg;
	uint64_t seed = 31 + (uint64_t)r->n;
	char *buf = malloc(r->size);

	if (!buf)
		return NULL;
	for (int i = 0; i < 150 && !r->err[0]; i++) {
		uint64_t off = ut_rand(&seed) % r->size, len = ut_rand(&seed) % (300 << 10);
		ssize_t n, want;

		if (i % 25 == 0)
			off = 0, len = r->size;
		want = (ssize_t)(len < r->size - off ? len : r->size - off);
		n = tier_read(r->h, buf, len, off);
		if (n != want)
			snprintf(r->err, sizeof(r->err), "read(%llu, %llu) = %zd, want %zd",
				 (unsigned long long)off, (unsigned long long)len, n, want);
		else if (ut_diff(&r->id, 6, buf, (size_t)n, off) >= 0)
			snprintf(r->err, sizeof(r->err), "read(%llu, %llu): wrong bytes",
				 (unsigned long long)off, (unsigned long long)len);
	}
	free(buf);
	return NULL;
}

START_TEST(test_tier_parallel_reads_of_one_handle)
{
	struct tfix fx;
	struct tier *t = fx_open(&fx, _i);
	struct shared_reader r[THREADS];
	pthread_t th[THREADS];
	struct tier_handle *h;
	struct blockid id = ut_id(77);
	const uint64_t size = (3 << 20) / 2 + 333;

	ck_assert_int_eq(tu_put(t, &id, 6, size, 0, 0, 0), 0);
	tu_settle(t);
	ck_assert_int_eq(t->ops->open(t, &id, 0, &h), 0);
	for (int i = 0; i < THREADS; i++) {
		memset(&r[i], 0, sizeof(r[i]));
		r[i].h = h;
		r[i].id = id;
		r[i].size = size;
		r[i].n = i;
		ck_assert_int_eq(pthread_create(&th[i], NULL, read_shared, &r[i]), 0);
	}
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < THREADS; i++)
		ck_assert_msg(r[i].err[0] == '\0', "thread %d: %s", i, r[i].err);
	tier_close(h);
	fx_close(&fx);
}
END_TEST

unsigned tier_contract_count(void)
{
	return NFACTORIES;
}

const char *tier_contract_name(unsigned k)
{
	static char names[NFACTORIES][64];

	if (k >= NFACTORIES)
		return "";
	snprintf(names[k], sizeof(names[k]), "tier_%s", factories[k].name);
	return names[k];
}

/* The contract as suite `name`, every case run against factory k. */
static Suite *contract_suite(const char *name, unsigned k)
{
	Suite *s = suite_create(name);
	TCase *core = ut_tcase("core", UT_TIMEOUT), *errors = ut_tcase("errors", UT_TIMEOUT);
	TCase *conc = ut_tcase("concurrency", UT_TIMEOUT_SLOW);
	const TTest *core_cases[] = {
		test_tier_write_commit_read,
		test_tier_out_of_order_writes,
		test_tier_reservation_invisible,
		test_tier_abort_leaves_nothing,
		test_tier_remove,
		test_tier_remove_keeps_open_reader,
		test_tier_replace_keeps_open_reader,
		test_tier_touch,
		test_tier_deadline,
		test_tier_list_shard,
		test_tier_list_shard_stops,
		test_tier_usage_counts_blocks,
		test_tier_read_any_offset,
		test_tier_zero_length_block,
		test_tier_truncate_shrinks,
		test_tier_reservation_reads_back,
		test_tier_commit_returns_reader,
		test_tier_stat_handles,
	};
	const TTest *error_cases[] = {
		test_tier_absent_ids,
		test_tier_expired_lookup_open_list,
		test_tier_expired_touch,
		test_tier_expired_set_deadline,
		test_tier_expired_remove,
	};
	const TTest *conc_cases[] = {
		test_tier_parallel_writers_readers,
		test_tier_parallel_reads_of_one_handle,
	};

	for (size_t i = 0; i < sizeof(core_cases) / sizeof(core_cases[0]); i++)
		tcase_add_loop_test(core, core_cases[i], (int)k, (int)k + 1);
	for (size_t i = 0; i < sizeof(error_cases) / sizeof(error_cases[0]); i++)
		tcase_add_loop_test(errors, error_cases[i], (int)k, (int)k + 1);
	for (size_t i = 0; i < sizeof(conc_cases) / sizeof(conc_cases[0]); i++)
		tcase_add_loop_test(conc, conc_cases[i], (int)k, (int)k + 1);
	suite_add_tcase(s, core);
	suite_add_tcase(s, errors);
	suite_add_tcase(s, conc);
	return s;
}

Suite *tier_contract_suite(unsigned k)
{
	return contract_suite(tier_contract_name(k), k);
}

Suite *tier_contract_suite_for(const char *name, void (*open)(struct tfix *fx), unsigned flags)
{
	if (nextra == MAX_EXTRA)
		return NULL;
	extra[nextra] = (struct tier_factory){ name, open, flags };
	return contract_suite(name, (unsigned)NFACTORIES + nextra++);
}
