/*
 * ucm-bench phases (bench_phases.h): for each block size the floors, nullfs, the plain
 * directory peer and ucmfs; then metadata and lookups; then the rows that need every phase.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools/bench_phases.h"

static const size_t SHARDS[2] = { 128 << 10, 512 << 10 };

/* --- floors measured once ---------------------------------------------------------------- */

static void floors_once(const struct pool *p, uint64_t n)
{
	struct zstd_res z;
	struct disk_res d;
	char path[PATH_MAX];
	uint64_t bytes = p->bsize * n;
	int rc;

	phase_start("floor: zstd");
	rc = floor_zstd(p, R.c.min_secs, &z);
	fig_set(&R.zr_plain, rc, z.ratio_plain);
	fig_set(&R.zr_shuf, rc, z.ratio_shuf);
	fig_set(&R.zc_plain, rc, z.c_plain);
	fig_set(&R.zd_plain, rc, z.d_plain);
	fig_set(&R.zc_shuf, rc, z.c_shuf);
	fig_set(&R.zd_shuf, rc, z.d_shuf);

	phase_start("floor: raw disk");
	bytes = bytes < (256ull << 20) ? 256ull << 20 : bytes > (1ull << 30) ? 1ull << 30 : bytes;
	snprintf(path, sizeof(path), "%s/raw.dat", R.tmp);
	rc = floor_disk(path, bytes, p, R.c.depth, SHARDS, R.c.quick ? 256 : 1000, &d);
	fig_set(&R.disk_w, rc, d.write_gbps);
	fig_set(&R.disk_r, rc, d.read_gbps);
	fig_set(&R.disk_shard[0], rc, d.shard_us[0]);
	fig_set(&R.disk_shard[1], rc, d.shard_us[1]);
}

/* --- one block size ---------------------------------------------------------------------- */

struct size_figs {
	struct fig memcpy, null_w_bps, null_w, null_rd, null_rd2, null_rb;
	struct fig plain_w, plain_wf, plain_hot, plain_re, plain_cold, plain_cold_d, plain_mmap;
	struct fig w_bps, w, w_disk, hot_d1, hot_d2, hot_b1, hot_b2, hot_mmap;
	struct fig cold_d, cold_b, shard[2], stored;
};

static void mixed_split(unsigned *readers, unsigned *writers)
{
	*readers = R.c.threads > 1 ? R.c.threads / 2 : 1;
	*writers = R.c.threads > 1 ? R.c.threads - *readers : 1;
}

static void mixed_figs(struct fig out[5], int rc, const struct mixed_res *m)
{
	fig_set(&out[0], rc, m->gbps);
	fig_set(&out[1], rc, m->rp50);
	fig_set(&out[2], rc, m->rp99);
	fig_set(&out[3], rc, m->wp50);
	fig_set(&out[4], rc, m->wp99);
}

/* Mount nullfs with files of the block size and write the blocks there; it stays mounted. */
static void size_nullfs(struct wl *w, struct size_figs *f)
{
	double secs;
	int rc;

	phase_start("nullfs: write");
	w->dir = R.nmnt;
	rc = null_start(w->bsize, 0);
	if (rc == 0)
		rc = wl_write(w, WM_DIRECT, &secs);
	fig_set(&f->null_w_bps, rc, (double)w->n / secs);
	fig_set(&f->null_w, rc, (double)(w->n * w->bsize) / secs / 1e9);
}

