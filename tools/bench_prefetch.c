/*
 * ucm-bench: loads from disk, the figure users feel as time to first token (an engine that
 * finds a long prefix on disk asks for all of it at once and waits), against the disk read at
 * the depth it likes best.
 *
 *   floor:  fio, 1 MiB O_DIRECT sequential reads of a file of the same size, at queue depths
 *           16 ... 256: the best (the host behind a virtual disk answers differently by depth)
 *   rows:   user.ucm.prefetch of every block of a set, polled until done, in a fresh daemon
 *           (its memory never used) and in a warm one (its memory used once: a second set
 *           that evicts the first); readers of cold blocks in parallel; the same prefetch
 *           with the default compression, in logical bytes per second
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

static struct {
	struct fig fio, fresh, warm, readers, zstd;
	unsigned fio_depth;
	char fio_detail[200];
} P = { FIG_NONE, FIG_NONE, FIG_NONE, FIG_NONE, FIG_NONE, 0, "" };

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

	snprintf(path, sizeof(path), "%s/fio.dat", R.tmp);
	/* lay the file out (fio writes it when it is missing or short) */
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
	unlink(path);
	fig_set(&P.fio, rc, best);
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

void run_prefetch(void)
{
	uint64_t bsize = R.c.sizes[0], n = blocks_for(bsize), bytes = n * bsize;
	char store[PATH_MAX], zstore[PATH_MAX];
	uint64_t mem = R.mem_size;
	struct pool pool = { 0 };
	struct wl a, b;
	double secs, x = 0;
	int rc;

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
	phase_start("prefetch: fresh daemon");
	if (rc == 0)
		rc = restart(store, "none");
	if (rc == 0)
		rc = prefetch(&a, &x);
	fig_set(&P.fresh, rc, x);
	phase_start("prefetch: warm daemon");
	if (rc == 0 && R.can_drop)
		drop_caches();
	if (rc == 0)
		rc = prefetch(&b, &x);
	fig_set(&P.warm, rc, x);
	phase_start("prefetch: readers of cold blocks");
	if (rc == 0)
		rc = restart(store, "none");
	if (rc == 0)
		rc = readers(&a, &x);
	fig_set(&P.readers, rc, x);
	if (R.ucm.pid)
		daemon_stop(&R.ucm);
	rm_rf(store);
	phase_start("prefetch: default compression");
	rc = pool.n ? start(zstore, "zstd:1") : -ENOMEM;
	if (rc == 0)
		rc = wl_write(&a, WM_DIRECT, &secs);
	if (rc == 0)
		rc = wl_sync(&a);
	if (rc == 0)
		rc = restart(zstore, "zstd:1");
	if (rc == 0)
		rc = prefetch(&a, &x);
	fig_set(&P.zstd, rc, x);
	if (R.ucm.pid)
		daemon_stop(&R.ucm);
	rm_rf(zstore);
	pool_free(&pool);
	R.mem_size = mem;
}

void prefetch_rows(void)
{
	uint64_t bsize = R.c.sizes[0], bytes = blocks_for(bsize) * bsize;
	char fig[96], fl[96], sz[16], note[300];

	size_label(bytes, sz, sizeof(sz));
	snprintf(fl, sizeof(fl), "fio 1M O_DIRECT read, best QD (%u)", P.fio_depth);
	if (P.fio_detail[0]) {
		/* on the first row only */
		snprintf(note, sizeof(note), "the floor, fio by depth, GB/s: %s", P.fio_detail);
		fig_note(&P.fresh, note);
	}
#define PROW(id, fmt, f)                                                                       \
	do {                                                                                   \
		snprintf(fig, sizeof(fig), fmt, sz);                                           \
		emit(id, bsize, fig, f, "GB/s", ROW_RATE, fl, &P.fio);                         \
	} while (0)
	PROW("prefetch.fresh", "prefetch %s cold, fresh daemon", &P.fresh);
	PROW("prefetch.warm", "prefetch %s cold, warm daemon", &P.warm);
	PROW("prefetch.readers", "8 readers of %s cold blocks", &P.readers);
	PROW("prefetch.zstd", "prefetch %s cold, zstd:1, fresh", &P.zstd);
#undef PROW
}
