/*
 * The FUSE low-level operations of ucmfs: the namespace of DESIGN.md section 3.
 *
 * Blocks are files at the root named by 32 lowercase hex characters. Reading a block opens
 * (pins) its committed version in the pipeline; writing opens a write session there
 * (two-phase admission); the commit runs in FLUSH, so a block is visible as soon as close()
 * returns. Entries and attributes of blocks are not cached by the kernel (timeouts 0): a block
 * can vanish through eviction or expiry, or get a new version between a lookup and an open,
 * without the kernel being told, and a reader that takes a node over for a newer version
 * needs the kernel to ask for its size again (docs/BENCHMARKS.md: what keeping them for a
 * second cost). Those of the directories, which never change, are kept (ctl_attr_timeout()):
 * every path walk checks the root's.
 *
 * Passthrough. Where the kernel allows it (passthrough=auto|on, FUSE_CAP_PASSTHROUGH, and
 * CAP_SYS_ADMIN), a reader of a block whose bytes are in the memory tier's file
 * (tier_ops.backing) opens with FOPEN_PASSTHROUGH: the kernel then reads and maps that file
 * itself and sends no READ; the daemon still sees the open and the release, which pin and
 * unpin the version as for any reader. fs/inode.h says which readers of a node may pass
 * through (the kernel forbids mixing them with page-cache readers); the backing id lives
 * from a node's first passthrough open to its last release. The memory tier never writes a
 * file handed to the kernel while anybody holds it (a process may map it past its close).
 *
 * Every reply is sent by the handler that received the request; no lock of this file is
 * held across a reply.
 */
#include "fs/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "fs/fs_int.h"
#include "src/bdi.h"
#include "src/buf.h"
#include "src/log.h"
#include "src/notify.h"
#include "tiers/pipeline.h"

#define MAX_REQUEST (1u << 20)

/* <linux/fuse.h> of kernel 6.9 (Debian 12's headers predate it): forget a backing id. libfuse
 * has fuse_passthrough_close(), which needs a request; a backing id also goes at shutdown. */
#ifndef FUSE_DEV_IOC_BACKING_CLOSE
#define FUSE_DEV_IOC_BACKING_CLOSE _IOW(229, 2, uint32_t)
#endif

static struct timespec ns_to_ts(int64_t ns)
{
	struct timespec ts = { .tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000 };

	return ts;
}

static void block_stat_common(struct ucmfs *fs, struct inode *ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino ? ino->st_ino : 0;
	st->st_mode = S_IFREG | 0644;
	st->st_nlink = 1;
	st->st_uid = fs->uid;
	st->st_gid = fs->gid;
	st->st_blksize = 1 << 20;
}

static void attr_to_stat(struct ucmfs *fs, struct inode *ino, const struct block_attr *a,
			 struct stat *st)
{
	block_stat_common(fs, ino, st);
	st->st_size = (off_t)a->size;
	st->st_blocks = (blkcnt_t)((a->stored + 511) / 512);
	st->st_mtim = ns_to_ts(a->mtime);
	st->st_ctim = st->st_mtim;
	st->st_atim = ns_to_ts(a->atime ? a->atime : a->mtime);
}

int fs_block_stat(struct ucmfs *fs, struct inode *ino, struct fh *fh, struct stat *st)
{
	struct block_attr a;
	uint64_t size;

	if (fh && fh->kind == FH_READ && fs->pipe->ops->stat(fh->h, &a) == 0) {
		/* the version this descriptor reads, even if it was replaced or unlinked */
		attr_to_stat(fs, ino, &a, st);
		return 0;
	}
	if (fs->pipe->ops->lookup(fs->pipe, &ino->node.id, &a) == 0 &&
	    (!ino->version || ino->version == a.mtime)) {
		attr_to_stat(fs, ino, &a, st);
		return 0;
	}
	/* fstat() carries no file handle: a node bound to a version answers for that version's
	 * readers even while a writer replacing it shares the node (until the writer's
	 * RELEASE); only a node that never showed a committed version is a reservation's */
	if (itable_snapshot(fs->itab, ino, st) == 0) {
		/* a version that was replaced or removed: its attributes, with no name left */
		st->st_nlink = 0;
		return 0;
	}
	if (itable_resv_size(fs->itab, ino, &size) == 0) {
		/* only a reservation: what its writers see with fstat() */
		block_stat_common(fs, ino, st);
		st->st_size = (off_t)size;
		clock_gettime(CLOCK_REALTIME, &st->st_mtim);
		st->st_atim = st->st_ctim = st->st_mtim;
		return 0;
	}
	return -ENOENT;
}

static void reply_entry(fuse_req_t req, struct inode *ino, const struct stat *st)
{
	struct fuse_entry_param e;

	memset(&e, 0, sizeof(e));
	e.ino = (fuse_ino_t)(uintptr_t)ino;
	e.generation = 1;
	e.attr = *st;
	e.attr_timeout = 0;
	e.entry_timeout = 0;
	if (fuse_reply_entry(req, &e) == -ENOENT)
		itable_forget(fs_of(req)->itab, ino, 1); /* the lookup was interrupted */
}