static void size_plain(struct wl *w, struct size_figs *f)
{
	char dir[PATH_MAX + 32];
	double secs, x;
	int rc;

	phase_start("plain dir: write");
	snprintf(dir, sizeof(dir), "%s/%llu", R.plain, (unsigned long long)w->bsize);
	mkdir(dir, 0755);
	w->dir = dir;
	sync(); /* start from a quiet disk */
	rc = wl_write(w, WM_TMP_RENAME, &secs);
	fig_set(&f->plain_w, rc, (double)(w->n * w->bsize) / secs / 1e9);
	rm_rf(dir);
	sync();
	mkdir(dir, 0755);
	rc = wl_write(w, WM_TMP_FSYNC, &secs);
	fig_set(&f->plain_wf, rc, (double)(w->n * w->bsize) / secs / 1e9);

	phase_start("plain dir: read");
	if (rc == 0)
		rc = wl_read(w, 0, REQ_SIZE, R.c.min_secs, &f->plain_hot.v,
			     &f->plain_re.v);
	fig_set(&f->plain_hot, rc, f->plain_hot.v);
	fig_set(&f->plain_re, rc, f->plain_re.v);
	/* the same files, in the page cache, read through a mapping */
	if (rc == 0)
		rc = wl_read(w, RD_MMAP, REQ_SIZE, R.c.min_secs, &x, NULL);
	fig_set(&f->plain_mmap, rc, x);
	/* cold: the whole page cache dropped if root, each file's in any case */
	if (rc == 0 && R.can_drop)
		drop_caches();
	if (rc == 0)
		rc = wl_read(w, RD_DROP, REQ_SIZE, 0, &x, NULL);
	fig_set(&f->plain_cold, rc, x);
	if (rc == 0 && R.can_drop)
		drop_caches();
	if (rc == 0)
		rc = wl_read(w, RD_DIRECT | RD_DROP, REQ_SIZE, 0, &x, NULL);
	fig_set(&f->plain_cold_d, rc, x);
	rm_rf(dir);
}

static void skip_all(struct fig **figs, int n, const char *why)
{
	for (int i = 0; i < n; i++)
		fig_skip(figs[i], why);
}

/*
 * Hot reads of ucmfs (u) and of nullfs (n), either may be NULL, in alternating trials whose
 * medians are the figures: the machine's drift weighs on a figure and its floor alike.
 */
static void hot_pair(const struct wl *u, const struct wl *n, struct size_figs *f)
{
	struct hot {
		const struct wl *w;
		bool direct;
		struct fig *first, *re;
		double t1[5], t2[5];
	} m[4] = {
		{ u, true, &f->hot_d1, &f->hot_d2, { 0 }, { 0 } },
		{ n, true, &f->null_rd, &f->null_rd2, { 0 }, { 0 } },
		{ u, false, &f->hot_b1, &f->hot_b2, { 0 }, { 0 } },
		{ n, false, &f->null_rb, NULL, { 0 }, { 0 } },
	};
	unsigned trials = R.c.quick ? 3 : 5;
	int rc;

	for (unsigned k = 0; k < trials; k++) {
		for (int i = 0; i < 4; i++) {
			if (!m[i].w)
				continue;
			/* "first" is the first read since the block left the page cache */
			rc = wl_read(m[i].w, (m[i].direct ? RD_DIRECT : 0) | RD_DROP, REQ_SIZE,
				     R.c.min_secs / trials, &m[i].t1[k],
				     m[i].re ? &m[i].t2[k] : NULL);
			if (rc) {
				fig_set(m[i].first, rc, NAN);
				if (m[i].re)
					fig_set(m[i].re, rc, NAN);
				m[i].w = NULL;
			}
		}
	}
	for (int i = 0; i < 4; i++) {
		if (!m[i].w)
			continue;
		fig_set(m[i].first, 0, median(m[i].t1, trials));
		if (m[i].re)
			fig_set(m[i].re, 0, median(m[i].t2, trials));
	}
}

static void mixed_run(const struct wl *w, struct fig out[5])
{
	struct mixed_res m;
	unsigned readers, writers;
	uint64_t written = 0;
	struct wl mw = *w;
	int rc;

	mixed_split(&readers, &writers);
	rc = wl_mixed(w, w->salt + 1, readers, writers, R.c.mixed_secs, &m, &written);
	mixed_figs(out, rc, &m);
	if (R.c.mnt && w->dir == R.ucm_mnt) {
		/* a mount that is not ours: take the new blocks away */
		mw.salt = w->salt + 1;
		mw.n = written;
		wl_unlink(&mw);
	}
}

