/*
 * ucmfs client (see ucmfs.h). Blocks are files MNT/<hex>; lookups, TTL extensions and
 * prefetches are query files MNT/.ucm/query/<name>: created exclusively, unlinked at once (so
 * a crashed client leaves nothing behind; the open descriptor keeps the query alive), filled
 * with hex ids and answered by fgetxattr on that descriptor.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "ucmfs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

/* ids per query file: 33 bytes each stays under the daemon's 1 MiB per query file, and the
 * hit mask (one byte per id) under the 64 KiB limit of an extended attribute */
#define QUERY_BATCH 30000
#define IO_CHUNK (64u << 20)

struct ucmfs {
	char *root;   /* mount point, absolute when possible */
	int dfd;      /* the mount's root directory */
	int qfd;      /* MNT/.ucm/query */
	atomic_uint seq;
};

struct ucmfs_writer {
	struct ucmfs *u;
	int fd;
	uint64_t size;
	unsigned flags;
	int64_t ttl_ms;
};

struct ucmfs_prefetch {
	int *fds;     /* one query file per batch; -1 once known done */
	size_t nfds;
};

/* --- ids ------------------------------------------------------------------------------ */

static const char hexdig[] = "0123456789abcdef";

void ucmfs_id_format(const ucmfs_id id, char hex[UCMFS_HEX_LEN + 1])
{
	for (int i = 0; i < UCMFS_ID_LEN; i++) {
		hex[2 * i] = hexdig[id[i] >> 4];
		hex[2 * i + 1] = hexdig[id[i] & 15];
	}
	hex[UCMFS_HEX_LEN] = '\0';
}

