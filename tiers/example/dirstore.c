/*
 * dirstore: an example of a tier built outside the daemon, against <tier.h> alone:
 *
 *	cc -shared -fPIC -pthread $(pkg-config --cflags ucmfs-tier) \
 *		-o ucmfs-dirstore.so dirstore.c
 *
 * A store (TIER_KIND_STORE) that keeps each block in a file of one directory. Options:
 * `path`, the directory (created if missing); `capacity`, the most bytes of blocks it keeps
 * (without it, only the filesystem bounds them). Capacity is checked when a block is
 * published: a reservation may write past it, but its commit then fails -ENOSPC.
 *
 * DESIGN
 *
 * Files: PATH/<hex>, one per block, named by its id. A file is a 32-byte header, then the
 * block's bytes. The header is a magic and three little-endian 64-bit words:
 *
 *	"ucmdst1\n" | version | deadline (wall clock ns, 0 = none) | size
 *
 * The API's deadlines are monotonic, a clock that restarts at boot; the file keeps wall
 * clock time, so a deadline survives a restart. The file's mtime is the commit time.
 *
 * A reservation writes PATH/.tmp-<hex>-<random>; commit writes the header, sets the mtime,
 * fsyncs if durable, and renames the file over the block's name, so a block file is always
 * whole. A read handle keeps its file open: a remove or a replacement takes the name away,
 * never the bytes a reader is reading.
 *
 * The index (id -> size, version, times, deadline), a list per shard, is rebuilt from the
 * files at create and kept in memory: lookups never touch the disk. An expired block is
 * absent to every op, but its file stays until sweep(), a new commit of its id, or the next
 * create deletes it.
 *
 * Locking: ds->lock protects the index, the open reservations and the byte count. It is held
 * across the directory calls that must agree with the index (openat of a block, renameat,
 * unlinkat, the write of a new deadline), never across a block's bytes or an fsync. A flock
 * on PATH keeps a second process out, so temp files found at create are a dead writer's.
 *
 * Pins (block_attr.pins) are not counted: nothing here evicts blocks, so an open reader
 * needs nothing but its open file, and TIER_OPEN_INTERNAL changes nothing; nor does
 * TIER_OPEN_RUNS (it reads nothing ahead of its readers).
 */
#define _DEFAULT_SOURCE

#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <tier.h>

#define HDR 32
#define MAGIC "ucmdst1\n"
#define DEADLINE_OFF 16

/* A file name in PATH: "<hex>" or ".tmp-<hex>-<random>" */
typedef char name_t[48];

struct entry {
	struct entry *next;    /* in its shard's list */
	struct blockid id;
	uint64_t size, version;
	int64_t mtime, atime;  /* wall clock ns */
	int64_t deadline;      /* wall clock ns, 0 = none */
};

struct handle {
	struct tier_handle h;  /* first: what the API sees */
	int fd;
	struct blockid id;
	bool writing;
	uint64_t size;         /* writing: the bytes of the reservation so far */
	name_t tmp;            /* writing: its file */
	struct handle *next;   /* writing: in ds->reserving */
	struct block_attr attr; /* reading: the version it opened */
};

struct ds {
	struct tier tier;
	int dirfd;
	uint64_t capacity;     /* 0: no limit but the filesystem's */
	uint64_t max_block;
	bool durable;
	pthread_mutex_t lock;
	struct entry *shard[BLOCKID_SHARDS]; /* protected by lock */
	struct handle *reserving;            /* protected by lock */
	uint64_t used;         /* protected by lock: bytes of the blocks in the index */
	uint64_t version;      /* protected by lock: the last one given */
};

static int64_t now_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t to_wall(int64_t mono)
{
	return mono ? mono - now_ns(CLOCK_MONOTONIC) + now_ns(CLOCK_REALTIME) : 0;
}

static int64_t to_mono(int64_t wall)
{
	return wall ? wall - now_ns(CLOCK_REALTIME) + now_ns(CLOCK_MONOTONIC) : 0;
}