/* ucmfs at one size; the nullfs floors of the hot reads and the mixed run alongside. */
static void size_ucmfs(struct wl *w, struct size_figs *f, bool first)
{
	struct wl nw = *w;
	bool null_up = R.null.pid != 0, wrote;
	double secs, t0, x;
	int rc;

	nw.dir = R.nmnt;
	phase_start("ucmfs: write");
	w->dir = R.ucm_mnt;
	sync(); /* start from a quiet disk */
	rc = R.ucm.pid || R.c.mnt ? 0 : ucm_start(R.store);
	t0 = now_s();
	if (rc == 0)
		rc = wl_write(w, WM_DIRECT, &secs);
	fig_set(&f->w_bps, rc, (double)w->n / secs);
	fig_set(&f->w, rc, (double)(w->n * w->bsize) / secs / 1e9);
	wrote = rc == 0;
	if (wrote) {
		rc = wl_sync(w);
		fig_set(&f->w_disk, rc, (double)(w->n * w->bsize) / (now_s() - t0) / 1e9);
		phase_start("ucmfs: verify");
		rc = wl_verify(w);
		if (rc) {
			fig_set(&f->hot_d1, rc, NAN);
			wrote = false;
		}
	}
	if (!wrote) {
		struct fig *rest[] = { &f->w_disk, &f->hot_d1, &f->hot_d2, &f->hot_b1, &f->hot_b2,
				       &f->hot_mmap, &f->cold_d, &f->cold_b, &f->shard[0],
				       &f->shard[1], &f->stored, &R.mx[0], &R.mx[1], &R.mx[2],
				       &R.mx[3], &R.mx[4] };

		skip_all(rest, first ? 16 : 11, "skipped: the ucmfs write phase failed");
	}
	if (!null_up) {
		struct fig *rest[] = { &f->null_rd, &f->null_rd2, &f->null_rb, &R.nmx[0],
				       &R.nmx[1], &R.nmx[2], &R.nmx[3], &R.nmx[4] };

		skip_all(rest, first ? 8 : 3, "skipped: nullfs failed");
	}

	phase_start("hot reads: ucmfs and nullfs");
	hot_pair(wrote ? w : NULL, null_up ? &nw : NULL, f);
	if (wrote) {
		/* through a mapping: with passthrough, the memory tier's file itself */
		rc = wl_read(w, RD_MMAP, REQ_SIZE, R.c.min_secs, &x, NULL);
		fig_set(&f->hot_mmap, rc, x);
		rc = wl_stored_ratio(w, &x);
		fig_set(&f->stored, rc, x);
	}
	if (first) {
		phase_start("mixed: nullfs");
		if (null_up)
			mixed_run(&nw, R.nmx);
		phase_start("mixed: ucmfs");
		if (wrote)
			mixed_run(w, R.mx);
	}
	if (R.null.pid && daemon_stop(&R.null))
		fprintf(stderr, "ucm-bench: nullfs: %s\n", bench_last_error());
	if (!wrote)
		return;

	phase_start("ucmfs: cold reads");
	rc = ucm_remount(R.store, true);
	if (rc == 0)
		rc = wl_read(w, RD_DIRECT, REQ_SIZE, 0, &x, NULL);
	fig_set(&f->cold_d, rc, x);
	/* what the fresh daemon loaded from disk must be what was written */
	if (rc == 0 && (rc = wl_verify(w)))
		fig_set(&f->cold_d, rc, x);
	rc = ucm_remount(R.store, true);
	if (rc == 0)
		rc = wl_read(w, 0, REQ_SIZE, 0, &x, NULL);
	fig_set(&f->cold_b, rc, x);
	for (int i = 0; i < 2; i++) {
		rc = ucm_remount(R.store, true);
		if (rc == 0)
			rc = wl_shards(w, SHARDS[i], R.c.seed + i, &x);
		fig_set(&f->shard[i], rc, x);
	}
	fig_note(&f->cold_d, cold_note());
	fig_note(&f->cold_b, cold_note());
	fig_note(&f->shard[0], cold_note());
	fig_note(&f->shard[1], cold_note());
	if (R.c.mnt)
		wl_unlink(w);
}

