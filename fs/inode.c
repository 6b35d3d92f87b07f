#include "fs/inode.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

struct itable {
	pthread_mutex_t lock;
	struct idmap map; /* protected by lock */
};

#define INODE(n) ((struct inode *)((char *)(n) - offsetof(struct inode, node)))

int itable_create(struct itable **out)
{
	struct itable *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	pthread_mutex_init(&t->lock, NULL);
	idmap_init(&t->map);
	*out = t;
	return 0;
}

static void free_inode(struct idnode *n, void *arg)
{
	idmap_remove(arg, n);
	free(INODE(n));
}

void itable_destroy(struct itable *t)
{
	if (!t)
		return;
	idmap_foreach_safe(&t->map, free_inode, &t->map);
	idmap_destroy(&t->map);
	pthread_mutex_destroy(&t->lock);
	free(t);
}

struct inode *itable_get(struct itable *t, const struct blockid *id, int kernel)
{
	struct idnode *n;
	struct inode *ino;

	pthread_mutex_lock(&t->lock);
	n = idmap_find(&t->map, id);
	if (n) {
		ino = INODE(n);
	} else {
		ino = calloc(1, sizeof(*ino));
		if (ino) {
			ino->kind = NODE_BLOCK;
			ino->node.id = *id;
			/* stable across mounts; never one of the fixed node numbers */
			ino->st_ino = (blockid_hash(id) >> 1) | NID_FIRST_BLOCK;
			if (idmap_insert(&t->map, &ino->node)) {
				free(ino);
				ino = NULL;
			}
		}
	}
	if (ino) {
		if (kernel)
			ino->nlookup++;
		else
			ino->refs++;
	}
	pthread_mutex_unlock(&t->lock);
	return ino;
}

/* Free ino if nothing refers to it any more; t->lock held. */
static void maybe_free(struct itable *t, struct inode *ino)
{
	if (ino->nlookup == 0 && ino->refs == 0) {
		idmap_remove(&t->map, &ino->node);
		free(ino);
	}
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

void itable_add_writer(struct itable *t, struct inode *ino, uint64_t size)
{
	pthread_mutex_lock(&t->lock);
	if (ino->writers++ == 0 || size > ino->resv_size)
		ino->resv_size = size;
	pthread_mutex_unlock(&t->lock);
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