/* A failed file call as one of tier.h's errors. */
static int io_err(int e)
{
	return e == ENOSPC || e == EDQUOT ? -ENOSPC : e == ENOMEM ? -ENOMEM : -EIO;
}

static void block_name(const struct blockid *id, name_t out)
{
	for (int i = 0; i < BLOCKID_LEN; i++)
		sprintf(out + 2 * i, "%02x", id->b[i]);
}

static bool parse_hex(const char *s, struct blockid *id)
{
	static const char digits[] = "0123456789abcdef";
	const char *d;

	if (strlen(s) != BLOCKID_HEX_LEN)
		return false;
	for (int i = 0; i < BLOCKID_HEX_LEN; i++) {
		d = strchr(digits, s[i]);
		if (!d)
			return false;
		id->b[i / 2] = (uint8_t)(i % 2 ? id->b[i / 2] | (d - digits) : (d - digits) << 4);
	}
	return true;
}

/* --- the index (under ds->lock) ---------------------------------------------------------- */

static bool live(const struct entry *e, int64_t wall)
{
	return !e->deadline || e->deadline > wall;
}

static struct entry *find(struct ds *ds, const struct blockid *id)
{
	struct entry *e = ds->shard[blockid_shard(id)];

	while (e && memcmp(&e->id, id, sizeof(*id)))
		e = e->next;
	return e;
}

static struct entry *find_live(struct ds *ds, const struct blockid *id)
{
	struct entry *e = find(ds, id);

	return e && live(e, now_ns(CLOCK_REALTIME)) ? e : NULL;
}

static void insert(struct ds *ds, struct entry *e)
{
	e->next = ds->shard[blockid_shard(&e->id)];
	ds->shard[blockid_shard(&e->id)] = e;
	ds->used += e->size;
}

/* Forget e, whose file is gone. */
static void drop(struct ds *ds, struct entry *e)
{
	struct entry **p = &ds->shard[blockid_shard(&e->id)];

	while (*p != e)
		p = &(*p)->next;
	*p = e->next;
	ds->used -= e->size;
	free(e);
}

static void fill_attr(const struct entry *e, struct block_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->size = e->size;
	a->stored = HDR + e->size;
	a->mtime = e->mtime;
	a->atime = e->atime;
	a->deadline = to_mono(e->deadline);
	a->version = e->version;
	a->where = TIER_DISK;
	a->codec = CODEC_RAW;
}

/* --- reading ----------------------------------------------------------------------------- */

static int ds_lookup(struct tier *t, const struct blockid *id, struct block_attr *attr)
{
	struct ds *ds = t->priv;
	struct entry *e;

	pthread_mutex_lock(&ds->lock);
	e = find_live(ds, id);
	if (e)
		fill_attr(e, attr);
	pthread_mutex_unlock(&ds->lock);
	return e ? 0 : -ENOENT;
}

static void ds_present(struct tier *t, const struct blockid *ids, size_t n, uint8_t *hit)
{
	struct ds *ds = t->priv;

	pthread_mutex_lock(&ds->lock);
	for (size_t i = 0; i < n; i++)
		hit[i] = hit[i] || find_live(ds, &ids[i]);
	pthread_mutex_unlock(&ds->lock);
}

static int ds_open(struct tier *t, const struct blockid *id, unsigned flags,
		   struct tier_handle **out)
{
	struct ds *ds = t->priv;
	struct handle *h = calloc(1, sizeof(*h));
	struct entry *e;
	name_t name;
	int rc = 0;

	(void)flags;
	if (!h)
		return -ENOMEM;
	block_name(id, name);
	pthread_mutex_lock(&ds->lock);
	e = find_live(ds, id);
	h->fd = e ? openat(ds->dirfd, name, O_RDONLY | O_CLOEXEC) : -1;
	if (!e)
		rc = -ENOENT;
	else if (h->fd < 0)
		rc = io_err(errno);
	else
		fill_attr(e, &h->attr);
	pthread_mutex_unlock(&ds->lock);
	if (rc) {
		free(h);
		return rc;
	}
	h->h.tier = t;
	*out = &h->h;
	return 0;
}

