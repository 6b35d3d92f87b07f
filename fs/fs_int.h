/* Internals shared by the files of fs/ (the only folder that includes fuse_lowlevel.h). */
#ifndef UCM_FS_INT_H
#define UCM_FS_INT_H

#include <fuse_lowlevel.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/stat.h>

#include "fs/inode.h"
#include "src/metrics.h"
#include "src/options.h"
#include "tiers/tier.h"

struct dircursor;
struct qdir;
struct qfile;

struct ucmfs {
	struct tier *pipe;               /* the only storage the FS knows */
	const struct ucm_options *opts;
	const char *tree;                /* the tiers as built, one line (/.ucm/config) */
	struct itable *itab;
	struct fuse_session *se;
	uid_t uid;                       /* owner of / and of every block */
	gid_t gid;
	struct timespec start;           /* times of the fixed files */
	struct qdir *queries;            /* /.ucm/query */
	counter_t read_bytes, write_bytes, opens;
	counter_t read_requests, write_requests; /* READ and WRITE requests for blocks */
	counter_t queries_total;
	/* FUSE passthrough (fs/fs.c): blocks in memory are read by the kernel from their files */
	atomic_bool pt;                  /* opens of blocks in memory pass through */
	counter_t pt_opens;              /* opens that did */
	atomic_long backing_files;       /* backing ids registered in the kernel now */
	struct histogram query_hist;
	atomic_int replies_later;        /* reads to be answered by the thread fetching their
					    bytes: the session must outlive them (fs_run) */
	pthread_mutex_t fh_lock;         /* protects fhs */
	struct fh *fhs;                  /* every open file: the kernel drops the RELEASE of a
					    file closed just before an unmount, and fs_run()
					    closes what is left */
};

enum fh_kind { FH_READ, FH_WRITE, FH_CTL, FH_DIR, FH_QUERY };

/* An open file (fuse_file_info.fh). */
struct fh {
	enum fh_kind kind;
	struct inode *inode;             /* blocks only; holds a daemon reference */
	struct tier_handle *h;           /* FH_READ: pinned version; FH_WRITE: the reservation,
					    NULL once committed (a later write starts another) */
	struct rhandle *rh;              /* FH_READ: h's owner, shared by the node's readers */
	int open_flags;
	bool counted;                    /* FH_READ: counted by itable_add_reader() */
	bool uncached;                   /* FH_READ not through the page cache (writers share
					    its node) */
	bool purge;                      /* FH_READ: the node's older pages go at open */
	int backing_id;                  /* FH_READ, cached: the node's backing id it reads
					    through (itable_pt_join()), 0 if through the daemon */
	uint64_t size;                   /* FH_READ: the version's size (immutable) */
	pthread_mutex_t lock;            /* FH_WRITE: serializes h changes */
	char *text;                      /* FH_CTL: the file's contents at open */
	size_t len;
	struct dircursor *dir;           /* FH_DIR */
	struct qfile *q;                 /* FH_QUERY */
	/* FH_WRITE: the processes (lock owners) that wrote through this open file; a close by
	 * another one (a child that inherited the descriptor) does not commit. fh->lock. */
	uint64_t owners[8];
	unsigned nowners;                /* > 8: any close commits */
	/* replies being sent from this handle's memory: release waits for them (the reader can
	 * see its data, close, and have the handle released before our writev returns) */
	atomic_int inflight;
	struct fh *prev, *next;          /* on fs->fhs */
};

static inline struct ucmfs *fs_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static inline struct fh *fh_of(struct fuse_file_info *fi)
{
	return (struct fh *)(uintptr_t)fi->fh;
}

/* Wait until no reply is being sent from fh's memory. */
static inline void fh_quiesce(struct fh *fh)
{
	while (atomic_load(&fh->inflight))
		sched_yield();
}

/* The kind of node behind a node id, 0 for the fixed files. */
static inline int node_kind(fuse_ino_t nid)
{
	return nid >= NID_FIRST_BLOCK ? *(const uint8_t *)(uintptr_t)nid : 0;
}

/* Is this node id a block? */
static inline bool is_block(fuse_ino_t nid)
{
	return node_kind(nid) == NODE_BLOCK;
}

static inline bool is_query(fuse_ino_t nid)
{
	return node_kind(nid) == NODE_QUERY;
}

static inline struct inode *inode_of(fuse_ino_t nid)
{
	return (struct inode *)(uintptr_t)nid;
}

/* An open file of `kind` on fs->fhs (fs/fs.c), or NULL without memory. */
struct fh *fh_new(struct ucmfs *fs, enum fh_kind kind, int flags);
/* Free fh and what it holds, as a close does; a writer's reservation is gone already
 * (committed or aborted). */
