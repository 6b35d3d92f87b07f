/*
 * Inode table: the kernel's node ids for blocks.
 *
 * A node id shows one version of a block: the first lookup after a commit binds the id's
 * current inode to that version (its commit time), and a lookup that finds a newer version
 * detaches the old inode and makes a new one. So the kernel never mixes the cached pages of
 * two versions: readers of the old version keep their node id (and its page cache) until
 * they close, new opens get the new one. An unlink detaches the inode too.
 *
 * A node id's size in the kernel is one number for every open file of it (and what fstat()
 * shows, as it carries no file handle), and a writer's writes move it. So a writer never
 * shares a node with readers that the page cache serves: a writer's open that would
 * detaches the node and fails -ESTALE, and the kernel looks the name up again, which gives a
 * fresh node (still the one a writer is due on when a lookup that raced a commit binds it to
 * an older version and the next lookup makes another). A reader never shares one with
 * readers of another version: a reader opening a node that others read at an older version
 * reads that version with them (its lookup saw it). A reader opening a node with writers (or
 * made for a writer's retry) reads direct. A node nobody holds open takes the newer version a
 * reader opened, after its pages are dropped.
 *
 * Passthrough (the kernel reads a block's memory itself, fs/fs.c): the kernel gives a node
 * one backing file for all its passthrough opens, and fails an open with EIO if a node mixes
 * them with opens that the page cache of the node serves. So the readers of a node that the
 * page cache could serve either all pass through, sharing the node's backing id (kept from the
 * first such open to the last one's release), or none does: each cached reader, as it opens,
 * joins the passthrough readers if there are some, starts them if no cached reader reads
 * through the daemon, and else reads through the daemon. Writers and direct readers never
 * mix with them: passthrough readers are cached readers, so a writer's open detaches their
 * node (-ESTALE);
 * and as the kernel completes opens in any order (a direct reader answered first may reach
 * it after a passthrough reader answered next), no reader starts a backing id while a direct
 * reader of the node is open.
 *
 * A block's node id is the address of its `struct inode`, which lives while the kernel holds
 * lookups on it (nlookup) or the daemon holds references (open handles). The small node ids
 * below NID_FIRST_BLOCK name the fixed files of the namespace.
 */
#ifndef UCM_FS_INODE_H
#define UCM_FS_INODE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "src/blockid.h"
#include "src/idmap.h"

enum {
	NID_ROOT = 1,     /* / */
	NID_UCM = 2,      /* /.ucm */
	NID_CONFIG = 3,   /* /.ucm/config */
	NID_STATS = 4,    /* /.ucm/stats */
	NID_QUERY = 5,    /* /.ucm/query */
	NID_FIRST_BLOCK = 4096,
};

/* What a node id above NID_FIRST_BLOCK points at: its first byte says. */
enum node_kind { NODE_BLOCK = 1, NODE_QUERY = 2 };

struct inode {
	uint8_t kind;           /* NODE_BLOCK */
	struct idnode node;     /* node.id; in the table while current */
	struct inode *prev, *next; /* every inode, for freeing at the end; table lock */
	bool current;           /* the id's inode for new lookups; protected by the table lock */
	uint64_t nlookup;       /* kernel references; protected by the table lock */
	uint64_t refs;          /* daemon references; protected by the table lock */
	uint64_t st_ino;        /* stable inode number shown to users */
	uint32_t writers;       /* open write handles; protected by the table lock */
	uint32_t readers;       /* open read handles; protected by the table lock */
	uint32_t cached_readers; /* those served from the page cache; table lock */
	bool purge;             /* its pages are an older version's; table lock */
	bool writer_due;        /* made for a writer told -ESTALE: readers read direct until
				   a writer opens it; table lock */
	uint64_t resv_size;     /* size of the reservation they share; protected by the lock */
	void *share;            /* readers: the handle they share (fs.c); table lock */
	uint32_t pt_readers;    /* of the cached readers, those passed through; table lock */
	uint32_t plain_readers; /* ... and those that read through the daemon; table lock */
	int backing_id;         /* their backing file's id in the kernel, 0 if none; lock */
	int64_t version;        /* commit time of the version shown, 0 if not bound yet */
	struct stat snap;       /* that version's attributes, for after it is gone */
};

