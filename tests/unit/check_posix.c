/*
 * The disk tier beyond the contract (tiers/posix.c): the on-disk layouts, restart recovery
 * (with and without the index a stop saved), leftover temp files, quarantine of damaged
 * files, the store lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "src/buf.h"
#include "src/clock.h"
#include "tests/unit/tier_util.h"
#include "tests/unit/unit.h"
#include "tiers/io.h"
#include "tiers/posix.h"
#include "tiers/posix_header.h"

struct store {
	char dir[PATH_MAX];
	enum ucm_layout layout;
	struct tier *t;
};

static struct tier *store_open(struct store *s, enum ucm_layout layout)
{
	ut_mkdtemp(s->dir, sizeof(s->dir));
	s->layout = layout;
	s->t = tu_posix(s->dir, layout);
	return s->t;
}

static struct tier *store_reopen(struct store *s)
{
	tier_destroy(s->t);
	s->t = tu_posix(s->dir, s->layout);
	return s->t;
}

static void store_close(struct store *s)
{
	tier_destroy(s->t);
	s->t = NULL;
}

static void path_of(const struct store *s, const struct blockid *id, char *out, size_t len)
{
	tu_block_path(s->dir, s->layout, id, out, len);
}

static void shard_dir(const struct store *s, const struct blockid *id, char *out, size_t len)
{
	char hex[BLOCKID_HEX_LEN + 1];

	blockid_format(id, hex);
	snprintf(out, len, "%s%s/%.3s", s->dir, s->layout == LAYOUT_NATIVE ? "/data" : "", hex);
}

static bool exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

static void flip_byte(const char *path, off_t off)
{
	int fd = open(path, O_RDWR);
	unsigned char c;

	ck_assert_msg(fd >= 0, "open %s", path);
	ck_assert_int_eq(pread(fd, &c, 1, off), 1);
	c ^= 0xff;
	ck_assert_int_eq(pwrite(fd, &c, 1, off), 1);
	close(fd);
}

static void write_file(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	ck_assert_msg(fd >= 0, "create %s: %s", path, strerror(errno));
	ck_assert_int_eq(write(fd, buf, len), (ssize_t)len);
	close(fd);
}

static void *read_file(const char *path, size_t *len)
{
	struct stat st;
	int fd = open(path, O_RDONLY);
	char *buf;

	ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
	ck_assert_int_eq(fstat(fd, &st), 0);
	buf = malloc((size_t)st.st_size + 1);
	ck_assert_ptr_nonnull(buf);
	ck_assert_int_eq(pread(fd, buf, (size_t)st.st_size, 0), st.st_size);
	close(fd);
	*len = (size_t)st.st_size;
	return buf;
}

/* Put a copy of block `from`'s file under block `to`'s name, as someone behind the store's
 * back would. */
static void copy_block_file(const struct store *s, const struct blockid *from,
			    const struct blockid *to)
{
	char src[PATH_MAX], dst[PATH_MAX], dir[PATH_MAX];
	size_t len;
	void *buf;

	path_of(s, from, src, sizeof(src));
	buf = read_file(src, &len);
	shard_dir(s, to, dir, sizeof(dir));
	mkdir(dir, 0700);
	path_of(s, to, dst, sizeof(dst));
	write_file(dst, buf, len);
	free(buf);
}

/* Set a file's mtime to `age_s` seconds ago. */
static void age_file(const char *path, int age_s)
{
	struct timeval tv[2];

	gettimeofday(&tv[0], NULL);
	tv[0].tv_sec -= age_s;
	tv[1] = tv[0];
	ck_assert_int_eq(utimes(path, tv), 0);
}

static int quarantined_files(const struct store *s, const struct blockid *id)
{
	char q[PATH_MAX];
	int n;

	snprintf(q, sizeof(q), "%s/quarantine", s->dir);
	n = ut_count_prefixed(q, ut_hex(id));
	return n < 0 ? 0 : n;
}

static struct posix_counters counters(struct tier *t)
{
	struct posix_counters c;

	posix_counters(t, &c);
	return c;
}

/* After damage: the block is gone from the store and its file is in quarantine. */
static void expect_quarantined(const struct store *s, const struct blockid *id)
{
	char path[PATH_MAX];

	path_of(s, id, path, sizeof(path));
	ck_assert_msg(!exists(path), "%s still in place", path);
	ck_assert_int_eq(quarantined_files(s, id), 1);
	ck_assert_int_eq(tu_lookup(s->t, id, NULL), -ENOENT);
}

/* --- core -------------------------------------------------------------------------------- */

START_TEST(test_posix_reopen_finds_every_block)
{
	struct store s;
	struct tier *t = store_open(&s, (enum ucm_layout)_i);
	enum { N = 60 };
	uint64_t size[N], seed[N];
	int64_t mtime[N], deadline[N];
	bool live[N];
	uint64_t r = 1;
	int nlive = 0;

	for (int i = 0; i < N; i++) {
		struct blockid id = ut_id(300 + (uint64_t)i);
		struct block_attr a;

		size[i] = i % 10 == 0 ? 0 : ut_rand(&r) % 300000;
		seed[i] = 1;
		deadline[i] = (s.layout == LAYOUT_NATIVE && i % 4 == 1)
				      ? mono_ns() + 3600 * 1000000000LL : 0;
		ck_assert_int_eq(tu_put(t, &id, seed[i], size[i], 0, 0, deadline[i]), 0);
		if (i % 7 == 3) { /* replaced */
			size[i] = ut_rand(&r) % 100000;
			seed[i] = 2;
			ck_assert_int_eq(tu_put(t, &id, seed[i], size[i], 0, 0, deadline[i]), 0);
		}
		ck_assert_int_eq(tu_lookup(t, &id, &a), 0);
		mtime[i] = a.mtime;
		live[i] = i % 5 != 2;
		if (!live[i])
			ck_assert_int_eq(t->ops->remove(t, &id), 0);
		nlive += live[i];
	}
	t = store_reopen(&s);
	{
		struct tier_usage u;

		ck_assert_int_eq(t->ops->usage(t, &u), 0);
		ck_assert_uint_eq(u.blocks, (uint64_t)nlive);
	}
	for (int i = 0; i < N; i++) {
		struct blockid id = ut_id(300 + (uint64_t)i);
		struct block_attr a;

		if (!live[i]) {
			ck_assert_int_eq(tu_lookup(t, &id, NULL), -ENOENT);
			continue;
		}
		ck_assert_msg(tu_lookup(t, &id, &a) == 0, "block %d lost at restart", i);
		ck_assert_uint_eq(a.size, size[i]);
		if (s.layout == LAYOUT_NATIVE) {
			ck_assert_int_eq(a.mtime, mtime[i]);
			if (deadline[i])
				ck_assert_int_le(llabs(a.deadline - deadline[i]), 1000000000LL);
			else
				ck_assert_int_eq(a.deadline, 0);
		}
		tu_expect(t, &id, seed[i], size[i]);
	}
	store_close(&s);
}
END_TEST

