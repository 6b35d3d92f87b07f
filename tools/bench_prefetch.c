/*
 * ucm-bench: loads from disk, the figure users feel as time to first token (an engine that
 * finds a long prefix on disk asks for all of it at once and waits), against the disk read at
 * the depth it likes best.
 *
 *   floor:  fio, 1 MiB O_DIRECT sequential reads of a file of the same size, at queue depths
 *           16 ... 256, picks the depth (the host behind a virtual disk answers differently
 *           by depth); each row's floor is fio at that depth run again just before the row,
 *           so that a row and its floor see the same moment of a disk whose speed drifts by
 *           2x over minutes (the best of five runs would be a floor no single run reaches)
 *   rows:   user.ucm.prefetch of every block of a set, polled until done, in a fresh daemon
 *           once its memory is ready (its prefaulter done, ucmfs_mem_prefault_pending_bytes
 *           0; never used) and in a warm one (its memory used once: a second set that
 *           evicts the first); readers of cold blocks in parallel; the same prefetch with
 *           the default compression, in logical bytes per second; how long the fresh
 *           daemon's memory took to be ready, against all CPUs touching as much fresh
 *           memory; and the prefetch in a daemon mounted a moment before, whose loads
 *           meet memory not yet touched
 *
 * Blocks are the first --block size, 1 GiB of them (256 MiB with --quick), compress=none but
 * for the last row. The page cache is dropped before each (root).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "tools/bench_phases.h"

#define FIO_DEPTHS 5
static const unsigned fio_depths[FIO_DEPTHS] = { 16, 32, 64, 128, 256 };
#define READERS 8

#define READY_LIMIT_S 120.0
#define TRIALS 3 /* of each row: the disk's speed moves by 2x between runs a second apart */

static struct {
	struct fig fio;                                   /* the depth scan: best, or why not */
	struct fig fl_fresh, fl_warm, fl_readers, fl_zstd, fl_at; /* fio at that depth, before */
	struct fig fresh, warm, readers, zstd, ready, touch_s, at_once;
	unsigned fio_depth;
	char fio_detail[200], fio_path[PATH_MAX];
} P;

/* One fio run: read bandwidth of 1 MiB O_DIRECT reads at `depth`, GB/s; 0 or -errno. */
static int fio_read(const char *path, uint64_t bytes, unsigned depth, double *gbps)
{
	char cmd[PATH_MAX + 256], line[4096], *f;
	double kib = 0, ms = 0;
	int field = 0, rc;
	FILE *p;

	snprintf(cmd, sizeof(cmd),
		 "fio --name=floor --filename='%s' --size=%llu --rw=read --bs=1M --direct=1 "
		 "--ioengine=libaio --iodepth=%u --output-format=terse --terse-version=3 "
		 "2>/dev/null",
		 path, (unsigned long long)bytes, depth);
	p = popen(cmd, "r");
	if (!p)
		return bench_fail(errno, "popen fio");
	if (!fgets(line, sizeof(line), p))
		line[0] = 0;
	rc = pclose(p);
	if (rc)
		return bench_fail(0, "fio at depth %u exited %d (is fio installed?)", depth, rc);
	/* terse v3: ...;read_kb;read_bw;read_iops;read_runtime_ms;... from field 5 (0-based) */
	for (f = strtok(line, ";"); f; f = strtok(NULL, ";"), field++) {
		if (field == 5)
			kib = strtod(f, NULL);
		if (field == 8)
			ms = strtod(f, NULL);
	}
	if (kib <= 0 || ms <= 0)
		return bench_fail(0, "fio at depth %u: no read figures in its output", depth);
	*gbps = kib * 1024 / (ms / 1000) / 1e9;
	return 0;
}

