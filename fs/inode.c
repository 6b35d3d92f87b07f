#include "fs/inode.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct itable {
	pthread_mutex_t lock;
	struct idmap map; /* current inodes; protected by lock */
	struct inode all; /* list of every inode, current or detached; protected by lock */
};

#define INODE(n) ((struct inode *)((char *)(n) - offsetof(struct inode, node)))

int itable_create(struct itable **out)
{
	struct itable *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	pthread_mutex_init(&t->lock, NULL);
	idmap_init(&t->map);
	t->all.next = t->all.prev = &t->all;
	*out = t;
	return 0;
}

void itable_destroy(struct itable *t)
{
	if (!t)
		return;
	/* the session is over: whatever the kernel still held goes too */
	while (t->all.next != &t->all) {
		struct inode *ino = t->all.next;

		t->all.next = ino->next;
		free(ino);
	}
	idmap_destroy(&t->map);
	pthread_mutex_destroy(&t->lock);
	free(t);
}

static void take(struct inode *ino, bool kernel)
{
	if (kernel)
		ino->nlookup++;
	else
		ino->refs++;
}

/* Free ino if nothing refers to it any more; t->lock held. A current node kept for a writer
 * told -ESTALE stays, so that the kernel's retry finds it even if its first lookup of it was
 * forgotten at once (the kernel does that when a revalidation finds a new node). */
static void maybe_free(struct itable *t, struct inode *ino)
{
	if (ino->nlookup == 0 && ino->refs == 0 && !(ino->current && ino->writer_due)) {
		if (ino->current)
			idmap_remove(&t->map, &ino->node);
		ino->prev->next = ino->next;
		ino->next->prev = ino->prev;
		free(ino);
	}
}

static void detach_locked(struct itable *t, struct inode *ino)
{
	if (ino->current) {
		idmap_remove(&t->map, &ino->node);
		ino->current = false;
	}
}

/* The current inode of id, made if needed; t->lock held. */
static struct inode *current_locked(struct itable *t, const struct blockid *id)
{
	struct idnode *n = idmap_find(&t->map, id);
	struct inode *ino;

	if (n)
		return INODE(n);
	ino = calloc(1, sizeof(*ino));
	if (!ino)
		return NULL;
	ino->kind = NODE_BLOCK;
	ino->node.id = *id;
	/* stable across versions and mounts; never one of the fixed node numbers */
	ino->st_ino = (blockid_hash(id) >> 1) | NID_FIRST_BLOCK;
	if (idmap_insert(&t->map, &ino->node)) {
		free(ino);
		return NULL;
	}
	ino->current = true;
	ino->next = &t->all;
	ino->prev = t->all.prev;
	t->all.prev->next = ino;
	t->all.prev = ino;
	return ino;
}

struct inode *itable_get(struct itable *t, const struct blockid *id, bool kernel)
{
	struct inode *ino;

	pthread_mutex_lock(&t->lock);
	ino = current_locked(t, id);
	if (ino)
		take(ino, kernel);
	pthread_mutex_unlock(&t->lock);
	return ino;
}

struct inode *itable_get_version(struct itable *t, const struct blockid *id, int64_t version,
				 const struct stat *st, bool kernel)
{
	struct inode *ino;

	pthread_mutex_lock(&t->lock);
	ino = current_locked(t, id);
	if (ino && ino->version && ino->version != version) {
		/* a writer told -ESTALE is due on whatever node the name shows next (a lookup
		 * that raced a commit can give its node an older version, the next one a newer) */
		bool due = ino->writer_due;

		detach_locked(t, ino);
		maybe_free(t, ino);
		ino = current_locked(t, id);
		if (ino)
			ino->writer_due |= due;
	}
	if (ino) {
		if (!ino->version)
			ino->version = version;
		if (ino->version == version)
			ino->snap = *st;
		take(ino, kernel);
	}
	pthread_mutex_unlock(&t->lock);
	return ino;
}

int itable_add_reader(struct itable *t, struct inode *ino, int64_t version,
		      const struct stat *st, void *mine, struct reader_grant *g)
{
	int rc;

	memset(g, 0, sizeof(*g));
	pthread_mutex_lock(&t->lock);
	if (ino->version && ino->version != version && ino->readers) {
		/* the version the lookup saw is still held open: read it (an open is as old as
		 * its lookup; the newer version is the next lookup's) */
		g->share = ino->share;
	} else if (ino->version && ino->version != version) {
		/* nobody holds the older version open: the node shows this one from now on,
		 * once the older pages are dropped */
		ino->version = 0;
		ino->purge = true;
	}
	if (!ino->version) {
		ino->version = version;
		ino->snap = *st;
	}
	if (ino->readers++ == 0) {
		ino->share = mine;
		g->adopted = true;
	}
	if (ino->writers || ino->writer_due) {
		rc = READ_DIRECT;
	} else {
		ino->cached_readers++;
		rc = ino->purge ? READ_PURGE : READ_CACHED;
		ino->purge = false;
	}
	pthread_mutex_unlock(&t->lock);
	return rc;
}

