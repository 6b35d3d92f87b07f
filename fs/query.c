/*
 * Lookup queries: files under /.ucm/query/ (DESIGN.md section 4).
 *
 * A client creates any file there, writes BlockIds into it as hex separated by whitespace,
 * in request order, and reads the answer from extended attributes, computed at each
 * getxattr in one pass over the ids: user.ucm.prefix, user.ucm.hits, user.ucm.last. Setting
 * user.ucm.prefetch loads the listed disk-only blocks into memory in the background;
 * setting user.ucm.ttl extends the TTL of every listed block that has one. A query pins
 * nothing, so probing never holds back eviction.
 *
 * Query files live in memory only, owned by their creator (mode 0600; the directory is
 * 1777). Their number and size are bounded (QUERY_MAX_FILES, QUERY_MAX_SIZE): past them,
 * create fails ENOSPC and write EFBIG.
 *
 * DESIGN: a qfile is alive while it is listed in the directory, looked up by the kernel
 * (nlookup), open (opens) or prefetching (one open reference); qd->lock protects the list,
 * those counts and every qfile's content and state. It is never held across a pipeline call:
 * answers are computed on a copy of the content.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/fs_int.h"
#include "src/clock.h"
#include "src/log.h"
#include "src/units.h"

#define QUERY_MAX_FILES 4096
#define QUERY_MAX_SIZE (1u << 20)
/* all query files together: 1,024 full ones (DESIGN.md's minimum), not 4,096 */
#define QUERY_MAX_TOTAL (1ull << 30)
#define QUERY_NAME_MAX 255

enum { PREFETCH_NONE, PREFETCH_PENDING, PREFETCH_DONE };

struct qfile {
	uint8_t kind;            /* NODE_QUERY: first, like struct inode */
	struct qfile *next;      /* in qd->head while listed, then in qd->zombies */
	struct qfile *zprev;     /* in qd->zombies: the previous one (NULL at its head) */
	char name[QUERY_NAME_MAX + 1];
	uid_t uid;
	gid_t gid;
	uint64_t nlookup, opens;
	bool listed;
	char *data;
	size_t len, cap;
	int prefetch;
	uint64_t gen;            /* bumped by every change of the content */
	struct blockid *ids;     /* the content parsed, valid while ids_gen == gen */
	size_t nids;
	uint64_t ids_gen;
	struct timespec mtime, ctime;
	uint64_t st_ino;
};

struct qdir {
	pthread_mutex_t lock;
	pthread_cond_t idle;     /* prefetches == 0 */
	struct qfile *head;
	struct qfile *zombies;   /* unlinked but still referenced (freed at the end if left) */
	unsigned count;
	unsigned prefetches;     /* threads running */
	uint64_t total;          /* bytes held by all query files */
	uint64_t next_ino;
};

static struct qfile *qf_of(fuse_ino_t nid)
{
	return (struct qfile *)(uintptr_t)nid;
}

int query_init(struct ucmfs *fs)
{
	struct qdir *qd = calloc(1, sizeof(*qd));

	if (!qd)
		return -ENOMEM;
	pthread_mutex_init(&qd->lock, NULL);
	pthread_cond_init(&qd->idle, NULL);
	qd->next_ino = 1;
	fs->queries = qd;
	return 0;
}

static void qf_free(struct qfile *q)
{
	free(q->data);
	free(q->ids);
	free(q);
}

void query_shutdown(struct ucmfs *fs)
{
	struct qdir *qd = fs->queries;

	if (!qd)
		return;
	pthread_mutex_lock(&qd->lock);
	while (qd->prefetches)
		pthread_cond_wait(&qd->idle, &qd->lock);
	pthread_mutex_unlock(&qd->lock);
	while (qd->head) {
		struct qfile *q = qd->head;

		qd->head = q->next;
		qf_free(q);
	}
	while (qd->zombies) {
		struct qfile *q = qd->zombies;

		qd->zombies = q->next;
		qf_free(q);
	}
	pthread_cond_destroy(&qd->idle);
	pthread_mutex_destroy(&qd->lock);
	free(qd);
	fs->queries = NULL;
}

