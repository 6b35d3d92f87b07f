/*
 * Directory listings.
 *
 * The root streams: it walks the BLOCKID_SHARDS shards in order and holds the sorted ids of
 * one shard at a time, so a listing of millions of blocks never builds the whole list. A
 * readdir offset encodes (shard + 1) << 32 | index within the shard; offsets below 1 << 32
 * are the fixed entries ".", ".." and ".ucm". Blocks added or removed during a listing may
 * or may not appear, as POSIX allows; every block present throughout appears exactly once.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fs/fs_int.h"

struct dircursor {
	unsigned shard;          /* the shard whose ids are held, or BLOCKID_SHARDS if none */
	struct idvec ids;        /* sorted */
};

#define SHARD_OFF(s, i) ((((off_t)(s) + 1) << 32) | (off_t)(i))
#define NFIXED 3

void dir_opendir(fuse_req_t req, fuse_ino_t nid, struct fuse_file_info *fi)
{
	struct ucmfs *fs = fs_of(req);
	struct fh *fh;

	if (nid != NID_ROOT && nid != NID_UCM && nid != NID_QUERY) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	fh = fh_new(fs, FH_DIR, fi->flags);
	if (!fh || !(fh->dir = calloc(1, sizeof(*fh->dir)))) {
		if (fh)
			fh_free(fs, fh);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	fh->dir->shard = BLOCKID_SHARDS;
	fi->fh = (uintptr_t)fh;
	if (fuse_reply_open(req, fi) == -ENOENT)
		fh_free(fs, fh);
}

void dir_free(struct dircursor *c)
{
	if (c) {
		idvec_free(&c->ids);
		free(c);
	}
}

void dir_releasedir(fuse_req_t req, fuse_ino_t nid, struct fuse_file_info *fi)
{
	fh_release(fs_of(req), fh_of(fi));
	fuse_reply_err(req, 0);
}

static int add_id(const struct blockid *id, void *arg)
{
	return idvec_push(arg, id) ? 1 : 0;
}

/* Hold the sorted ids of shard s. */
static void load_shard(struct ucmfs *fs, struct dircursor *c, unsigned s)
{
	c->ids.n = 0;
	c->shard = s;
	fs->pipe->ops->list_shard(fs->pipe, s, add_id, &c->ids);
	blockid_sort(c->ids.v, c->ids.n); /* the pipeline lists in order; cheap to be sure */
}

/* Add one entry; false if it does not fit. */
static bool add(fuse_req_t req, char *buf, size_t size, size_t *used, const char *name,
		mode_t mode, fuse_ino_t ino, off_t next)
{
	struct stat st = { .st_ino = ino, .st_mode = mode };
	size_t need = fuse_add_direntry(req, buf + *used, size - *used, name, &st, next);

	if (need > size - *used)
		return false;
	*used += need;
	return true;
}

static void readdir_ucm(fuse_req_t req, size_t size, off_t off, char *buf)
{
	static const struct {
		const char *name;
		mode_t mode;
		fuse_ino_t ino;
	} ents[] = { { ".", S_IFDIR, NID_UCM }, { "..", S_IFDIR, NID_ROOT },
		     { "config", S_IFREG, NID_CONFIG }, { "stats", S_IFREG, NID_STATS },
		     { "query", S_IFDIR, NID_QUERY } };
	size_t used = 0;

	for (off_t i = off; i < (off_t)(sizeof(ents) / sizeof(ents[0])); i++)
		if (!add(req, buf, size, &used, ents[i].name, ents[i].mode, ents[i].ino, i + 1))
			break;
	fuse_reply_buf(req, buf, used);
}

struct qlist {
	fuse_req_t req;
	char *buf;
	size_t size, used;
};

static bool add_query(const char *name, uint64_t ino, size_t next, void *arg)
{
	struct qlist *l = arg;

	return add(l->req, l->buf, l->size, &l->used, name, S_IFREG, ino, (off_t)next + 2);
}

/* /.ucm/query: ".", "..", then the query files (offset = 2 + index in their list) */
static void readdir_query(fuse_req_t req, size_t size, off_t off, char *buf)
{
	struct qlist l = { .req = req, .buf = buf, .size = size };

	if (off == 0 && !add(req, buf, size, &l.used, ".", S_IFDIR, NID_QUERY, 1))
		goto out;
	if (off <= 1 && !add(req, buf, size, &l.used, "..", S_IFDIR, NID_UCM, 2))
		goto out;
	query_list(fs_of(req), off > 2 ? (size_t)off - 2 : 0, add_query, &l);
out:
	fuse_reply_buf(req, buf, l.used);
}

void dir_readdir(fuse_req_t req, fuse_ino_t nid, size_t size, off_t off,
		 struct fuse_file_info *fi)
{
	static const char *const fixed[NFIXED] = { ".", "..", ".ucm" };
	static const fuse_ino_t fixed_ino[NFIXED] = { NID_ROOT, NID_ROOT, NID_UCM };
	struct ucmfs *fs = fs_of(req);
	struct dircursor *c = fh_of(fi)->dir;
	char *buf = malloc(size), hex[BLOCKID_HEX_LEN + 1];
	size_t used = 0;
	unsigned s;
	size_t i;

	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (nid == NID_UCM) {
		readdir_ucm(req, size, off, buf);
		free(buf);
		return;
	}
	if (nid == NID_QUERY) {
		readdir_query(req, size, off, buf);
		free(buf);
		return;
	}
	if (off < NFIXED) {
		for (; off < NFIXED; off++)
			if (!add(req, buf, size, &used, fixed[off], S_IFDIR, fixed_ino[off], off + 1))
				goto out;
		off = SHARD_OFF(0, 0);
	}
	if (off < SHARD_OFF(0, 0))
		off = SHARD_OFF(0, 0);
	s = (unsigned)((off >> 32) - 1);
	i = (size_t)(off & 0xffffffff);
	for (; s < BLOCKID_SHARDS; s++, i = 0) {
		if (c->shard != s || i == 0)
			load_shard(fs, c, s);
		for (; i < c->ids.n; i++) {
			off_t next = i + 1 < c->ids.n ? SHARD_OFF(s, i + 1) : SHARD_OFF(s + 1, 0);

			blockid_format(&c->ids.v[i], hex);
			if (!add(req, buf, size, &used, hex, S_IFREG,
				 (blockid_hash(&c->ids.v[i]) >> 1) | NID_FIRST_BLOCK, next))
				goto out;
		}
	}
out:
	fuse_reply_buf(req, buf, used);
	free(buf);
}
