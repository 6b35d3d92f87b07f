/*
 * The reclaimer of a shared STORE: one capacity for all the hosts, kept by one of them.
 *
 * DESIGN
 *
 * The lease is STORE/.reclaim: the host that holds an flock on it reclaims, and keeps it while
 * its daemon lives, beating it (its mtime) every sweep. Every host's sweeper tries to take it
 * every LEASE_EVERY_NS. The filesystem releases the lock at once when the holder's daemon is
 * killed; a lost machine's lock stays until the filesystem's own timeout (GlusterFS: 42 s),
 * so a lease not beaten for LEASE_STALE_NS is taken over by a new lease file renamed over
 * it. Another host reclaims within seconds either way.
 *
 * The holder walks the STORE a slice per sweep (WALK_SLICE_NS): every shard directory, every
 * block file's inode. A file its index holds in the same version (inode and mtime) only gives
 * its atime (hosts set it when they use a block: posix_touch()); any other file is read into
 * the index (posix_entry_read(): its header, TTL included). So on the holder the index is the
 * whole STORE, and the disk tier's own machinery applies to all of it: expiry (the sweep),
 * and capacity (make_room(), coldest first by atime, sparing what any host used within
 * SHARED_USED_NS). At the end of a walk, entries no walk saw and this host did not touch
 * since it began are files another host removed: dropped. Then the recency list is sorted by
 * atime, the STORE's figures are written to STORE/.usage for every host's metrics, and the
 * STORE is trimmed to capacity: the smallest disk_size= of the live hosts
 * (posix_shared_reap()), else until its filesystem has 5% free.
 *
 * Other hosts never evict for room (make_room() admits): between two walks the STORE may
 * exceed its capacity by what the hosts write meanwhile.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/clock.h"
#include "src/log.h"
#include "tiers/posix_int.h"

#define LEASE_EVERY_NS (2 * 1000000000LL)  /* a host tries the lease this often */
#define WALK_SLICE_NS (200 * 1000000LL)    /* a sweep walks this long at most */
#define WALK_PAUSE_NS (2 * 1000000000LL)   /* between two walks */
#define USAGE_READ_NS (2 * 1000000000LL)   /* other hosts read STORE/.usage this often */
#define LEASE_STALE_NS (10 * 1000000000LL) /* a lease not beaten for this long is taken over */

static void lease_path(const struct posix *p, char *out, size_t len)
{
	snprintf(out, len, "%s/.reclaim", p->root);
}

/* Take the lease: free, or stale (its holder stopped beating: a lost machine whose lock
 * the filesystem keeps until its own timeout) - then a new lease file replaces it, and the
 * old holder, should it wake up, finds its file no longer at the name (lease_valid()). */
static void take_lease(struct posix *p)
{
	char path[PATH_MAX], tmp[PATH_MAX];
	struct stat st;
	int fd;

	lease_path(p, path, sizeof(path));
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
	if (fd < 0)
		return;
	if (flock(fd, LOCK_EX | LOCK_NB)) {
		bool stale = fstat(fd, &st) == 0 &&
			     wall_ns() - timespec_ns(&st.st_mtim) > LEASE_STALE_NS;

		close(fd);
		if (!stale)
			return;
		snprintf(tmp, sizeof(tmp), "%s%s.%s.%d", path, TEMP_MARK, p->host, (int)getpid());
		fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) || rename(tmp, path)) {
			if (fd >= 0)
				close(fd);
			unlink(tmp);
			return;
		}
		log_info("store %s: the reclaimer's lease had no heartbeat for %lld s: taken over",
			 p->root, (long long)((wall_ns() - timespec_ns(&st.st_mtim)) / 1000000000));
	}
	__atomic_store_n(&p->lease_fd, fd, __ATOMIC_RELAXED); /* make_room() and metrics read it */
	p->walk_shard = BLOCKID_SHARDS;
	p->walk_ended = 0;
	log_info("store %s: this host reclaims for the store (holds %s)", p->root, path);
}

/* Is the lease still the file at its name (nobody removed or replaced it)? */
static bool lease_valid(struct posix *p)
{
	char path[PATH_MAX];
	struct stat a, b;

	lease_path(p, path, sizeof(path));
	return fstat(p->lease_fd, &a) == 0 && stat(path, &b) == 0 && a.st_ino == b.st_ino &&
	       a.st_dev == b.st_dev;
}

/* Walk one block file: take its atime, or read it into the index. */
static int walk_file(struct posix *p, int dfd, const char *name, const struct blockid *id,
		     void *arg)
{
	struct pentry *e = NULL;
	struct idnode *n;
	struct stat st;
	uint64_t ino = 0;
	int fd, rc;

	(void)arg;
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode))
		return 0;
	pthread_mutex_lock(&p->lock);
	n = idmap_find(&p->map, id);
	if (n && PE(n)->fmtime == timespec_ns(&st.st_mtim) &&
	    (e = posix_entry_seen(p, id, (uint64_t)st.st_ino, timespec_ns(&st.st_atim)))) {
		e->round = p->walk_round;
		pthread_mutex_unlock(&p->lock);
		return 0;
	}
	if (n)
		ino = PE(n)->ino;
	pthread_mutex_unlock(&p->lock);
	fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return 0; /* removed meanwhile */
	rc = posix_entry_read(p, fd, id, &e);
	close(fd);
	if (rc == -ETIME) { /* expired, and no host knew it: nobody else will remove it */
		char path[PATH_MAX];

		posix_block_path(p, id, path, sizeof(path));
		pthread_mutex_lock(&p->lock);
		if (!idmap_find(&p->map, id))
			posix_remove_file(p, path, (uint64_t)st.st_ino, false);
		pthread_mutex_unlock(&p->lock);
	}
	if (rc)
		return 0; /* damaged: left to readers, which quarantine it */
	e->round = p->walk_round;
	pthread_mutex_lock(&p->lock);
	posix_entry_replace(p, id, ino, e);
	pthread_mutex_unlock(&p->lock);
	return 0;
}

