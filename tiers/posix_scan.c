/*
 * The disk tier at start and at a clean stop: rebuilding the index, and the index snapshot.
 *
 * DESIGN
 *
 * At start the index is rebuilt from the tree: every shard directory is listed and every
 * block file's header read (tiers/posix_header.h), on SCAN_THREADS threads; temp files left by
 * this host are deleted, other hosts' once they are an hour old; a file whose header is wrong
 * is moved to STORE/quarantine/. Cold, that is one random 4 KiB read per block besides its
 * inode: most of a mount's time for a large store.
 *
 * A clean stop therefore writes the index to STORE/.index.<host> (written to a temp name,
 * synced, renamed): the store's identity (STORE/.store-id, the same through every path to it:
 * another client mount of a shared STORE) and per block its id, sizes, times, deadline,
 * codec, and the inode number and ctime its file had. The next start of this host opens it
 * and unlinks it at once (and syncs the directory) before anything else, so that it is used at
 * most once: the daemon then changes files in place (a TTL is written into the header), and a
 * crash must find no stale copy.
 * During the scan, a block file whose inode number and ctime are those of its record takes
 * the record instead of having its header read: any change to the file since (a write, a
 * truncate, a rename over it) moved its ctime. A record whose ctime is within
 * SNAP_SETTLE_NS of the save is not trusted (a change in the same clock tick as the last one
 * would leave ctime as it was). New files, and every file of a damaged, foreign or missing
 * snapshot, are read as before, so the result is the scan's in every case; the snapshot only
 * spares header reads.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "src/clock.h"
#include "src/hash.h"
#include "src/log.h"
#include "tiers/posix_header.h"
#include "tiers/posix_int.h"

/* Put a new entry found at start into the index; frees it if it cannot. 0 or -ENOMEM. */
static int add_entry(struct posix *p, struct pentry *e)
{
	int rc;

	pthread_mutex_lock(&p->lock);
	rc = idmap_reserve(&p->map, &e->node.id);
	if (rc == 0)
		posix_index_put(p, e);
	pthread_mutex_unlock(&p->lock);
	if (rc)
		free(e);
	return rc;
}

/* --- the index snapshot ------------------------------------------------------------------ */

#define SNAP_MAGIC "UCMINDEX"
#define SNAP_VERSION 2
#define SNAP_SETTLE_NS 1000000000LL

struct snap_head {
	char magic[8];
	uint32_t version, layout;
	uint64_t count;
	int64_t saved;            /* wall ns */
	uint8_t store_id[16];     /* the store it describes (STORE/.store-id) */
};

/* One block; times are wall ns, deadline 0 = none. Followed, after the last one, by the
 * XXH3-64 of everything before it. Host byte order: only this host reads it. */
struct snap_rec {
	uint8_t id[BLOCKID_LEN];
	uint64_t size, stored, ino;
	int64_t ctime, mtime, atime, deadline;
	uint32_t codec, pad;
};

struct snapshot {
	char *buf;                /* NULL: none */
	struct snap_head head;
	const struct snap_rec *rec; /* head.count records, sorted by id */
};

static void snapshot_path(const struct posix *p, char *out, size_t len, const char *suffix)
{
	snprintf(out, len, "%s/.index.%s%s", p->root, p->host, suffix);
}

static int by_id(const void *a, const void *b)
{
	return memcmp(a, b, BLOCKID_LEN);
}

/* Read and take away the snapshot of this host, if any; s->buf stays NULL if there is none or
 * it does not describe this store. */