/* The floor: the best of the depths, each once after a layout pass. */
static void fio_floor(uint64_t bytes)
{
	char path[PATH_MAX], *d = P.fio_detail;
	double best = 0, g;
	size_t left = sizeof(P.fio_detail);
	int rc = 0, n;

	snprintf(P.fio_path, sizeof(P.fio_path), "%s/fio.dat", R.tmp);
	snprintf(path, sizeof(path), "%s", P.fio_path);
	/* lay the file out (fio writes it when it is missing or short); kept for the rows */
	rc = fio_read(path, bytes, 16, &g);
	for (unsigned i = 0; i < FIO_DEPTHS && !rc; i++) {
		if (R.can_drop)
			drop_caches();
		rc = fio_read(path, bytes, fio_depths[i], &g);
		if (rc)
			break;
		n = snprintf(d, left, "%sQD%u %.2f", i ? ", " : "", fio_depths[i], g);
		d += n;
		left -= (size_t)n;
		if (g > best) {
			best = g;
			P.fio_depth = fio_depths[i];
		}
	}
	fig_set(&P.fio, rc, best);
}

/* One floor of a trial: fio at the depth the scan chose, page cache dropped, now. */
static int fio_pair(uint64_t bytes, double *gbps)
{
	if (isnan(P.fio.v))
		return bench_fail(0, "no fio floor: %s", P.fio.note);
	if (R.can_drop)
		drop_caches();
	return fio_read(P.fio_path, bytes, P.fio_depth, gbps);
}

/* Seconds from t0 until the daemon's memory is ready: no bytes left for its prefaulter
 * (and some made, unless none came in the first second: mem_prefault=none). 0 or -errno. */
static int wait_ready(double t0, double *secs)
{
	static const char *const names[] = { "ucmfs_mem_prefault_pending_bytes",
					     "ucmfs_mem_prefaulted_bytes_total" };
	double v[2] = { 1, 0 }; /* pending, made */
	int rc = 0;

	while (!rc && (v[0] > 0 || (v[1] == 0 && now_s() - t0 < 1))) {
		if (now_s() - t0 > READY_LIMIT_S)
			return bench_fail(ETIMEDOUT, "memory not ready %.0f s after mount",
					  READY_LIMIT_S);
		usleep(5000);
		rc = stats_values(R.mnt, names, v, 2);
	}
	*secs = now_s() - t0;
	return rc;
}

static int start(const char *store, const char *codec)
{
	char opts[1400], mem[32];
	char *argv[] = { R.ucmfs, "-f", "-o", opts, (char *)store, R.mnt, NULL };

	snprintf(opts, sizeof(opts), "mem_size=%s,compress=%s%s%s",
		 size_label(R.mem_size, mem, sizeof(mem)), codec, R.c.opts ? "," : "",
		 R.c.opts ? R.c.opts : "");
	return daemon_start(&R.ucm, argv, R.mnt, R.log);
}

/* Stop the daemon, drop the page cache, start a fresh one. */
static int restart(const char *store, const char *codec)
{
	int rc = R.ucm.pid ? daemon_stop(&R.ucm) : 0;

	if (rc)
		return rc;
	if (R.can_drop)
		drop_caches();
	else
		drop_tree_cache(store);
	return start(store, codec);
}

/* Prefetch every block of w through one query file, wait until done; GB/s of block bytes.
 * Every block must be in memory afterwards. 0 or -errno. */