/* --- lifecycle --------------------------------------------------------------------------- */

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	struct ucmfs *fs = userdata;

	/* O_TRUNC arrives with open (a replacement), not as a separate truncate */
	fuse_set_feature_flag(conn, FUSE_CAP_ATOMIC_O_TRUNC);
	/* attributes are never cached, so the kernel must not re-check them on every read */
	fuse_unset_feature_flag(conn, FUSE_CAP_AUTO_INVAL_DATA);
	fuse_unset_feature_flag(conn, FUSE_CAP_READDIRPLUS);
	conn->max_write = MAX_REQUEST;
	/* what the kernel offers is the window set at mount (fs_run()); libfuse keeps the
	 * smaller of the two */
	conn->max_readahead = fs->opts->readahead > MAX_REQUEST ? (unsigned)fs->opts->readahead
								 : MAX_REQUEST;
	conn->time_gran = 1;
	/* blocks in memory are read by the kernel from their files (backing files are on a
	 * tmpfs: nothing stacks below them) */
	if (fs->opts->passthrough != PT_OFF && fuse_set_feature_flag(conn, FUSE_CAP_PASSTHROUGH)) {
		conn->max_backing_stack_depth = 1;
		atomic_store(&fs->pt, true);
	}
}

static void op_destroy(void *userdata)
{
	struct ucmfs *fs = userdata;

	if (fs->pipe->ops->drain)
		fs->pipe->ops->drain(fs->pipe);
}

/* --- names ------------------------------------------------------------------------------- */

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct ucmfs *fs = fs_of(req);
	struct fuse_entry_param e;
	struct blockid id;
	struct inode *ino;
	struct block_attr a;
	struct stat st;
	int rc;

	if (parent != NID_ROOT || !strcmp(name, ".ucm")) {
		rc = ctl_lookup(fs, parent, name, &e);
		if (rc)
			fuse_reply_err(req, -rc);
		else if (fuse_reply_entry(req, &e) == -ENOENT && is_query(e.ino))
			query_forget(fs, e.ino, 1);
		return;
	}
	/* a reservation is invisible: only committed, live blocks are found */
	if (blockid_parse_name(name, &id) || fs->pipe->ops->lookup(fs->pipe, &id, &a)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	block_stat_common(fs, NULL, &st);
	attr_to_stat(fs, NULL, &a, &st);
	ino = itable_get_version(fs->itab, &id, a.mtime, &st, true);
	if (!ino) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	st.st_ino = ino->st_ino;
	reply_entry(req, ino, &st);
}

static void forget_one(struct ucmfs *fs, fuse_ino_t nid, uint64_t nlookup)
{
	if (is_block(nid))
		itable_forget(fs->itab, inode_of(nid), nlookup);
	else if (is_query(nid))
		query_forget(fs, nid, nlookup);
}

static void op_forget(fuse_req_t req, fuse_ino_t nid, uint64_t nlookup)
{
	forget_one(fs_of(req), nid, nlookup);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	for (size_t i = 0; i < count; i++)
		forget_one(fs_of(req), forgets[i].ino, forgets[i].nlookup);
	fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t nid, struct fuse_file_info *fi)
{
	struct ucmfs *fs = fs_of(req);
	struct stat st;
	int rc;

	if (is_block(nid))
		rc = fs_block_stat(fs, inode_of(nid), fi ? fh_of(fi) : NULL, &st);
	else if (is_query(nid))
		rc = query_getattr(fs, nid, &st);
	else
		rc = ctl_getattr(fs, nid, &st);
	if (rc)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_attr(req, &st, ctl_attr_timeout(&st));
}

/* Declare the size of the reservation behind fh (ftruncate, fallocate). */
static int declare_size(struct ucmfs *fs, struct fh *fh, uint64_t size)
{
	int rc;

	pthread_mutex_lock(&fh->lock);
	rc = fh->h ? fs->pipe->ops->truncate(fh->h, size) : -EPERM;
	pthread_mutex_unlock(&fh->lock);
	if (rc == 0)
		itable_resv_set(fs->itab, fh->inode, size);
	return rc;
}

static void op_setattr(fuse_req_t req, fuse_ino_t nid, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	struct ucmfs *fs = fs_of(req);
	struct fh *fh = fi ? fh_of(fi) : NULL;
	struct stat st;
	int rc = 0;

	if (!is_block(nid) && !is_query(nid)) {
		fuse_reply_err(req, EPERM);
		return;
	}
	if (to_set & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
		fuse_reply_err(req, EPERM);
		return;
	}
	if (is_query(nid)) {
		rc = (to_set & FUSE_SET_ATTR_SIZE) ? query_truncate(fs, nid, (uint64_t)attr->st_size)
						   : 0;
		if (rc == 0)
			rc = query_getattr(fs, nid, &st);
		if (rc)
			fuse_reply_err(req, -rc);
		else
			fuse_reply_attr(req, &st, 0);
		return;
	}
	if (to_set & FUSE_SET_ATTR_SIZE) {
		/* only a writer declares a size; a committed block is immutable */
		if (fh && fh->kind == FH_WRITE)
			rc = declare_size(fs, fh, (uint64_t)attr->st_size);
		else
			rc = fs_block_stat(fs, inode_of(nid), fh, &st) ? -ENOENT : -EPERM;
		if (rc) {
			fuse_reply_err(req, -rc);
			return;
		}
	}
	if (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_ATIME_NOW |
		      FUSE_SET_ATTR_MTIME_NOW)) {
		/* touch: refresh recency (a reservation has none yet) */
		fs->pipe->ops->touch(fs->pipe, &inode_of(nid)->node.id);
	}
	rc = fs_block_stat(fs, inode_of(nid), fh, &st);
	if (rc)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_attr(req, &st, 0);
}