static void snapshot_load(struct posix *p, struct snapshot *s)
{
	static const uint8_t zero_id[16];
	char path[PATH_MAX];
	struct stat st;
	uint64_t sum;
	size_t len;
	int fd;

	snapshot_path(p, path, sizeof(path), "");
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0) {
		if (errno != ENOENT)
			log_warn("cannot open %s: %s; reading every block's header", path,
				 strerror(errno));
		return;
	}
	if (unlink(path) || posix_fsync_dir(p->root)) {
		log_warn("cannot remove %s: %s; reading every block's header", path,
			 strerror(errno));
		close(fd);
		return;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size < sizeof(s->head) + sizeof(sum))
		goto bad;
	len = (size_t)st.st_size;
	s->buf = malloc(len);
	if (!s->buf) {
		log_warn("no memory to read %s; reading every block's header", path);
		close(fd);
		return;
	}
	if (io_pread_full(fd, s->buf, len, 0) != (ssize_t)len)
		goto bad;
	memcpy(&s->head, s->buf, sizeof(s->head));
	memcpy(&sum, s->buf + len - sizeof(sum), sizeof(sum));
	if (memcmp(s->head.magic, SNAP_MAGIC, sizeof(s->head.magic)) ||
	    s->head.version != SNAP_VERSION || s->head.layout != (uint32_t)p->layout ||
	    s->head.count != (len - sizeof(s->head) - sizeof(sum)) / sizeof(struct snap_rec) ||
	    len != sizeof(s->head) + s->head.count * sizeof(struct snap_rec) + sizeof(sum) ||
	    sum != hash64(s->buf, len - sizeof(sum)) || !memcmp(p->store_id, zero_id, 16) ||
	    memcmp(s->head.store_id, p->store_id, sizeof(p->store_id)))
		goto bad;
	s->rec = (const struct snap_rec *)(s->buf + sizeof(s->head));
	close(fd);
	return;
bad:
	log_warn("%s is damaged or describes another store; reading every block's header", path);
	free(s->buf);
	s->buf = NULL;
	close(fd);
}

/*
 * Index the block file `name` from its record if the file is the one the record describes.
 * True if done (indexed, or deleted because it expired while the store was closed); false if
 * the file must be read.
 */
static bool snapshot_take(struct posix *p, const struct snapshot *s, int dfd, const char *name,
			  const struct blockid *id)
{
	const struct snap_rec *r;
	struct pentry *e;
	struct stat st;

	if (!s->buf)
		return false;
	r = bsearch(id->b, s->rec, s->head.count, sizeof(*r), by_id);
	if (!r || r->ctime > s->head.saved - SNAP_SETTLE_NS ||
	    fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_ino != r->ino || timespec_ns(&st.st_ctim) != r->ctime)
		return false;
	if (r->deadline && r->deadline <= wall_ns()) {
		unlinkat(dfd, name, 0); /* expired while nobody was looking */
		return true;
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		return false;
	e->node.id = *id;
	e->size = r->size;
	e->stored = r->stored;
	e->phys = (uint64_t)st.st_blocks * 512;
	e->ino = r->ino;
	e->ctime = r->ctime;
	e->mtime = r->mtime;
	e->atime = r->atime;
	e->deadline = r->deadline ? wall_to_mono(r->deadline) : 0;
	e->codec = r->codec;
	if (add_entry(p, e))
		return false;
	atomic_fetch_add(&p->from_snapshot, 1);
	return true;
}

/* Write the file of the snapshot: temp name, data synced, renamed, directory synced. */
static int snapshot_write(struct posix *p, const char *buf, size_t len)
{
	char tmp[PATH_MAX], path[PATH_MAX];
	int fd, rc = 0;
	ssize_t w;

	snapshot_path(p, tmp, sizeof(tmp), TEMP_MARK);
	snapshot_path(p, path, sizeof(path), "");
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	w = io_pwrite_full(fd, buf, len, 0);

	if (w != (ssize_t)len)
		rc = w < 0 ? (int)w : -EIO;
	else if (fdatasync(fd))
		rc = -errno;
	if (close(fd) && !rc)
		rc = -errno;
	if (!rc && rename(tmp, path))
		rc = -errno;
	if (rc)
		unlink(tmp);
	else
		posix_fsync_dir(p->root);
	return rc;
}

void posix_save_index(struct posix *p)
{
	struct snap_head head = { .version = SNAP_VERSION, .layout = (uint32_t)p->layout };
	int64_t started = mono_ns();
	struct snap_rec *rec;
	uint64_t sum;
	size_t n = 0, len;
	char *buf;
	int rc;

	if (!p->opened)
		return;
	len = sizeof(head) + p->map.count * sizeof(*rec) + sizeof(sum);
	buf = malloc(len);
	if (!buf) {
		log_warn("store %s: no memory to save the index; the next start reads every block",
			 p->root);
		return;
	}
	rec = (struct snap_rec *)(buf + sizeof(head));
	for (const struct pentry *e = p->lru.next; e != &p->lru; e = e->next) {
		struct snap_rec *r = &rec[n++];

		memset(r, 0, sizeof(*r));
		memcpy(r->id, e->node.id.b, BLOCKID_LEN);
		r->size = e->size;
		r->stored = e->stored;
		r->ino = e->ino;
		r->ctime = e->ctime;
		r->mtime = e->mtime;
		r->atime = e->atime;
		r->deadline = e->deadline ? mono_to_wall(e->deadline) : 0;
		r->codec = e->codec;
	}
	qsort(rec, n, sizeof(*rec), by_id);
	memcpy(head.magic, SNAP_MAGIC, sizeof(head.magic));
	head.count = n;
	head.saved = wall_ns();
	memcpy(head.store_id, p->store_id, sizeof(head.store_id));
	memcpy(buf, &head, sizeof(head));
	len = sizeof(head) + n * sizeof(*rec) + sizeof(sum);
	sum = hash64(buf, len - sizeof(sum));
	memcpy(buf + len - sizeof(sum), &sum, sizeof(sum));
	rc = snapshot_write(p, buf, len);
	free(buf);
	if (rc)
		log_warn("store %s: cannot save the index: %s; the next start reads every block",
			 p->root, strerror(-rc));
	else
		log_info("store %s: index of %zu blocks saved for the next start (%.2f s)", p->root,
			 n, (double)(mono_ns() - started) / 1e9);
}

/* --- the start scan ---------------------------------------------------------------------- */

/* Handle a temp file found at start: delete it if it is ours or stale. */
static void scan_temp(struct posix *p, int dfd, const char *name, const char *dir)
{
	const char *mark = strstr(name, TEMP_MARK);
	const char *host = mark[strlen(TEMP_MARK)] == '.' ? mark + strlen(TEMP_MARK) + 1 : NULL;
	size_t hlen = strlen(p->host);
	struct stat st;
	bool ours = host && !strncmp(host, p->host, hlen) && host[hlen] == '.';

	if (!ours) {
		if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW))
			return;
		if (wall_ns() / 1000000000 - st.st_mtim.tv_sec < FOREIGN_TEMP_AGE_S)
			return;
	}
	if (unlinkat(dfd, name, 0) == 0) {
		atomic_fetch_add(&p->temp_removed, 1);
		log_debug("removed leftover temp file %s/%s", dir, name);
	}
}