static int prefetch(const struct wl *w, double *gbps)
{
	char path[PATH_MAX], name[33], val[32], blk[PATH_MAX];
	size_t len = (size_t)w->n * 33;
	char *text = malloc(len + 1);
	double t0;
	ssize_t n;
	int fd, rc = 0;

	if (!text)
		return bench_fail(ENOMEM, "query text");
	for (uint64_t i = 0; i < w->n; i++) {
		block_name(name, w->salt, i);
		memcpy(text + i * 33, name, 32);
		text[i * 33 + 32] = '\n';
	}
	snprintf(path, sizeof(path), "%s/.ucm/query/prefetch-%d", R.mnt, (int)getpid());
	fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
	if (fd < 0 || write(fd, text, len) != (ssize_t)len) {
		rc = bench_fail(errno, "write %s", path);
		if (fd >= 0)
			close(fd);
		goto out;
	}
	close(fd);
	t0 = now_s();
	if (setxattr(path, "user.ucm.prefetch", "1", 1, 0)) {
		rc = bench_fail(errno, "setxattr user.ucm.prefetch");
		goto out;
	}
	for (;;) {
		n = getxattr(path, "user.ucm.prefetch", val, sizeof(val) - 1);
		if (n < 0) {
			rc = bench_fail(errno, "getxattr user.ucm.prefetch");
			goto out;
		}
		val[n] = 0;
		if (!strcmp(val, "done"))
			break;
		usleep(500);
	}
	*gbps = (double)(w->n * w->bsize) / (now_s() - t0) / 1e9;
	for (uint64_t i = 0; i < w->n && !rc; i++) {
		block_name(name, w->salt, i);
		snprintf(blk, sizeof(blk), "%s/%s", R.mnt, name);
		n = getxattr(blk, "user.ucm.tier", val, sizeof(val) - 1);
		if (n < 0)
			rc = bench_fail(errno, "getxattr user.ucm.tier %s", name);
		else if ((val[n] = 0, strncmp(val, "mem", 3)))
			rc = bench_fail(0, "the prefetch left block %llu in '%s'",
					(unsigned long long)i, val);
	}
out:
	unlink(path);
	free(text);
	return rc;
}

struct reader {
	const struct wl *w;
	unsigned k;
	int rc;
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	const struct wl *w = r->w;
	char *buf = bench_alloc(1u << 20), path[PATH_MAX], name[33];

	if (!buf) {
		r->rc = -ENOMEM;
		return NULL;
	}
	for (uint64_t i = r->k; i < w->n && !r->rc; i += READERS) {
		int fd;

		block_name(name, w->salt, i);
		snprintf(path, sizeof(path), "%s/%s", w->dir, name);
		fd = open(path, O_RDONLY | O_DIRECT);
		if (fd < 0) {
			r->rc = bench_fail(errno, "open %s", path);
			break;
		}
		for (uint64_t off = 0; off < w->bsize && !r->rc; off += 1u << 20)
			if (pread(fd, buf, 1u << 20, (off_t)off) != 1 << 20)
				r->rc = bench_fail(errno, "pread %s", path);
		close(fd);
	}
	free(buf);
	return NULL;
}

/* READERS threads reading the blocks of w (each its share, 1 MiB O_DIRECT preads). */
static int readers(const struct wl *w, double *gbps)
{
	pthread_t t[READERS];
	struct reader r[READERS];
	double t0 = now_s();
	int rc = 0;

	for (unsigned k = 0; k < READERS; k++) {
		r[k] = (struct reader){ .w = w, .k = k };
		if (pthread_create(&t[k], NULL, reader_main, &r[k]))
			r[k].rc = bench_fail(EAGAIN, "pthread_create");
	}
	for (unsigned k = 0; k < READERS; k++) {
		pthread_join(t[k], NULL);
		rc = rc ? rc : r[k].rc;
	}
	*gbps = (double)(w->n * w->bsize) / (now_s() - t0) / 1e9;
	return rc;
}

/* How a trial finds the daemon before its loads. */
enum trial_kind {
	T_AT_ONCE,  /* mounted a moment before: its memory not ready */
	T_FRESH,    /* mounted, memory ready, nothing loaded yet */
	T_WARM,     /* the same daemon, which holds the other set: the loads evict it */
	T_READERS,  /* fresh, memory ready; READERS threads instead of a prefetch */
};

/*
 * TRIALS of one row, each with fio's floor just before its loads; the row is the median of
 * the loads, its floor the median of the floors (ready: the median time to memory ready).
 * T_WARM alternates sets a and b, each evicting the other. Stops at the first failure.
 */
