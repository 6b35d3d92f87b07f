/*
 * Tiers as plugins: the loader (tiers/plugin.c) and the example store built as one
 * (tiers/example/dirstore.c), in what the tier contract does not cover: libraries the
 * loader must refuse, the store's options, and what the store keeps across a restart.
 *
 * The libraries are built beside this runner: the example store, one built for another
 * tier ABI and one without the entry point (tests/unit/plugin_*.c); meson passes their
 * paths as UCM_DIRSTORE_SO, UCM_BAD_ABI_SO and UCM_NO_ENTRY_SO.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/clock.h"
#include "tests/unit/tier_util.h"
#include "tests/unit/unit.h"
#include "tiers/plugin.h"

/* The example store over dir, with capacity= if not NULL. */
static struct tier *dirstore(const char *dir, const char *capacity)
{
	struct tier_param p[] = { { "path", dir }, { "capacity", capacity } };
	char none[1];

	return tu_plugin_store(UCM_DIRSTORE_SO, p, capacity ? 2 : 1, none, sizeof(none));
}

/* tier_ref_get() of name: its result, with the message in err. */
static int ref_get(const char *name, char *err, size_t len)
{
	struct tier_ref ref;
	int rc;

	err[0] = '\0';
	rc = tier_ref_get(name, &ref, err, len);
	if (rc == 0)
		tier_ref_put(&ref);
	return rc;
}

/* --- core -------------------------------------------------------------------------------- */

START_TEST(test_plugin_loads_by_name_and_path)
{
	struct tier_ref ref;
	char err[512];

	ck_assert_int_eq(tier_ref_get("posix", &ref, err, sizeof(err)), 0);
	ck_assert_ptr_eq(ref.plugin, &tier_posix_plugin);
	ck_assert_ptr_null(ref.lib);
	tier_ref_put(&ref);
	ck_assert_int_eq(tier_ref_get(UCM_DIRSTORE_SO, &ref, err, sizeof(err)), 0);
	ck_assert_ptr_nonnull(ref.lib);
	ck_assert_uint_eq(ref.plugin->abi, UCMFS_TIER_ABI);
	ck_assert_str_eq(ref.plugin->name, "dirstore");
	ck_assert_int_eq(ref.plugin->kind, TIER_KIND_STORE);
	tier_ref_put(&ref);
}
END_TEST

/* Blocks, their mtimes, versions and deadlines survive a restart; blocks that expired
 * while it was down, and the temp files of writes it never committed, do not. */