START_TEST(test_posix_deadline_persisted)
{
	struct store s;
	struct tier *t = store_open(&s, LAYOUT_NATIVE);
	struct blockid id = ut_id(1), soon = ut_id(2), cleared = ut_id(3);
	int64_t dl = mono_ns() + 7200 * 1000000000LL;
	struct block_attr a;
	char path[PATH_MAX];

	ck_assert_int_eq(tu_put(t, &id, 1, 5000, 0, 0, 0), 0);
	ck_assert_int_eq(tu_put(t, &soon, 1, 5000, 0, 0, mono_ns() + 150 * 1000000LL), 0);
	ck_assert_int_eq(tu_put(t, &cleared, 1, 5000, 0, 0, mono_ns() + 150 * 1000000LL), 0);
	ck_assert_int_eq(t->ops->set_deadline(t, &id, dl), 0);
	ck_assert_int_eq(t->ops->set_deadline(t, &cleared, 0), 0);
	t = store_reopen(&s);
	ck_assert_int_eq(tu_lookup(t, &id, &a), 0);
	ck_assert_int_le(llabs(a.deadline - dl), 1000000000LL);
	tu_expect(t, &id, 1, 5000);
	ut_sleep_ms(250);
	/* a block that expired while the store was closed is deleted at the next start */
	t = store_reopen(&s);
	ck_assert_int_eq(tu_lookup(t, &soon, NULL), -ENOENT);
	path_of(&s, &soon, path, sizeof(path));
	ck_assert_msg(!exists(path), "expired block file %s kept", path);
	ck_assert_int_eq(tu_lookup(t, &cleared, &a), 0);
	ck_assert_int_eq(a.deadline, 0);
	ck_assert_int_eq(tu_lookup(t, &id, NULL), 0);
	store_close(&s);
}
END_TEST

static int snapshot_files(const struct store *s)
{
	return ut_count_prefixed(s->dir, ".index.");
}

/* The path of the index a stop saved (there must be exactly one). */
static void snapshot_path(const struct store *s, char *out, size_t len)
{
	char cmd[PATH_MAX + 64];
	FILE *f;

	snprintf(cmd, sizeof(cmd), "ls -d %s/.index.* 2>/dev/null", s->dir);
	f = popen(cmd, "r");
	ck_assert_ptr_nonnull(f);
	ck_assert_ptr_nonnull(fgets(out, (int)len, f));
	out[strcspn(out, "\n")] = '\0';
	pclose(f);
}

/*
 * A clean stop saves the index; the next start takes from it every block whose file did not
 * change since, reads the others, and finds exactly what a full scan would: blocks changed,
 * removed or added behind its back included. The snapshot is used once.
 */
START_TEST(test_posix_index_snapshot)
{
	struct store s;
	struct tier *t = store_open(&s, (enum ucm_layout)_i);
	bool native = s.layout == LAYOUT_NATIVE;
	struct blockid fresh = ut_id(900), changed = ut_id(901), gone = ut_id(902);
	struct blockid added = ut_id(903);
	enum { N = 40 };
	int64_t dl = mono_ns() + 3600 * 1000000000LL;
	char path[PATH_MAX], snap[PATH_MAX];
	struct block_attr before[N], a;

	for (int i = 0; i < N; i++) {
		struct blockid id = ut_id(100 + (uint64_t)i);

		ck_assert_int_eq(tu_put(t, &id, 7, 1000 + 997 * (uint64_t)i, 0, 0,
					native && i % 3 == 0 ? dl : 0), 0);
		ck_assert_int_eq(tu_lookup(t, &id, &before[i]), 0);
	}
	ck_assert_int_eq(tu_put(t, &changed, 3, 9000, 0, 0, 0), 0);
	ck_assert_int_eq(tu_put(t, &gone, 3, 9000, 0, 0, 0), 0);
	ut_sleep_ms(1100); /* older than the save by more than its settling time */
	ck_assert_int_eq(tu_put(t, &fresh, 5, 7000, 0, 0, 0), 0);
	store_close(&s);
	ck_assert_int_eq(snapshot_files(&s), 1);

	/* behind its back: one file changed in place, one removed, one copied in */
	path_of(&s, &changed, path, sizeof(path));
	flip_byte(path, native ? 35 : 10);
	path_of(&s, &gone, path, sizeof(path));
	ck_assert_int_eq(unlink(path), 0);
	copy_block_file(&s, &fresh, &added);

	s.t = t = tu_posix(s.dir, s.layout);
	ck_assert_int_eq(snapshot_files(&s), 0); /* taken away at start */
	ck_assert_uint_eq(counters(t).from_snapshot, N);
	for (int i = 0; i < N; i++) {
		struct blockid id = ut_id(100 + (uint64_t)i);

		ck_assert_int_eq(tu_lookup(t, &id, &a), 0);
		ck_assert_uint_eq(a.size, before[i].size);
		ck_assert_uint_eq(a.stored, before[i].stored);
		ck_assert_int_eq(a.mtime, before[i].mtime);
		ck_assert_uint_eq(a.version, before[i].version);
		ck_assert_int_le(llabs(a.deadline - before[i].deadline), 1000000000LL);
		tu_expect(t, &id, 7, 1000 + 997 * (uint64_t)i);
	}
	tu_expect(t, &fresh, 5, 7000);
	ck_assert_int_eq(tu_lookup(t, &gone, NULL), -ENOENT);
	if (native) {
		/* its header is damaged (and a copied file names another block) */
		expect_quarantined(&s, &changed);
		expect_quarantined(&s, &added);
	} else {
		/* raw bytes carry no checksum: the changed file is what the block now holds */
		ck_assert_int_eq(tu_lookup(t, &changed, &a), 0);
		ck_assert_int_eq(tu_lookup(t, &added, &a), 0);
		ck_assert_uint_eq(a.size, 7000);
	}

	/* a damaged snapshot is not used, and costs nothing but the header reads */
	store_close(&s);
	snapshot_path(&s, snap, sizeof(snap));
	flip_byte(snap, 200);
	s.t = t = tu_posix(s.dir, s.layout);
	ck_assert_int_eq(snapshot_files(&s), 0);
	ck_assert_uint_eq(counters(t).from_snapshot, 0);
	for (int i = 0; i < N; i++) {
		struct blockid id = ut_id(100 + (uint64_t)i);

		ck_assert_int_eq(tu_lookup(t, &id, &a), 0);
		ck_assert_int_le(llabs(a.deadline - before[i].deadline), 1000000000LL);
	}
	store_close(&s);
}
END_TEST

/* A TTL set in place after a start from the snapshot is what the next start sees, even when
 * that start has no snapshot to take (the daemon was killed). */
START_TEST(test_posix_index_snapshot_then_ttl)
{
	struct store s;
	struct tier *t = store_open(&s, LAYOUT_NATIVE);
	struct blockid id = ut_id(5);
	int64_t dl = mono_ns() + 7200 * 1000000000LL;
	struct block_attr a;

	ck_assert_int_eq(tu_put(t, &id, 1, 5000, 0, 0, 0), 0);
	ut_sleep_ms(1100);
	t = store_reopen(&s);
	ck_assert_uint_eq(counters(t).from_snapshot, 1);
	ck_assert_int_eq(t->ops->set_deadline(t, &id, dl), 0);
	/* as if killed here: no stop, so no snapshot; the next start reads the header */
	ck_assert_int_eq(snapshot_files(&s), 0);
	t = store_reopen(&s);
	ck_assert_int_eq(tu_lookup(t, &id, &a), 0);
	ck_assert_int_le(llabs(a.deadline - dl), 1000000000LL);
	store_close(&s);
}
END_TEST

