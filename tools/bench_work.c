/*
 * ucm-bench workloads (bench_util.h). Each runs on a directory of block files, so the same
 * code measures ucmfs, the nullfs floor and the plain-directory peer. A failure is recorded
 * with bench_fail() (operation, file, errno) and returned; nothing is retried, so a daemon
 * error shows up as a failed row, never as a slower one.
 */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "tools/bench_util.h"

static void block_path(const struct wl *w, uint64_t i, char *path, size_t len)
{
	char name[33];

	block_name(name, w->salt, i);
	snprintf(path, len, "%s/%s", w->dir, name);
}

static int pwrite_all(int fd, const char *buf, size_t len, const char *path)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pwrite(fd, buf + done, len - done, (off_t)done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return bench_fail(n < 0 ? errno : EIO, "pwrite %s at %zu", path, done);
		done += (size_t)n;
	}
	return 0;
}

/* pread exactly len bytes at off, or fail (a short read of a committed block is a bug). */
static int pread_full(int fd, char *buf, size_t len, uint64_t off, const char *path)
{
	ssize_t n;

	do
		n = pread(fd, buf, len, (off_t)off);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return bench_fail(errno, "pread %s at %llu", path, (unsigned long long)off);
	if ((size_t)n != len)
		return bench_fail(0, "pread %s at %llu: %zd bytes instead of %zu", path,
				  (unsigned long long)off, n, len);
	return 0;
}

static int write_block(const struct wl *w, uint64_t i, enum wmode m, const char *path)
{
	char tmp[PATH_MAX];
	const char *target = path;
	int fd, rc;

	if (m != WM_DIRECT) {
		snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
		target = tmp;
	}
	fd = open(target, O_CREAT | O_WRONLY | (m == WM_DIRECT ? 0 : O_TRUNC), 0644);
	if (fd < 0)
		return bench_fail(errno, "open(O_CREAT) %s", target);
	rc = pwrite_all(fd, pool_block(w->pool, i), w->bsize, target);
	if (rc == 0 && m == WM_TMP_FSYNC && fsync(fd))
		rc = bench_fail(errno, "fsync %s", target);
	/* on ucmfs the close commits: its error is the commit's */
	if (close(fd) && rc == 0)
		rc = bench_fail(errno, "close %s", target);
	if (rc == 0 && m != WM_DIRECT && rename(tmp, path))
		rc = bench_fail(errno, "rename %s", tmp);
	return rc;
}

int wl_write(const struct wl *w, enum wmode m, double *secs)
{
	char path[PATH_MAX];
	double t0 = now_s();
	int rc;

	for (uint64_t i = 0; i < w->n; i++) {
		block_path(w, i, path, sizeof(path));
		rc = write_block(w, i, m, path);
		if (rc)
			return rc;
	}
	*secs = now_s() - t0;
	return 0;
}

int wl_sync(const struct wl *w)
{
	char path[PATH_MAX];
	int fd, rc = 0;

	for (uint64_t i = 0; i < w->n && !rc; i++) {
		block_path(w, i, path, sizeof(path));
		fd = open(path, O_RDONLY);
		if (fd < 0)
			return bench_fail(errno, "open %s", path);
		if (fsync(fd))
			rc = bench_fail(errno, "fsync %s", path);
		close(fd);
	}
	return rc;
}

/* One pass over a block: preads of fd, or copies out of its mapping map (if not NULL). */
static int read_pass(int fd, const char *map, char *buf, size_t req, uint64_t bsize,
		     const char *path)
{
	for (uint64_t off = 0; off < bsize; off += req) {
		size_t len = bsize - off < req ? (size_t)(bsize - off) : req;
		int rc = 0;

		if (map)
			memcpy(buf, map + off, len);
		else
			rc = pread_full(fd, buf, len, off, path);
		if (rc)
			return rc;
	}
	return 0;
}

/* Drop the page cache of one file (its clean pages), so that the next read reaches the
 * filesystem: fadvise works on FUSE files as on any other. 0 or -errno. */
static int drop_file_cache(const char *path)
{
	int fd = open(path, O_RDONLY), rc = 0;

	if (fd < 0)
		return bench_fail(errno, "open %s", path);
	rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
	return rc ? bench_fail(rc, "posix_fadvise(DONTNEED) %s", path) : 0;
}