/* Free q if it is unlisted and nothing refers to it; qd->lock held. */
static void qf_maybe_free(struct qdir *qd, struct qfile *q)
{
	if (q->listed || q->nlookup || q->opens)
		return;
	if (q->zprev)
		q->zprev->next = q->next;
	else
		qd->zombies = q->next;
	if (q->next)
		q->next->zprev = q->zprev;
	qd->total -= q->cap;
	qf_free(q);
}

static struct qfile *find(struct qdir *qd, const char *name)
{
	for (struct qfile *q = qd->head; q; q = q->next)
		if (!strcmp(q->name, name))
			return q;
	return NULL;
}

static void fill_attr(struct ucmfs *fs, const struct qfile *q, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = NID_FIRST_BLOCK - 1 - (q->st_ino % (NID_FIRST_BLOCK / 2));
	st->st_mode = S_IFREG | 0600;
	st->st_nlink = q->listed ? 1 : 0;
	st->st_uid = q->uid;
	st->st_gid = q->gid;
	st->st_size = (off_t)q->len;
	st->st_blksize = 4096;
	st->st_blocks = (blkcnt_t)((q->len + 511) / 512);
	st->st_mtim = q->mtime;
	st->st_ctim = q->ctime;
	st->st_atim = q->mtime;
	(void)fs;
}

static void entry_of(struct ucmfs *fs, struct qfile *q, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = (fuse_ino_t)(uintptr_t)q;
	e->generation = 1;
	fill_attr(fs, q, &e->attr);
}

int query_lookup(struct ucmfs *fs, const char *name, struct fuse_entry_param *e)
{
	struct qdir *qd = fs->queries;
	struct qfile *q;

	pthread_mutex_lock(&qd->lock);
	q = find(qd, name);
	if (q) {
		q->nlookup++;
		entry_of(fs, q, e);
	}
	pthread_mutex_unlock(&qd->lock);
	return q ? 0 : -ENOENT;
}

int query_create(struct ucmfs *fs, fuse_req_t req, const char *name, int flags,
		 struct fuse_entry_param *e, struct fh **out)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct qdir *qd = fs->queries;
	struct qfile *q;
	struct fh *fh;

	if (strlen(name) > QUERY_NAME_MAX)
		return -ENAMETOOLONG;
	pthread_mutex_lock(&qd->lock);
	q = find(qd, name);
	if (q && (flags & O_EXCL)) {
		pthread_mutex_unlock(&qd->lock);
		return -EEXIST;
	}
	if (!q) {
		if (qd->count >= QUERY_MAX_FILES) {
			pthread_mutex_unlock(&qd->lock);
			return -ENOSPC;
		}
		q = calloc(1, sizeof(*q));
		if (!q) {
			pthread_mutex_unlock(&qd->lock);
			return -ENOMEM;
		}
		q->kind = NODE_QUERY;
		snprintf(q->name, sizeof(q->name), "%s", name);
		q->uid = ctx->uid;
		q->gid = ctx->gid;
		q->listed = true;
		q->st_ino = qd->next_ino++;
		clock_gettime(CLOCK_REALTIME, &q->mtime);
		q->ctime = q->mtime;
		q->next = qd->head;
		qd->head = q;
		qd->count++;
	} else if (flags & O_TRUNC) {
		q->len = 0;
		q->gen++;
	}
	fh = fh_new(fs, FH_QUERY, flags);
	if (!fh) {
		pthread_mutex_unlock(&qd->lock);
		return -ENOMEM;
	}
	fh->q = q;
	q->nlookup++;
	q->opens++;
	entry_of(fs, q, e);
	pthread_mutex_unlock(&qd->lock);
	*out = fh;
	return 0;
}