START_TEST(test_plugin_dirstore_restart)
{
	struct blockid a = ut_id(1), b = ut_id(2), gone = ut_id(3), fresh = ut_id(4);
	struct block_attr a1, b1, a2, b2, f;
	char dir[PATH_MAX], tmp[PATH_MAX + 64];
	struct tier *t;
	int fd;

	ut_mkdtemp(dir, sizeof(dir));
	t = dirstore(dir, NULL);
	ck_assert_int_eq(tu_put(t, &a, 1, 5000, 0, 0, 0), 0);
	ck_assert_int_eq(tu_put(t, &b, 2, 70001, 0, 0, 0), 0);
	ck_assert_int_eq(tu_put(t, &gone, 3, 100, 0, 0, 0), 0);
	ck_assert_int_eq(t->ops->set_deadline(t, &b, mono_ns() + 3600 * 1000000000LL), 0);
	ck_assert_int_eq(t->ops->set_deadline(t, &gone, mono_ns() + 30 * 1000000LL), 0);
	ck_assert_int_eq(tu_lookup(t, &a, &a1), 0);
	ck_assert_int_eq(tu_lookup(t, &b, &b1), 0);
	tier_destroy(t);
	snprintf(tmp, sizeof(tmp), "%s/.tmp-%s-0badf00d", dir, ut_hex(&a));
	fd = open(tmp, O_WRONLY | O_CREAT, 0644);
	ck_assert_int_ge(fd, 0);
	close(fd);
	ut_sleep_ms(60);

	t = dirstore(dir, NULL);
	ck_assert_int_eq(tu_lookup(t, &a, &a2), 0);
	ck_assert_int_eq(tu_lookup(t, &b, &b2), 0);
	ck_assert_uint_eq(a2.size, 5000);
	ck_assert_uint_eq(a2.version, a1.version);
	ck_assert_int_le(llabs(a2.mtime - a1.mtime), 1000000000);
	ck_assert_int_eq(a2.deadline, 0);
	ck_assert_uint_eq(b2.version, b1.version);
	ck_assert_msg(llabs(b2.deadline - b1.deadline) < 10000000, "deadline moved by %lld ns",
		      (long long)(b2.deadline - b1.deadline));
	tu_expect(t, &a, 1, 5000);
	tu_expect(t, &b, 2, 70001);
	ck_assert_int_eq(tu_lookup(t, &gone, NULL), -ENOENT);
	ck_assert_int_eq(ut_count_entries(dir), 2); /* a and b: no temp file, no expired block */
	/* versions go on from the store's, not from 1 */
	ck_assert_int_eq(tu_put(t, &fresh, 4, 10, 0, 0, 0), 0);
	ck_assert_int_eq(tu_lookup(t, &fresh, &f), 0);
	ck_assert_uint_ne(f.version, a1.version);
	ck_assert_uint_ne(f.version, b1.version);
	tier_destroy(t);
}
END_TEST

/* tier.h: without TIER_RESERVE_TRUNC a replacement starts with the old bytes */
START_TEST(test_plugin_dirstore_replacement_starts_with_old_bytes)
{
	struct blockid id = ut_id(5);
	struct block_meta m = tu_meta(10000, 0);
	struct tier_handle *h;
	struct block_attr a;
	char dir[PATH_MAX];
	struct tier *t;

	ut_mkdtemp(dir, sizeof(dir));
	t = dirstore(dir, NULL);
	ck_assert_int_eq(tu_put(t, &id, 1, 10000, 0, 0, 0), 0);
	ck_assert_int_eq(t->ops->reserve(t, &id, TIER_RESERVE_TRUNC, 0, &h), 0);
	ck_assert_int_eq(h->tier->ops->stat(h, &a), 0);
	ck_assert_uint_eq(a.size, 0);
	t->ops->abort(h);
	ck_assert_int_eq(t->ops->reserve(t, &id, 0, 0, &h), 0);
	ck_assert_int_eq(h->tier->ops->stat(h, &a), 0);
	ck_assert_uint_eq(a.size, 10000);
	ck_assert_int_eq(tu_write(h, &id, 2, 0, 100), 100);
	ck_assert_int_eq(t->ops->commit(h, &m, 0, NULL), 0);
	ck_assert_int_eq(t->ops->open(t, &id, 0, &h), 0);
	tu_check_read(h, &id, 2, 10000, 0, 100);
	tu_check_read(h, &id, 1, 10000, 100, 10000);
	tier_close(h);
	tier_destroy(t);
}
END_TEST

START_TEST(test_plugin_dirstore_exclusive)
{
	struct blockid id = ut_id(6), other = ut_id(7);
	struct tier_handle *h, *x;
	char dir[PATH_MAX];
	struct tier *t;

	ut_mkdtemp(dir, sizeof(dir));
	t = dirstore(dir, NULL);
	ck_assert_int_eq(tu_put(t, &id, 1, 100, 0, 0, 0), 0);
	ck_assert_int_eq(t->ops->reserve(t, &id, TIER_RESERVE_EXCL, 0, &x), -EEXIST);
	ck_assert_int_eq(t->ops->reserve(t, &other, 0, 0, &h), 0);
	ck_assert_int_eq(t->ops->reserve(t, &other, TIER_RESERVE_EXCL, 0, &x), -EEXIST);
	t->ops->abort(h);
	ck_assert_int_eq(t->ops->reserve(t, &other, TIER_RESERVE_EXCL, 0, &h), 0);
	t->ops->abort(h);
	ck_assert_int_eq(t->ops->remove(t, &id), 0);
	ck_assert_int_eq(t->ops->reserve(t, &id, TIER_RESERVE_EXCL, 0, &h), 0);
	t->ops->abort(h);
	tier_destroy(t);
}
END_TEST