/* --- open, create, close ----------------------------------------------------------------- */

struct fh *fh_new(struct ucmfs *fs, enum fh_kind kind, int flags)
{
	struct fh *fh = calloc(1, sizeof(*fh));

	if (!fh)
		return NULL;
	fh->kind = kind;
	fh->open_flags = flags;
	pthread_mutex_init(&fh->lock, NULL);
	pthread_mutex_lock(&fs->fh_lock);
	fh->next = fs->fhs;
	if (fs->fhs)
		fs->fhs->prev = fh;
	fs->fhs = fh;
	pthread_mutex_unlock(&fs->fh_lock);
	return fh;
}

/* A pinned version, shared by the readers of one node (itable_add_reader()). */
struct rhandle {
	struct tier_handle *h;
	atomic_uint refs;
};

static void rhandle_put(struct rhandle *r)
{
	if (r && atomic_fetch_sub(&r->refs, 1) == 1) {
		tier_close(r->h);
		free(r);
	}
}

/* A cached reader goes: the node's backing id goes with its last passthrough reader. */
static void pt_leave(struct ucmfs *fs, struct fh *fh)
{
	uint32_t id = (uint32_t)itable_pt_leave(fs->itab, fh->inode, fh->backing_id);

	if (id) {
		/* after an unmount the session's descriptor is gone, and the ids with it */
		ioctl(fuse_session_fd(fs->se), FUSE_DEV_IOC_BACKING_CLOSE, &id);
		atomic_fetch_sub(&fs->backing_files, 1);
	}
}

void fh_free(struct ucmfs *fs, struct fh *fh)
{
	pthread_mutex_lock(&fs->fh_lock);
	if (fh->prev)
		fh->prev->next = fh->next;
	else
		fs->fhs = fh->next;
	if (fh->next)
		fh->next->prev = fh->prev;
	pthread_mutex_unlock(&fs->fh_lock);
	if (fh->inode) {
		if (fh->kind == FH_READ && fh->counted && !fh->uncached)
			pt_leave(fs, fh);
		if (fh->kind == FH_WRITE)
			itable_del_writer(fs->itab, fh->inode);
		else if (fh->kind == FH_READ && fh->counted)
			rhandle_put(itable_del_reader(fs->itab, fh->inode, !fh->uncached));
		itable_put(fs->itab, fh->inode);
	}
	if (fh->kind == FH_READ)
		rhandle_put(fh->rh);
	if (fh->kind == FH_QUERY)
		query_close(fs, fh->q);
	if (fh->kind == FH_DIR)
		dir_free(fh->dir);
	pthread_mutex_destroy(&fh->lock);
	free(fh->text);
	free(fh);
}

/* Free fh without a close: a reservation it holds is aborted (nothing is published). */
static void fh_discard(struct ucmfs *fs, struct fh *fh)
{
	if (fh->kind == FH_WRITE && fh->h)
		fs->pipe->ops->abort(fh->h);
	fh_free(fs, fh);
}

static bool wants_write(int flags)
{
	return (flags & O_ACCMODE) != O_RDONLY;
}

struct pt_open {
	struct ucmfs *fs;
	fuse_req_t req;
	struct fh *fh;
};

/* itable_pt_join()'s open_backing: a backing id for the file that holds fh's version. */
static int pt_open_backing(void *arg)
{
	struct pt_open *a = arg;
	struct ucmfs *fs = a->fs;
	int fd = fs->pipe->ops->backing(a->fh->h), id;

	if (fd < 0)
		return fd; /* not in a file of the memory tier (not loaded, too small, ...) */
	id = fuse_passthrough_open(a->req, fd);
	close(fd);
	if (id <= 0) {
		/* the kernel refuses (no CAP_SYS_ADMIN in the initial namespace, say): from now
		 * on every block is read through the daemon */
		if (atomic_exchange(&fs->pt, false))
			log_warn("passthrough off: the kernel refused a backing file (FUSE_DEV_IOC_"
				 "BACKING_OPEN); blocks are read through the daemon from now on");
		return -EPERM;
	}
	atomic_fetch_add(&fs->backing_files, 1);
	return id;
}

/* A cached reader: through the kernel (fh->backing_id) or through the daemon. */
static void pt_join(struct ucmfs *fs, fuse_req_t req, struct fh *fh)
{
	struct pt_open a = { .fs = fs, .req = req, .fh = fh };
	bool pt = atomic_load(&fs->pt) && fs->pipe->ops->backing;

	fh->backing_id = itable_pt_join(fs->itab, fh->inode, fh->purge,
					pt ? pt_open_backing : NULL, &a);
}

/* Pin the version of fh's block that its node shows (the committed one, or the older one
 * that the node's other readers hold) and count the reader. 0 or -errno. */