int query_open(struct ucmfs *fs, fuse_ino_t nid, int flags, struct fh **out)
{
	struct qdir *qd = fs->queries;
	struct qfile *q = qf_of(nid);
	struct fh *fh = fh_new(fs, FH_QUERY, flags);

	if (!fh)
		return -ENOMEM;
	fh->q = q;
	pthread_mutex_lock(&qd->lock);
	q->opens++;
	if (flags & O_TRUNC) {
		q->len = 0;
		q->gen++;
		clock_gettime(CLOCK_REALTIME, &q->mtime);
	}
	pthread_mutex_unlock(&qd->lock);
	*out = fh;
	return 0;
}

void query_forget(struct ucmfs *fs, fuse_ino_t nid, uint64_t n)
{
	struct qdir *qd = fs->queries;
	struct qfile *q = qf_of(nid);

	pthread_mutex_lock(&qd->lock);
	q->nlookup = n > q->nlookup ? 0 : q->nlookup - n;
	qf_maybe_free(qd, q);
	pthread_mutex_unlock(&qd->lock);
}

void query_close(struct ucmfs *fs, struct qfile *q)
{
	struct qdir *qd = fs->queries;

	pthread_mutex_lock(&qd->lock);
	q->opens--;
	qf_maybe_free(qd, q);
	pthread_mutex_unlock(&qd->lock);
}

int query_getattr(struct ucmfs *fs, fuse_ino_t nid, struct stat *st)
{
	struct qdir *qd = fs->queries;

	pthread_mutex_lock(&qd->lock);
	fill_attr(fs, qf_of(nid), st);
	pthread_mutex_unlock(&qd->lock);
	return 0;
}

/* Make room for `size` bytes of content; qd->lock held. 0, -EFBIG, -ENOSPC or -ENOMEM. */
static int reserve_content(struct qdir *qd, struct qfile *q, size_t size)
{
	if (size > QUERY_MAX_SIZE)
		return -EFBIG;
	if (size > q->cap) {
		size_t cap = q->cap ? q->cap : 4096;
		char *d;

		while (cap < size)
			cap *= 2;
		if (cap > QUERY_MAX_SIZE)
			cap = QUERY_MAX_SIZE;
		if (qd->total - q->cap + cap > QUERY_MAX_TOTAL)
			return -ENOSPC;
		d = realloc(q->data, cap);
		if (!d)
			return -ENOMEM;
		qd->total += cap - q->cap;
		q->data = d;
		q->cap = cap;
	}
	return 0;
}

int query_truncate(struct ucmfs *fs, fuse_ino_t nid, uint64_t size)
{
	struct qdir *qd = fs->queries;
	struct qfile *q = qf_of(nid);
	int rc;

	pthread_mutex_lock(&qd->lock);
	rc = size > QUERY_MAX_SIZE ? -EFBIG : reserve_content(qd, q, (size_t)size);
	if (rc == 0) {
		if (size > q->len)
			memset(q->data + q->len, 0, (size_t)size - q->len);
		q->len = (size_t)size;
		q->gen++;
		clock_gettime(CLOCK_REALTIME, &q->mtime);
	}
	pthread_mutex_unlock(&qd->lock);
	return rc;
}

ssize_t query_read(struct ucmfs *fs, struct fh *fh, char *buf, size_t size, uint64_t off)
{
	struct qdir *qd = fs->queries;
	struct qfile *q = fh->q;
	size_t n = 0;

	pthread_mutex_lock(&qd->lock);
	if (off < q->len) {
		n = q->len - (size_t)off < size ? q->len - (size_t)off : size;
		memcpy(buf, q->data + off, n);
	}
	pthread_mutex_unlock(&qd->lock);
	return (ssize_t)n;
}

ssize_t query_write(struct ucmfs *fs, struct fh *fh, const char *buf, size_t size,
		    uint64_t off)
{
	struct qdir *qd = fs->queries;
	struct qfile *q = fh->q;
	int rc;

	if (fh->open_flags & O_APPEND)
		off = q->len;
	if (off > QUERY_MAX_SIZE || size > QUERY_MAX_SIZE - off)
		return -EFBIG;
	if (size == 0)
		return 0; /* nothing to copy (and q->data may still be NULL) */
	pthread_mutex_lock(&qd->lock);
	if (fh->open_flags & O_APPEND)
		off = q->len;
	rc = reserve_content(qd, q, (size_t)(off + size));
	if (rc == 0) {
		if (off > q->len)
			memset(q->data + q->len, 0, (size_t)off - q->len);
		memcpy(q->data + off, buf, size);
		if (off + size > q->len)
			q->len = (size_t)(off + size);
		q->gen++;
		clock_gettime(CLOCK_REALTIME, &q->mtime);
	}
	pthread_mutex_unlock(&qd->lock);
	return rc ? rc : (ssize_t)size;
}