/*
 * Read the entry of the block file open at fd: its inode, times and, for layout=native, its
 * header. 0 and *out; -ENOTSUP (not a regular file); -EBADMSG (damaged header); -ETIME (its
 * TTL passed); -ENOMEM. fd stays open.
 */
int posix_entry_read(struct posix *p, int fd, const struct blockid *id, struct pentry **out)
{
	uint8_t raw[DISK_HEADER_SIZE];
	struct disk_header hd;
	struct pentry *e;
	struct stat st;
	int rc = 0;

	if (fstat(fd, &st) || !S_ISREG(st.st_mode))
		return -ENOTSUP;
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->node.id = *id;
	e->phys = (uint64_t)st.st_blocks * 512;
	e->ino = st.st_ino;
	e->atime = timespec_ns(&st.st_atim);
	e->ctime = timespec_ns(&st.st_ctim);
	e->fmtime = timespec_ns(&st.st_mtim);
	e->checked = mono_ns();
	if (p->layout == LAYOUT_UCM) {
		e->size = e->stored = (uint64_t)st.st_size;
		e->mtime = timespec_ns(&st.st_mtim);
	} else if (io_pread_full(fd, raw, sizeof(raw), 0) != (ssize_t)sizeof(raw) ||
		   disk_header_decode(raw, &hd) || !blockid_eq(&hd.id, id) ||
		   (uint64_t)st.st_size < DISK_HEADER_SIZE + hd.stored_size) {
		rc = -EBADMSG;
	} else if (hd.deadline && hd.deadline <= wall_ns()) {
		rc = -ETIME;
	} else {
		e->size = hd.raw_size;
		e->stored = hd.stored_size;
		e->mtime = hd.mtime;
		e->codec = hd.codec;
		e->deadline = hd.deadline ? wall_to_mono(hd.deadline) : 0;
	}
	if (rc)
		free(e);
	else
		*out = e;
	return rc;
}

/* Index one block file found at start; quarantine it if it is damaged. 0, or -ENOMEM if it
 * cannot be indexed (the store must not open without it). */