static int open_reader(struct ucmfs *fs, fuse_req_t req, struct fh *fh)
{
	struct inode *ino = fh->inode;
	struct tier_handle *h;
	struct rhandle *mine;
	struct block_attr a;
	struct reader_grant g;
	struct stat st;
	int rc;

	rc = fs->pipe->ops->open(fs->pipe, &ino->node.id, 0, &h);
	if (rc)
		return rc;
	mine = malloc(sizeof(*mine));
	rc = mine ? fs->pipe->ops->stat(h, &a) : -ENOMEM;
	if (rc) {
		free(mine);
		tier_close(h);
		return rc;
	}
	mine->h = h;
	atomic_init(&mine->refs, 1);
	attr_to_stat(fs, ino, &a, &st);
	/* a node shared with writers reads direct (their writes move its size) */
	rc = itable_add_reader(fs->itab, ino, a.mtime, &st, mine, &g);
	if (g.adopted)
		atomic_fetch_add(&mine->refs, 1); /* the node's */
	if (g.share) {
		/* the older version the node's readers hold: counted, so it stays open */
		rhandle_put(mine);
		mine = g.share;
		atomic_fetch_add(&mine->refs, 1);
		fs->pipe->ops->stat(mine->h, &a);
	}
	fh->rh = mine;
	fh->h = mine->h;
	fh->counted = true;
	fh->uncached = rc == READ_DIRECT;
	fh->purge = rc == READ_PURGE;
	fh->size = a.size;
	if (!fh->uncached)
		pt_join(fs, req, fh);
	return 0;
}

/*
 * Open a block for reading (pin) or writing (reserve). 0 or -errno; *out on success.
 * -ESTALE: a writer asked for a node that readers use through the page cache; the node was
 * detached, and a new lookup of the name gives one of its own (the kernel retries by itself).
 */
static int open_block(struct ucmfs *fs, fuse_req_t req, struct inode *ino, int flags,
		      struct fh **out)
{
	struct fh *fh = fh_new(fs, wants_write(flags) ? FH_WRITE : FH_READ, flags);
	unsigned rf = 0;
	struct block_attr a;
	int rc;

	if (!fh)
		return -ENOMEM;
	fh->inode = ino;
	if (fh->kind == FH_READ) {
		rc = open_reader(fs, req, fh);
	} else {
		if (flags & O_EXCL)
			rf |= TIER_RESERVE_EXCL;
		if (flags & O_TRUNC)
			rf |= TIER_RESERVE_TRUNC;
		rc = itable_add_writer(fs->itab, ino);
		if (rc == 0) {
			rc = fs->pipe->ops->reserve(fs->pipe, &ino->node.id, rf, 0, &fh->h);
			if (rc)
				itable_del_writer(fs->itab, ino);
			else if (fs->pipe->ops->stat(fh->h, &a) == 0)
				itable_resv_grow(fs->itab, ino, a.size);
		}
	}
	if (rc) {
		fh->inode = NULL;
		fh_free(fs, fh);
		return rc;
	}
	*out = fh;
	return 0;
}

