/*
 * ucm-bench mount-time phase (bench_phases.h): how long a daemon takes to mount a large store.
 *
 * A store of --mount-blocks blocks of MT_BLOCK bytes is written straight through the disk
 * tier (tiers/posix.c, native layout, uncompressed: the files the daemon would have left),
 * then mounted by a fresh daemon, timed from its start until the mount answers, with the page
 * cache dropped (the first mount after a reboot) and warm (a remount), each after a clean
 * stop (the start takes the index the stop saved, STORE/.index.<host>, and only looks at each
 * file) and as after a crash (that index deleted: the start reads every block file's header;
 * tiers/posix_scan.c).
 *
 * The floor is what any tool that looks at every file pays on the same tree in the same cache
 * state: one thread that lists every shard directory and fstatat()s each entry, like `du`.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "src/blockid.h"
#include "src/clock.h"
#include "src/log.h"
#include "tiers/posix.h"
#include "tiers/tier.h"
#include "tools/bench_phases.h"

#define MT_BLOCK 4096

/* Write n blocks of MT_BLOCK bytes into a fresh store at root through the disk tier. */
static int build_store(const char *root, uint64_t n, double *secs)
{
	struct posix_config cfg = { .root = root, .layout = LAYOUT_NATIVE };
	char *blk = bench_alloc(MT_BLOCK);
	double t0 = now_s();
	struct tier *t;
	int rc;

	if (!blk)
		return bench_fail(ENOMEM, "mount store: %u bytes", MT_BLOCK);
	memset(blk, 0x5a, MT_BLOCK);
	log_set_level(LOG_LVL_WARN);
	rc = posix_create(&cfg, &t);
	if (rc) {
		free(blk);
		return bench_fail(-rc, "mount store: open %s", root);
	}
	for (uint64_t i = 0; i < n && !rc; i++) {
		struct block_meta m = { .size = MT_BLOCK, .mtime = wall_ns() };
		struct tier_handle *h;
		struct blockid id;
		char hex[33];

		block_name(hex, 0x6d6f756e74ull, i);
		blockid_parse(hex, 32, &id);
		memcpy(blk, &i, sizeof(i));
		rc = t->ops->reserve(t, &id, TIER_RESERVE_TRUNC, MT_BLOCK, &h);
		if (rc) {
			rc = bench_fail(-rc, "mount store: reserve block %llu", (unsigned long long)i);
			break;
		}
		if (t->ops->write(h, blk, MT_BLOCK, 0) != MT_BLOCK) {
			t->ops->abort(h);
			rc = bench_fail(EIO, "mount store: write block %llu", (unsigned long long)i);
			break;
		}
		rc = t->ops->commit(h, &m, 0, NULL);
		if (rc)
			rc = bench_fail(-rc, "mount store: commit block %llu", (unsigned long long)i);
	}
	tier_destroy(t);
	free(blk);
	*secs = now_s() - t0;
	return rc;
}