void fh_free(struct ucmfs *fs, struct fh *fh);
/* The kernel's RELEASE of fh: a writer's last close commits, then fh is freed. */
void fh_release(struct ucmfs *fs, struct fh *fh);

/* Attributes of the version ino shows (or of a reservation with writers); fh, if not NULL, is
 * an open file of ino. 0 or -ENOENT. */
int fs_block_stat(struct ucmfs *fs, struct inode *ino, struct fh *fh, struct stat *st);

/* fs/mount.c: auto_unmount through the system's fusermount3 */
bool fs_wants_helper(const char *opts);
/* Mount through fusermount3 -o opts: the /dev/fuse descriptor, or -errno (why says what).
 * *keep is the socket the helper watches: it unmounts once that is closed (or the daemon
 * dies). */
int fs_mount_by_helper(const char *mountpoint, const char *opts, int *keep, char *why,
		       size_t len);
/* Unmount such a mount now and let the helper go. */
void fs_unmount_by_helper(const char *mountpoint, int keep);

/* fs/ctl.c: the fixed files under /.ucm */
int ctl_lookup(struct ucmfs *fs, fuse_ino_t parent, const char *name, struct fuse_entry_param *e);
int ctl_getattr(struct ucmfs *fs, fuse_ino_t nid, struct stat *st);
/* How long the kernel may keep attributes st (of any node): DIR_ATTR_TIMEOUT_S for the
 * directories, which never change, 0 for files. */
#define DIR_ATTR_TIMEOUT_S 3600.0
double ctl_attr_timeout(const struct stat *st);
void ctl_root_attr(struct ucmfs *fs, struct stat *st);
int ctl_open(struct ucmfs *fs, fuse_ino_t nid, struct fuse_file_info *fi, struct fh **out);

/* fs/ctl.c: /.ucm/stats */
int stats_text(struct ucmfs *fs, char **text, size_t *len);

/* fs/query.c: lookup queries under /.ucm/query (DESIGN.md section 4) */
int query_init(struct ucmfs *fs);
void query_shutdown(struct ucmfs *fs);
int query_lookup(struct ucmfs *fs, const char *name, struct fuse_entry_param *e);
int query_create(struct ucmfs *fs, fuse_req_t req, const char *name, int flags,
		 struct fuse_entry_param *e, struct fh **out);
int query_open(struct ucmfs *fs, fuse_ino_t nid, int flags, struct fh **out);
void query_forget(struct ucmfs *fs, fuse_ino_t nid, uint64_t n);
/* An open file of q is freed. */
void query_close(struct ucmfs *fs, struct qfile *q);
int query_getattr(struct ucmfs *fs, fuse_ino_t nid, struct stat *st);
int query_truncate(struct ucmfs *fs, fuse_ino_t nid, uint64_t size);
ssize_t query_read(struct ucmfs *fs, struct fh *fh, char *buf, size_t size, uint64_t off);
ssize_t query_write(struct ucmfs *fs, struct fh *fh, const char *buf, size_t size,
		    uint64_t off);
int query_unlink(struct ucmfs *fs, const char *name);
/* Names in /.ucm/query: calls fn for each from index `from` on, until it returns false. */
void query_list(struct ucmfs *fs, size_t from, bool (*fn)(const char *name, uint64_t ino,
							  size_t next, void *arg), void *arg);
/* xattrs of a query file: length of the value (or -errno) */
int query_getxattr(struct ucmfs *fs, fuse_ino_t nid, const char *name, char **value);
int query_setxattr(struct ucmfs *fs, fuse_ino_t nid, const char *name, const char *value,
		   size_t size);
size_t query_listxattr(char *buf, size_t size);

/* fs/dir.c: directory listings */
void dir_opendir(fuse_req_t req, fuse_ino_t nid, struct fuse_file_info *fi);
void dir_readdir(fuse_req_t req, fuse_ino_t nid, size_t size, off_t off,
		 struct fuse_file_info *fi);
void dir_releasedir(fuse_req_t req, fuse_ino_t nid, struct fuse_file_info *fi);
void dir_free(struct dircursor *c);

/* fs/xattr.c: extended attributes */
void xattr_get(fuse_req_t req, fuse_ino_t nid, const char *name, size_t size);
void xattr_set(fuse_req_t req, fuse_ino_t nid, const char *name, const char *value,
	       size_t size, int flags);
void xattr_list(fuse_req_t req, fuse_ino_t nid, size_t size);
void xattr_remove(fuse_req_t req, fuse_ino_t nid, const char *name);

#endif