static void op_open(fuse_req_t req, fuse_ino_t nid, struct fuse_file_info *fi)
{
	struct ucmfs *fs = fs_of(req);
	struct fh *fh;
	struct inode *ino;
	int rc;

	if (is_query(nid)) {
		rc = query_open(fs, nid, fi->flags, &fh);
	} else if (!is_block(nid)) {
		rc = ctl_open(fs, nid, fi, &fh);
	} else {
		ino = inode_of(nid);
		itable_ref(fs->itab, ino, false);
		rc = open_block(fs, req, ino, fi->flags, &fh);
		if (rc)
			itable_put(fs->itab, ino);
	}
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	fi->fh = (uintptr_t)fh;
	/* the kernel reads the block's memory itself */
	fi->backing_id = fh->kind == FH_READ ? fh->backing_id : 0;
	/* a node id shows one immutable version: its cached pages stay valid across opens (a
	 * passthrough open takes no other flag than noflush and direct_io, or fails EIO) */
	fi->keep_cache = fh->kind == FH_READ && !fh->uncached && !fh->purge && !fi->backing_id;
	fi->noflush = fh->kind != FH_WRITE; /* only a writer's close commits anything */
	/* writes go straight to the reservation, never into the page cache of a version that
	 * readers may hold; a query file's contents change under other descriptors */
	if (fh->kind == FH_WRITE || fh->kind == FH_QUERY || fh->uncached)
		fi->direct_io = 1;
	if (fh->kind == FH_READ)
		counter_add(&fs->opens, 1);
	if (fi->backing_id)
		counter_add(&fs->pt_opens, 1);
	if (fuse_reply_open(req, fi) == -ENOENT) {
		fh_discard(fs, fh); /* interrupted: the kernel will not release it */
	}
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	struct ucmfs *fs = fs_of(req);
	struct fuse_entry_param e;
	struct blockid id;
	struct inode *ino;
	struct fh *fh;
	int rc;

	(void)mode; /* every block is 0644, every query file 0600 */
	if (parent == NID_QUERY) {
		rc = query_create(fs, req, name, fi->flags, &e, &fh);
		if (rc) {
			fuse_reply_err(req, -rc);
			return;
		}
		fi->fh = (uintptr_t)fh;
		fi->direct_io = 1;
		fi->noflush = 1; /* as op_open: only a block writer's close does anything */
		if (fuse_reply_create(req, &e, fi) == -ENOENT) {
			query_forget(fs, e.ino, 1);
			fh_free(fs, fh);
		}
		return;
	}
	if (parent != NID_ROOT) {
		fuse_reply_err(req, EPERM);
		return;
	}
	if (blockid_parse_name(name, &id)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (fs->pipe->ops->lookup(fs->pipe, &id, NULL))
		itable_detach(fs->itab, &id); /* a new block: never the node id of a gone one */
	/* a replacement by create chooses its node: one that page-cache readers do not use */
	for (int tries = 0;; tries++) {
		ino = itable_get(fs->itab, &id, false);
		if (!ino) {
			fuse_reply_err(req, ENOMEM);
			return;
		}
		rc = open_block(fs, req, ino, fi->flags | O_CREAT, &fh);
		if (rc == 0)
			break;
		itable_put(fs->itab, ino);
		if (rc != -ESTALE || tries == 2) {
			fuse_reply_err(req, -rc);
			return;
		}
	}
	/* the kernel now holds a lookup on the inode as well */
	itable_ref(fs->itab, ino, true);
	memset(&e, 0, sizeof(e));
	e.ino = (fuse_ino_t)(uintptr_t)ino;
	e.generation = 1;
	fs_block_stat(fs, ino, fh, &e.attr);
	fi->fh = (uintptr_t)fh;
	fi->keep_cache = 0;
	fi->direct_io = 1;
	if (fuse_reply_create(req, &e, fi) == -ENOENT) {
		fh_discard(fs, fh);
		itable_forget(fs->itab, ino, 1);
	}
}

/* Remember that the process `owner` wrote through fh (fh->lock held). */
static void add_owner(struct fh *fh, uint64_t owner)
{
	for (unsigned i = 0; i < fh->nowners && i < 8; i++)
		if (fh->owners[i] == owner)
			return;
	if (fh->nowners < 8)
		fh->owners[fh->nowners] = owner;
	fh->nowners++;
}

/* Does a close by `owner` commit? Only a process that wrote, once anyone has written. */
static bool owner_commits(struct fh *fh, uint64_t owner)
{
	if (fh->nowners == 0 || fh->nowners > 8 || owner == 0)
		return true;
	for (unsigned i = 0; i < fh->nowners; i++)
		if (fh->owners[i] == owner)
			return true;
	return false;
}

/*
 * Commit a writer's reservation. A complete block is published (by the last writer) and the
 * handle is given up; an incomplete one fails -EIO and, unless `final`, stays open so that a
 * duplicate of the descriptor can go on writing (the shell's `> file` closes one early).
 */
static int commit_writer(struct ucmfs *fs, struct fh *fh, bool final, uint64_t owner)
{
	int rc = 0;

	pthread_mutex_lock(&fh->lock);
	if (fh->h && (final || owner_commits(fh, owner))) {
		rc = fs->pipe->ops->commit(fh->h, NULL, final ? 0 : TIER_COMMIT_TRY, NULL);
		if (rc == 0 || final || rc != -EIO)
			fh->h = NULL;
	}
	pthread_mutex_unlock(&fh->lock);
	return rc;
}

static void op_flush(fuse_req_t req, fuse_ino_t nid, struct fuse_file_info *fi)
{
	struct fh *fh = fh_of(fi);
	int rc = 0;

	/* a child that inherited the descriptor and never wrote does not commit for its parent */
	if (fh->kind == FH_WRITE)
		rc = commit_writer(fs_of(req), fh, false, fi->lock_owner);
	fuse_reply_err(req, -rc);
}

void fh_release(struct ucmfs *fs, struct fh *fh)
{
	fh_quiesce(fh);
	if (fh->kind == FH_WRITE)
		commit_writer(fs, fh, true, 0);
	fh_free(fs, fh); /* a reader's handle closes with the node's last reader */
}

static void op_release(fuse_req_t req, fuse_ino_t nid, struct fuse_file_info *fi)
{
	fh_release(fs_of(req), fh_of(fi));
	fuse_reply_err(req, 0);
}

static void op_fsync(fuse_req_t req, fuse_ino_t nid, int datasync, struct fuse_file_info *fi)
{
	struct ucmfs *fs = fs_of(req);
	struct fh *fh = fh_of(fi);
	int rc = 0;

	if (!is_block(nid)) {
		fuse_reply_err(req, 0);
		return;
	}
	if (fh->kind == FH_WRITE) {
		/* before close: the commit that close makes will be durable */
		pthread_mutex_lock(&fh->lock);
		if (fh->h)
			rc = fs->pipe->ops->set_durable(fh->h);
		pthread_mutex_unlock(&fh->lock);
		if (rc == 0 && !fh->h)
			rc = fs->pipe->ops->sync(fs->pipe, &fh->inode->node.id);
	} else {
		rc = fs->pipe->ops->sync(fs->pipe, &fh->inode->node.id);
	}
	fuse_reply_err(req, rc == -ENOENT ? 0 : -rc);
}

/* --- data -------------------------------------------------------------------------------- */

static bool do_read(fuse_req_t req, struct fh *fh, size_t size, off_t off);

static void op_read(fuse_req_t req, fuse_ino_t nid, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct fh *fh = fh_of(fi);

	atomic_fetch_add(&fh->inflight, 1);
	if (!do_read(req, fh, size, off))
		atomic_fetch_sub(&fh->inflight, 1);
	/* else answered by read_done(), which may have run already: fh is not ours to touch */
}

/* A read of a block whose bytes are still on their way from disk. */
struct read_wait {
	fuse_req_t req;
	struct fh *fh;
	size_t size;
};

/* The bytes of a read_wait are in (or failed): answer from the thread that fetched them. */
static void read_done(void *arg, const void *data, int err)
{
	struct read_wait *w = arg;
	struct fh *fh = w->fh;
	struct ucmfs *fs = fs_of(w->req);

	if (data) {
		counter_add(&fs->read_bytes, w->size);
		fuse_reply_buf(w->req, data, w->size);
	} else {
		fuse_reply_err(w->req, -err);
	}
	free(w);
	atomic_fetch_sub(&fh->inflight, 1); /* release may go on */
	atomic_fetch_sub(&fs->replies_later, 1); /* and the session may end */
}

/*
 * Answer a read of a block straight from its memory: at once if the bytes are there, else
 * later, by read_done() in the thread that fetches them (*later), so that no session thread
 * waits for the disk. false: not answered; copy with read().
 */
static bool read_mapped(fuse_req_t req, struct fh *fh, size_t size, off_t off, bool *later)
{
	const struct tier_ops *ops = fh->h->tier->ops;
	struct read_wait *w = NULL;
	const void *data = NULL;
	int rc = -ENOTSUP;

	*later = false;
	if (ops->map_start && (w = malloc(sizeof(*w)))) {
		w->req = req;
		w->fh = fh;
		w->size = size;
		atomic_fetch_add(&fs_of(req)->replies_later, 1);
		rc = ops->map_start(fh->h, (uint64_t)off, size, read_done, w, &data);
		if (rc == 0) {
			*later = true;
			return true;
		}
		atomic_fetch_sub(&fs_of(req)->replies_later, 1);
		free(w);
	} else if (ops->map) {
		data = ops->map(fh->h, (uint64_t)off, size);
		rc = data ? 1 : -ENOTSUP;
	}
	if (rc == 1) {
		counter_add(&fs_of(req)->read_bytes, size);
		fuse_reply_buf(req, data, size);
		return true;
	}
	if (rc != -ENOTSUP && rc != -ENOMEM) {
		fuse_reply_err(req, -rc);
		return true;
	}
	return false;
}

/* true if the reply comes later, from another thread. */
static bool do_read(fuse_req_t req, struct fh *fh, size_t size, off_t off)
{
	struct ucmfs *fs = fs_of(req);
	char *buf;
	ssize_t n;

	if (fh->kind == FH_CTL) {
		size_t len = (size_t)off >= fh->len ? 0 : fh->len - (size_t)off;

		fuse_reply_buf(req, fh->text + (len ? off : 0), len < size ? len : size);
		return false;
	}
	if (fh->kind == FH_QUERY) {
		buf = malloc(size ? size : 1);
		n = buf ? query_read(fs, fh, buf, size, (uint64_t)off) : -ENOMEM;
		if (n < 0)
			fuse_reply_err(req, (int)-n);
		else
			fuse_reply_buf(req, buf, (size_t)n);
		free(buf);
		return false;
	}
	if (fh->kind == FH_READ || fh->kind == FH_WRITE)
		counter_add(&fs->read_requests, 1);
	if (fh->kind == FH_READ) {
		bool later;

		if ((uint64_t)off >= fh->size)
			size = 0;
		else if (size > fh->size - (uint64_t)off)
			size = (size_t)(fh->size - (uint64_t)off);
		if (size == 0) {
			fuse_reply_buf(req, NULL, 0);
			return false;
		}
		/* straight from the memory tier's buffer (fetched from disk first if need be) */
		if (read_mapped(req, fh, size, off, &later))
			return later;
	}
	buf = malloc(size ? size : 1);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return false;
	}
	if (fh->kind == FH_WRITE) {
		pthread_mutex_lock(&fh->lock);
		n = fh->h ? tier_read(fh->h, buf, size, (uint64_t)off) : -EBADF;
		pthread_mutex_unlock(&fh->lock);
		if (n == -EBADF) {
			/* committed already: read what was published */
			struct tier_handle *rh;

			n = fs->pipe->ops->open(fs->pipe, &fh->inode->node.id, 0, &rh);
			if (n == 0) {
				n = tier_read(rh, buf, size, (uint64_t)off);
				tier_close(rh);
			}
		}
	} else {
		n = tier_read(fh->h, buf, size, (uint64_t)off);
	}
	if (n < 0) {
		fuse_reply_err(req, (int)-n);
	} else {
		counter_add(&fs->read_bytes, (uint64_t)n);
		fuse_reply_buf(req, buf, (size_t)n);
	}
	free(buf);
	return false;
}