/* Write the STORE's figures where every host reads them. */
static void write_usage(struct posix *p, const struct store_usage *u)
{
	char path[PATH_MAX], tmp[PATH_MAX], text[512];
	int fd, len;

	snprintf(path, sizeof(path), "%s/.usage", p->root);
	snprintf(tmp, sizeof(tmp), "%s/.usage%s.%s.%d", p->root, TEMP_MARK, p->host,
		 (int)getpid());
	len = snprintf(text, sizeof(text),
		       "blocks %" PRIu64 "\nbytes %" PRIu64 "\ncapacity %" PRIu64
		       "\nat %" PRId64 "\nholder %s\n",
		       u->blocks, u->bytes, u->capacity, u->at, u->holder);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0 || io_pwrite_full(fd, text, (size_t)len, 0) < 0 || rename(tmp, path)) {
		log_debug("store %s: cannot write %s: %s", p->root, path, strerror(errno));
		unlink(tmp);
	}
	if (fd >= 0)
		close(fd);
}

/* Read STORE/.usage into p->usage. */
static void read_usage(struct posix *p)
{
	char path[PATH_MAX], text[512], holder[256] = ""; /* %255s below */
	struct store_usage u = { 0 };
	ssize_t n = -1;
	int fd;

	snprintf(path, sizeof(path), "%s/.usage", p->root);
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd >= 0) {
		n = pread(fd, text, sizeof(text) - 1, 0);
		close(fd);
	}
	if (n <= 0)
		return;
	text[n] = '\0';
	if (sscanf(text, "blocks %" SCNu64 "\nbytes %" SCNu64 "\ncapacity %" SCNu64
		   "\nat %" SCNd64 "\nholder %255s", &u.blocks, &u.bytes, &u.capacity, &u.at,
		   holder) != 5)
		return;
	snprintf(u.holder, sizeof(u.holder), "%s", holder);
	pthread_mutex_lock(&p->lock);
	p->usage = u;
	pthread_mutex_unlock(&p->lock);
}

/* The end of a walk: forget what is gone, order by use, publish, trim. */
static void end_walk(struct posix *p)
{
	struct store_usage u = { 0 };
	struct pentry *e, *next;

	pthread_mutex_lock(&p->lock);
	for (e = p->lru.next; e != &p->lru; e = next) {
		next = e->next;
		if (e->round != p->walk_round && e->checked < p->walk_started && !e->opens)
			posix_index_drop(p, &e->node.id, e->ino); /* its file is gone */
	}
	posix_sort_recency(p);
	u.blocks = p->map.count - p->expired_held;
	u.bytes = p->phys_used;
	pthread_mutex_unlock(&p->lock);
	u.capacity = posix_capacity(p, u.bytes);
	u.at = wall_ns() / 1000000000;
	snprintf(u.holder, sizeof(u.holder), "%s", p->host);
	pthread_mutex_lock(&p->lock);
	p->usage = u;
	pthread_mutex_unlock(&p->lock);
	write_usage(p, &u);
	posix_trim(p);
	p->walk_shard = BLOCKID_SHARDS;
	p->walk_ended = mono_ns();
}

void posix_reclaim(struct posix *p)
{
	int64_t now = mono_ns(), until = now + WALK_SLICE_NS;

	if (p->lease_fd >= 0 && !lease_valid(p)) {
		close(p->lease_fd);
		__atomic_store_n(&p->lease_fd, -1, __ATOMIC_RELAXED);
		log_info("store %s: the lease file was replaced; trying it again", p->root);
	}
	if (p->lease_fd < 0 && (!p->lease_tried || now - p->lease_tried >= LEASE_EVERY_NS)) {
		p->lease_tried = now;
		take_lease(p);
	}
	if (p->lease_fd >= 0 && futimens(p->lease_fd, NULL))
		log_debug("store %s: cannot beat the lease: %s", p->root, strerror(errno));
	if (p->lease_fd < 0) {
		if (now - p->usage_read >= USAGE_READ_NS) {
			p->usage_read = now;
			read_usage(p);
		}
		return;
	}
	if (p->walk_shard >= BLOCKID_SHARDS) {
		if (p->walk_ended && now - p->walk_ended < WALK_PAUSE_NS)
			return;
		p->walk_round++;
		p->walk_started = now;
		p->walk_shard = 0;
		posix_shards_forget(p); /* the shard directories as they are now */
	}
	while (p->walk_shard < BLOCKID_SHARDS && mono_ns() < until)
		posix_each_block_file(p, p->walk_shard++, walk_file, NULL);
	if (p->walk_shard >= BLOCKID_SHARDS)
		end_walk(p);
}

void posix_reclaim_stop(struct posix *p)
{
	if (p->lease_fd >= 0)
		close(p->lease_fd);
	__atomic_store_n(&p->lease_fd, -1, __ATOMIC_RELAXED);
}