static int nibble(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

int ucmfs_id_parse(const char *hex, size_t len, ucmfs_id out)
{
	if (len != UCMFS_HEX_LEN)
		return -EINVAL;
	for (int i = 0; i < UCMFS_ID_LEN; i++) {
		int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return -EINVAL;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

/* --- mount ---------------------------------------------------------------------------- */

int ucmfs_open(const char *mountpoint, struct ucmfs **out)
{
	struct ucmfs *u = calloc(1, sizeof(*u));
	int rc;

	if (!u)
		return -ENOMEM;
	u->dfd = u->qfd = -1;
	u->root = realpath(mountpoint, NULL);
	if (!u->root)
		u->root = strdup(mountpoint);
	rc = -ENOMEM;
	if (!u->root)
		goto err;
	u->dfd = open(mountpoint, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (u->dfd < 0) {
		rc = -errno;
		goto err;
	}
	u->qfd = openat(u->dfd, ".ucm/query", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (u->qfd < 0) {
		rc = errno == ENOENT ? -ENOTDIR : -errno;
		goto err;
	}
	*out = u;
	return 0;
err:
	ucmfs_close(u);
	return rc;
}

void ucmfs_close(struct ucmfs *u)
{
	if (!u)
		return;
	if (u->dfd >= 0)
		close(u->dfd);
	if (u->qfd >= 0)
		close(u->qfd);
	free(u->root);
	free(u);
}

int ucmfs_dirfd(const struct ucmfs *u)
{
	return u->dfd;
}

/* --- writing -------------------------------------------------------------------------- */

static int write_all(int fd, const void *buf, size_t len, uint64_t off)
{
	const char *p = buf;

	while (len) {
		ssize_t n = pwrite(fd, p, len < IO_CHUNK ? len : IO_CHUNK, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		p += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

static int set_ttl_fd(int fd, int64_t ttl_ms)
{
	char v[32];
	int n = snprintf(v, sizeof(v), "%lld", (long long)ttl_ms);

	return fsetxattr(fd, "user.ucm.ttl", v, (size_t)n, 0) ? -errno : 0;
}

int ucmfs_writer_begin(struct ucmfs *u, const ucmfs_id id, uint64_t size,
		       const struct ucmfs_put_opts *opts, struct ucmfs_writer **out)
{
	struct ucmfs_writer *w = calloc(1, sizeof(*w));
	char hex[UCMFS_HEX_LEN + 1];
	int flags = O_WRONLY | O_CREAT | O_CLOEXEC, rc;

	*out = NULL;
	if (!w)
		return -ENOMEM;
	w->u = u;
	w->size = size;
	w->flags = opts ? opts->flags : 0;
	w->ttl_ms = opts ? opts->ttl_ms : 0;
	flags |= (w->flags & UCMFS_PUT_REPLACE) ? O_TRUNC : O_EXCL;
	ucmfs_id_format(id, hex);
	w->fd = openat(u->dfd, hex, flags, 0644);
	if (w->fd < 0) {
		rc = errno == EEXIST ? 1 : -errno;
		free(w);
		return rc;
	}
	/* the TTL before anything else (it counts from the commit all the same): a mount whose
	 * topology routes by TTL then places the block in its branch before its first byte */
	rc = w->ttl_ms > 0 ? set_ttl_fd(w->fd, w->ttl_ms) : 0;
	/* declare the size: the commit then needs every byte of it */
	if (rc == 0 && ftruncate(w->fd, (off_t)size))
		rc = -errno;
	if (rc) {
		/* a byte declared and never written: the close publishes nothing */
		if (ftruncate(w->fd, (off_t)size + 1))
			rc = rc ? rc : -errno;
		close(w->fd);
		free(w);
		return rc;
	}
	*out = w;
	return 0;
}

int ucmfs_writer_write(struct ucmfs_writer *w, const void *buf, size_t len, uint64_t off)
{
	if (off > w->size || len > w->size - off)
		return -EFBIG;
	return write_all(w->fd, buf, len, off);
}

int ucmfs_writer_commit(struct ucmfs_writer *w)
{
	int rc = 0;

	if ((w->flags & UCMFS_PUT_DURABLE) && fsync(w->fd))
		rc = -errno;
	if (rc) {
		ucmfs_writer_abort(w);
		return rc;
	}
	if (close(w->fd))
		rc = -errno;
	free(w);
	return rc;
}

void ucmfs_writer_abort(struct ucmfs_writer *w)
{
	if (!w)
		return;
	/* one byte more than was written: the reservation is incomplete, nothing publishes */
	if (ftruncate(w->fd, (off_t)w->size + 1) == 0)
		w->size++;
	close(w->fd);
	free(w);
}

int ucmfs_put(struct ucmfs *u, const ucmfs_id id, const void *buf, size_t len,
	      const struct ucmfs_put_opts *opts)
{
	struct ucmfs_writer *w;
	int rc = ucmfs_writer_begin(u, id, len, opts, &w);

	if (rc)
		return rc;
	rc = write_all(w->fd, buf, len, 0);
	if (rc) {
		ucmfs_writer_abort(w);
		return rc;
	}
	return ucmfs_writer_commit(w);
}

/* --- reading -------------------------------------------------------------------------- */

static int open_block(struct ucmfs *u, const ucmfs_id id, unsigned flags)
{
	char hex[UCMFS_HEX_LEN + 1];
	int fd;

	ucmfs_id_format(id, hex);
	fd = openat(u->dfd, hex,
		    O_RDONLY | O_CLOEXEC | ((flags & UCMFS_GET_DIRECT) ? O_DIRECT : 0));
	if (fd < 0 && errno == EINVAL && (flags & UCMFS_GET_DIRECT))
		fd = openat(u->dfd, hex, O_RDONLY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

static ssize_t read_fd(int fd, void *buf, size_t len, uint64_t off)
{
	char *p = buf;
	size_t done = 0;

	while (done < len) {
		size_t want = len - done < IO_CHUNK ? len - done : IO_CHUNK;
		ssize_t n = pread(fd, p + done, want, (off_t)(off + done));

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		done += (size_t)n;
	}
	return (ssize_t)done;
}

ssize_t ucmfs_get(struct ucmfs *u, const ucmfs_id id, void *buf, size_t len, uint64_t off,
		  unsigned flags)
{
	int fd = open_block(u, id, flags);
	ssize_t n;

	if (fd < 0)
		return fd;
	n = read_fd(fd, buf, len, off);
	close(fd);
	return n;
}

int ucmfs_get_shard(struct ucmfs *u, const ucmfs_id id, uint64_t index, size_t shard_size,
		    void *buf, unsigned flags)
{
	ssize_t n;

	if (shard_size && index > UINT64_MAX / shard_size)
		return -EINVAL;
	n = ucmfs_get(u, id, buf, shard_size, index * shard_size, flags);
	if (n < 0)
		return (int)n;
	if (n == 0 && shard_size)
		return -ENXIO;
	return (size_t)n == shard_size ? 0 : -EIO;
}

static int get_attr(const char *path, const char *name, char *buf, size_t len)
{
	ssize_t n = getxattr(path, name, buf, len - 1);

	if (n < 0)
		return -errno;
	buf[n] = '\0';
	return 0;
}

int ucmfs_stat(struct ucmfs *u, const ucmfs_id id, struct ucmfs_info *out)
{
	char hex[UCMFS_HEX_LEN + 1], path[PATH_MAX], v[32];
	struct stat st;
	int rc;

	ucmfs_id_format(id, hex);
	if (fstatat(u->dfd, hex, &st, 0))
		return -errno;
	memset(out, 0, sizeof(*out));
	out->size = (uint64_t)st.st_size;
	snprintf(path, sizeof(path), "%s/%s", u->root, hex);
	rc = get_attr(path, "user.ucm.tier", out->tier, sizeof(out->tier));
	if (rc == 0)
		rc = get_attr(path, "user.ucm.codec", out->codec, sizeof(out->codec));
	if (rc == 0 && (rc = get_attr(path, "user.ucm.stored", v, sizeof(v))) == 0)
		out->stored = strtoull(v, NULL, 10);
	if (rc == 0 && (rc = get_attr(path, "user.ucm.pins", v, sizeof(v))) == 0)
		out->pins = (unsigned)strtoul(v, NULL, 10);
	if (rc == 0 && (rc = get_attr(path, "user.ucm.ttl", v, sizeof(v))) == 0)
		out->ttl_ms = strcmp(v, "none") ? strtoll(v, NULL, 10) : UCMFS_TTL_NONE;
	return rc == -ENODATA ? -ENOENT : rc;
}

/* --- query files ---------------------------------------------------------------------- */

/* A fresh, already unlinked query file holding ids[0..n). The descriptor or -errno. */
static int query_file(struct ucmfs *u, const ucmfs_id *ids, size_t n)
{
	char name[96], *text;
	int fd, rc;

	for (int tries = 0;; tries++) {
		snprintf(name, sizeof(name), ".client.%d.%ld.%u", (int)getpid(),
			 (long)gettid(), atomic_fetch_add(&u->seq, 1));
		fd = openat(u->qfd, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd >= 0 || errno != EEXIST || tries > 100)
			break;
	}
	if (fd < 0)
		return -errno;
	unlinkat(u->qfd, name, 0);
	text = malloc(n * (UCMFS_HEX_LEN + 1) + 1);
	if (!text) {
		close(fd);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		ucmfs_id_format(ids[i], text + i * (UCMFS_HEX_LEN + 1));
		text[i * (UCMFS_HEX_LEN + 1) + UCMFS_HEX_LEN] = '\n';
	}
	rc = write_all(fd, text, n * (UCMFS_HEX_LEN + 1), 0);
	free(text);
	if (rc) {
		close(fd);
		return rc;
	}
	return fd;
}

int ucmfs_lookup(struct ucmfs *u, const ucmfs_id *ids, size_t n, struct ucmfs_lookup_result *r,
		 uint8_t *hits)
{
	char *mask = malloc(QUERY_BATCH + 1);
	bool in_prefix = true;
	int rc = 0;

	memset(r, 0, sizeof(*r));
	r->last = -1;
	if (!mask)
		return -ENOMEM;
	for (size_t base = 0; base < n && rc == 0; base += QUERY_BATCH) {
		size_t cnt = n - base < QUERY_BATCH ? n - base : QUERY_BATCH;
		int fd = query_file(u, ids + base, cnt);
		ssize_t got;

		if (fd < 0) {
			rc = fd;
			break;
		}
		/* one getxattr: the hit mask; prefix and last follow from it */
		got = fgetxattr(fd, "user.ucm.hits", mask, QUERY_BATCH + 1);
		rc = got < 0 ? -errno : (size_t)got != cnt ? -EPROTO : 0;
		close(fd);
		for (size_t i = 0; rc == 0 && i < cnt; i++) {
			bool hit = mask[i] == '1';

			if (hits)
				hits[base + i] = hit;
			if (hit) {
				r->hits++;
				r->last = (int64_t)(base + i);
			} else {
				in_prefix = false;
			}
			if (hit && in_prefix)
				r->prefix++;
		}
	}
	free(mask);
	return rc;
}

int ucmfs_set_ttl(struct ucmfs *u, const ucmfs_id id, int64_t ttl_ms)
{
	char hex[UCMFS_HEX_LEN + 1], path[PATH_MAX], v[32];
	int n;

	ucmfs_id_format(id, hex);
	snprintf(path, sizeof(path), "%s/%s", u->root, hex);
	n = ttl_ms <= 0 ? snprintf(v, sizeof(v), "none")
			: snprintf(v, sizeof(v), "%lld", (long long)ttl_ms);
	return setxattr(path, "user.ucm.ttl", v, (size_t)n, 0) ? -errno : 0;
}

int ucmfs_extend_ttl(struct ucmfs *u, const ucmfs_id *ids, size_t n, int64_t ttl_ms)
{
	int rc = 0;

	if (ttl_ms <= 0)
		return -EINVAL;
	for (size_t base = 0; base < n && rc == 0; base += QUERY_BATCH) {
		size_t cnt = n - base < QUERY_BATCH ? n - base : QUERY_BATCH;
		int fd = query_file(u, ids + base, cnt);

		if (fd < 0)
			return fd;
		rc = set_ttl_fd(fd, ttl_ms);
		close(fd);
	}
	return rc;
}

int ucmfs_prefetch_start(struct ucmfs *u, const ucmfs_id *ids, size_t n,
			 struct ucmfs_prefetch **out)
{
	struct ucmfs_prefetch *p = calloc(1, sizeof(*p));
	size_t nb = (n + QUERY_BATCH - 1) / QUERY_BATCH;

	*out = NULL;
	if (!p || !(p->fds = calloc(nb ? nb : 1, sizeof(int)))) {
		free(p);
		return -ENOMEM;
	}
	for (size_t b = 0; b < nb; b++) {
		size_t base = b * QUERY_BATCH, cnt = n - base < QUERY_BATCH ? n - base : QUERY_BATCH;
		int fd = query_file(u, ids + base, cnt);

		if (fd >= 0 && fsetxattr(fd, "user.ucm.prefetch", "1", 1, 0)) {
			int e = -errno;

			close(fd);
			fd = e;
		}
		if (fd < 0) {
			ucmfs_prefetch_free(p);
			return fd;
		}
		p->fds[p->nfds++] = fd;
	}
	*out = p;
	return 0;
}

int ucmfs_prefetch_poll(struct ucmfs_prefetch *p)
{
	char v[16];
	int done = 1;

	for (size_t i = 0; i < p->nfds; i++) {
		ssize_t n;

		if (p->fds[i] < 0)
			continue;
		n = fgetxattr(p->fds[i], "user.ucm.prefetch", v, sizeof(v) - 1);
		if (n < 0)
			return -errno;
		v[n] = '\0';
		if (strcmp(v, "done")) {
			done = 0;
			continue;
		}
		close(p->fds[i]);
		p->fds[i] = -1;
	}
	return done;
}

int ucmfs_prefetch_wait(struct ucmfs_prefetch *p, int timeout_ms)
{
	struct timespec t0, t;
	long sleep_us = 200;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int rc = ucmfs_prefetch_poll(p);

		if (rc)
			return rc < 0 ? rc : 0;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (timeout_ms >= 0 &&
		    (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 >= timeout_ms)
			return -ETIMEDOUT;
		usleep((useconds_t)sleep_us);
		if (sleep_us < 20000)
			sleep_us *= 2;
	}
}

void ucmfs_prefetch_free(struct ucmfs_prefetch *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->nfds; i++)
		if (p->fds[i] >= 0)
			close(p->fds[i]);
	free(p->fds);
	free(p);
}

int ucmfs_prefetch(struct ucmfs *u, const ucmfs_id *ids, size_t n, int timeout_ms)
{
	struct ucmfs_prefetch *p;
	int rc = ucmfs_prefetch_start(u, ids, n, &p);

	if (rc)
		return rc;
	rc = ucmfs_prefetch_wait(p, timeout_ms);
	ucmfs_prefetch_free(p);
	return rc;
}