int wl_read(const struct wl *w, unsigned flags, size_t req, double min_secs, double *first,
	    double *reread)
{
	char path[PATH_MAX];
	char *buf = bench_alloc(req), *map = NULL;
	double t1 = 0, t2 = 0, t;
	uint64_t i;
	int fd, rc = 0;

	if (!buf)
		return bench_fail(ENOMEM, "read buffer");
	for (i = 0; (min_secs > 0 ? i == 0 || t1 < min_secs : i < w->n) && !rc; i++) {
		block_path(w, i % w->n, path, sizeof(path));
		if ((flags & RD_DROP) && (rc = drop_file_cache(path)))
			break;
		t = now_s();
		fd = open(path, O_RDONLY | (flags & RD_DIRECT ? O_DIRECT : 0));
		if (fd < 0) {
			rc = bench_fail(errno, "open %s", path);
			break;
		}
		if (flags & RD_MMAP) {
			map = mmap(NULL, w->bsize, PROT_READ, MAP_SHARED, fd, 0);
			if (map == MAP_FAILED) {
				rc = bench_fail(errno, "mmap %s", path);
				close(fd);
				break;
			}
		}
		rc = read_pass(fd, map, buf, req, w->bsize, path);
		t1 += now_s() - t;
		if (rc == 0 && reread) {
			t = now_s();
			rc = read_pass(fd, map, buf, req, w->bsize, path);
			t2 += now_s() - t;
		}
		if (map)
			munmap(map, w->bsize);
		map = NULL;
		close(fd);
	}
	free(buf);
	if (rc)
		return rc;
	*first = (double)(i * w->bsize) / t1 / 1e9;
	if (reread)
		*reread = (double)(i * w->bsize) / t2 / 1e9;
	return 0;
}

int wl_verify(const struct wl *w)
{
	char path[PATH_MAX];
	char *buf = bench_alloc(w->bsize);
	int fd, rc = 0;

	if (!buf)
		return bench_fail(ENOMEM, "verify buffer");
	for (uint64_t i = 0; i < w->n && !rc; i++) {
		block_path(w, i, path, sizeof(path));
		fd = open(path, O_RDONLY);
		if (fd < 0) {
			rc = bench_fail(errno, "open %s", path);
			break;
		}
		for (uint64_t off = 0; off < w->bsize && !rc; off += REQ_SIZE) {
			size_t len = w->bsize - off < REQ_SIZE ? w->bsize - off : REQ_SIZE;

			rc = pread_full(fd, buf + off, len, off, path);
		}
		close(fd);
		if (rc == 0 && memcmp(buf, pool_block(w->pool, i), w->bsize)) {
			const char *want = pool_block(w->pool, i);
			uint64_t off = 0;

			while (buf[off] == want[off])
				off++;
			rc = bench_fail(0, "DATA MISMATCH: %s differs from what was written at "
					   "byte %llu", path, (unsigned long long)off);
			rc = -EILSEQ;
		}
	}
	free(buf);
	return rc;
}

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

int wl_shards(const struct wl *w, size_t shard, uint64_t seed, double *mean_us)
{
	char path[PATH_MAX];
	uint64_t rng = seed | 1, nshards;
	char *buf;
	double t0;
	int fd, rc = 0;

	if (shard > w->bsize)
		shard = (size_t)w->bsize;
	nshards = w->bsize / shard;
	buf = bench_alloc(shard);
	if (!buf)
		return bench_fail(ENOMEM, "shard buffer");
	t0 = now_s();
	for (uint64_t i = 0; i < w->n && !rc; i++) {
		block_path(w, i, path, sizeof(path));
		fd = open(path, O_RDONLY | O_DIRECT);
		if (fd < 0) {
			rc = bench_fail(errno, "open %s", path);
			break;
		}
		rc = pread_full(fd, buf, shard, (xorshift(&rng) % nshards) * shard, path);
		close(fd);
	}
	*mean_us = (now_s() - t0) / (double)w->n * 1e6;
	free(buf);
	return rc;
}

int wl_stored_ratio(const struct wl *w, double *ratio)
{
	char path[PATH_MAX];
	uint64_t raw = 0, stored = 0;
	struct stat st;

	for (uint64_t i = 0; i < w->n; i++) {
		block_path(w, i, path, sizeof(path));
		if (stat(path, &st))
			return bench_fail(errno, "stat %s", path);
		raw += (uint64_t)st.st_size;
		stored += (uint64_t)st.st_blocks * 512;
	}
	if (!stored)
		return bench_fail(0, "st_blocks is 0 for every block (nothing on disk?)");
	*ratio = (double)raw / (double)stored;
	return 0;
}

/* count paths of the set, cycling over it (caller frees the array and each string). */
static char **set_paths(const struct wl *w, unsigned count)
{
	char path[PATH_MAX];
	char **p = calloc(count, sizeof(*p));

	for (unsigned i = 0; p && i < count; i++) {
		block_path(w, i % w->n, path, sizeof(path));
		p[i] = strdup(path);
		if (!p[i]) {
			while (i--)
				free(p[i]);
			free(p);
			return NULL;
		}
	}
	return p;
}

