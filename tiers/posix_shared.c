/*
 * The disk tier over a STORE that other hosts share (-o shared): what this host learns of
 * the blocks they commit, replace and remove.
 *
 * DESIGN
 *
 * Each host keeps its own index of the STORE (tiers/posix.c), built at its start. Other hosts
 * change the STORE behind its back, so with shared the index is a cache of the STORE whose
 * entries are trusted for p->shared_ns after the file was last seen:
 *
 *   miss     an id the index does not hold is looked up on the STORE: one open of its block
 *            file (and a read of the header if it is there), counted in store_lookups. Found,
 *            it joins the index; not found, nothing is remembered: the next lookup asks again,
 *            since another host may commit the block at any moment.
 *   check    an entry last seen more than shared_ns ago is looked at again before it answers:
 *            no file -> the entry is dropped (ENOENT); another inode or mtime (a replacement,
 *            or a TTL written by another host) -> the header is read again; else seen now
 *            (and its atime, which hosts move to say they use it, is taken).
 *   listing  a shard is listed from the STORE's directory, not from the index; which shard
 *            directories exist is read with one listing of the STORE, again once older than
 *            shared_ns (+ 100 ms: once per ls): on a distributed filesystem each missing
 *            directory would cost a round trip, 4096 of them for one ls.
 *
 *   the dead  a host's daemon holds STORE/.lock.<host> (flock) while it runs and writes
 *            "stopped" into it when it stops cleanly. A lock that another host can take, on
 *            a file that does not say "stopped", belongs to a daemon that died: the
 *            filesystem released its lock (at once when the process died; after the
 *            filesystem's own timeout when the machine was lost). Every few seconds each
 *            host tries the others' locks; the one that gets such a lock removes that host's
 *            temp files while holding it (a restart of that host waits for it), then marks
 *            it "stopped". A live host's lock says its disk_size=: the STORE's capacity is
 *            the smallest of them (tiers/posix_reclaim.c keeps it).
 *
 * The file is read without p->lock; what was read goes into the index under it only if the
 * entry is still the one that was looked at (a commit of this host meanwhile wins).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/clock.h"
#include "src/log.h"
#include "tiers/posix_int.h"

/* Under p->lock: the attributes of id's entry if it is live, as a lookup answers. */
static int answer(struct posix *p, const struct blockid *id, struct block_attr *attr)
{
	struct idnode *n = idmap_find(&p->map, id);

	if (!n || (PE(n)->deadline && PE(n)->deadline <= mono_ns()))
		return -ENOENT;
	if (attr)
		posix_fill_attr(PE(n), attr);
	return 0;
}

int posix_shared_lookup(struct posix *p, const struct blockid *id, struct block_attr *attr)
{
	char path[PATH_MAX];
	struct pentry *e = NULL;
	struct idnode *n;
	struct stat st;
	uint64_t ino = 0;
	int64_t fmtime = 0;
	int fd, rc;

	pthread_mutex_lock(&p->lock);
	n = idmap_find(&p->map, id);
	if (n) {
		ino = PE(n)->ino;
		fmtime = PE(n)->fmtime;
	}
	pthread_mutex_unlock(&p->lock);

	posix_block_path(p, id, path, sizeof(path));
	counter_add(&p->store_lookups, 1);
	fd = posix_open_file(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd >= 0 && fstat(fd, &st)) {
		close(fd);
		fd = -1;
	}
	if (fd >= 0 && ino && st.st_ino == ino && timespec_ns(&st.st_mtim) == fmtime) {
		close(fd); /* the file this host knows */
		pthread_mutex_lock(&p->lock);
		posix_entry_seen(p, id, ino, timespec_ns(&st.st_atim));
		rc = answer(p, id, attr);
		pthread_mutex_unlock(&p->lock);
		return rc;
	}
	rc = fd < 0 ? -ENOENT : posix_entry_read(p, fd, id, &e);
	if (fd >= 0)
		close(fd);
	if (rc == -EBADMSG)
		posix_quarantine(p, path, id, st.st_ino, "bad header");
	if (rc == -ENOMEM)
		return rc;
	pthread_mutex_lock(&p->lock);
	posix_entry_replace(p, id, ino, e);
	rc = answer(p, id, attr);
	pthread_mutex_unlock(&p->lock);
	return rc;
}