int query_unlink(struct ucmfs *fs, const char *name)
{
	struct qdir *qd = fs->queries;
	struct qfile **pp, *q = NULL;

	pthread_mutex_lock(&qd->lock);
	for (pp = &qd->head; *pp; pp = &(*pp)->next) {
		if (!strcmp((*pp)->name, name)) {
			q = *pp;
			*pp = q->next;
			q->listed = false;
			qd->count--;
			/* onto the zombie list until the last reference goes */
			q->zprev = NULL;
			q->next = qd->zombies;
			if (qd->zombies)
				qd->zombies->zprev = q;
			qd->zombies = q;
			qf_maybe_free(qd, q);
			break;
		}
	}
	pthread_mutex_unlock(&qd->lock);
	return q ? 0 : -ENOENT;
}

void query_list(struct ucmfs *fs, size_t from,
		bool (*fn)(const char *name, uint64_t ino, size_t next, void *arg), void *arg)
{
	struct qdir *qd = fs->queries;
	size_t i = 0;

	/* the list is short (bounded by QUERY_MAX_FILES) and new files go to its head, so an
	 * index into it is a usable cursor */
	pthread_mutex_lock(&qd->lock);
	for (struct qfile *q = qd->head; q; q = q->next, i++) {
		if (i < from)
			continue;
		if (!fn(q->name, NID_FIRST_BLOCK - 1 - (q->st_ino % (NID_FIRST_BLOCK / 2)), i + 1,
			arg))
			break;
	}
	pthread_mutex_unlock(&qd->lock);
}

/* --- answers ----------------------------------------------------------------------------- */

/* The ids in q's content, parsed (a copy: the content may change meanwhile). 0, or -EINVAL
 * for anything but ids, or -ENOMEM. */
static int parse_text(struct ucmfs *fs, struct qfile *q, struct blockid **ids, size_t *n,
		      uint64_t *gen)
{
	struct qdir *qd = fs->queries;
	struct blockid *v = NULL;
	size_t cnt = 0, cap = 0, len;
	char *text;
	int rc = 0;

	pthread_mutex_lock(&qd->lock);
	*gen = q->gen;
	len = q->len;
	text = malloc(len + 1);
	if (text) {
		if (len)
			memcpy(text, q->data, len);
		text[len] = '\0';
	}
	pthread_mutex_unlock(&qd->lock);
	if (!text)
		return -ENOMEM;
	for (size_t i = 0; i < len && rc == 0;) {
		size_t j;

		while (i < len && (text[i] == ' ' || text[i] == '\n' || text[i] == '\t' ||
				   text[i] == '\r' || text[i] == '\v' || text[i] == '\f'))
			i++;
		if (i == len)
			break;
		for (j = i; j < len && text[j] != ' ' && text[j] != '\n' && text[j] != '\t' &&
			    text[j] != '\r' && text[j] != '\v' && text[j] != '\f';
		     j++)
			;
		if (cnt == cap) {
			size_t nc = cap ? cap * 2 : 64;
			struct blockid *nv = realloc(v, nc * sizeof(*nv));

			if (!nv) {
				rc = -ENOMEM;
				break;
			}
			v = nv;
			cap = nc;
		}
		if (blockid_parse(text + i, j - i, &v[cnt]))
			rc = -EINVAL;
		cnt++;
		i = j;
	}
	free(text);
	if (rc) {
		free(v);
		return rc;
	}
	*ids = v;
	*n = cnt;
	return 0;
}