static void size_rows(const struct wl *w, const struct size_figs *f)
{
	char b[16], fig[96], fl[96];
	uint64_t bs = w->bsize;

	size_label(bs, b, sizeof(b));
#define ROW(id, figfmt, val, unit, kind, flfmt, flval)                                         \
	do {                                                                                   \
		snprintf(fig, sizeof(fig), figfmt, b);                                         \
		snprintf(fl, sizeof(fl), flfmt, b);                                            \
		emit(id, bs, fig, val, unit, kind, fl, flval);                                 \
	} while (0)
	ROW("write.blocks_per_s", "write %s: open/pwrite/close", &f->w_bps, "blocks/s", ROW_RATE,
	    "nullfs, same writes%.0s", &f->null_w_bps);
	ROW("write.gbps", "write %s: open/pwrite/close", &f->w, "GB/s", ROW_RATE,
	    "nullfs, same writes%.0s", &f->null_w);
	ROW("write.to_disk_gbps", "write %s until all on disk (fsync)", &f->w_disk, "GB/s",
	    ROW_RATE, "raw disk write 1M O_DIRECT%.0s", &R.disk_w);
	ROW("hot.direct_first", "hot read %s, 1M O_DIRECT, first", &f->hot_d1, "GB/s", ROW_RATE,
	    "nullfs 1M O_DIRECT read%.0s", &f->null_rd);
	ROW("hot.direct_reread", "hot read %s, 1M O_DIRECT, re-read", &f->hot_d2, "GB/s",
	    ROW_RATE, "nullfs 1M O_DIRECT re-read%.0s", &f->null_rd2);
	ROW("hot.buffered_first", "hot read %s, 1M buffered, first", &f->hot_b1, "GB/s",
	    ROW_RATE, "nullfs 1M buffered read%.0s", &f->null_rb);
	ROW("hot.buffered_reread", "hot read %s, 1M buffered, re-read", &f->hot_b2, "GB/s",
	    ROW_RATE, "page cache re-read, plain file%.0s", &f->plain_re);
	ROW("hot.mmap", "hot read %s, mmap, copied out by 1M", &f->hot_mmap, "GB/s", ROW_RATE,
	    "mmap of a plain file, page cache%.0s", &f->plain_mmap);
	ROW("cold.direct", "cold read %s, 1M O_DIRECT", &f->cold_d, "GB/s", ROW_RATE,
	    "raw disk read 1M O_DIRECT%.0s", &R.disk_r);
	ROW("cold.buffered", "cold read %s, 1M buffered", &f->cold_b, "GB/s", ROW_RATE,
	    "raw disk read 1M O_DIRECT%.0s", &R.disk_r);
	ROW("cold.shard_128k", "cold read one 128K shard of %s", &f->shard[0], "us", ROW_COST,
	    "raw disk read 128K, QD1%.0s", &R.disk_shard[0]);
	ROW("cold.shard_512k", "cold read one 512K shard of %s", &f->shard[1], "us", ROW_COST,
	    "raw disk read 512K, QD1%.0s", &R.disk_shard[1]);
	ROW("disk.stored_ratio", "size on disk %s: st_size/st_blocks", &f->stored, "x",
	    ROW_RATE, "zstd -1 shuffle2 ratio%.0s", &R.zr_shuf);
	ROW("peer.write", "vs plain dir: write %s", &f->w, "GB/s", ROW_RATE,
	    "plain dir: tmp, rename%.0s", &f->plain_w);
	ROW("peer.write_durable", "vs plain dir: write %s until on disk", &f->w_disk, "GB/s",
	    ROW_RATE, "plain dir: tmp, fsync, rename%.0s", &f->plain_wf);
	ROW("peer.hot_read", "vs plain dir: hot read %s, buffered", &f->hot_b1, "GB/s",
	    ROW_RATE, "plain dir: pread, page cache%.0s", &f->plain_hot);
	ROW("peer.cold_read", "vs plain dir: cold read %s, buffered", &f->cold_b, "GB/s",
	    ROW_RATE, "plain dir: pread, cold%.0s", &f->plain_cold);
	ROW("peer.cold_direct", "vs plain dir: cold read %s, O_DIRECT", &f->cold_d, "GB/s",
	    ROW_RATE, "plain dir: pread O_DIRECT, cold%.0s", &f->plain_cold_d);
#undef ROW
}