static int trials(enum trial_kind k, const char *store, const char *codec, const struct wl *a,
		  const struct wl *b, uint64_t bytes, struct fig *v, struct fig *fl,
		  struct fig *ready)
{
	double x[TRIALS], f[TRIALS], r[TRIALS];
	int rc = 0;

	for (unsigned t = 0; t < TRIALS && !rc; t++) {
		const struct wl *w = k == T_WARM && t % 2 == 0 ? b : a;

		if (k == T_AT_ONCE)
			rc = fio_pair(bytes, &f[t]);
		if (rc == 0 && k != T_WARM)
			rc = restart(store, codec);
		r[t] = 0;
		if (rc == 0 && (k == T_FRESH || k == T_READERS))
			rc = wait_ready(now_s(), &r[t]);
		if (rc == 0 && k != T_AT_ONCE)
			rc = fio_pair(bytes, &f[t]);
		if (rc == 0)
			rc = k == T_READERS ? readers(w, &x[t]) : prefetch(w, &x[t]);
	}
	if (rc) {
		fig_set(v, rc, NAN); /* the failure, counted once; the rest say why they are empty */
		fig_skip(fl, "its trial failed");
		if (ready)
			fig_skip(ready, "its trial failed");
		return rc;
	}
	fig_set(v, 0, median(x, TRIALS));
	fig_set(fl, 0, median(f, TRIALS));
	if (ready)
		fig_set(ready, 0, median(r, TRIALS));
	return 0;
}