START_TEST(test_posix_native_file_format)
{
	struct store s;
	struct tier *t = store_open(&s, LAYOUT_NATIVE);
	struct blockid id = ut_id(5);
	const uint64_t size = 100001;
	struct block_attr a;
	struct disk_header h;
	char path[PATH_MAX];
	uint8_t *file;
	size_t len;

	ck_assert_int_eq(tu_put(t, &id, 4, size, 0, 0, 0), 0);
	ck_assert_int_eq(tu_lookup(t, &id, &a), 0);
	path_of(&s, &id, path, sizeof(path));
	file = read_file(path, &len);
	ck_assert_uint_eq(len, DISK_HEADER_SIZE + buf_round(size));
	ck_assert_int_eq(disk_header_decode(file, &h), 0);
	ck_assert(blockid_eq(&h.id, &id));
	ck_assert_uint_eq(h.raw_size, size);
	ck_assert_uint_eq(h.stored_size, size);
	ck_assert_uint_eq(h.codec, CODEC_RAW);
	ck_assert_int_eq(h.mtime, a.mtime);
	ck_assert_int_eq(h.deadline, 0);
	ck_assert_uint_eq(h.csum, XXH3_64bits(file + DISK_HEADER_SIZE, size));
	ck_assert_int_eq(ut_diff(&id, 4, file + DISK_HEADER_SIZE, size, 0), -1);
	free(file);
	/* the shard directory holds just the block: no temp file left */
	{
		char dir[PATH_MAX];

		shard_dir(&s, &id, dir, sizeof(dir));
		ck_assert_int_eq(ut_count_entries(dir), 1);
	}
	store_close(&s);
}
END_TEST

START_TEST(test_posix_layout_ucm_raw_files)
{
	struct store s;
	struct tier *t = store_open(&s, LAYOUT_UCM);
	struct blockid id = ut_id(6), empty = ut_id(7);
	char path[PATH_MAX], dir[PATH_MAX];
	uint8_t *file;
	size_t len;

	ck_assert_int_eq(tu_put(t, &id, 4, 70000, 0, 0, 0), 0);
	ck_assert_int_eq(tu_put(t, &empty, 4, 0, 0, 0, 0), 0);
	/* STORE/<hex[0:3]>/<hex>, raw bytes, nothing else */
	path_of(&s, &id, path, sizeof(path));
	file = read_file(path, &len);
	ck_assert_uint_eq(len, 70000);
	ck_assert_int_eq(ut_diff(&id, 4, file, len, 0), -1);
	free(file);
	path_of(&s, &empty, path, sizeof(path));
	file = read_file(path, &len);
	ck_assert_uint_eq(len, 0);
	free(file);
	shard_dir(&s, &id, dir, sizeof(dir));
	ck_assert_int_eq(ut_count_entries(dir), 1);
	snprintf(dir, sizeof(dir), "%s/data", s.dir);
	ck_assert(!exists(dir));
	store_close(&s);
}
END_TEST

START_TEST(test_posix_layout_ucm_reads_ucm_store)
{
	/* a store written by UCM's PosixStore: raw files at STORE/<hex[0:3]>/<hex> */
	char dir[PATH_MAX], sub[PATH_MAX], path[PATH_MAX];
	struct blockid ids[3] = { ut_id(10), ut_id(11), ut_id(12) };
	const uint64_t sizes[3] = { 1 << 20, 12345, 0 };
	struct tier *t;
	struct store s;

	ut_mkdtemp(dir, sizeof(dir));
	for (int i = 0; i < 3; i++) {
		char hex[BLOCKID_HEX_LEN + 1];
		char *buf = malloc(sizes[i] + 1);

		ck_assert_ptr_nonnull(buf);
		blockid_format(&ids[i], hex);
		snprintf(sub, sizeof(sub), "%s/%.3s", dir, hex);
		mkdir(sub, 0755);
		snprintf(path, sizeof(path), "%s/%s", sub, hex);
		ut_fill(&ids[i], 8, buf, sizes[i], 0);
		write_file(path, buf, sizes[i]);
		free(buf);
	}
	snprintf(s.dir, sizeof(s.dir), "%s", dir);
	s.layout = LAYOUT_UCM;
	s.t = t = tu_posix(dir, LAYOUT_UCM);
	for (int i = 0; i < 3; i++) {
		struct block_attr a;

		ck_assert_int_eq(tu_lookup(t, &ids[i], &a), 0);
		ck_assert_uint_eq(a.size, sizes[i]);
		tu_expect(t, &ids[i], 8, sizes[i]);
	}
	store_close(&s);
}
END_TEST

START_TEST(test_posix_usage_is_physical)
{
	struct store s;
	struct tier *t = store_open(&s, (enum ucm_layout)_i);
	struct tier_usage u;
	uint64_t phys = 0;

	for (int i = 0; i < 5; i++) {
		struct blockid id = ut_id(40 + (uint64_t)i);
		char path[PATH_MAX];
		struct stat st;
		struct block_attr a;

		ck_assert_int_eq(tu_put(t, &id, 1, 10000 * (uint64_t)(i + 1), 0, 0, 0), 0);
		path_of(&s, &id, path, sizeof(path));
		ck_assert_int_eq(stat(path, &st), 0);
		phys += (uint64_t)st.st_blocks * 512;
		ck_assert_int_eq(tu_lookup(t, &id, &a), 0);
		ck_assert_uint_eq(a.stored, (uint64_t)st.st_blocks * 512);
	}
	ck_assert_int_eq(t->ops->usage(t, &u), 0);
	ck_assert_uint_eq(u.used, phys);
	ck_assert_uint_eq(u.blocks, 5);
	ck_assert_uint_gt(u.fs_free, 0);
	t = store_reopen(&s);
	ck_assert_int_eq(t->ops->usage(t, &u), 0);
	ck_assert_uint_eq(u.used, phys);
	store_close(&s);
}
END_TEST

/* usage().common_size: the size most of the latest blocks have, also after a restart (the
 * daemon makes memory ready in that size before the first load). */
START_TEST(test_posix_usage_common_size)
{
	struct store s;
	struct tier *t = store_open(&s, (enum ucm_layout)_i);
	struct tier_usage u;

	ck_assert_int_eq(t->ops->usage(t, &u), 0);
	ck_assert_uint_eq(u.common_size, 0);
	for (int i = 0; i < 12; i++) {
		struct blockid id = ut_id(60 + (uint64_t)i);

		/* most are 300000 bytes; every third another size */
		ck_assert_int_eq(tu_put(t, &id, 1, i % 3 ? 300000 : 5000 + (uint64_t)i, 0, 0, 0), 0);
	}
	ck_assert_int_eq(t->ops->usage(t, &u), 0);
	ck_assert_uint_eq(u.common_size, 300000);
	t = store_reopen(&s);
	ck_assert_int_eq(t->ops->usage(t, &u), 0);
	ck_assert_uint_eq(u.common_size, 300000);
	store_close(&s);
}
END_TEST

START_TEST(test_posix_remove_deletes_file)
{
	struct store s;
	struct tier *t = store_open(&s, (enum ucm_layout)_i);
	struct blockid id = ut_id(8);
	char path[PATH_MAX];

	ck_assert_int_eq(tu_put(t, &id, 1, 5000, 0, 0, 0), 0);
	path_of(&s, &id, path, sizeof(path));
	ck_assert(exists(path));
	ck_assert_int_eq(t->ops->remove(t, &id), 0);
	ck_assert(!exists(path));
	t = store_reopen(&s);
	ck_assert_int_eq(tu_lookup(t, &id, NULL), -ENOENT);
	store_close(&s);
}
END_TEST