static int scan_block(struct posix *p, int dfd, const char *name, const char *dir,
		       const struct blockid *id)
{
	char path[PATH_MAX];
	struct pentry *e;
	int fd, rc;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0 && errno == ENOENT)
		return 0; /* removed meanwhile (another host of a shared STORE) */
	rc = fd < 0 ? -ENOTSUP : posix_entry_read(p, fd, id, &e);
	if (fd >= 0)
		close(fd);
	switch (rc) {
	case 0:
		return add_entry(p, e);
	case -ENOMEM:
		return -ENOMEM;
	case -EBADMSG:
		posix_quarantine(p, path, NULL, 0, "bad header");
		return 0;
	case -ETIME:
		unlinkat(dfd, name, 0); /* expired while nobody was looking */
		return 0;
	default:
		atomic_fetch_add(&p->skipped, 1);
		log_warn("skipped %s: not a regular block file", path);
		return 0;
	}
}

int posix_shard_of_name(const char *name)
{
	struct blockid id;
	char hex[BLOCKID_HEX_LEN];

	if (strlen(name) != 3)
		return -1;
	memcpy(hex, name, 3);
	memset(hex + 3, '0', sizeof(hex) - 3);
	return blockid_parse(hex, sizeof(hex), &id) ? -1 : (int)blockid_shard(&id);
}

/* Index the blocks of one shard directory. 0 or -errno: a shard that cannot be read whole
 * must not open as if it were empty. */
static int scan_shard(struct posix *p, const struct snapshot *snap, const char *shard)
{
	char dir[PATH_MAX];
	struct dirent *de;
	DIR *d;
	int rc = 0;

	snprintf(dir, sizeof(dir), "%s/%s", p->data, shard);
	d = opendir(dir);
	if (!d && errno == ENOTDIR) {
		/* a stray file with a shard's name holds no blocks */
		atomic_fetch_add(&p->skipped, 1);
		log_warn("skipped %s: not a directory", dir);
		return 0;
	}
	if (!d) {
		rc = -errno;
		if (rc != -ENOENT)
			log_err("store %s: cannot read %s: %s", p->root, dir, strerror(-rc));
		return rc == -ENOENT ? 0 : rc;
	}
	while (rc == 0 && (de = readdir(d))) {
		struct blockid id;

		if (de->d_name[0] == '.')
			continue;
		if (strstr(de->d_name, TEMP_MARK))
			scan_temp(p, dirfd(d), de->d_name, dir);
		else if (blockid_parse_name(de->d_name, &id) == 0 && !strncmp(de->d_name, shard, 3))
			rc = snapshot_take(p, snap, dirfd(d), de->d_name, &id) ? 0 :
			     scan_block(p, dirfd(d), de->d_name, dir, &id);
		else {
			atomic_fetch_add(&p->skipped, 1);
			log_warn("skipped %s/%s: not a block file name", dir, de->d_name);
		}
	}
	closedir(d);
	return rc;
}

/*
 * The start scan runs on SCAN_THREADS threads that take shard directories from a shared
 * cursor: on a cold disk or a distributed filesystem each header read waits on the device,
 * so several in flight keep it busy. Every SCAN_REPORT_NS one of them logs the progress.
 */
#define SCAN_THREADS 8
#define SCAN_REPORT_NS (2 * 1000000000LL)

struct scan_ctx {
	struct posix *p;
	const struct snapshot *snap;  /* the index saved at the last clean stop, or empty */
	struct {
		char (*name)[4];
		size_t n, cap;
	} shards;
	atomic_size_t next, done;
	atomic_int_fast64_t last_report;
	int64_t started;
	atomic_int err;               /* the first shard's error: the scan stops */
};

static void scan_progress(struct scan_ctx *c)
{
	int64_t now = mono_ns(), last = atomic_load(&c->last_report);
	uint64_t blocks;

	if (now - last < SCAN_REPORT_NS ||
	    !atomic_compare_exchange_strong(&c->last_report, &last, now))
		return;
	pthread_mutex_lock(&c->p->lock);
	blocks = c->p->map.count;
	pthread_mutex_unlock(&c->p->lock);
	log_info("store %s: scanning, %zu of %zu directories, %llu blocks so far (%.0f s)",
		 c->p->root, atomic_load(&c->done), c->shards.n, (unsigned long long)blocks,
		 (double)(now - c->started) / 1e9);
}