static void free_paths(char **p, unsigned count)
{
	for (unsigned i = 0; p && i < count; i++)
		free(p[i]);
	free(p);
}

int wl_stat(const struct wl *w, unsigned count, unsigned batches, double *us)
{
	char **paths = set_paths(w, count);
	double t[64];
	struct stat st;
	int rc = 0;

	if (!paths)
		return bench_fail(ENOMEM, "paths");
	if (batches > 64)
		batches = 64;
	for (unsigned b = 0; b < batches && !rc; b++) {
		double t0 = now_s();

		for (unsigned i = 0; i < count; i++) {
			if (stat(paths[i], &st)) {
				rc = bench_fail(errno, "stat %s", paths[i]);
				break;
			}
		}
		t[b] = (now_s() - t0) * 1e6;
	}
	free_paths(paths, count);
	if (rc == 0)
		*us = median(t, batches);
	return rc;
}

int wl_query(const struct wl *w, const char *qdir, unsigned count, unsigned batches,
	     double *us, double *answer_us)
{
	char path[PATH_MAX], name[33], val[64];
	char *text = malloc((size_t)count * 33 + 1);
	double t[64], ta[64], tg;
	size_t len = 0;
	ssize_t n;
	int fd, rc = 0;

	if (!text)
		return bench_fail(ENOMEM, "query text");
	for (unsigned i = 0; i < count; i++) {
		block_name(name, w->salt, i % w->n);
		memcpy(text + len, name, 32);
		text[len + 32] = '\n';
		len += 33;
	}
	snprintf(path, sizeof(path), "%s/bench-%d", qdir, (int)getpid());
	if (batches > 64)
		batches = 64;
	for (unsigned b = 0; b < batches && !rc; b++) {
		double t0 = now_s();

		fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
		if (fd < 0) {
			rc = bench_fail(errno, "open(O_CREAT) %s", path);
			break;
		}
		rc = pwrite_all(fd, text, len, path);
		if (close(fd) && !rc)
			rc = bench_fail(errno, "close %s", path);
		tg = now_s();
		n = rc ? -1 : getxattr(path, "user.ucm.prefix", val, sizeof(val) - 1);
		t[b] = (now_s() - t0) * 1e6;
		ta[b] = (now_s() - tg) * 1e6;
		if (!rc && n < 0)
			rc = bench_fail(errno, "getxattr user.ucm.prefix %s", path);
		if (!rc) {
			val[n] = 0;
			if (strtoull(val, NULL, 10) != count)
				rc = bench_fail(0, "query of %u present ids: user.ucm.prefix is '%s'",
						count, val);
		}
	}
	unlink(path);
	free(text);
	if (rc == 0) {
		*us = median(t, batches);
		*answer_us = median(ta, batches);
	}
	return rc;
}

int wl_readdir(const char *dir, uint64_t *entries, double *secs)
{
	double t0 = now_s();
	struct dirent *de;
	uint64_t n = 0;
	DIR *d;

	d = opendir(dir);
	if (!d)
		return bench_fail(errno, "opendir %s", dir);
	errno = 0;
	while ((de = readdir(d)))
		n += strlen(de->d_name) == 32;
	if (errno) {
		int err = errno;

		closedir(d);
		return bench_fail(err, "readdir %s after %llu entries", dir,
				  (unsigned long long)n);
	}
	closedir(d);
	*secs = now_s() - t0;
	*entries = n;
	return 0;
}

void wl_unlink(const struct wl *w)
{
	char path[PATH_MAX];

	for (uint64_t i = 0; i < w->n; i++) {
		block_path(w, i, path, sizeof(path));
		unlink(path);
	}
}

/* --- mixed readers and writers ----------------------------------------------------------- */

struct mixed_ctx {
	const struct wl *w;
	uint64_t wsalt;
	_Atomic uint64_t next_write;
	atomic_bool go, stop;
};

struct mixed_thread {
	struct mixed_ctx *c;
	pthread_t tid;
	bool writer;
	unsigned index;
	double *lat; /* milliseconds per op */
	size_t nlat, cap;
	uint64_t bytes;
	int err;
	char errmsg[512];
};