/* Reads of one handle may run in parallel: pread moves no shared offset. */
static ssize_t ds_read(struct tier_handle *th, void *buf, size_t len, uint64_t off)
{
	struct handle *h = (struct handle *)th;
	uint64_t size = h->writing ? h->size : h->attr.size;
	size_t want, done = 0;
	ssize_t n;

	if (off >= size)
		return 0;
	want = len < size - off ? len : (size_t)(size - off);
	while (done < want) {
		n = pread(h->fd, (char *)buf + done, want - done, (off_t)(HDR + off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -EIO; /* failed, or the file is shorter than its header says */
		done += (size_t)n;
	}
	return (ssize_t)done;
}

static int ds_stat(struct tier_handle *th, struct block_attr *attr)
{
	struct handle *h = (struct handle *)th;

	*attr = h->attr;
	if (h->writing)
		attr->size = h->size;
	return 0;
}

static void ds_close(struct tier_handle *th)
{
	close(((struct handle *)th)->fd);
	free(th);
}

/* --- writing ----------------------------------------------------------------------------- */

/* Take h off the open reservations (under ds->lock). */
static void unlist(struct ds *ds, struct handle *h)
{
	struct handle **p = &ds->reserving;

	while (*p != h)
		p = &(*p)->next;
	*p = h->next;
}

/* Give a reservation back: its place among the reservations, its file. */
static void release(struct ds *ds, struct handle *h)
{
	pthread_mutex_lock(&ds->lock);
	unlist(ds, h);
	pthread_mutex_unlock(&ds->lock);
	if (h->fd >= 0) {
		unlinkat(ds->dirfd, h->tmp, 0);
		close(h->fd);
	}
	free(h);
}

/* The reservation's file, under a name no other writer has. */
static int create_temp(struct ds *ds, struct handle *h)
{
	name_t name;
	uint32_t r;

	block_name(&h->id, name);
	do {
		if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != sizeof(r))
			r = (uint32_t)now_ns(CLOCK_MONOTONIC);
		snprintf(h->tmp, sizeof(h->tmp), ".tmp-%.32s-%08x", name, r);
		h->fd = openat(ds->dirfd, h->tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	} while (h->fd < 0 && errno == EEXIST);
	return h->fd < 0 ? io_err(errno) : 0;
}

/* The bytes of a block file (after the header) into the same place of another. */
static int copy_bytes(int from, int to, uint64_t len)
{
	char buf[64 << 10];
	ssize_t n;

	for (uint64_t off = HDR; off < HDR + len; off += (uint64_t)n) {
		n = pread(from, buf, HDR + len - off < sizeof(buf) ? HDR + len - off : sizeof(buf),
			  (off_t)off);
		if (n <= 0)
			return -EIO;
		if (pwrite(to, buf, (size_t)n, (off_t)off) != n)
			return io_err(errno);
	}
	return 0;
}

static int ds_reserve(struct tier *t, const struct blockid *id, unsigned flags,
		      uint64_t size_hint, struct tier_handle **out)
{
	struct ds *ds = t->priv;
	struct handle *h = calloc(1, sizeof(*h)), *r;
	uint64_t old_size = 0;
	struct entry *e;
	int old = -1, rc = 0;
	name_t name;

	(void)size_hint;
	if (!h)
		return -ENOMEM;
	h->h.tier = t;
	h->id = *id;
	h->writing = true;
	h->fd = -1;
	h->attr.where = TIER_DISK;
	block_name(id, name);
	pthread_mutex_lock(&ds->lock);
	e = find_live(ds, id);
	for (r = ds->reserving; r && memcmp(&r->id, id, sizeof(*id)); r = r->next)
		;
	if ((flags & TIER_RESERVE_EXCL) && (e || r)) {
		pthread_mutex_unlock(&ds->lock);
		free(h);
		return -EEXIST;
	}
	/* a replacement starts with the old bytes unless TIER_RESERVE_TRUNC */
	if (e && !(flags & TIER_RESERVE_TRUNC)) {
		old = openat(ds->dirfd, name, O_RDONLY | O_CLOEXEC);
		old_size = e->size;
		rc = old < 0 ? io_err(errno) : 0;
	}
	h->next = ds->reserving;
	ds->reserving = h;
	pthread_mutex_unlock(&ds->lock);

	if (rc == 0)
		rc = create_temp(ds, h);
	if (rc == 0 && old >= 0)
		rc = copy_bytes(old, h->fd, old_size);
	if (rc == 0)
		h->size = old_size;
	if (old >= 0)
		close(old);
	if (rc) {
		release(ds, h);
		return rc;
	}
	*out = &h->h;
	return 0;
}

static ssize_t ds_write(struct tier_handle *th, const void *buf, size_t len, uint64_t off)
{
	struct handle *h = (struct handle *)th;
	struct ds *ds = th->tier->priv;
	size_t done = 0;
	ssize_t n;

	if (ds->max_block && (off > ds->max_block || len > ds->max_block - off))
		return -EFBIG;
	while (done < len) {
		n = pwrite(h->fd, (const char *)buf + done, len - done, (off_t)(HDR + off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return io_err(errno);
		done += (size_t)n;
	}
	if (off + len > h->size)
		h->size = off + len;
	return (ssize_t)len;
}

static int ds_truncate(struct tier_handle *th, uint64_t size)
{
	struct handle *h = (struct handle *)th;
	struct ds *ds = th->tier->priv;

	if (ds->max_block && size > ds->max_block)
		return -EFBIG;
	if (ftruncate(h->fd, (off_t)(HDR + size)))
		return io_err(errno);
	h->size = size;
	return 0;
}

/* The header and the mtime, then (durable) fsync: all before the file gets its name. */
static int seal(struct handle *h, uint64_t version, int64_t mtime, int64_t deadline,
		bool durable)
{
	uint64_t w[4] = { 0, htole64(version), htole64((uint64_t)deadline), htole64(h->size) };
	struct timespec ts[2] = { { mtime / 1000000000, mtime % 1000000000 } };

	ts[1] = ts[0];
	memcpy(w, MAGIC, 8);
	if (pwrite(h->fd, w, HDR, 0) != HDR || futimens(h->fd, ts))
		return io_err(errno);
	return durable && fsync(h->fd) ? io_err(errno) : 0;
}

static int ds_commit(struct tier_handle *th, const struct block_meta *meta, unsigned flags,
		     struct tier_handle **rd)
{
	struct handle *h = (struct handle *)th;
	struct ds *ds = th->tier->priv;
	bool durable = ds->durable || (flags & TIER_COMMIT_DURABLE);
	int64_t mtime = meta->mtime ? meta->mtime : now_ns(CLOCK_REALTIME);
	int64_t deadline = to_wall(meta->deadline);
	struct entry *e, *fresh = calloc(1, sizeof(*fresh));
	uint64_t version = 0;
	name_t name;
	int rc = fresh ? 0 : -ENOMEM;

	if (rd)
		*rd = NULL;
	if (rc == 0 && meta->size != h->size)
		rc = ds_truncate(th, meta->size);
	if (rc == 0) {
		pthread_mutex_lock(&ds->lock);
		version = ++ds->version;
		pthread_mutex_unlock(&ds->lock);
		rc = seal(h, version, mtime, deadline, durable);
	}
	if (rc) {
		free(fresh);
		release(ds, h);
		return rc;
	}

	block_name(&h->id, name);
	pthread_mutex_lock(&ds->lock);
	e = find(ds, &h->id); /* the version it replaces, whose bytes go with the name */
	if (ds->capacity && ds->used - (e ? e->size : 0) + h->size > ds->capacity)
		rc = -ENOSPC;
	else if (renameat(ds->dirfd, h->tmp, ds->dirfd, name))
		rc = io_err(errno);
	if (rc) {
		pthread_mutex_unlock(&ds->lock);
		free(fresh);
		release(ds, h);
		return rc;
	}
	unlist(ds, h);
	if (e)
		drop(ds, e);
	fresh->id = h->id;
	fresh->size = h->size;
	fresh->version = version;
	fresh->mtime = fresh->atime = mtime;
	fresh->deadline = deadline;
	insert(ds, fresh);
	fill_attr(fresh, &h->attr);
	pthread_mutex_unlock(&ds->lock);

	if (durable && fsync(ds->dirfd))
		rc = -EIO; /* published, but perhaps not durable: the caller must know */
	if (!rd || rc) {
		close(h->fd);
		free(h);
		return rc;
	}
	/* the temp file is the published version now: the handle reads on from it */
	h->writing = false;
	*rd = &h->h;
	return 0;
}

static void ds_abort(struct tier_handle *th)
{
	release(th->tier->priv, (struct handle *)th);
}

/* --- by id ------------------------------------------------------------------------------- */

static int ds_remove(struct tier *t, const struct blockid *id)
{
	struct ds *ds = t->priv;
	struct entry *e;
	name_t name;
	int rc = -ENOENT;

	block_name(id, name);
	pthread_mutex_lock(&ds->lock);
	e = find_live(ds, id);
	if (e) {
		rc = unlinkat(ds->dirfd, name, 0) ? io_err(errno) : 0;
		if (rc == 0)
			drop(ds, e);
	}
	pthread_mutex_unlock(&ds->lock);
	return rc;
}

/* atime is the daemon's to report: kept in memory, the file's after a restart. */
static int ds_touch(struct tier *t, const struct blockid *id)
{
	struct ds *ds = t->priv;
	struct entry *e;

	pthread_mutex_lock(&ds->lock);
	e = find_live(ds, id);
	if (e)
		e->atime = now_ns(CLOCK_REALTIME);
	pthread_mutex_unlock(&ds->lock);
	return e ? 0 : -ENOENT;
}

static int ds_set_deadline(struct tier *t, const struct blockid *id, int64_t deadline)
{
	struct ds *ds = t->priv;
	int64_t wall = to_wall(deadline);
	uint64_t w = htole64((uint64_t)wall);
	struct entry *e;
	name_t name;
	int fd = -1, rc = -ENOENT;

	block_name(id, name);
	pthread_mutex_lock(&ds->lock);
	e = find_live(ds, id);
	if (e) {
		fd = openat(ds->dirfd, name, O_WRONLY | O_CLOEXEC);
		rc = fd >= 0 && pwrite(fd, &w, 8, DEADLINE_OFF) == 8 ? 0 : -EIO;
	}
	if (rc == 0)
		e->deadline = wall;
	pthread_mutex_unlock(&ds->lock);
	if (fd >= 0)
		close(fd);
	return rc;
}

static int ds_sync(struct tier *t, const struct blockid *id)
{
	struct ds *ds = t->priv;
	name_t name;
	int fd = -1, rc = -ENOENT;

	block_name(id, name);
	pthread_mutex_lock(&ds->lock);
	if (find_live(ds, id)) {
		fd = openat(ds->dirfd, name, O_RDONLY | O_CLOEXEC);
		rc = fd < 0 ? io_err(errno) : 0;
	}
	pthread_mutex_unlock(&ds->lock);
	if (rc == 0) {
		rc = fsync(fd) || fsync(ds->dirfd) ? io_err(errno) : 0;
		close(fd);
	}
	return rc;
}

/* fn runs without the lock, so that it may call the store. */
static int ds_list_shard(struct tier *t, unsigned shard, tier_list_fn fn, void *arg)
{
	struct ds *ds = t->priv;
	int64_t now = now_ns(CLOCK_REALTIME);
	struct blockid *ids;
	struct entry *e;
	size_t n = 0;

	if (shard >= BLOCKID_SHARDS)
		return 0;
	pthread_mutex_lock(&ds->lock);
	for (e = ds->shard[shard]; e; e = e->next)
		n++;
	ids = malloc((n ? n : 1) * sizeof(*ids));
	n = 0;
	for (e = ds->shard[shard]; e && ids; e = e->next)
		if (live(e, now))
			ids[n++] = e->id;
	pthread_mutex_unlock(&ds->lock);
	if (!ids)
		return -ENOMEM;
	for (size_t i = 0; i < n && !fn(&ids[i], arg); i++)
		;
	free(ids);
	return 0;
}

static int ds_usage(struct tier *t, struct tier_usage *u)
{
	struct ds *ds = t->priv;
	int64_t now = now_ns(CLOCK_REALTIME);
	struct statvfs fs;

	memset(u, 0, sizeof(*u));
	if (fstatvfs(ds->dirfd, &fs) == 0) {
		u->capacity = (uint64_t)fs.f_blocks * fs.f_frsize;
		u->fs_free = (uint64_t)fs.f_bavail * fs.f_frsize;
	}
	pthread_mutex_lock(&ds->lock);
	if (ds->capacity)
		u->capacity = ds->capacity;
	u->used = ds->used;
	for (unsigned s = 0; s < BLOCKID_SHARDS; s++)
		for (struct entry *e = ds->shard[s]; e; e = e->next)
			u->blocks += live(e, now);
	pthread_mutex_unlock(&ds->lock);
	return 0;
}

/* Delete expired blocks. */
static void ds_sweep(struct tier *t)
{
	struct ds *ds = t->priv;
	int64_t now = now_ns(CLOCK_REALTIME);
	struct entry *e, *next;
	name_t name;

	pthread_mutex_lock(&ds->lock);
	for (unsigned s = 0; s < BLOCKID_SHARDS; s++) {
		for (e = ds->shard[s]; e; e = next) {
			next = e->next;
			block_name(&e->id, name);
			if (!live(e, now) && (!unlinkat(ds->dirfd, name, 0) || errno == ENOENT))
				drop(ds, e);
		}
	}
	pthread_mutex_unlock(&ds->lock);
}

/* --- the store --------------------------------------------------------------------------- */

static void ds_destroy(struct tier *t)
{
	struct ds *ds = t->priv;
	struct entry *e, *next;

	for (unsigned s = 0; s < BLOCKID_SHARDS; s++) {
		for (e = ds->shard[s]; e; e = next) {
			next = e->next;
			free(e);
		}
	}
	if (ds->dirfd >= 0)
		close(ds->dirfd); /* and with it the flock */
	pthread_mutex_destroy(&ds->lock);
	free(ds);
}

/* Index one file of PATH: expired blocks are deleted, files that are not whole blocks of
 * this store are left alone. 0 or -ENOMEM. */
static int load(struct ds *ds, const char *name, const struct blockid *id)
{
	int fd = openat(ds->dirfd, name, O_RDONLY | O_CLOEXEC);
	uint64_t w[4];
	struct entry *e;
	struct stat st;
	bool whole;

	if (fd < 0)
		return 0;
	whole = fstat(fd, &st) == 0 && pread(fd, w, HDR, 0) == HDR && !memcmp(w, MAGIC, 8) &&
		(uint64_t)st.st_size == HDR + le64toh(w[3]);
	close(fd);
	if (!whole)
		return 0;
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->id = *id;
	e->version = le64toh(w[1]);
	e->deadline = (int64_t)le64toh(w[2]);
	e->size = le64toh(w[3]);
	e->mtime = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	e->atime = (int64_t)st.st_atim.tv_sec * 1000000000 + st.st_atim.tv_nsec;
	if (!live(e, now_ns(CLOCK_REALTIME))) {
		unlinkat(ds->dirfd, name, 0);
		free(e);
		return 0;
	}
	insert(ds, e);
	if (e->version > ds->version)
		ds->version = e->version;
	return 0;
}

/* Rebuild the index from PATH, and delete the temp files of dead writers. */
static int scan(struct ds *ds)
{
	int fd = dup(ds->dirfd), rc = 0;
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct blockid id;
	struct dirent *de;

	if (!d) {
		rc = -errno;
		if (fd >= 0)
			close(fd);
		return rc;
	}
	while (rc == 0 && (de = readdir(d))) {
		if (!strncmp(de->d_name, ".tmp-", 5))
			unlinkat(ds->dirfd, de->d_name, 0);
		else if (parse_hex(de->d_name, &id))
			rc = load(ds, de->d_name, &id);
	}
	closedir(d);
	return rc;
}

static const struct tier_ops ds_ops;

static int ds_create(const struct tier_setup *s, struct tier **out)
{
	const char *who = s->name ? s->name : "dirstore", *path = NULL;
	struct ds *ds = calloc(1, sizeof(*ds));
	int rc = -EINVAL;
	char *end;

	if (!ds)
		return -ENOMEM;
	ds->tier.ops = &ds_ops;
	ds->tier.priv = ds;
	ds->dirfd = -1;
	ds->max_block = s->max_block;
	ds->durable = s->durable;
	pthread_mutex_init(&ds->lock, NULL);
	for (size_t i = 0; i < s->nparam; i++) {
		const struct tier_param *p = &s->param[i];

		if (!strcmp(p->key, "path")) {
			path = p->value;
		} else if (!strcmp(p->key, "capacity")) {
			errno = 0;
			ds->capacity = strtoull(p->value, &end, 10);
			if (errno || end == p->value || *end || *p->value == '-') {
				snprintf(s->err, s->errlen, "%s: capacity '%s' is not a number of "
					 "bytes", who, p->value);
				goto err;
			}
		} else {
			snprintf(s->err, s->errlen, "%s: unknown option '%s' (dirstore takes path "
				 "and capacity)", who, p->key);
			goto err;
		}
	}
	if (!path || !*path) {
		snprintf(s->err, s->errlen, "%s: option 'path' (the directory of the blocks) is "
			 "missing", who);
		goto err;
	}
	if (mkdir(path, 0755) && errno != EEXIST)
		goto err_errno;
	ds->dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ds->dirfd < 0)
		goto err_errno;
	if (flock(ds->dirfd, LOCK_EX | LOCK_NB)) {
		if (errno != EWOULDBLOCK)
			goto err_errno;
		snprintf(s->err, s->errlen, "%s: %s is in use by another store", who, path);
		rc = -EBUSY;
		goto err;
	}
	rc = scan(ds);
	if (rc)
		goto err_msg;
	*out = &ds->tier;
	return 0;
err_errno:
	rc = -errno;
err_msg:
	snprintf(s->err, s->errlen, "%s: %s: %s", who, path, strerror(-rc));
err:
	ds_destroy(&ds->tier);
	return rc;
}

static const struct tier_ops ds_ops = {
	.name = "dirstore",
	.destroy = ds_destroy,
	.lookup = ds_lookup,
	.present = ds_present,
	.open = ds_open,
	.read = ds_read,
	.stat = ds_stat,
	.close = ds_close,
	.reserve = ds_reserve,
	.write = ds_write,
	.truncate = ds_truncate,
	.commit = ds_commit,
	.abort = ds_abort,
	.remove = ds_remove,
	.touch = ds_touch,
	.set_deadline = ds_set_deadline,
	.sync = ds_sync,
	.list_shard = ds_list_shard,
	.usage = ds_usage,
	.sweep = ds_sweep,
};

static const struct tier_plugin dirstore = {
	.abi = UCMFS_TIER_ABI,
	.name = "dirstore",
	.kind = TIER_KIND_STORE,
	.create = ds_create,
};

/* The entry point the daemon looks up (UCMFS_TIER_ENTRY); exported even from a library
 * built with -fvisibility=hidden. */
__attribute__((visibility("default"))) const struct tier_plugin *ucmfs_tier_plugin(void)
{
	return &dirstore;
}