/* The KV data of one size and the workload that writes it; false (counted) if it failed. */
static bool size_workload(uint64_t bsize, struct pool *p, struct wl *w)
{
	uint64_t n = blocks_for(bsize);
	unsigned np = (unsigned)(POOL_MAX_BYTES / bsize);

	np = np < 1 ? 1 : np > POOL_MAX_BLOCKS ? POOL_MAX_BLOCKS : np;
	np = np > n ? (unsigned)n : np;
	phase_start("generating KV data");
	if (pool_make(p, bsize, np, R.c.seed + bsize)) {
		fprintf(stderr, "ucm-bench: %s\n", bench_last_error());
		R.failures++;
		return false;
	}
	*w = (struct wl){ .pool = p, .salt = R.c.seed * 7919 + bsize, .n = n, .bsize = bsize };
	return true;
}

void run_size(uint64_t bsize, bool first)
{
	struct size_figs f;
	struct pool p;
	struct wl w;

	for (struct fig *x = (struct fig *)&f; x < (struct fig *)(&f + 1); x++)
		*x = (struct fig)FIG_NONE;
	if (!size_workload(bsize, &p, &w))
		return;
	if (first)
		floors_once(&p, w.n);
	phase_start("floor: memcpy");
	fig_set(&f.memcpy, 0, floor_memcpy(&p, R.c.min_secs));
	if (isnan(f.memcpy.v))
		fig_set(&f.memcpy, -EIO, NAN);
	size_nullfs(&w, &f);
	size_plain(&w, &f);
	size_ucmfs(&w, &f, first);
	size_rows(&w, &f);
	if (first) {
		R.b0 = bsize;
		R.memcpy0 = f.memcpy;
		R.null_rd0 = f.null_rd;
		R.null_rb0 = f.null_rb;
		R.null_w0 = f.null_w;
		R.pagecache0 = f.plain_re;
	}
	pool_free(&p);
}

/*
 * --writes-only: writes until on disk at one size, the plain directory (tmp, fsync, rename)
 * and ucmfs (open/pwrite/close of every block, then fsync of each) alternated twice, each
 * ucmfs round in a fresh daemon on an empty store, so that both see the same disk moments.
 */
void run_writes(uint64_t bsize)
{
	struct fig u[2] = { FIG_NONE, FIG_NONE }, pl[2] = { FIG_NONE, FIG_NONE };
	char dir[PATH_MAX + 32], b[16], fig[96], fl[96], id[32];
	struct pool p;
	struct wl w;
	double secs, t0;
	int rc;

	if (!size_workload(bsize, &p, &w))
		return;
	snprintf(dir, sizeof(dir), "%s/%llu", R.plain, (unsigned long long)bsize);
	for (int r = 0; r < 2; r++) {
		phase_start("plain dir: write until on disk");
		w.dir = dir;
		mkdir(dir, 0755);
		sync();
		rc = wl_write(&w, WM_TMP_FSYNC, &secs);
		fig_set(&pl[r], rc, (double)(w.n * w.bsize) / secs / 1e9);
		rm_rf(dir);

		phase_start("ucmfs: write until on disk");
		w.dir = R.ucm_mnt;
		if (!R.c.mnt && ucm_stop() == 0)
			rm_rf(R.store);
		sync();
		rc = R.c.mnt ? 0 : ucm_start(R.store);
		t0 = now_s();
		if (rc == 0)
			rc = wl_write(&w, WM_DIRECT, &secs);
		if (rc == 0)
			rc = wl_sync(&w);
		fig_set(&u[r], rc, (double)(w.n * w.bsize) / (now_s() - t0) / 1e9);
		if (rc == 0 && (rc = wl_verify(&w)))
			fig_set(&u[r], rc, NAN);
		if (R.c.mnt)
			wl_unlink(&w);
	}
	size_label(bsize, b, sizeof(b));
	for (int r = 0; r < 2; r++) {
		snprintf(id, sizeof(id), "peer.write_durable.%d", r + 1);
		snprintf(fig, sizeof(fig), "vs plain dir: write %s until on disk, %d", b, r + 1);
		snprintf(fl, sizeof(fl), "plain dir: tmp, fsync, rename, %d", r + 1);
		emit(id, bsize, fig, &u[r], "GB/s", ROW_RATE, fl, &pl[r]);
	}
	pool_free(&p);
}