struct pentry *posix_entry_seen(struct posix *p, const struct blockid *id, uint64_t ino,
				int64_t atime)
{
	struct idnode *n = idmap_find(&p->map, id);

	if (!n || PE(n)->ino != ino)
		return NULL;
	PE(n)->checked = mono_ns();
	if (atime > PE(n)->atime)
		PE(n)->atime = atime;
	return PE(n);
}

void posix_entry_replace(struct posix *p, const struct blockid *id, uint64_t ino,
			 struct pentry *e)
{
	struct idnode *n = idmap_find(&p->map, id);

	/* a commit of this host (or another lookup) that came first wins */
	if (n ? PE(n)->ino == ino : !ino) {
		if (e && idmap_reserve(&p->map, id) == 0) {
			posix_index_put(p, e);
			e = NULL;
		} else if (n) {
			posix_index_drop(p, id, ino);
		}
	}
	free(e);
}

#define SHARDS_FRESH_NS 100000000LL /* 100 ms */

/* Errs on yes when it cannot tell. */
bool posix_shard_exists(struct posix *p, unsigned shard)
{
	int64_t now = mono_ns();
	bool yes;

	pthread_mutex_lock(&p->shards_lock);
	/* at most once per listing, even with shared=0 */
	if (!p->shards_read || now - p->shards_read > p->shared_ns + SHARDS_FRESH_NS) {
		DIR *d = opendir(p->data);
		struct dirent *de;

		memset(p->shards, d ? 0 : 0xff, sizeof(p->shards));
		while (d && (de = readdir(d))) {
			int s = posix_shard_of_name(de->d_name);

			if (s >= 0)
				p->shards[s / 8] |= 1u << (s % 8);
		}
		if (d)
			closedir(d);
		p->shards_read = now;
	}
	yes = p->shards[shard / 8] & (1u << (shard % 8));
	pthread_mutex_unlock(&p->shards_lock);
	return yes;
}

void posix_shards_forget(struct posix *p)
{
	pthread_mutex_lock(&p->shards_lock);
	p->shards_read = 0;
	pthread_mutex_unlock(&p->shards_lock);
}

int posix_each_block_file(struct posix *p, unsigned shard, posix_file_fn fn, void *arg)
{
	char dir[PATH_MAX], hex[4];
	struct dirent *de;
	DIR *d;

	if (!posix_shard_exists(p, shard))
		return 0;
	snprintf(hex, sizeof(hex), "%03x", shard);
	snprintf(dir, sizeof(dir), "%s/%s", p->data, hex);
	d = opendir(dir);
	if (!d)
		return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
	while ((de = readdir(d))) {
		struct blockid id;

		if (de->d_name[0] == '.' || strstr(de->d_name, TEMP_MARK) ||
		    blockid_parse_name(de->d_name, &id) || strncmp(de->d_name, hex, 3))
			continue;
		if (fn(p, dirfd(d), de->d_name, &id, arg))
			break;
	}
	closedir(d);
	return 0;
}

struct list_fn {
	tier_list_fn fn;
	void *arg;
};

static int list_one(struct posix *p, int dfd, const char *name, const struct blockid *id,
		    void *arg)
{
	struct list_fn *l = arg;

	(void)p, (void)dfd, (void)name;
	return l->fn(id, l->arg);
}

int posix_shared_list(struct posix *p, unsigned shard, tier_list_fn fn, void *arg)
{
	struct list_fn l = { fn, arg };

	return posix_each_block_file(p, shard, list_one, &l);
}