START_TEST(test_posix_abort_removes_temp)
{
	struct store s;
	struct tier *t = store_open(&s, (enum ucm_layout)_i);
	struct blockid id = ut_id(9);
	struct tier_handle *h, *h2;
	char dir[PATH_MAX];

	ck_assert_int_eq(t->ops->reserve(t, &id, 0, 0, &h), 0);
	ck_assert_int_eq(t->ops->reserve(t, &id, 0, 0, &h2), 0); /* two writers of one id */
	ck_assert_int_eq(tu_write(h, &id, 1, 0, 50000), 50000);
	ck_assert_int_eq(tu_write(h2, &id, 1, 0, 10), 10);
	t->ops->abort(h);
	t->ops->abort(h2);
	shard_dir(&s, &id, dir, sizeof(dir));
	ck_assert_int_le(ut_count_entries(dir), 0);
	store_close(&s);
}
END_TEST

START_TEST(test_posix_leftover_temps_removed)
{
	struct store s;
	struct tier *t = store_open(&s, (enum ucm_layout)_i);
	struct blockid id = ut_id(20);
	char host[256], hex[BLOCKID_HEX_LEN + 1], dir[PATH_MAX];
	char mine[PATH_MAX], mine2[PATH_MAX], theirs_new[PATH_MAX], theirs_old[PATH_MAX];
	char prefix_host[PATH_MAX], ucm_new[PATH_MAX], ucm_old[PATH_MAX];
	uint64_t removed;

	store_close(&s);
	tu_hostname(host, sizeof(host));
	blockid_format(&id, hex);
	shard_dir(&s, &id, dir, sizeof(dir));
	mkdir(dir, 0700);
	/* this host's temp files, whatever their pid: their writer is gone */
	snprintf(mine, sizeof(mine), "%s/%s.tmp.%s.%d.0", dir, hex, host, 999999);
	snprintf(mine2, sizeof(mine2), "%s/%s.tmp.%s.%d.7", dir, hex, host, (int)getpid());
	/* another host's: kept while fresh, removed after an hour */
	snprintf(theirs_new, sizeof(theirs_new), "%s/%s.tmp.otherhost-b.12.0", dir, hex);
	snprintf(theirs_old, sizeof(theirs_old), "%s/%s.tmp.otherhost-b.13.0", dir, hex);
	/* a host whose name starts with ours is another host */
	snprintf(prefix_host, sizeof(prefix_host), "%s/%s.tmp.%sx.1.0", dir, hex, host);
	/* UCM's own temp name */
	snprintf(ucm_new, sizeof(ucm_new), "%s/%s.tmp", dir, hex);
	write_file(mine, "x", 1);
	write_file(mine2, "x", 1);
	write_file(theirs_new, "x", 1);
	write_file(theirs_old, "x", 1);
	age_file(theirs_old, 7200);
	write_file(prefix_host, "x", 1);
	write_file(ucm_new, "x", 1);
	/* an old UCM temp in another shard directory */
	{
		char d0[PATH_MAX];

		snprintf(d0, sizeof(d0), "%s%s/000", s.dir,
			 s.layout == LAYOUT_NATIVE ? "/data" : "");
		mkdir(d0, 0700);
		snprintf(ucm_old, sizeof(ucm_old), "%s/%s.tmp", d0,
			 "00000000000000000000000000000000");
		write_file(ucm_old, "x", 1);
		age_file(ucm_old, 7200);
	}

	s.t = t = tu_posix(s.dir, s.layout);
	ck_assert_msg(!exists(mine), "this host's temp file was kept");
	ck_assert_msg(!exists(mine2), "this host's temp file was kept");
	ck_assert_msg(exists(theirs_new), "a fresh temp file of another host was removed");
	ck_assert_msg(!exists(theirs_old), "an hour-old temp file of another host was kept");
	ck_assert_msg(exists(prefix_host), "a fresh temp file of host '%sx' was removed", host);
	ck_assert_msg(exists(ucm_new), "a fresh UCM temp file was removed");
	ck_assert_msg(!exists(ucm_old), "an hour-old UCM temp file was kept");
	removed = counters(t).temp_removed;
	ck_assert_uint_eq(removed, 4);
	/* temp files are not blocks */
	{
		struct tier_usage u;

		ck_assert_int_eq(t->ops->usage(t, &u), 0);
		ck_assert_uint_eq(u.blocks, 0);
		ck_assert_int_eq(tu_lookup(t, &id, NULL), -ENOENT);
	}
	/* and a writer of that id is not disturbed by what was kept */
	ck_assert_int_eq(tu_put(t, &id, 1, 3000, 0, 0, 0), 0);
	tu_expect(t, &id, 1, 3000);
	store_close(&s);
}
END_TEST