struct itable;

int itable_create(struct itable **out);
void itable_destroy(struct itable *t);

/* The id's current inode, created (unbound) if there is none, with one more kernel lookup if
 * `kernel`, else one more daemon reference. NULL on ENOMEM. */
struct inode *itable_get(struct itable *t, const struct blockid *id, bool kernel);

/* Like itable_get(), for the committed version `version` with attributes st: an inode bound
 * to another version is detached first; an unbound one is bound. */
struct inode *itable_get_version(struct itable *t, const struct blockid *id, int64_t version,
				 const struct stat *st, bool kernel);

/* What a reader opening a version through a node gets (itable_add_reader()). */
enum { READ_DIRECT = 0, READ_CACHED = 1, READ_PURGE = 2 };

/*
 * A reader opens the committed version `version` (attributes st) through ino, binding ino to
 * it if ino is not bound yet; mine is the reader's handle of that version (opaque here).
 * READ_CACHED: the reader may use the page cache; READ_PURGE: also, after the node's pages
 * are dropped; READ_DIRECT: not (writers share the node). Counted until itable_del_reader()
 * (cached: not READ_DIRECT).
 *
 * The readers of a node share the handle of its first reader (the node keeps it while it
 * has readers): g->adopted says mine became it (the node holds a reference from now on). A
 * reader whose lookup gave a node that others still read at an older version reads that
 * version too, as if it had opened before the newer one was committed: g->share is set to
 * their handle, which the reader uses instead of mine (taking a reference); NULL otherwise.
 */
struct reader_grant {
	void *share;
	bool adopted;
};
int itable_add_reader(struct itable *t, struct inode *ino, int64_t version,
		      const struct stat *st, void *mine, struct reader_grant *g);
/* The node's handle to release if this was its last reader, else NULL. */
void *itable_del_reader(struct itable *t, struct inode *ino, bool cached);

/*
 * How a cached reader of ino (counted by itable_add_reader()) reads: with the node's backing
 * id if it has one; else, if no other reader of ino reads through the daemon, with a new one
 * from open_backing(arg) (NULL: none can be had; called with the table lock held, it returns
 * a backing id > 0 or -errno), which the node keeps; else through the daemon. Returns the
 * backing id the reader's open carries, or 0 (through the daemon). Either way the reader is
 * counted until itable_pt_leave(). A passthrough reader leaves the node's page cache as it is:
 * `purge` (itable_add_reader() said READ_PURGE) hands the purge on to the next reader that
 * reads through the daemon.
 */
int itable_pt_join(struct itable *t, struct inode *ino, bool purge,
		   int (*open_backing)(void *arg), void *arg);
/* A cached reader of ino that itable_pt_join() gave `backing_id` is released: the backing id
 * to close if it was the node's last passthrough reader, else 0. */
int itable_pt_leave(struct itable *t, struct inode *ino, int backing_id);

/* Make the id's current inode non-current (unlink, or a version that is gone). */
void itable_detach(struct itable *t, const struct blockid *id);

/* One more kernel lookup (kernel) or daemon reference on ino. */
void itable_ref(struct itable *t, struct inode *ino, bool kernel);
/* Drop n kernel lookups / one daemon reference. */
void itable_forget(struct itable *t, struct inode *ino, uint64_t n);
void itable_put(struct itable *t, struct inode *ino);

/* Writers: the attributes of a block that exists only as a reservation. add_writer fails
 * -ESTALE, detaching ino, if readers use its page cache. */
int itable_add_writer(struct itable *t, struct inode *ino);
void itable_del_writer(struct itable *t, struct inode *ino);
/* Record the reservation's size after a write (grow to end) or a truncate (set). */
void itable_resv_grow(struct itable *t, struct inode *ino, uint64_t end);
void itable_resv_set(struct itable *t, struct inode *ino, uint64_t size);
/* The reservation's size if ino has open writers: 0 and *size set, else -ENOENT. */
int itable_resv_size(struct itable *t, struct inode *ino, uint64_t *size);
/* The bound version's attributes: 0 and *st set, or -ENOENT if ino was never bound. */
int itable_snapshot(struct itable *t, struct inode *ino, struct stat *st);

#endif