#define REAP_EVERY_NS (2 * 1000000000LL)

/* Remove the temp files "<hex>.tmp.<host>.<pid>.<n>" of one host from every shard directory. */
static uint64_t remove_temps(struct posix *p, const char *host)
{
	char mark[HOST_NAME_MAX + 16], dir[PATH_MAX];
	struct dirent *de, *se;
	uint64_t n = 0;
	DIR *d, *sd;

	snprintf(mark, sizeof(mark), "%s.%s.", TEMP_MARK, host);
	d = opendir(p->data);
	while (d && (de = readdir(d))) {
		if (posix_shard_of_name(de->d_name) < 0)
			continue;
		snprintf(dir, sizeof(dir), "%s/%s", p->data, de->d_name);
		sd = opendir(dir);
		while (sd && (se = readdir(sd)))
			if (strstr(se->d_name, mark) && unlinkat(dirfd(sd), se->d_name, 0) == 0)
				n++;
		if (sd)
			closedir(sd);
	}
	if (d)
		closedir(d);
	return n;
}

/* Look at the lock of one other host: if its daemon died, clean up after it; if it is alive,
 * return the disk_size= it runs with (0: none). */
static uint64_t reap_host(struct posix *p, int dfd, const char *name, const char *host)
{
	char state[64] = "";
	unsigned long long cap = 0;
	struct stat a, b;
	const char *c;
	uint64_t n;
	int fd = openat(dfd, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);

	if (fd < 0)
		return 0;
	if (flock(fd, LOCK_EX | LOCK_NB)) {
		if (pread(fd, state, sizeof(state) - 1, 0) > 0 && (c = strstr(state, "disk_size=")))
			cap = strtoull(c + strlen("disk_size="), NULL, 10);
		close(fd);
		return cap; /* held: alive */
	}
	/* taken: its file must still be the lock (not replaced meanwhile) */
	if (fstat(fd, &a) || !S_ISREG(a.st_mode) ||
	    fstatat(dfd, name, &b, AT_SYMLINK_NOFOLLOW) || a.st_ino != b.st_ino ||
	    pread(fd, state, sizeof(state) - 1, 0) < 0 || !strcmp(state, LOCK_STOPPED)) {
		close(fd);
		return 0;
	}
	n = remove_temps(p, host);
	atomic_fetch_add(&p->temp_removed, n);
	log_info("store %s: the ucmfs of host %s is gone; removed the %llu temp files it left",
		 p->root, host, (unsigned long long)n);
	if (ftruncate(fd, 0) || pwrite(fd, LOCK_STOPPED, strlen(LOCK_STOPPED), 0) < 0 || fsync(fd))
		log_warn("store %s: cannot mark the lock of host %s as stopped: %s", p->root, host,
			 strerror(errno));
	close(fd); /* and with it the lock */
	return 0;
}

void posix_shared_reap(struct posix *p)
{
	int64_t now = mono_ns();
	uint64_t least = 0, cap;
	struct dirent *de;
	DIR *d;

	if (p->reaped && now - p->reaped < REAP_EVERY_NS)
		return;
	p->reaped = now; /* only the sweeper calls this */
	d = opendir(p->root);
	if (!d)
		return;
	while ((de = readdir(d))) {
		const char *host = de->d_name + strlen(".lock.");

		if (strncmp(de->d_name, ".lock.", strlen(".lock.")) || !*host ||
		    !strcmp(host, p->host))
			continue;
		cap = reap_host(p, dirfd(d), de->d_name, host);
		if (cap && (!least || cap < least))
			least = cap;
	}
	closedir(d);
	/* one capacity for the store: the smallest disk_size= of the live hosts */
	cap = p->own_capacity;
	if (least && (!cap || least < cap))
		cap = least;
	__atomic_store_n(&p->capacity, cap, __ATOMIC_RELAXED);
}
