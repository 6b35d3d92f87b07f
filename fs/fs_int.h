/* Internals shared by the files of fs/ (the only folder that includes fuse_lowlevel.h). */
#ifndef UCM_FS_INT_H
#define UCM_FS_INT_H

#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/stat.h>

#include "fs/inode.h"
#include "src/options.h"
#include "tiers/tier.h"

struct ucmfs {
	struct tier *pipe;               /* the only storage the FS knows */
	const struct ucm_options *opts;
	struct itable *itab;
	struct fuse_session *se;
	uid_t uid;                       /* owner of / and of every block */
	gid_t gid;
	struct timespec start;           /* times of the fixed files */
};

enum fh_kind { FH_READ, FH_WRITE, FH_CTL, FH_DIR };

/* An open file (fuse_file_info.fh). */
struct fh {
	enum fh_kind kind;
	struct inode *inode;             /* blocks only; holds a daemon reference */
	struct tier_handle *h;           /* FH_READ: pinned version; FH_WRITE: the reservation,
					    NULL once committed (a later write starts another) */
	int open_flags;
	pthread_mutex_t lock;            /* FH_WRITE: serializes h changes */
	char *text;                      /* FH_CTL: the file's contents at open */
	size_t len;
	struct dircursor *dir;           /* FH_DIR */
};

static inline struct ucmfs *fs_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static inline struct fh *fh_of(struct fuse_file_info *fi)
{
	return (struct fh *)(uintptr_t)fi->fh;
}

/* Is this node id a block (not one of the fixed files)? */
static inline bool is_block(fuse_ino_t nid)
{
	return nid >= NID_FIRST_BLOCK;
}

static inline struct inode *inode_of(fuse_ino_t nid)
{
	return (struct inode *)(uintptr_t)nid;
}

/* Attributes of a committed block (or of a reservation with writers). 0 or -ENOENT. */
int fs_block_stat(struct ucmfs *fs, struct inode *ino, struct stat *st);

/* fs/ctl.c: the fixed files under /.ucm */
int ctl_lookup(struct ucmfs *fs, fuse_ino_t parent, const char *name, struct fuse_entry_param *e);
int ctl_getattr(struct ucmfs *fs, fuse_ino_t nid, struct stat *st);
void ctl_root_attr(struct ucmfs *fs, struct stat *st);
int ctl_open(struct ucmfs *fs, fuse_ino_t nid, struct fuse_file_info *fi, struct fh **out);

/* fs/dir.c: directory listings */
void dir_opendir(fuse_req_t req, fuse_ino_t nid, struct fuse_file_info *fi);
void dir_readdir(fuse_req_t req, fuse_ino_t nid, size_t size, off_t off,
		 struct fuse_file_info *fi);
void dir_releasedir(fuse_req_t req, fuse_ino_t nid, struct fuse_file_info *fi);

/* fs/xattr.c: extended attributes */
void xattr_get(fuse_req_t req, fuse_ino_t nid, const char *name, size_t size);
void xattr_set(fuse_req_t req, fuse_ino_t nid, const char *name, const char *value,
	       size_t size, int flags);
void xattr_list(fuse_req_t req, fuse_ino_t nid, size_t size);
void xattr_remove(fuse_req_t req, fuse_ino_t nid, const char *name);

#endif