START_TEST(test_posix_skips_foreign_entries)
{
	struct store s;
	struct tier *t = store_open(&s, (enum ucm_layout)_i);
	struct blockid id = ut_id_in_shard(0x123, 1), other = ut_id_in_shard(0x456, 2);
	char dir[PATH_MAX], path[PATH_MAX], hex[BLOCKID_HEX_LEN + 1], upper[BLOCKID_HEX_LEN + 1];
	struct tier_usage u;

	ck_assert_int_eq(tu_put(t, &id, 1, 5000, 0, 0, 0), 0);
	store_close(&s);
	shard_dir(&s, &id, dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/hello", dir);
	write_file(path, "x", 1);
	/* an uppercase name is not an id */
	blockid_format(&other, hex);
	for (int i = 0; i < BLOCKID_HEX_LEN + 1; i++)
		upper[i] = (char)(hex[i] >= 'a' && hex[i] <= 'f' ? hex[i] - 32 : hex[i]);
	snprintf(path, sizeof(path), "%s/%s", dir, upper);
	write_file(path, "x", 1);
	/* a block file in the wrong shard directory */
	snprintf(path, sizeof(path), "%s/%s", dir, hex);
	{
		char src[PATH_MAX];
		size_t len;
		void *buf;

		path_of(&s, &id, src, sizeof(src));
		buf = read_file(src, &len);
		write_file(path, buf, len);
		free(buf);
	}
	/* a directory named like a block */
	blockid_format(&(struct blockid){ .b = { 0x12, 0x30 } }, hex);
	snprintf(path, sizeof(path), "%s/%s", dir, hex);
	mkdir(path, 0700);
	/* a symlink named like a block */
	{
		struct blockid l = ut_id_in_shard(0x123, 3);
		char target[PATH_MAX];

		path_of(&s, &id, target, sizeof(target));
		blockid_format(&l, hex);
		snprintf(path, sizeof(path), "%s/%s", dir, hex);
		ck_assert_int_eq(symlink(target, path), 0);
	}
	t = s.t = tu_posix(s.dir, s.layout);
	ck_assert_int_eq(t->ops->usage(t, &u), 0);
	ck_assert_uint_eq(u.blocks, 1);
	ck_assert_int_eq(tu_lookup(t, &other, NULL), -ENOENT);
	ck_assert_uint_ge(counters(t).skipped, 4);
	tu_expect(t, &id, 1, 5000);
	store_close(&s);
}
END_TEST

START_TEST(test_posix_store_lock)
{
	struct store s;
	struct posix_config pc = { .layout = LAYOUT_NATIVE, .lock_wait_s = 0 };
	struct tier *t2 = NULL;

	store_open(&s, LAYOUT_NATIVE);
	pc.root = s.dir;
	/* one daemon per host and store */
	ck_assert_int_eq(posix_create(&pc, &t2), -EBUSY);
	store_close(&s);
	ck_assert_int_eq(posix_create(&pc, &t2), 0);
	tier_destroy(t2);
}
END_TEST

struct syncer {
	struct tier *t;
	int first, n, rc;
};

static void *sync_blocks(void *arg)
{
	struct syncer *a = arg;

	for (int i = a->first; i < a->first + a->n; i++) {
		struct blockid id = ut_id((uint64_t)i);
		int rc = a->t->ops->sync(a->t, &id);

		if (rc && !a->rc)
			a->rc = rc;
	}
	return NULL;
}

/*
 * fsyncs of many blocks share their flushes: 8 threads syncing 64 blocks committed before
 * them cost one syncfs between them, a block already durable none, and a block committed
 * after the last flush (or a durable commit) one more. The store is on a local filesystem.
 */
START_TEST(test_posix_syncs_shared)
{
	struct store s;
	struct tier *t = store_open(&s, LAYOUT_NATIVE);
	struct syncer a[8];
	pthread_t th[8];
	struct blockid id, missing = ut_id(1000);
	double syncs;

	for (int i = 0; i < 64; i++) {
		id = ut_id((uint64_t)i);
		ck_assert_int_eq(tu_put(t, &id, (uint64_t)i, 65536 + (uint64_t)i, 0, 0, 0), 0);
	}
	syncs = tu_metric(t, "ucmfs_disk_syncs_total");
	for (int k = 0; k < 8; k++) {
		a[k] = (struct syncer){ .t = t, .first = k * 8, .n = 8 };
		ck_assert_int_eq(pthread_create(&th[k], NULL, sync_blocks, &a[k]), 0);
	}
	for (int k = 0; k < 8; k++) {
		pthread_join(th[k], NULL);
		ck_assert_int_eq(a[k].rc, 0);
	}
	ck_assert_double_eq(tu_metric(t, "ucmfs_disk_syncs_total"), syncs + 1);
	sync_blocks(&a[0]);
	ck_assert_double_eq(tu_metric(t, "ucmfs_disk_syncs_total"), syncs + 1);
	ck_assert_int_eq(t->ops->sync(t, &missing), -ENOENT);
	id = ut_id(64);
	ck_assert_int_eq(tu_put(t, &id, 64, 4096, 0, 0, 0), 0);
	ck_assert_int_eq(t->ops->sync(t, &id), 0);
	ck_assert_double_eq(tu_metric(t, "ucmfs_disk_syncs_total"), syncs + 2);
	id = ut_id(65);
	ck_assert_int_eq(tu_put(t, &id, 65, 4096, 0, TIER_COMMIT_DURABLE, 0), 0);
	ck_assert_double_eq(tu_metric(t, "ucmfs_disk_syncs_total"), syncs + 3);
	ck_assert_int_eq(t->ops->sync(t, &id), 0);
	ck_assert_double_eq(tu_metric(t, "ucmfs_disk_syncs_total"), syncs + 3);
	/* blocks found at start are made durable by this daemon's first flush */
	t = store_reopen(&s);
	syncs = tu_metric(t, "ucmfs_disk_syncs_total");
	a[3].t = t;
	sync_blocks(&a[3]);
	ck_assert_int_eq(a[3].rc, 0);
	ck_assert_double_eq(tu_metric(t, "ucmfs_disk_syncs_total"), syncs + 1);
	store_close(&s);
}
END_TEST

START_TEST(test_posix_creates_store)
{
	char dir[PATH_MAX], store[PATH_MAX];
	struct stat st;
	struct tier *t;

	ut_mkdtemp(dir, sizeof(dir));
	snprintf(store, sizeof(store), "%s/new-store", dir);
	t = tu_posix(store, LAYOUT_NATIVE);
	ck_assert_int_eq(stat(store, &st), 0);
	ck_assert(S_ISDIR(st.st_mode));
	ck_assert_uint_eq(st.st_mode & 0777, 0700);
	tier_destroy(t);
}
END_TEST

/* --- errors: damaged files --------------------------------------------------------------- */

START_TEST(test_posix_corrupt_header_quarantined)
{
	static const off_t offs[] = { 0, 7, 9, 13, 20, 33, 41, 49, 53, 60, 70, 75, 81, 100,
				      200, 4000, 4090 };
	struct store s;
	struct tier *t = store_open(&s, LAYOUT_NATIVE);
	const int n = (int)(sizeof(offs) / sizeof(offs[0]));

	for (int i = 0; i < n; i++) {
		struct blockid id = ut_id(500 + (uint64_t)i);
		struct tier_handle *h;
		char path[PATH_MAX];

		ck_assert_int_eq(tu_put(t, &id, 1, 20000, 0, 0, 0), 0);
		path_of(&s, &id, path, sizeof(path));
		flip_byte(path, offs[i]);
		ck_assert_msg(t->ops->open(t, &id, 0, &h) == -EIO,
			      "header byte %lld flipped: open did not fail -EIO",
			      (long long)offs[i]);
		expect_quarantined(&s, &id);
	}
	ck_assert_uint_eq(counters(t).quarantined, (uint64_t)n);
	store_close(&s);
}
END_TEST

START_TEST(test_posix_corrupt_header_found_at_start)
{
	struct store s;
	struct tier *t = store_open(&s, LAYOUT_NATIVE);
	struct blockid bad = ut_id(1), good = ut_id(2), swapped = ut_id(3);
	char path[PATH_MAX];

	ck_assert_int_eq(tu_put(t, &bad, 1, 20000, 0, 0, 0), 0);
	ck_assert_int_eq(tu_put(t, &good, 1, 20000, 0, 0, 0), 0);
	store_close(&s);
	path_of(&s, &bad, path, sizeof(path));
	flip_byte(path, 35);
	/* a good block file under another block's name */
	copy_block_file(&s, &good, &swapped);
	s.t = t = tu_posix(s.dir, s.layout);
	expect_quarantined(&s, &bad);
	expect_quarantined(&s, &swapped);
	ck_assert_uint_eq(counters(t).quarantined, 2);
	tu_expect(t, &good, 1, 20000);
	store_close(&s);
}
END_TEST

/* Flip payload byte `at`; the block must not be served. */
static void corrupt_payload(uint64_t size, uint64_t at, uint64_t read_off, uint64_t read_len)
{
	struct store s;
	struct tier *t = store_open(&s, LAYOUT_NATIVE);
	struct blockid id = ut_id(77);
	struct tier_handle *h;
	char path[PATH_MAX], *buf = malloc(size + 1);
	int rc;

	ck_assert_ptr_nonnull(buf);
	ck_assert_int_eq(tu_put(t, &id, 1, size, 0, 0, 0), 0);
	path_of(&s, &id, path, sizeof(path));
	flip_byte(path, (off_t)(DISK_HEADER_SIZE + at));
	rc = t->ops->open(t, &id, 0, &h);
	if (rc == 0) {
		ssize_t n = tier_read(h, buf, read_len, read_off);

		ck_assert_msg(n == -EIO, "payload byte %llu flipped: read(%llu, %llu) = %zd",
			      (unsigned long long)at, (unsigned long long)read_off,
			      (unsigned long long)read_len, n);
		expect_quarantined(&s, &id);
		ck_assert_uint_eq(counters(t).quarantined, 1);
		/* and never later on the same handle, whole or in part */
		ck_assert_int_lt(tier_read(h, buf, size, 0), 0);
		ck_assert_int_lt(tier_read(h, buf, 10, read_off), 0);
		tier_close(h);
	} else {
		ck_assert_int_eq(rc, -EIO);
		expect_quarantined(&s, &id);
		ck_assert_uint_eq(counters(t).quarantined, 1);
	}
	free(buf);
	store_close(&s);
}

START_TEST(test_posix_corrupt_payload_whole_read)
{
	corrupt_payload(100000, 50000, 0, 100000);
}
END_TEST

START_TEST(test_posix_corrupt_payload_partial_read)
{
	/* the damage is far from the bytes asked for */
	corrupt_payload(3 << 20, (3 << 20) - 1, 0, 10);
}
END_TEST

START_TEST(test_posix_corrupt_payload_first_byte)
{
	corrupt_payload(5000, 0, 4000, 1000);
}
END_TEST

/*
 * io=aio writes a stream from byte 0 O_DIRECT, through a 1 MiB stage for what is not whole
 * aligned pages: pieces of every size and alignment, a read of the reservation in the
 * middle (the stage goes out first), an overwrite of bytes already written (the handle
 * goes on through the page cache) and a truncate all leave exactly the bytes written.
 */
static void aio_write_case(enum ucm_layout layout, int variant)
{
	static const size_t pieces[] = { 1, 4095, 4097, 100000, (1u << 20) + 3, 5000, 8192,
					 (2u << 20), 12345 };
	const uint64_t size = 7 * (1u << 20) + 1234;
	struct blockid id = ut_id(100 + (uint64_t)variant);
	char dir[PATH_MAX], *buf = aligned_alloc(4096, (size + 8191) & ~(uint64_t)4095);
	struct tier_handle *h;
	struct block_meta m = tu_meta(size, 0);
	struct tier *t;
	uint64_t off = 0;
	size_t k = 0;

	ut_mkdtemp(dir, sizeof(dir));
	t = tu_posix_io(dir, layout, true);
	ut_fill(&id, 7, buf, size, 0);
	ck_assert_int_eq(t->ops->reserve(t, &id, 0, size, &h), 0);
	if (variant == 2) {
		/* wrong bytes first in [0, 64K), written over once the stream has gone on */
		ut_fill(&id, 99, buf, 65536, 0);
	}
	while (off < size) {
		size_t n = pieces[k++ % (sizeof(pieces) / sizeof(pieces[0]))];

		if (n > size - off)
			n = (size_t)(size - off);
		ck_assert_int_eq(t->ops->write(h, buf + off, n, off), (ssize_t)n);
		off += n;
		if (variant == 1 && k == 4)
			tu_check_read(h, &id, 7, off, 0, off); /* the reservation so far */
		if (variant == 2 && k == 5) {
			ut_fill(&id, 7, buf, 65536, 0);
			ck_assert_int_eq(t->ops->write(h, buf, 65536, 0), 65536);
		}
		if (variant == 3 && k == 3) {
			/* cut back into what is staged, then go on from there */
			ck_assert_int_eq(t->ops->truncate(h, off - 3000), 0);
			off -= 3000;
		}
	}
	ck_assert_int_eq(t->ops->commit(h, &m, 0, NULL), 0);
	tu_expect(t, &id, 7, size);
	tier_destroy(t);
	t = tu_posix_io(dir, layout, false); /* read back by the other engine after a restart */
	tu_expect(t, &id, 7, size);
	tier_destroy(t);
	free(buf);
}

START_TEST(test_posix_aio_writes)
{
	for (int v = 0; v < 4; v++) {
		aio_write_case(LAYOUT_NATIVE, v);
		aio_write_case(LAYOUT_UCM, v);
	}
}
END_TEST

struct abort_arg {
	struct tier *t;
	struct tier_handle *h;
};

static void *abort_in_thread(void *arg)
{
	struct abort_arg *a = arg;

	a->t->ops->abort(a->h);
	return NULL;
}

/*
 * A write the engine's depth held back goes out when the handle waits for it, with the
 * descriptor it was planned with: an abort must not close that descriptor first, or a file
 * opened meanwhile by another thread takes its number and gets the block's bytes. Depth 1
 * and a completion thread that dawdles keep the second stage's write back while the abort
 * waits for the first; two files opened then take the lowest free numbers.
 */
START_TEST(test_posix_aio_abort_keeps_descriptors)
{
	struct posix_config pc = { .layout = LAYOUT_NATIVE, .aio = true, .io_depth = 1,
				   .io_timeout_ns = 30000000000LL,
				   .io_test_stall_ns = 300000000LL };
	const size_t size = (2u << 20) + 4096;
	struct blockid id = ut_id(140);
	char dir[PATH_MAX], other[2][PATH_MAX + 16], *buf = aligned_alloc(4096, size);
	struct abort_arg a;
	struct stat st;
	pthread_t th;
	int fd[2];

	ut_mkdtemp(dir, sizeof(dir));
	pc.root = dir;
	ck_assert_int_eq(posix_create(&pc, &a.t), 0);
	ut_fill(&id, 3, buf, size, 0);
	io_set_background(true); /* as the pipeline's workers dump */
	ck_assert_int_eq(a.t->ops->reserve(a.t, &id, 0, size, &a.h), 0);
	ck_assert_int_eq(a.t->ops->write(a.h, buf, size, 0), (ssize_t)size);
	io_set_background(false);
	ck_assert_int_eq(pthread_create(&th, NULL, abort_in_thread, &a), 0);
	usleep(100000); /* the abort waits for the first stage's write */
	for (int i = 0; i < 2; i++) {
		snprintf(other[i], sizeof(other[i]), "%s/other%d", dir, i);
		fd[i] = open(other[i], O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		ck_assert_int_ge(fd[i], 0);
	}
	pthread_join(th, NULL);
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(fstat(fd[i], &st), 0);
		ck_assert_msg(st.st_size == 0, "a file opened during the abort got %lld bytes",
			      (long long)st.st_size);
		close(fd[i]);
	}
	tier_destroy(a.t);
	ut_rmtree(dir);
	free(buf);
}
END_TEST

START_TEST(test_posix_padding_is_not_payload)
{
	struct store s;
	struct tier *t = store_open(&s, LAYOUT_NATIVE);
	struct blockid id = ut_id(78);
	char path[PATH_MAX];

	ck_assert_int_eq(tu_put(t, &id, 1, 100000, 0, 0, 0), 0);
	path_of(&s, &id, path, sizeof(path));
	flip_byte(path, DISK_HEADER_SIZE + 100000 + 10);
	tu_expect(t, &id, 1, 100000);
	ck_assert_int_eq(truncate(path, DISK_HEADER_SIZE + 100000), 0);
	tu_expect(t, &id, 1, 100000);
	ck_assert_uint_eq(counters(t).quarantined, 0);
	store_close(&s);
}
END_TEST

START_TEST(test_posix_truncated_file_quarantined)
{
	static const off_t keep[] = { DISK_HEADER_SIZE + 99999, DISK_HEADER_SIZE + 4096,
				      DISK_HEADER_SIZE, 100, 0 };
	struct store s;
	struct tier *t = store_open(&s, LAYOUT_NATIVE);

	for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++) {
		struct blockid id = ut_id(600 + i);
		struct tier_handle *h;
		char path[PATH_MAX];
		int rc;

		ck_assert_int_eq(tu_put(t, &id, 1, 100000, 0, 0, 0), 0);
		path_of(&s, &id, path, sizeof(path));
		ck_assert_int_eq(truncate(path, keep[i]), 0);
		rc = t->ops->open(t, &id, 0, &h);
		if (rc == 0) {
			char buf[16];

			ck_assert_int_eq(tier_read(h, buf, sizeof(buf), 0), -EIO);
			tier_close(h);
		} else {
			ck_assert_msg(rc == -EIO, "truncated to %lld: open = %d",
				      (long long)keep[i], rc);
		}
		expect_quarantined(&s, &id);
	}
	store_close(&s);
}
END_TEST