/* The ids of q (caller frees *ids): parsed once per change of the content, so that the
 * prefix, hits and last of one query cost one parse. 0, -EINVAL or -ENOMEM. */
static int parse_ids(struct ucmfs *fs, struct qfile *q, struct blockid **ids, size_t *n)
{
	struct qdir *qd = fs->queries;
	struct blockid *v;
	uint64_t gen;
	int rc;

	pthread_mutex_lock(&qd->lock);
	if (q->ids && q->ids_gen == q->gen) {
		v = malloc((q->nids ? q->nids : 1) * sizeof(*v));
		if (v) {
			if (q->nids)
				memcpy(v, q->ids, q->nids * sizeof(*v));
			*ids = v;
			*n = q->nids;
		}
		pthread_mutex_unlock(&qd->lock);
		return v ? 0 : -ENOMEM;
	}
	pthread_mutex_unlock(&qd->lock);
	rc = parse_text(fs, q, ids, n, &gen);
	if (rc)
		return rc;
	v = malloc((*n ? *n : 1) * sizeof(*v));
	pthread_mutex_lock(&qd->lock);
	if (v && q->gen == gen) {
		if (*n)
			memcpy(v, *ids, *n * sizeof(*v));
		free(q->ids);
		q->ids = v;
		q->nids = *n;
		q->ids_gen = gen;
		v = NULL;
	}
	pthread_mutex_unlock(&qd->lock);
	free(v);
	return 0;
}

static bool present(struct ucmfs *fs, const struct blockid *id, struct block_attr *a)
{
	return fs->pipe->ops->lookup(fs->pipe, id, a) == 0;
}

/* The value of user.ucm.prefix, .hits or .last (caller frees *value). Length or -errno.
 * One pass over the ids per tier, each tier's lock taken once. */
static int answer(struct ucmfs *fs, struct qfile *q, const char *name, char **value)
{
	struct blockid *ids = NULL;
	int64_t t0 = mono_ns();
	size_t n = 0, i;
	long long last = -1;
	uint8_t *hit;
	char *out;
	int len, rc;

	rc = parse_ids(fs, q, &ids, &n);
	if (rc)
		return rc;
	hit = calloc(n ? n : 1, 1);
	out = malloc(n + 32);
	if (!hit || !out) {
		free(ids);
		free(hit);
		free(out);
		return -ENOMEM;
	}
	fs->pipe->ops->present(fs->pipe, ids, n, hit);
	if (!strcmp(name, "user.ucm.hits")) {
		for (i = 0; i < n; i++)
			out[i] = hit[i] ? '1' : '0';
		out[n] = '\0';
		len = (int)n;
	} else if (!strcmp(name, "user.ucm.prefix")) {
		for (i = 0; i < n && hit[i]; i++)
			;
		len = snprintf(out, 32, "%zu", i);
	} else {
		for (i = n; i-- > 0;) {
			if (hit[i]) {
				last = (long long)i;
				break;
			}
		}
		len = snprintf(out, 32, "%lld", last);
	}
	free(ids);
	free(hit);
	counter_add(&fs->queries_total, 1);
	histogram_observe(&fs->query_hist, mono_ns() - t0);
	*value = out;
	return len;
}

int query_getxattr(struct ucmfs *fs, fuse_ino_t nid, const char *name, char **value)
{
	struct qfile *q = qf_of(nid);
	struct qdir *qd = fs->queries;
	const char *st;

	if (!strcmp(name, "user.ucm.prefix") || !strcmp(name, "user.ucm.hits") ||
	    !strcmp(name, "user.ucm.last"))
		return answer(fs, q, name, value);
	if (strcmp(name, "user.ucm.prefetch"))
		return -ENODATA;
	pthread_mutex_lock(&qd->lock);
	st = q->prefetch == PREFETCH_NONE ? "none"
	     : q->prefetch == PREFETCH_PENDING ? "pending" : "done";
	pthread_mutex_unlock(&qd->lock);
	*value = strdup(st);
	return *value ? (int)strlen(st) : -ENOMEM;
}

struct prefetch_job {
	struct ucmfs *fs;
	struct qfile *q;
	struct blockid *ids;
	size_t n;
};