static void *scan_worker(void *arg)
{
	struct scan_ctx *c = arg;
	size_t i;

	while (!atomic_load(&c->err) && (i = atomic_fetch_add(&c->next, 1)) < c->shards.n) {
		int rc = scan_shard(c->p, c->snap, c->shards.name[i]);
		int none = 0;

		if (rc)
			atomic_compare_exchange_strong(&c->err, &none, rc);
		atomic_fetch_add(&c->done, 1);
		scan_progress(c);
	}
	return NULL;
}

static int by_atime(const void *a, const void *b)
{
	const struct pentry *x = *(struct pentry *const *)a, *y = *(struct pentry *const *)b;

	return (x->atime > y->atime) - (x->atime < y->atime);
}

/* After the scan the recency list is in directory order: put it in the order of the files'
 * access times, so that the coldest blocks of the previous run are the first evicted. Left
 * as it is if there is no memory to sort it. p->lock held. */
void posix_sort_recency(struct posix *p)
{
	size_t n = 0, i;
	struct pentry **v = malloc((p->map.count + 1) * sizeof(*v));

	if (!v)
		return;
	for (struct pentry *e = p->lru.next; e != &p->lru; e = e->next)
		v[n++] = e;
	qsort(v, n, sizeof(*v), by_atime);
	p->lru.next = p->lru.prev = &p->lru;
	for (i = 0; i < n; i++) {
		v[i]->next = NULL;
		posix_lru_touch(p, v[i]);
	}
	free(v);
}

int posix_scan(struct posix *p)
{
	struct snapshot snap = { 0 };
	struct scan_ctx c = { .p = p, .snap = &snap };
	pthread_t tid[SCAN_THREADS];
	int nthreads = 0, rc = 0;
	struct dirent *de;
	DIR *d;

	snapshot_load(p, &snap);
	d = opendir(p->data);
	if (!d) {
		rc = -errno;
		log_err("cannot read STORE directory %s: %s", p->data, strerror(errno));
		free(snap.buf);
		return rc;
	}
	while ((de = readdir(d))) {
		struct stat st;
		char path[PATH_MAX];

		if (de->d_name[0] == '.' ||
		    (p->layout == LAYOUT_UCM && !strcmp(de->d_name, "quarantine")))
			continue;
		snprintf(path, sizeof(path), "%s/%s", p->data, de->d_name);
		if (posix_shard_of_name(de->d_name) < 0) {
			atomic_fetch_add(&p->skipped, 1);
			log_warn("skipped %s: not a shard directory name", path);
			continue;
		}
		if (de->d_type != DT_DIR &&
		    (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) ||
		     !S_ISDIR(st.st_mode))) {
			/* moved aside, so that the shard's blocks can be written again */
			posix_quarantine(p, path, NULL, 0, "not a directory");
			continue;
		}
		if (c.shards.n == c.shards.cap) {
			size_t cap = c.shards.cap ? 2 * c.shards.cap : 4096;
			void *v = realloc(c.shards.name, cap * sizeof(*c.shards.name));

			if (!v) {
				rc = -ENOMEM;
				break;
			}
			c.shards.name = v;
			c.shards.cap = cap;
		}
		memcpy(c.shards.name[c.shards.n++], de->d_name, 4);
	}
	closedir(d);
	if (rc) {
		free(c.shards.name);
		free(snap.buf);
		return rc;
	}
	c.started = mono_ns();
	atomic_store(&c.last_report, c.started);
	while (nthreads < SCAN_THREADS - 1 && (size_t)nthreads + 1 < c.shards.n &&
	       pthread_create(&tid[nthreads], NULL, scan_worker, &c) == 0)
		nthreads++;
	scan_worker(&c); /* this thread too, and alone if no thread could start */
	while (nthreads)
		pthread_join(tid[--nthreads], NULL);
	free(c.shards.name);
	free(snap.buf);
	if (atomic_load(&c.err)) {
		log_err("store %s: cannot index every block: %s", p->root,
			strerror(-atomic_load(&c.err)));
		return atomic_load(&c.err);
	}
	pthread_mutex_lock(&p->lock);
	posix_sort_recency(p);
	pthread_mutex_unlock(&p->lock);
	log_info("store %s: %llu blocks, %llu bytes on disk (%llu from the index saved at the "
		 "last stop; scanned in %.2f s)", p->root, (unsigned long long)p->map.count,
		 (unsigned long long)p->phys_used,
		 (unsigned long long)atomic_load(&p->from_snapshot),
		 (double)(mono_ns() - c.started) / 1e9);
	return 0;
}