void run_prefetch(void)
{
	uint64_t bsize = R.c.sizes[0], n = blocks_for(bsize), bytes = n * bsize;
	char store[PATH_MAX], zstore[PATH_MAX];
	uint64_t mem = R.mem_size;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	struct pool pool = { 0 };
	struct wl a, b;
	double secs;
	int rc;

	for (struct fig *f = &P.fio; f <= &P.at_once; f++)
		*f = (struct fig)FIG_NONE;
	if (R.c.mnt) {
		fig_skip(&P.fresh, "--mnt: the daemon is not ours to restart");
		return;
	}
	phase_start("prefetch: fio floor");
	fio_floor(bytes);
	phase_start("prefetch: write");
	snprintf(store, sizeof(store), "%s/store-prefetch", R.tmp);
	snprintf(zstore, sizeof(zstore), "%s/store-prefetch-zstd", R.tmp);
	/* room for one set: prefetching the second evicts the first */
	R.mem_size = bytes + bytes / 8;
	rc = pool_make(&pool, bsize, 8, R.c.seed + 77);
	a = (struct wl){ .dir = R.mnt, .pool = &pool, .salt = R.c.seed + 1000, .n = n,
			 .bsize = bsize };
	b = a;
	b.salt = R.c.seed + 2000;
	if (rc == 0)
		rc = start(store, "none");
	if (rc == 0)
		rc = wl_write(&a, WM_DIRECT, &secs);
	if (rc == 0)
		rc = wl_write(&b, WM_DIRECT, &secs);
	if (rc == 0)
		rc = wl_sync(&a);
	if (rc == 0)
		rc = wl_sync(&b);
	if (rc) {
		struct fig *rows[] = { &P.at_once, &P.fresh, &P.warm, &P.readers };

		fig_set(rows[0], rc, NAN);
		for (unsigned i = 1; i < sizeof(rows) / sizeof(rows[0]); i++)
			fig_skip(rows[i], "skipped: writing the blocks failed");
	}
	phase_start("prefetch: daemon mounted a moment before");
	if (rc == 0)
		rc = trials(T_AT_ONCE, store, "none", &a, &b, bytes, &P.at_once, &P.fl_at, NULL);
	/* after that daemon, whose memory the system has back, as the next one will */
	phase_start("prefetch: first touch of fresh memory");
	if (R.ucm.pid)
		daemon_stop(&R.ucm);
	P.touch_s.v = floor_first_touch(R.mem_size, cpus > 0 ? (unsigned)cpus : 1);
	fig_set(&P.touch_s, isnan(P.touch_s.v) ? -EIO : 0, P.touch_s.v);
	phase_start("prefetch: fresh daemon");
	if (rc == 0)
		rc = trials(T_FRESH, store, "none", &a, &b, bytes, &P.fresh, &P.fl_fresh,
			    &P.ready);
	phase_start("prefetch: warm daemon");
	if (rc == 0)
		rc = trials(T_WARM, store, "none", &a, &b, bytes, &P.warm, &P.fl_warm, NULL);
	phase_start("prefetch: readers of cold blocks");
	if (rc == 0)
		trials(T_READERS, store, "none", &a, &b, bytes, &P.readers, &P.fl_readers, NULL);
	if (R.ucm.pid)
		daemon_stop(&R.ucm);
	rm_rf(store);
	{
		/* the rows after a phase that failed were not measured: say so */
		struct fig *rows[] = { &P.fresh, &P.ready, &P.warm, &P.readers };

		for (unsigned i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
			if (isnan(rows[i]->v) && !rows[i]->note[0])
				fig_skip(rows[i], "skipped: an earlier load phase failed");
	}
	phase_start("prefetch: default compression");
	rc = pool.n ? start(zstore, "zstd:1") : -ENOMEM;
	if (rc == 0)
		rc = wl_write(&a, WM_DIRECT, &secs);
	if (rc == 0)
		rc = wl_sync(&a);
	if (rc)
		fig_set(&P.zstd, rc, NAN);
	else
		trials(T_FRESH, zstore, "zstd:1", &a, &b, bytes, &P.zstd, &P.fl_zstd, NULL);
	if (R.ucm.pid)
		daemon_stop(&R.ucm);
	rm_rf(zstore);
	unlink(P.fio_path);
	pool_free(&pool);
	R.mem_size = mem;
}

void prefetch_rows(void)
{
	uint64_t bsize = R.c.sizes[0], bytes = blocks_for(bsize) * bsize;
	char fig[96], fl[96], sz[16], msz[16], note[300];

	size_label(bytes, sz, sizeof(sz));
	size_label(bytes + bytes / 8, msz, sizeof(msz));
	snprintf(fl, sizeof(fl), "fio 1M O_DIRECT read, QD%u, just before", P.fio_depth);
	if (P.fio_detail[0]) {
		/* on the first row only */
		snprintf(note, sizeof(note), "fio's depth chosen by one run at each, GB/s: %s",
			 P.fio_detail);
		fig_note(&P.fl_fresh, note);
	}
#define PROW(id, fmt, f, floor)                                                                \
	do {                                                                                   \
		snprintf(fig, sizeof(fig), fmt, sz);                                           \
		emit(id, bsize, fig, f, "GB/s", ROW_RATE, fl, floor);                          \
	} while (0)
	PROW("prefetch.fresh", "prefetch %s cold, fresh daemon", &P.fresh, &P.fl_fresh);
	PROW("prefetch.warm", "prefetch %s cold, warm daemon", &P.warm, &P.fl_warm);
	PROW("prefetch.readers", "8 readers of %s cold blocks", &P.readers, &P.fl_readers);
	PROW("prefetch.zstd", "prefetch %s cold, zstd:1, fresh", &P.zstd, &P.fl_zstd);
#undef PROW
	snprintf(fig, sizeof(fig), "fresh daemon: %s of memory ready", msz);
	snprintf(fl, sizeof(fl), "first touch of %s, every CPU", msz);
	emit("prefetch.ready_s", bsize, fig, &P.ready, "s", ROW_COST, fl, &P.touch_s);
	snprintf(fig, sizeof(fig), "prefetch %s cold, mounted just before", sz);
	snprintf(fl, sizeof(fl), "fio 1M O_DIRECT read, QD%u, just before", P.fio_depth);
	fig_note(&P.at_once, "its loads and the prefaulter touch fresh memory at once");
	emit("prefetch.at_once", bsize, fig, &P.at_once, "GB/s", ROW_RATE, fl, &P.fl_at);
}