static void *prefetch_thread(void *arg)
{
	struct prefetch_job *j = arg;
	struct ucmfs *fs = j->fs;
	struct qdir *qd = fs->queries;
	struct tier_handle *h;
	struct block_attr a;

	/* only disk-only blocks: a block in memory is already where it should be */
	for (size_t i = 0; i < j->n && !fs->pipe->ops->prefetch; i++) {
		if (!present(fs, &j->ids[i], &a) || (a.where & TIER_MEM))
			continue;
		if (fs->pipe->ops->open(fs->pipe, &j->ids[i], TIER_OPEN_INTERNAL, &h) == 0)
			tier_close(h);
	}
	if (fs->pipe->ops->prefetch)
		fs->pipe->ops->prefetch(fs->pipe, j->ids, j->n);
	pthread_mutex_lock(&qd->lock);
	j->q->prefetch = PREFETCH_DONE;
	j->q->opens--;
	qf_maybe_free(qd, j->q);
	if (--qd->prefetches == 0)
		pthread_cond_broadcast(&qd->idle);
	pthread_mutex_unlock(&qd->lock);
	free(j->ids);
	free(j);
	return NULL;
}

static int start_prefetch(struct ucmfs *fs, struct qfile *q)
{
	struct qdir *qd = fs->queries;
	struct prefetch_job *j = calloc(1, sizeof(*j));
	pthread_attr_t attr;
	pthread_t t;
	int rc;

	if (!j)
		return -ENOMEM;
	rc = parse_ids(fs, q, &j->ids, &j->n);
	if (rc) {
		free(j);
		return rc;
	}
	j->fs = fs;
	j->q = q;
	pthread_mutex_lock(&qd->lock);
	q->prefetch = PREFETCH_PENDING;
	q->opens++; /* the job's reference */
	qd->prefetches++;
	pthread_mutex_unlock(&qd->lock);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&t, &attr, prefetch_thread, j);
	pthread_attr_destroy(&attr);
	if (rc) {
		/* no thread: do it here */
		prefetch_thread(j);
	}
	return 0;
}

/* Extend the TTL of every listed block that has one to at least now + ms. */
static int extend_ttls(struct ucmfs *fs, struct qfile *q, int64_t ms)
{
	struct blockid *ids;
	struct block_attr a;
	size_t n;
	int rc = parse_ids(fs, q, &ids, &n);

	if (rc)
		return rc;
	for (size_t i = 0; i < n; i++) {
		int64_t want = mono_ns() + ms * 1000000;

		if (present(fs, &ids[i], &a) && a.deadline && a.deadline < want)
			fs->pipe->ops->set_deadline(fs->pipe, &ids[i], want);
	}
	free(ids);
	return 0;
}

int query_setxattr(struct ucmfs *fs, fuse_ino_t nid, const char *name, const char *value,
		   size_t size)
{
	struct qfile *q = qf_of(nid);
	char buf[64];
	int64_t ms;

	if (!strcmp(name, "user.ucm.prefetch"))
		return start_prefetch(fs, q);
	if (!strcmp(name, "user.ucm.prefix") || !strcmp(name, "user.ucm.hits") ||
	    !strcmp(name, "user.ucm.last"))
		return -EPERM;
	if (strcmp(name, "user.ucm.ttl"))
		return -ENOTSUP;
	while (size && (value[size - 1] == '\n' || value[size - 1] == ' ' || !value[size - 1]))
		size--;
	if (size == 0 || size >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, value, size);
	buf[size] = '\0';
	if (parse_duration_ms(buf, &ms) || ms == TTL_NONE)
		return -EINVAL;
	return extend_ttls(fs, q, ms);
}

size_t query_listxattr(char *buf, size_t size)
{
	static const char names[] = "user.ucm.prefix\0user.ucm.hits\0user.ucm.last\0"
				    "user.ucm.prefetch\0";

	if (size >= sizeof(names) - 1)
		memcpy(buf, names, sizeof(names) - 1);
	return sizeof(names) - 1;
}