START_TEST(test_posix_truncated_after_open)
{
	struct store s;
	struct tier *t = store_open(&s, LAYOUT_NATIVE);
	struct blockid a = ut_id(1), b = ut_id(2);
	struct tier_handle *ha, *hb;
	char path[PATH_MAX], *buf = malloc(200000);

	ck_assert_ptr_nonnull(buf);
	ck_assert_int_eq(tu_put(t, &a, 1, 200000, 0, 0, 0), 0);
	ck_assert_int_eq(tu_put(t, &b, 1, 200000, 0, 0, 0), 0);
	ck_assert_int_eq(t->ops->open(t, &a, 0, &ha), 0);
	ck_assert_int_eq(t->ops->open(t, &b, 0, &hb), 0);
	path_of(&s, &a, path, sizeof(path));
	ck_assert_int_eq(truncate(path, DISK_HEADER_SIZE + 5000), 0);
	path_of(&s, &b, path, sizeof(path));
	ck_assert_int_eq(truncate(path, DISK_HEADER_SIZE + 5000), 0);
	ck_assert_int_eq(tier_read(ha, buf, 200000, 0), -EIO); /* whole */
	ck_assert_int_eq(tier_read(hb, buf, 100, 0), -EIO);    /* a piece it still has */
	tier_close(ha);
	tier_close(hb);
	expect_quarantined(&s, &a);
	expect_quarantined(&s, &b);
	free(buf);
	store_close(&s);
}
END_TEST