START_TEST(test_plugin_dirstore_capacity)
{
	struct blockid a = ut_id(8), b = ut_id(9);
	struct tier_usage u;
	char dir[PATH_MAX];
	struct tier *t;

	ut_mkdtemp(dir, sizeof(dir));
	t = dirstore(dir, "100000");
	ck_assert_int_eq(tu_put(t, &a, 1, 60000, 0, 0, 0), 0);
	ck_assert_int_eq(tu_put(t, &b, 1, 60000, 0, 0, 0), -ENOSPC);
	ck_assert_int_eq(t->ops->usage(t, &u), 0);
	ck_assert_uint_eq(u.capacity, 100000);
	ck_assert_uint_eq(u.used, 60000);
	ck_assert_uint_eq(u.blocks, 1);
	ck_assert_int_eq(tu_lookup(t, &b, NULL), -ENOENT);
	ck_assert_int_eq(t->ops->remove(t, &a), 0);
	ck_assert_int_eq(tu_put(t, &b, 1, 60000, 0, 0, 0), 0);
	tu_expect(t, &b, 1, 60000);
	tier_destroy(t);
}
END_TEST

START_TEST(test_plugin_dirstore_durable_sync_sweep)
{
	struct blockid a = ut_id(10), b = ut_id(11), absent = ut_id(12);
	struct tier_usage u;
	char dir[PATH_MAX];
	struct tier *t;

	ut_mkdtemp(dir, sizeof(dir));
	t = dirstore(dir, NULL);
	ck_assert_int_eq(tu_put(t, &a, 1, 9000, 0, TIER_COMMIT_DURABLE, 0), 0);
	ck_assert_int_eq(tu_put(t, &b, 1, 9000, 0, 0, 0), 0);
	ck_assert_int_eq(t->ops->sync(t, &b), 0);
	ck_assert_int_eq(t->ops->sync(t, &absent), -ENOENT);
	ck_assert_int_eq(t->ops->set_deadline(t, &a, mono_ns() + 20 * 1000000LL), 0);
	ut_sleep_ms(40);
	ck_assert_int_eq(t->ops->sync(t, &a), -ENOENT);
	ck_assert_int_eq(ut_count_entries(dir), 2);
	t->ops->sweep(t);
	ck_assert_int_eq(ut_count_entries(dir), 1);
	ck_assert_int_eq(t->ops->usage(t, &u), 0);
	ck_assert_uint_eq(u.used, 9000);
	ck_assert_uint_eq(u.blocks, 1);
	tu_expect(t, &b, 1, 9000);
	tier_destroy(t);
}
END_TEST

/* --- errors ------------------------------------------------------------------------------ */

START_TEST(test_plugin_refuses_other_abi)
{
	char err[512], want[PATH_MAX + 128];

	ck_assert_int_eq(ref_get(UCM_BAD_ABI_SO, err, sizeof(err)), -EPROTO);
	snprintf(want, sizeof(want), "tier library %s is built for tier ABI %u, this daemon has %u",
		 UCM_BAD_ABI_SO, UCMFS_TIER_ABI + 1, UCMFS_TIER_ABI);
	ck_assert_str_eq(err, want);
}
END_TEST