static void op_write(fuse_req_t req, fuse_ino_t nid, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	struct ucmfs *fs = fs_of(req);
	struct fh *fh = fh_of(fi);
	ssize_t n;
	int rc = 0;

	if (fh->kind == FH_QUERY) {
		n = query_write(fs, fh, buf, size, (uint64_t)off);
		if (n < 0)
			fuse_reply_err(req, (int)-n);
		else
			fuse_reply_write(req, (size_t)n);
		return;
	}
	if (fh->kind != FH_WRITE) {
		fuse_reply_err(req, EBADF);
		return;
	}
	counter_add(&fs->write_requests, 1);
	pthread_mutex_lock(&fh->lock);
	if (!fh->h) {
		/* written again after its close committed it: a replacement of that version */
		rc = fs->pipe->ops->reserve(fs->pipe, &fh->inode->node.id, 0, 0, &fh->h);
	}
	n = rc ? rc : fs->pipe->ops->write(fh->h, buf, size, (uint64_t)off);
	if (n > 0 && fi->lock_owner)
		add_owner(fh, fi->lock_owner);
	pthread_mutex_unlock(&fh->lock);
	if (n < 0) {
		fuse_reply_err(req, (int)-n);
		return;
	}
	itable_resv_grow(fs->itab, fh->inode, (uint64_t)off + (uint64_t)n);
	counter_add(&fs->write_bytes, (uint64_t)n);
	fuse_reply_write(req, (size_t)n);
}