/* --- metadata and lookups ------------------------------------------------------------------ */

/*
 * Median time of LOOKUP_IDS stat calls on each of two sets (either may be NULL), in batches
 * that alternate between them, so that the machine's drift weighs on both alike.
 */
static void stat_pair(const struct wl *a, struct fig *fa, const struct wl *b, struct fig *fb)
{
	double ta[64], tb[64];
	unsigned n = R.c.batches > 64 ? 64 : R.c.batches, na = 0, nb = 0;
	int rc;

	for (unsigned i = 0; i < n && (a || b); i++) {
		if (a) {
			rc = wl_stat(a, LOOKUP_IDS, 1, &ta[na]);
			if (rc) {
				fig_set(fa, rc, NAN);
				a = NULL;
			} else {
				na++;
			}
		}
		if (b) {
			rc = wl_stat(b, LOOKUP_IDS, 1, &tb[nb]);
			if (rc) {
				fig_set(fb, rc, NAN);
				b = NULL;
			} else {
				nb++;
			}
		}
	}
	if (a)
		fig_set(fa, 0, median(ta, na));
	if (b)
		fig_set(fb, 0, median(tb, nb));
}

void run_meta(void)
{
	struct fig create = FIG_NONE, readdir_ = FIG_NONE, rss = FIG_NONE, st = FIG_NONE;
	struct fig query = FIG_NONE, ncreate = FIG_NONE, nreaddir = FIG_NONE, nst = FIG_NONE;
	struct fig pcreate = FIG_NONE, preaddir = FIG_NONE, rss_floor = FIG_NONE, rtt;
	struct fig answer = FIG_NONE;
	char dir[PATH_MAX + 8], qdir[PATH_MAX + 16], fig[96], fl[96];
	uint64_t m = R.c.meta, entries = 0;
	struct wl nw, pw, uw;
	struct pool p;
	double secs;
	struct stat sb;
	int rc;

	phase_start("metadata: nullfs");
	if (pool_make(&p, META_BLOCK, 16, R.c.seed + 1)) {
		fprintf(stderr, "ucm-bench: %s\n", bench_last_error());
		R.failures++;
		return;
	}
	nw = (struct wl){ .pool = &p, .salt = R.c.seed * 7919 + 1, .n = m, .bsize = META_BLOCK };
	pw = uw = nw;
	nw.dir = R.nmnt;
	uw.dir = R.ucm_mnt;
	snprintf(dir, sizeof(dir), "%s/meta", R.plain);
	pw.dir = dir;

	/* nullfs stays mounted until the lookups, which alternate between it and ucmfs */
	rc = null_start(META_BLOCK, m);
	if (rc == 0)
		rc = wl_write(&nw, WM_DIRECT, &secs);
	fig_set(&ncreate, rc, (double)m / secs);
	if (rc == 0)
		rc = wl_readdir(R.nmnt, &entries, &secs);
	fig_set(&nreaddir, rc, (double)entries / secs);

	phase_start("metadata: plain dir");
	mkdir(dir, 0755);
	rc = wl_write(&pw, WM_TMP_RENAME, &secs);
	fig_set(&pcreate, rc, (double)m / secs);
	if (rc == 0)
		rc = wl_readdir(dir, &entries, &secs);
	fig_set(&preaddir, rc, (double)entries / secs);
	rm_rf(dir);

	phase_start("metadata: ucmfs");
	rc = R.c.mnt ? 0 : ucm_start(R.meta_store);
	if (rc == 0)
		rc = wl_write(&uw, WM_DIRECT, &secs);
	fig_set(&create, rc, (double)m / secs);
	fig_set(&rss_floor, 0, (double)(m * META_BLOCK) / MiB);
	if (rc == 0) {
		rc = wl_readdir(R.ucm_mnt, &entries, &secs);
		if (rc == 0 && (R.c.mnt ? entries < m : entries != m))
			rc = bench_fail(0, "readdir listed %llu blocks, %llu were written",
					(unsigned long long)entries, (unsigned long long)m);
		fig_set(&readdir_, rc, (double)entries / secs);
		if (R.c.mnt) {
			fig_skip(&rss, "--mnt: not our daemon");
		} else {
			long long hwm = proc_peak_rss(R.ucm.pid);

			fig_set(&rss, hwm < 0 ? bench_fail((int)-hwm, "VmHWM") : 0,
				(double)hwm / MiB);
		}
	} else {
		fig_skip(&readdir_, "skipped: the ucmfs creates failed");
		fig_skip(&rss, "skipped: the ucmfs creates failed");
	}

	phase_start("lookup: stat and query");
	stat_pair(R.null.pid ? &nw : NULL, &nst, rc == 0 ? &uw : NULL, &st);
	if (rc == 0) {
		snprintf(qdir, sizeof(qdir), "%s/.ucm/query", R.ucm_mnt);
		if (stat(qdir, &sb) == 0 && S_ISDIR(sb.st_mode)) {
			rc = wl_query(&uw, qdir, LOOKUP_IDS, R.c.batches, &query.v, &answer.v);
			fig_set(&query, rc, query.v);
			fig_set(&answer, rc, answer.v);
		} else {
			query.v = st.v;
			snprintf(query.note, sizeof(query.note),
				 "no /.ucm/query in this daemon yet: the value is the stat side "
				 "(%u stat calls), not a query", LOOKUP_IDS);
			answer = query;
		}
		if (R.c.mnt)
			wl_unlink(&uw);
	} else {
		fig_skip(&st, "skipped: the ucmfs creates failed");
		fig_skip(&query, "skipped: the ucmfs creates failed");
		fig_skip(&answer, "skipped: the ucmfs creates failed");
	}
	if (R.null.pid && daemon_stop(&R.null))
		fprintf(stderr, "ucm-bench: nullfs: %s\n", bench_last_error());
	if (ucm_stop())
		fprintf(stderr, "ucm-bench: ucmfs: %s\n", bench_last_error());

	rtt.v = nst.v / LOOKUP_IDS;
	snprintf(rtt.note, sizeof(rtt.note), "%s", nst.note);
	emit("lookup.stat", 0, "lookup: 1000 stat calls", &st, "us", ROW_COST,
	     "nullfs: 1000 stat calls", &nst);
	emit("lookup.query", 0, "lookup: prefix query of 1000 ids", &query, "us", ROW_COST,
	     "one FUSE round trip (nullfs stat)", &rtt);
	emit("lookup.query_answer", 0, "lookup: its getxattr alone", &answer, "us", ROW_COST,
	     "one FUSE round trip (nullfs stat)", &rtt);
	emit("meta.create", META_BLOCK, "create 4K blocks", &create, "blocks/s", ROW_RATE,
	     "nullfs, same creates", &ncreate);
	snprintf(fig, sizeof(fig), "readdir of %llu blocks", (unsigned long long)m);
	snprintf(fl, sizeof(fl), "nullfs readdir, %llu names", (unsigned long long)m);
	emit("meta.readdir", META_BLOCK, fig, &readdir_, "entries/s", ROW_RATE, fl, &nreaddir);
	snprintf(fig, sizeof(fig), "daemon peak RSS, %llu 4K blocks", (unsigned long long)m);
	emit("meta.peak_rss", META_BLOCK, fig, &rss, "MiB", ROW_COST, "the blocks' bytes",
	     &rss_floor);
	emit("peer.create", META_BLOCK, "vs plain dir: create 4K blocks", &create, "blocks/s",
	     ROW_RATE, "plain dir: tmp, rename", &pcreate);
	emit("peer.readdir", META_BLOCK, "vs plain dir: readdir", &readdir_, "entries/s",
	     ROW_RATE, "plain dir readdir", &preaddir);
	pool_free(&p);
}