START_TEST(test_plugin_refuses_no_entry_point)
{
	char err[512], want[PATH_MAX + 128];

	ck_assert_int_eq(ref_get(UCM_NO_ENTRY_SO, err, sizeof(err)), -ENOEXEC);
	snprintf(want, sizeof(want), "tier library %s has no entry point ucmfs_tier_plugin()",
		 UCM_NO_ENTRY_SO);
	ck_assert_str_eq(err, want);
}
END_TEST

START_TEST(test_plugin_refuses_missing_and_foreign_files)
{
	char err[512], dir[PATH_MAX], path[PATH_MAX + 16];
	FILE *f;

	ck_assert_int_eq(ref_get("/nonexistent/tier.so", err, sizeof(err)), -ENOENT);
	ck_assert_str_eq(err, "tier library /nonexistent/tier.so: No such file or directory");
	ut_mkdtemp(dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/text.so", dir);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("not a library\n", f);
	fclose(f);
	ck_assert_int_eq(ref_get(path, err, sizeof(err)), -ENOEXEC);
	ck_assert_msg(strstr(err, "cannot be loaded"), "%s", err);
	ck_assert_int_eq(ref_get("nosuch", err, sizeof(err)), -ENOENT);
	ck_assert_msg(strstr(err, "unknown tier 'nosuch'"), "%s", err);
}
END_TEST

/* tier.h: unknown keys are an error (-EINVAL naming the key) */
START_TEST(test_plugin_dirstore_options)
{
	struct tier_param colour[] = { { "path", "/tmp" }, { "colour", "blue" } };
	struct tier_param bad_cap[] = { { "path", "/tmp" }, { "capacity", "lots" } };
	struct tier_param just_cap[] = { { "capacity", "1000" } };
	struct tier_param here[1];
	char err[512], dir[PATH_MAX], none[1];
	struct tier *t, *u;

	ck_assert_int_eq(tu_plugin_create(UCM_DIRSTORE_SO, colour, 2, none, sizeof(none), &u, err,
					  sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "unknown option 'colour'"), "%s", err);
	ck_assert_int_eq(tu_plugin_create(UCM_DIRSTORE_SO, bad_cap, 2, none, sizeof(none), &u,
					  err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "capacity 'lots'"), "%s", err);
	/* an empty path names no directory */
	here[0] = (struct tier_param){ "path", "" };
	ck_assert_int_eq(tu_plugin_create(UCM_DIRSTORE_SO, here, 1, none, sizeof(none), &u, err,
					  sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "option 'path'"), "%s", err);
	/* a directory is one store's */
	t = tu_plugin_store(UCM_DIRSTORE_SO, just_cap, 1, dir, sizeof(dir));
	here[0] = (struct tier_param){ "path", dir };
	ck_assert_int_eq(tu_plugin_create(UCM_DIRSTORE_SO, here, 1, none, sizeof(none), &u, err,
					  sizeof(err)), -EBUSY);
	ck_assert_msg(strstr(err, "in use"), "%s", err);
	tier_destroy(t);
}
END_TEST

Suite *plugin_suite(void)
{
	Suite *s = suite_create("plugin");
	TCase *core = ut_tcase("core", UT_TIMEOUT), *errors = ut_tcase("errors", UT_TIMEOUT);

	tcase_add_test(core, test_plugin_loads_by_name_and_path);
	tcase_add_test(core, test_plugin_dirstore_restart);
	tcase_add_test(core, test_plugin_dirstore_replacement_starts_with_old_bytes);
	tcase_add_test(core, test_plugin_dirstore_exclusive);
	tcase_add_test(core, test_plugin_dirstore_capacity);
	tcase_add_test(core, test_plugin_dirstore_durable_sync_sweep);
	tcase_add_test(errors, test_plugin_refuses_other_abi);
	tcase_add_test(errors, test_plugin_refuses_no_entry_point);
	tcase_add_test(errors, test_plugin_refuses_missing_and_foreign_files);
	tcase_add_test(errors, test_plugin_dirstore_options);
	suite_add_tcase(s, core);
	suite_add_tcase(s, errors);
	return s;
}