void *itable_del_reader(struct itable *t, struct inode *ino, bool cached)
{
	void *share = NULL;

	pthread_mutex_lock(&t->lock);
	if (--ino->readers == 0) {
		share = ino->share;
		ino->share = NULL;
	}
	if (cached)
		ino->cached_readers--;
	pthread_mutex_unlock(&t->lock);
	return share;
}

int itable_pt_join(struct itable *t, struct inode *ino, bool purge,
		   int (*open_backing)(void *arg), void *arg)
{
	int id = 0;

	pthread_mutex_lock(&t->lock);
	/* A node gets a backing id only while no other open of it reads through the daemon.
	 * The kernel fails a non-passthrough open of an inode with a backing file (EIO), and it
	 * completes opens in any order: a direct reader answered before this open may reach
	 * the kernel after it, so it counts until its release. */
	if (ino->pt_readers)
		id = ino->backing_id;
	else if (ino->plain_readers == 0 && ino->readers == ino->cached_readers && open_backing)
		id = open_backing(arg);
	if (id > 0) {
		ino->backing_id = id;
		ino->pt_readers++;
		ino->purge |= purge;
	} else {
		id = 0;
		ino->plain_readers++;
	}
	pthread_mutex_unlock(&t->lock);
	return id;
}

int itable_pt_leave(struct itable *t, struct inode *ino, int backing_id)
{
	int id = 0;

	pthread_mutex_lock(&t->lock);
	if (!backing_id) {
		ino->plain_readers--;
	} else if (--ino->pt_readers == 0) {
		id = ino->backing_id;
		ino->backing_id = 0;
	}
	pthread_mutex_unlock(&t->lock);
	return id;
}

void itable_detach(struct itable *t, const struct blockid *id)
{
	struct idnode *n;

	pthread_mutex_lock(&t->lock);
	n = idmap_find(&t->map, id);
	if (n) {
		struct inode *ino = INODE(n);

		detach_locked(t, ino);
		maybe_free(t, ino);
	}
	pthread_mutex_unlock(&t->lock);
}

void itable_ref(struct itable *t, struct inode *ino, bool kernel)
{
	pthread_mutex_lock(&t->lock);
	take(ino, kernel);
	pthread_mutex_unlock(&t->lock);
}

void itable_forget(struct itable *t, struct inode *ino, uint64_t n)
{
	pthread_mutex_lock(&t->lock);
	ino->nlookup = n > ino->nlookup ? 0 : ino->nlookup - n;
	maybe_free(t, ino);
	pthread_mutex_unlock(&t->lock);
}

void itable_put(struct itable *t, struct inode *ino)
{
	pthread_mutex_lock(&t->lock);
	ino->refs--;
	maybe_free(t, ino);
	pthread_mutex_unlock(&t->lock);
}

int itable_add_writer(struct itable *t, struct inode *ino)
{
	int rc = 0;

	pthread_mutex_lock(&t->lock);
	if (ino->cached_readers) {
		/* new lookups get another node, the readers keep this one to themselves; readers
		 * opening the new one before this writer's retry does read direct */
		struct idnode *n = idmap_find(&t->map, &ino->node.id);
		struct inode *fresh;

		detach_locked(t, ino);
		/* ino may be an older node: the current one must not send the retry back here */
		if (n && INODE(n)->cached_readers)
			detach_locked(t, INODE(n));
		fresh = current_locked(t, &ino->node.id);
		if (fresh)
			fresh->writer_due = true;
		rc = -ESTALE;
	} else if (ino->writers++ == 0) {
		ino->resv_size = 0;
		ino->writer_due = false;
	}
	pthread_mutex_unlock(&t->lock);
	return rc;
}

void itable_del_writer(struct itable *t, struct inode *ino)
{
	pthread_mutex_lock(&t->lock);
	ino->writers--;
	pthread_mutex_unlock(&t->lock);
}

void itable_resv_grow(struct itable *t, struct inode *ino, uint64_t end)
{
	pthread_mutex_lock(&t->lock);
	if (end > ino->resv_size)
		ino->resv_size = end;
	pthread_mutex_unlock(&t->lock);
}

void itable_resv_set(struct itable *t, struct inode *ino, uint64_t size)
{
	pthread_mutex_lock(&t->lock);
	ino->resv_size = size;
	pthread_mutex_unlock(&t->lock);
}

int itable_resv_size(struct itable *t, struct inode *ino, uint64_t *size)
{
	int rc = -ENOENT;

	pthread_mutex_lock(&t->lock);
	if (ino->writers) {
		*size = ino->resv_size;
		rc = 0;
	}
	pthread_mutex_unlock(&t->lock);
	return rc;
}

int itable_snapshot(struct itable *t, struct inode *ino, struct stat *st)
{
	int rc = -ENOENT;

	pthread_mutex_lock(&t->lock);
	if (ino->version) {
		*st = ino->snap;
		rc = 0;
	}
	pthread_mutex_unlock(&t->lock);
	return rc;
}