static void op_fallocate(fuse_req_t req, fuse_ino_t nid, int mode, off_t off, off_t len,
			 struct fuse_file_info *fi)
{
	struct ucmfs *fs = fs_of(req);
	struct fh *fh = fh_of(fi);
	uint64_t end = (uint64_t)off + (uint64_t)len, cur = 0;
	int rc;

	if (mode & ~FALLOC_FL_KEEP_SIZE) {
		fuse_reply_err(req, EOPNOTSUPP);
		return;
	}
	if (fh->kind != FH_WRITE) {
		fuse_reply_err(req, EBADF);
		return;
	}
	itable_resv_size(fs->itab, fh->inode, &cur);
	rc = (mode & FALLOC_FL_KEEP_SIZE) || end <= cur ? 0 : declare_size(fs, fh, end);
	fuse_reply_err(req, -rc);
}

/* --- namespace changes ------------------------------------------------------------------- */

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct ucmfs *fs = fs_of(req);
	struct blockid id;
	int rc;

	if (parent == NID_QUERY) {
		fuse_reply_err(req, -query_unlink(fs, name));
		return;
	}
	if (parent != NID_ROOT || !strcmp(name, ".ucm")) {
		fuse_reply_err(req, EPERM);
		return;
	}
	if (blockid_parse_name(name, &id)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	rc = fs->pipe->ops->remove(fs->pipe, &id);
	if (rc == 0)
		itable_detach(fs->itab, &id); /* open readers keep theirs; a new block gets another */
	fuse_reply_err(req, -rc);
}

static void op_eperm_entry(fuse_req_t req)
{
	fuse_reply_err(req, EPERM);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	op_eperm_entry(req);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	op_eperm_entry(req);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		     dev_t rdev)
{
	op_eperm_entry(req);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	op_eperm_entry(req);
}

static void op_link(fuse_req_t req, fuse_ino_t nid, fuse_ino_t newparent, const char *newname)
{
	op_eperm_entry(req);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	op_eperm_entry(req);
}

static void op_statfs(fuse_req_t req, fuse_ino_t nid)
{
	struct ucmfs *fs = fs_of(req);
	struct tier_usage u = { 0 };
	struct statvfs sv;
	const uint64_t bs = 4096;

	fs->pipe->ops->usage(fs->pipe, &u);
	memset(&sv, 0, sizeof(sv));
	sv.f_bsize = bs;
	sv.f_frsize = bs;
	sv.f_blocks = u.capacity / bs;
	sv.f_bfree = u.capacity > u.used ? (u.capacity - u.used) / bs : 0;
	sv.f_bavail = sv.f_bfree;
	sv.f_files = u.blocks;
	sv.f_ffree = 0;
	sv.f_favail = 0;
	sv.f_namemax = BLOCKID_HEX_LEN;
	fuse_reply_statfs(req, &sv);
}

static const struct fuse_lowlevel_ops ucmfs_ops = {
	.init = op_init,
	.destroy = op_destroy,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.setattr = op_setattr,
	.open = op_open,
	.create = op_create,
	.read = op_read,
	.write = op_write,
	.flush = op_flush,
	.release = op_release,
	.fsync = op_fsync,
	.fallocate = op_fallocate,
	.unlink = op_unlink,
	.mkdir = op_mkdir,
	.rmdir = op_rmdir,
	.mknod = op_mknod,
	.symlink = op_symlink,
	.link = op_link,
	.rename = op_rename,
	.opendir = dir_opendir,
	.readdir = dir_readdir,
	.releasedir = dir_releasedir,
	.statfs = op_statfs,
	.getxattr = xattr_get,
	.setxattr = xattr_set,
	.listxattr = xattr_list,
	.removexattr = xattr_remove,
};

/* --- running ----------------------------------------------------------------------------- */

/* The mount options: the kernel's permission checks, the names, then the user's. */
static void mount_opts(const struct ucm_options *o, char *opts, size_t len)
{
	snprintf(opts, len, "default_permissions,fsname=ucmfs,subtype=ucmfs%s%s",
		 o->fuse_opts[0] ? "," : "", o->fuse_opts);
}

static int build_args(const struct ucm_options *o, struct fuse_args *args)
{
	char opts[sizeof(o->fuse_opts) + 128];

	mount_opts(o, opts, sizeof(opts));
	if (fuse_opt_add_arg(args, "ucmfs") || fuse_opt_add_arg(args, "-o") ||
	    fuse_opt_add_arg(args, opts))
		return -ENOMEM;
	if (o->debug && fuse_opt_add_arg(args, "-d"))
		return -ENOMEM;
	return 0;
}

/* Answer the kernel's INIT now (it is always the first request): whether the connection
 * passes reads through is then known before the daemon goes to the background. 0 or -errno. */
static int answer_init(struct ucmfs *fs)
{
	struct fuse_buf buf = { .mem = NULL };
	int rc = fuse_session_receive_buf(fs->se, &buf);

	if (rc > 0)
		fuse_session_process_buf(fs->se, &buf);
	free(buf.mem);
	if (rc <= 0)
		return rc < 0 ? rc : -ENOTCONN;
	return 0;
}