/* The floor: list every shard directory of the store and fstatat() every entry. */
static int walk(const char *data, uint64_t *files, double *secs)
{
	double t0 = now_s();
	struct dirent *de;
	DIR *top = opendir(data);

	*files = 0;
	if (!top)
		return bench_fail(errno, "opendir %s", data);
	while ((de = readdir(top))) {
		int dfd;
		DIR *d;
		struct dirent *f;

		if (de->d_name[0] == '.')
			continue;
		dfd = openat(dirfd(top), de->d_name, O_RDONLY | O_DIRECTORY);
		if (dfd < 0 || !(d = fdopendir(dfd))) {
			if (dfd >= 0)
				close(dfd);
			continue;
		}
		while ((f = readdir(d))) {
			struct stat st;

			if (f->d_name[0] != '.' && fstatat(dfd, f->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
				(*files)++;
		}
		closedir(d);
	}
	closedir(top);
	*secs = now_s() - t0;
	return 0;
}

/* Delete the index a clean stop saved in store: the next start is the one after a crash. */
static void forget_index(const char *store)
{
	struct dirent *de;
	DIR *d = opendir(store);

	if (!d)
		return;
	while ((de = readdir(d)))
		if (!strncmp(de->d_name, ".index.", 7))
			unlinkat(dirfd(d), de->d_name, 0);
	closedir(d);
}

/* Mount the store with a fresh daemon; seconds from its start until the mount answered.
 * crashed: as after a crash, without the index the previous daemon's stop saved. */
static int timed_mount(const char *store, bool drop, bool crashed, double *secs)
{
	double t0;
	int rc = ucm_stop();

	if (rc)
		return rc;
	if (crashed)
		forget_index(store);
	if (drop && R.can_drop)
		drop_caches();
	mount_wait_s = 1800; /* the figure is the wait; the phase's watchdog still bounds it */
	t0 = now_s();
	rc = ucm_start(store);
	*secs = now_s() - t0;
	mount_wait_s = 20;
	return rc;
}

/* A phase over a million files: the watchdog allows it 30 minutes even with --quick. */
static void long_phase(const char *name)
{
	phase_start(name);
	alarm(R.c.phase_limit < 1800 ? 1800 : R.c.phase_limit);
}

void run_mount(void)
{
	char store[PATH_MAX + 16], data[PATH_MAX + 32], note[128];
	struct fig cold = FIG_NONE, warm = FIG_NONE, wcold = FIG_NONE, wwarm = FIG_NONE;
	struct fig ccold = FIG_NONE, cwarm = FIG_NONE;
	uint64_t n = R.c.mount_blocks, files = 0;
	double s = 0;
	int rc;

	if (R.c.mnt || !n) {
		const char *why = R.c.mnt ? "--mnt: no daemon of its own to mount" : "--mount-blocks 0";

		fig_skip(&cold, why);
		fig_skip(&warm, why);
		fig_skip(&ccold, why);
		fig_skip(&cwarm, why);
		goto rows;
	}
	long_phase("mount: writing the store");
	ucm_stop();
	snprintf(store, sizeof(store), "%s/store-mount", R.tmp);
	snprintf(data, sizeof(data), "%s/data", store);
	rc = build_store(store, n, &s);
	if (rc) {
		fig_set(&cold, rc, 0);
		goto rows;
	}
	snprintf(note, sizeof(note), "%llu blocks of 4K (written in %.0f s)",
		 (unsigned long long)n, s);

	long_phase("mount: cold");
	if (R.can_drop)
		drop_caches();
	rc = walk(data, &files, &s);
	if (rc == 0 && files != n)
		rc = bench_fail(EIO, "the walk found %llu files, not %llu",
				(unsigned long long)files, (unsigned long long)n);
	fig_set(&wcold, rc, s);
	rc = timed_mount(store, true, false, &s);
	fig_set(&cold, rc, s);
	rc = timed_mount(store, true, true, &s);
	fig_set(&ccold, rc, s);
	if (!R.can_drop) {
		fig_note(&cold, "not root: the page cache was not dropped");
		fig_note(&ccold, "not root: the page cache was not dropped");
		fig_note(&wcold, "not root: the page cache was not dropped");
	}

	long_phase("mount: warm");
	rc = walk(data, &files, &s);
	fig_set(&wwarm, rc, s);
	rc = timed_mount(store, false, false, &s);
	fig_set(&warm, rc, s);
	rc = timed_mount(store, false, true, &s);
	fig_set(&cwarm, rc, s);
	ucm_stop();
	rm_rf(store);
	fig_note(&cold, note);
	fig_note(&warm, note);
	fig_note(&ccold, note);
	fig_note(&cwarm, note);
rows:
	emit("mount.cold", MT_BLOCK, "mount, page cache dropped", &cold, "s", ROW_COST,
	     "stat walk", &wcold);
	emit("mount.warm", MT_BLOCK, "mount, page cache warm", &warm, "s", ROW_COST, "stat walk",
	     &wwarm);
	emit("mount.crash.cold", MT_BLOCK, "mount after a crash, page cache dropped", &ccold, "s",
	     ROW_COST, "stat walk", &wcold);
	emit("mount.crash.warm", MT_BLOCK, "mount after a crash, page cache warm", &cwarm, "s",
	     ROW_COST, "stat walk", &wwarm);
}