static int lat_push(struct mixed_thread *t, double ms)
{
	if (t->nlat == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 1024;
		double *n = realloc(t->lat, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		t->lat = n;
		t->cap = cap;
	}
	t->lat[t->nlat++] = ms;
	return 0;
}

static int mixed_read_one(struct mixed_thread *t, char *buf, uint64_t *rng)
{
	const struct wl *w = t->c->w;
	char path[PATH_MAX];
	int fd, rc;

	block_path(w, xorshift(rng) % w->n, path, sizeof(path));
	fd = open(path, O_RDONLY | O_DIRECT);
	if (fd < 0)
		return bench_fail(errno, "open %s", path);
	rc = read_pass(fd, NULL, buf, REQ_SIZE, w->bsize, path);
	close(fd);
	return rc;
}

static int mixed_write_one(struct mixed_thread *t)
{
	struct wl nw = *t->c->w;
	char path[PATH_MAX];
	uint64_t k = atomic_fetch_add(&t->c->next_write, 1);

	nw.salt = t->c->wsalt;
	block_path(&nw, k, path, sizeof(path));
	return write_block(&nw, k, WM_DIRECT, path);
}

static void *mixed_main(void *arg)
{
	struct mixed_thread *t = arg;
	uint64_t rng = 0x9e3779b97f4a7c15ull * (t->index + 1);
	char *buf = t->writer ? NULL : bench_alloc(REQ_SIZE);
	int rc = 0;

	while (!atomic_load(&t->c->go))
		usleep(100);
	if (!t->writer && !buf)
		rc = bench_fail(ENOMEM, "read buffer");
	while (!rc && !atomic_load(&t->c->stop)) {
		double t0 = now_s();

		rc = t->writer ? mixed_write_one(t) : mixed_read_one(t, buf, &rng);
		if (!rc)
			rc = lat_push(t, (now_s() - t0) * 1e3);
		t->bytes += rc ? 0 : t->c->w->bsize;
	}
	if (rc) {
		t->err = rc;
		snprintf(t->errmsg, sizeof(t->errmsg), "%s", bench_last_error());
		atomic_store(&t->c->stop, true);
	}
	free(buf);
	return NULL;
}

/* Percentiles of the latencies of every thread of one kind. */
static void mixed_pcts(struct mixed_thread *th, unsigned n, bool writer, double *p50,
		       double *p99, uint64_t *ops)
{
	size_t total = 0, k = 0;
	double *all;

	for (unsigned i = 0; i < n; i++)
		total += th[i].writer == writer ? th[i].nlat : 0;
	*ops = total;
	*p50 = *p99 = NAN;
	all = malloc((total ? total : 1) * sizeof(*all));
	if (!all)
		return;
	for (unsigned i = 0; i < n; i++)
		if (th[i].writer == writer) {
			memcpy(all + k, th[i].lat, th[i].nlat * sizeof(*all));
			k += th[i].nlat;
		}
	median(all, total); /* sorts */
	*p50 = percentile_sorted(all, total, 50);
	*p99 = percentile_sorted(all, total, 99);
	free(all);
}

int wl_mixed(const struct wl *w, uint64_t wsalt, unsigned readers, unsigned writers,
	     double secs, struct mixed_res *res, uint64_t *written)
{
	unsigned n = readers + writers, started = 0;
	struct mixed_thread *th = calloc(n, sizeof(*th));
	struct mixed_ctx c = { .w = w, .wsalt = wsalt };
	uint64_t bytes = 0;
	double t0, el;
	int rc = 0;

	if (!th)
		return bench_fail(ENOMEM, "threads");
	for (unsigned i = 0; i < n; i++) {
		th[i].c = &c;
		th[i].writer = i >= readers;
		th[i].index = i;
		rc = pthread_create(&th[i].tid, NULL, mixed_main, &th[i]);
		if (rc) {
			rc = bench_fail(rc, "pthread_create");
			atomic_store(&c.stop, true);
			break;
		}
		started++;
	}
	t0 = now_s();
	atomic_store(&c.go, true);
	while (!atomic_load(&c.stop) && now_s() - t0 < secs)
		usleep(10000);
	atomic_store(&c.stop, true);
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i].tid, NULL);
	el = now_s() - t0;
	for (unsigned i = 0; i < n; i++) {
		bytes += th[i].bytes;
		if (th[i].err && !rc)
			rc = bench_fail(0, "%s", th[i].errmsg);
	}
	*written = atomic_load(&c.next_write);
	if (rc == 0 && started < n)
		rc = -EAGAIN;
	if (rc == 0) {
		res->gbps = (double)bytes / el / 1e9;
		mixed_pcts(th, n, false, &res->rp50, &res->rp99, &res->reads);
		mixed_pcts(th, n, true, &res->wp50, &res->wp99, &res->writes);
	}
	for (unsigned i = 0; i < n; i++)
		free(th[i].lat);
	free(th);
	return rc;
}