/* Say (once, at start) how blocks in memory are read; -1 if passthrough=on cannot be had. */
static int report_passthrough(struct ucmfs *fs)
{
	const char *mem = buf_kind_name(buf_kind());

	if (atomic_load(&fs->pt)) {
		log_info("passthrough on: the kernel reads blocks in memory from their files "
			 "(memory: %s)", mem);
		return 0;
	}
	if (fs->opts->passthrough == PT_OFF)
		return 0; /* asked for, or said why already (main.c) */
	if (fs->opts->passthrough == PT_ON) {
		log_err("passthrough=on: the kernel offers no FUSE passthrough (Linux 6.9 or later "
			"with CONFIG_FUSE_PASSTHROUGH)");
		return -1;
	}
	log_info("passthrough off: the kernel offers no FUSE passthrough; blocks are read through "
		 "the daemon (memory: %s)", mem);
	return 0;
}

int fs_run(const struct ucm_options *o, struct tier *pipe, const char *tree)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct fuse_loop_config *lc = NULL;
	struct ucmfs fs = { .pipe = pipe, .opts = o, .tree = tree };
	char *mnt = NULL, why[256], opts[sizeof(o->fuse_opts) + 128], devfd[32];
	int status = 1, rc, helper = -1;

	pthread_mutex_init(&fs.fh_lock, NULL);
	fs.uid = getuid();
	fs.gid = getgid();
	clock_gettime(CLOCK_REALTIME, &fs.start);
	if (itable_create(&fs.itab) || query_init(&fs) || build_args(o, &args)) {
		log_err("out of memory");
		goto out;
	}
	fs.se = fuse_session_new(&args, &ucmfs_ops, sizeof(ucmfs_ops), &fs);
	if (!fs.se) {
		log_err("cannot start a FUSE session (options: %s)", o->fuse_opts);
		goto out;
	}
	if (fuse_set_signal_handlers(fs.se)) {
		log_err("cannot install signal handlers");
		goto out_session;
	}
	/* the canonical path, for mountinfo: once mounted, resolving it would ask the daemon */
	mnt = realpath(o->mountpoint, NULL);
	mount_opts(o, opts, sizeof(opts));
	if (fs_wants_helper(opts)) {
		rc = fs_mount_by_helper(mnt ? mnt : o->mountpoint, opts, &helper, why,
					sizeof(why));
		if (rc < 0) {
			log_err("cannot mount on %s: %s", o->mountpoint, why);
			goto out_signals;
		}
		snprintf(devfd, sizeof(devfd), "/dev/fd/%d", rc);
	}
	if (fuse_session_mount(fs.se, helper >= 0 ? devfd : o->mountpoint)) {
		log_err("cannot mount on %s", o->mountpoint);
		if (helper >= 0)
			fs_unmount_by_helper(mnt ? mnt : o->mountpoint, helper);
		goto out_signals;
	}
	if (o->readahead && mnt && bdi_set_readahead(mnt, o->readahead, why, sizeof(why)))
		log_warn("read-ahead stays at the kernel's default: %s", why);
	rc = answer_init(&fs);
	if (rc) {
		log_err("no INIT from the kernel on %s: %s", o->mountpoint, strerror(-rc));
		goto out_unmount;
	}
	if (report_passthrough(&fs))
		goto out_unmount;
	if (!o->foreground)
		log_use_syslog(-1);
	if (fuse_daemonize(o->foreground)) {
		log_err("cannot go to the background");
		goto out_unmount;
	}
	rc = tier_start(pipe);
	if (rc) {
		log_err("cannot start worker threads: %s", strerror(-rc));
		goto out_unmount;
	}
	lc = fuse_loop_cfg_create();
	if (!lc) {
		log_err("out of memory");
		goto out_unmount;
	}
	fuse_loop_cfg_set_max_threads(lc, 16);
	fuse_loop_cfg_set_idle_threads(lc, 4);
	notify_manager("READY=1");
	rc = fuse_session_loop_mt(fs.se, lc);
	notify_manager("STOPPING=1");
	status = rc == 0 || rc == SIGTERM || rc == SIGINT || rc == SIGHUP ? 0 : 1;
	/* reads left waiting for the disk are answered by the pipeline's threads: their replies
	 * go out before the unmount closes the session's descriptor (an IO that hangs fails
	 * after io_timeout) */
	while (atomic_load(&fs.replies_later))
		usleep(1000);
out_unmount:
	if (helper >= 0)
		fs_unmount_by_helper(mnt ? mnt : o->mountpoint, helper);
	fuse_session_unmount(fs.se);
	/* files still open: closed just before the unmount, whose RELEASE the kernel dropped (a
	 * writer's FLUSH committed already), or open when a signal stopped the daemon: a block
	 * that no close published is not published now */
	while (fs.fhs)
		fh_discard(&fs, fs.fhs);
out_signals:
	fuse_remove_signal_handlers(fs.se);
out_session:
	/* every committed block reaches the disk before the daemon exits */
	if (pipe->ops->drain)
		pipe->ops->drain(pipe);
	fuse_session_destroy(fs.se);
out:
	fuse_loop_cfg_destroy(lc);
	fuse_opt_free_args(&args);
	free(mnt);
	query_shutdown(&fs);
	tier_destroy(pipe);
	itable_destroy(fs.itab);
	pthread_mutex_destroy(&fs.fh_lock);
	return status;
}