START_TEST(test_posix_not_a_directory)
{
	char dir[PATH_MAX], file[PATH_MAX];
	struct posix_config pc = { .layout = LAYOUT_NATIVE };
	struct tier *t = NULL;

	ut_mkdtemp(dir, sizeof(dir));
	snprintf(file, sizeof(file), "%s/file", dir);
	write_file(file, "x", 1);
	pc.root = file;
	ck_assert_int_eq(posix_create(&pc, &t), -ENOTDIR);
	snprintf(file, sizeof(file), "%s/missing/parent", dir);
	pc.root = file;
	ck_assert_int_lt(posix_create(&pc, &t), 0);
}
END_TEST

/* A native store with room for `blocks` blocks of CAP_BLOCK bytes (each file 4 KiB + 40 KiB)
 * and 8 KiB more, less than one block. */
#define CAP_BLOCK 40000
#define CAP_FILE (DISK_HEADER_SIZE + 40960)

static struct tier *capped_store(struct store *s, int blocks)
{
	struct posix_config pc = { .layout = LAYOUT_NATIVE,
				   .capacity = (uint64_t)blocks * CAP_FILE + 8192 };

	ut_mkdtemp(s->dir, sizeof(s->dir));
	s->layout = LAYOUT_NATIVE;
	pc.root = s->dir;
	ck_assert_int_eq(posix_create(&pc, &s->t), 0);
	return s->t;
}

static void put_cap(struct tier *t, int n)
{
	struct blockid id = ut_id((uint64_t)n);

	ck_assert_int_eq(tu_put(t, &id, 1, CAP_BLOCK, 0, 0, 0), 0);
}

/* A capped store of room for `blocks` blocks, holding blocks 0 .. blocks - 1. */
static struct tier *full_store(struct store *s, int blocks)
{
	struct tier *t = capped_store(s, blocks);

	for (int i = 0; i < blocks; i++)
		put_cap(t, i);
	return t;
}

static bool has(struct tier *t, int n)
{
	struct blockid id = ut_id((uint64_t)n);

	return tu_lookup(t, &id, NULL) == 0;
}

START_TEST(test_posix_capacity_touch_keeps_hot)
{
	struct store s;
	struct tier *t = full_store(&s, 5);
	struct blockid b0 = ut_id(0);

	ck_assert_int_eq(t->ops->touch(t, &b0), 0);
	put_cap(t, 5);
	ck_assert_msg(has(t, 0), "a block touched just now was evicted");
	ck_assert(!has(t, 1));
	ck_assert(has(t, 2) && has(t, 3) && has(t, 4) && has(t, 5));
	store_close(&s);
}
END_TEST

/* After a restart the coldest block is the one whose file was accessed longest ago, whatever
 * the order of the directory listing: blocks 0..4 get access times 4, 3, 2, 1, 0 hours ago
 * (block 4 the coldest), the store is reopened with room for five, and a sixth evicts 4. */
START_TEST(test_posix_capacity_recency_survives_restart)
{
	struct store s;
	struct posix_config pc;
	struct tier *t = full_store(&s, 5);

	for (int i = 0; i < 5; i++) {
		struct blockid id = ut_id((uint64_t)i);
		struct timespec ts[2];
		char path[PATH_MAX];

		path_of(&s, &id, path, sizeof(path));
		clock_gettime(CLOCK_REALTIME, &ts[0]);
		ts[0].tv_sec -= 3600 * (time_t)i; /* atime */
		ts[1].tv_nsec = UTIME_OMIT;        /* mtime unchanged */
		ck_assert_int_eq(utimensat(AT_FDCWD, path, ts, 0), 0);
	}
	tier_destroy(t);
	pc = (struct posix_config){ .root = s.dir, .layout = LAYOUT_NATIVE,
				    .capacity = 5ull * CAP_FILE + 8192 };
	ck_assert_int_eq(posix_create(&pc, &s.t), 0);
	t = s.t;
	put_cap(t, 5);
	ck_assert_msg(!has(t, 4), "the block read longest ago survived the restart's eviction");
	ck_assert(has(t, 0) && has(t, 1) && has(t, 2) && has(t, 3) && has(t, 5));
	store_close(&s);
}
END_TEST

START_TEST(test_posix_capacity_expired_first)
{
	struct store s;
	struct tier *t = full_store(&s, 5);
	struct blockid b4 = ut_id(4);

	ck_assert_int_eq(t->ops->set_deadline(t, &b4, mono_ns() + 20 * 1000000LL), 0);
	ut_sleep_ms(40);
	put_cap(t, 5);
	ck_assert_msg(has(t, 0), "a live block was evicted while an expired one stayed");
	ck_assert(has(t, 1) && has(t, 2) && has(t, 3) && has(t, 5));
	store_close(&s);
}
END_TEST

START_TEST(test_posix_capacity_spares_open_blocks)
{
	struct store s;
	struct tier *t = full_store(&s, 5);
	struct blockid b0 = ut_id(0);
	struct tier_handle *h;

	ck_assert_int_eq(t->ops->open(t, &b0, 0, &h), 0);
	for (int i = 5; i < 15; i++) {
		put_cap(t, i);
		ck_assert_msg(has(t, 0), "an open block was evicted (at %d)", i);
	}
	tu_check_read(h, &b0, 1, CAP_BLOCK, 0, CAP_BLOCK);
	tier_close(h);
	store_close(&s);
}
END_TEST

START_TEST(test_posix_capacity_full_of_open_blocks)
{
	struct store s;
	struct tier *t = capped_store(&s, 2);
	struct blockid b0 = ut_id(0), b1 = ut_id(1), b2 = ut_id(2);
	struct tier_handle *h0, *h1, *w;

	put_cap(t, 0);
	put_cap(t, 1);
	ck_assert_int_eq(t->ops->open(t, &b0, 0, &h0), 0);
	ck_assert_int_eq(t->ops->open(t, &b1, 0, &h1), 0);
	ck_assert_int_eq(t->ops->reserve(t, &b2, 0, CAP_BLOCK, &w), -ENOSPC);
	/* no size given: the write that does not fit fails */
	ck_assert_int_eq(t->ops->reserve(t, &b2, 0, 0, &w), 0);
	ck_assert_int_eq(tu_write(w, &b2, 1, 0, 200000), -ENOSPC);
	t->ops->abort(w);
	ck_assert(has(t, 0) && has(t, 1));
	tier_close(h1);
	put_cap(t, 2);
	ck_assert(has(t, 0) && !has(t, 1) && has(t, 2));
	tier_close(h0);
	store_close(&s);
}
END_TEST