void mixed_rows(void)
{
	static const char *const ids[5] = { "mixed.gbps", "mixed.read_p50", "mixed.read_p99",
					    "mixed.write_p50", "mixed.write_p99" };
	static const char *const what[5] = { "", ", read p50", ", read p99", ", write p50",
					     ", write p99" };
	unsigned readers, writers;
	char b[16], fig[96], fl[96];

	mixed_split(&readers, &writers);
	size_label(R.b0, b, sizeof(b));
	for (int i = 0; i < 5; i++) {
		snprintf(fig, sizeof(fig), "mixed %ur+%uw %s%s", readers, writers, b, what[i]);
		snprintf(fl, sizeof(fl), "nullfs, same mix%s", what[i]);
		emit(ids[i], R.b0, fig, &R.mx[i], i ? "ms" : "GB/s", i ? ROW_COST : ROW_RATE, fl,
		     &R.nmx[i]);
	}
}

void floor_rows(void)
{
	struct fig raw = { 1.0, "" };
	char b[16], fl[64];

	size_label(R.b0, b, sizeof(b));
	snprintf(fl, sizeof(fl), "memcpy %s, one thread", b);
	emit("floor.nullfs_read_direct", R.b0, "floor: nullfs 1M O_DIRECT read", &R.null_rd0,
	     "GB/s", ROW_RATE, fl, &R.memcpy0);
	emit("floor.nullfs_read_buffered", R.b0, "floor: nullfs 1M buffered read", &R.null_rb0,
	     "GB/s", ROW_RATE, fl, &R.memcpy0);
	emit("floor.nullfs_write", R.b0, "floor: nullfs write", &R.null_w0, "GB/s", ROW_RATE, fl,
	     &R.memcpy0);
	emit("floor.pagecache_reread", R.b0, "floor: page cache re-read", &R.pagecache0, "GB/s",
	     ROW_RATE, fl, &R.memcpy0);
	emit("floor.zstd_ratio_plain", R.b0, "floor: zstd -1 ratio, plain", &R.zr_plain, "x",
	     ROW_RATE, "uncompressed", &raw);
	emit("floor.zstd_ratio_shuffle2", R.b0, "floor: zstd -1 ratio, shuffle2", &R.zr_shuf,
	     "x", ROW_RATE, "zstd -1 ratio, plain", &R.zr_plain);
	emit("floor.zstd_compress_plain", R.b0, "floor: zstd -1 compress, plain", &R.zc_plain,
	     "GB/s", ROW_RATE, fl, &R.memcpy0);
	emit("floor.zstd_decompress_plain", R.b0, "floor: zstd -1 decompress, plain",
	     &R.zd_plain, "GB/s", ROW_RATE, fl, &R.memcpy0);
	emit("floor.zstd_compress_shuffle2", R.b0, "floor: zstd -1 compress, shuffle2",
	     &R.zc_shuf, "GB/s", ROW_RATE, fl, &R.memcpy0);
	emit("floor.zstd_decompress_shuffle2", R.b0, "floor: zstd -1 decompress, shuffle2",
	     &R.zd_shuf, "GB/s", ROW_RATE, fl, &R.memcpy0);
}