static int count_kept(struct tier *t, int n)
{
	int kept = 0;

	for (int i = 0; i < n; i++)
		kept += has(t, i);
	return kept;
}

/* A reservation bounded by a size its bytes may stay far under (TIER_RESERVE_SHRINK: a block
 * compressed on its way) is given room as its bytes come: a block of one block's bytes under a
 * bound of five, into a full store of five, leaves at least three of them. */
START_TEST(test_posix_capacity_bound_takes_written_bytes)
{
	struct store s;
	struct tier *t = full_store(&s, 5);
	struct blockid b5 = ut_id(5);
	struct block_meta m = tu_meta(CAP_BLOCK, 0);
	struct tier_handle *w;
	struct tier_usage u;

	ck_assert_int_eq(t->ops->reserve(t, &b5, TIER_RESERVE_SHRINK, 5 * CAP_BLOCK, &w), 0);
	ck_assert_int_eq(tu_write(w, &b5, 1, 0, CAP_BLOCK), CAP_BLOCK);
	ck_assert_int_eq(t->ops->commit(w, &m, 0, NULL), 0);
	ck_assert_msg(count_kept(t, 5) >= 3, "%d of 5 blocks left for one block's bytes",
		      count_kept(t, 5));
	tu_expect(t, &b5, 1, CAP_BLOCK);
	ck_assert_int_eq(t->ops->usage(t, &u), 0);
	ck_assert_uint_le(u.used, 5ull * CAP_FILE + 8192);
	store_close(&s);
}
END_TEST

/* A bounded reservation evicts nothing for a bound that cannot fit: at reserve when the bound
 * is past the capacity, and on its way when the blocks it could evict (the others are open)
 * are too few for the rest of its bound. */
START_TEST(test_posix_capacity_bound_never_fits)
{
	struct store s;
	struct tier *t = full_store(&s, 5);
	struct blockid b0 = ut_id(0), b1 = ut_id(1), b5 = ut_id(5);
	struct tier_handle *h0, *h1, *w;

	ck_assert_int_eq(t->ops->reserve(t, &b5, TIER_RESERVE_SHRINK, 6 * CAP_FILE, &w), -ENOSPC);
	ck_assert_int_eq(count_kept(t, 5), 5);
	store_close(&s);

	t = capped_store(&s, 5);
	for (int i = 0; i < 3; i++)
		put_cap(t, i);
	ck_assert_int_eq(t->ops->open(t, &b0, 0, &h0), 0);
	ck_assert_int_eq(t->ops->open(t, &b1, 0, &h1), 0);
	/* room for two blocks and one that may go: a bound of four starts, then fails */
	ck_assert_int_eq(t->ops->reserve(t, &b5, TIER_RESERVE_SHRINK, 4 * CAP_BLOCK, &w), 0);
	ck_assert_int_eq(tu_write(w, &b5, 1, 0, 4 * CAP_BLOCK), -ENOSPC);
	t->ops->abort(w);
	ck_assert_msg(has(t, 2), "a block was evicted for a write that could not fit");
	tier_close(h0);
	tier_close(h1);
	store_close(&s);
}
END_TEST

START_TEST(test_posix_capacity_evicts_coldest)
{
	/* DESIGN.md: the disk tier has a capacity in physical bytes (disk_size=) "with
	 * eviction of the coldest blocks" */
	char dir[PATH_MAX];
	struct posix_config pc = { .layout = LAYOUT_NATIVE, .capacity = 256 << 10 };
	struct tier *t = NULL;
	struct tier_usage u;
	struct blockid first = ut_id(0), last = ut_id(19);

	ut_mkdtemp(dir, sizeof(dir));
	pc.root = dir;
	ck_assert_int_eq(posix_create(&pc, &t), 0);
	for (int i = 0; i < 20; i++) {
		struct blockid id = ut_id((uint64_t)i);

		ck_assert_int_eq(tu_put(t, &id, 1, 40000, 0, 0, 0), 0);
	}
	ck_assert_int_eq(t->ops->usage(t, &u), 0);
	ck_assert_msg(u.used <= pc.capacity + (48 << 10),
		      "%llu bytes on disk with disk_size %llu",
		      (unsigned long long)u.used, (unsigned long long)pc.capacity);
	ck_assert_int_eq(tu_lookup(t, &last, NULL), 0);
	ck_assert_int_eq(tu_lookup(t, &first, NULL), -ENOENT);
	tier_destroy(t);
}
END_TEST

Suite *posix_suite(void)
{
	Suite *s = suite_create("posix");
	TCase *core = ut_tcase("core", UT_TIMEOUT), *errors = ut_tcase("errors", UT_TIMEOUT);

	/* loop index = layout: LAYOUT_NATIVE (0), LAYOUT_UCM (1) */
	tcase_add_loop_test(core, test_posix_reopen_finds_every_block, 0, 2);
	tcase_add_loop_test(core, test_posix_usage_common_size, 0, 2);
	tcase_add_loop_test(core, test_posix_usage_is_physical, 0, 2);
	tcase_add_loop_test(core, test_posix_remove_deletes_file, 0, 2);
	tcase_add_loop_test(core, test_posix_abort_removes_temp, 0, 2);
	tcase_add_loop_test(core, test_posix_leftover_temps_removed, 0, 2);
	tcase_add_loop_test(core, test_posix_skips_foreign_entries, 0, 2);
	tcase_add_test(core, test_posix_deadline_persisted);
	tcase_add_loop_test(core, test_posix_index_snapshot, 0, 2);
	tcase_add_test(core, test_posix_index_snapshot_then_ttl);
	tcase_add_test(core, test_posix_native_file_format);
	tcase_add_test(core, test_posix_layout_ucm_raw_files);
	tcase_add_test(core, test_posix_layout_ucm_reads_ucm_store);
	tcase_add_test(core, test_posix_store_lock);
	tcase_add_test(core, test_posix_creates_store);
	tcase_add_test(core, test_posix_syncs_shared);
	tcase_add_test(core, test_posix_capacity_evicts_coldest);
	tcase_add_test(core, test_posix_capacity_touch_keeps_hot);
	tcase_add_test(core, test_posix_capacity_expired_first);
	tcase_add_test(core, test_posix_capacity_recency_survives_restart);
	tcase_add_test(core, test_posix_capacity_spares_open_blocks);
	tcase_add_test(errors, test_posix_capacity_full_of_open_blocks);
	tcase_add_test(core, test_posix_capacity_bound_takes_written_bytes);
	tcase_add_test(errors, test_posix_capacity_bound_never_fits);
	tcase_add_test(errors, test_posix_corrupt_header_quarantined);
	tcase_add_test(errors, test_posix_corrupt_header_found_at_start);
	tcase_add_test(errors, test_posix_corrupt_payload_whole_read);
	tcase_add_test(errors, test_posix_corrupt_payload_partial_read);
	tcase_add_test(errors, test_posix_corrupt_payload_first_byte);
	tcase_add_test(errors, test_posix_padding_is_not_payload);
	tcase_add_test(errors, test_posix_aio_writes);
	tcase_add_test(errors, test_posix_aio_abort_keeps_descriptors);
	tcase_add_test(errors, test_posix_truncated_file_quarantined);
	tcase_add_test(errors, test_posix_truncated_after_open);
	tcase_add_test(errors, test_posix_not_a_directory);
	suite_add_tcase(s, core);
	suite_add_tcase(s, errors);
	return s;
}
