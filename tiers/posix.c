/*
 * The disk tier: one file per block.
 *
 * DESIGN
 *
 * Layouts:
 *   native  STORE/data/<hex[0:3]>/<hex>: a 4 KiB header (tiers/posix_header.h), then the
 *           payload, padded to a 4 KiB multiple.
 *   ucm     STORE/<hex[0:3]>/<hex>: the raw block bytes, nothing else (UCM's PosixStore).
 *
 * A reservation writes a temp file beside the final name, "<hex>.tmp.<host>.<pid>.<n>"
 * (layout=ucm first tries UCM's own "<hex>.tmp"); commit writes the header, optionally
 * fdatasyncs, and renames it over the final name, so a block file is always whole. At start,
 * temp files of this host are deleted (the store lock guarantees their writer is gone), and
 * other hosts' temp files once they are an hour old (tiers/posix_scan.c).
 *
 * The index (id -> size, stored bytes, times, deadline, inode number) is rebuilt from the
 * tree at start, helped by the snapshot of it a clean stop saves (tiers/posix_scan.c), and
 * kept in memory; lookups never touch the disk. It is protected by p->lock,
 * which is never held across file IO. The inode number is the version of a block file: a
 * replacement renames a new inode over the name.
 *
 * IO goes through the store's engine (tiers/io.h). With io=aio, read handles are O_DIRECT
 * (a stream of reads from byte 0 is read ahead in windows: stream_read), and a
 * reservation written in order from byte 0 goes to the disk O_DIRECT, its unaligned bytes
 * through a stage (append_direct); anything else about a reservation (a write out of order,
 * a truncate, a read) flushes the stage and goes on through the page cache.
 *
 * Durability: a block is durable once its file's bytes and its name are on the disk. Each
 * commit is numbered (p->commit_seq) after its rename; on a local filesystem one syncfs()
 * makes every commit numbered before it durable, for every caller waiting on one (sync_upto):
 * a burst of fsyncs, or of durable commits, costs one journal commit and gives the disk all
 * their bytes at once. On any other filesystem (a network one, whose syncfs may not reach its
 * servers) each block is fdatasynced and its directory fsynced.
 *
 * Reads verify the checksum of the stored bytes before any byte is returned: a whole-block
 * read checks the buffer it filled, any other read first checks the whole file once per
 * handle. A mismatch moves the file to STORE/quarantine/ and fails with -EIO.
 */
#include "tiers/posix_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "src/buf.h"
#include "src/clock.h"
#include "src/dlheap.h"
#include "src/hash.h"
#include "src/idmap.h"
#include "src/log.h"
#include "src/metrics.h"
#include "tiers/posix_header.h"
#include "tiers/stripe.h"

#define READ_AHEAD_MIN (256u << 10) /* stored bytes from which reads are read ahead */
#define READ_AHEAD (4u << 20)        /* how far ahead of a sequential reader */
#define PREFETCH (2u << 20)          /* O_DIRECT: a window of a stream's prefetch */
#define NWIN 4                       /* ... and how many windows a stream keeps */
#define STAGE IO_WSEG                /* O_DIRECT writes: bytes gathered before a write */
#define NSTAGE 4                     /* ... and how many such writes may be in flight */
#define VERIFY_CHUNK (4u << 20)

/* Stored bytes [start, start + PREFETCH) of a stream, read ahead by the engine. */
struct window {
	struct io_req *r;        /* NULL: could not be started (readers read for themselves) */
	uint64_t start;
	unsigned refs;           /* the handle's list, and each reader taking bytes from it */
};

struct phandle {
	struct tier_handle base;
	int fd;
	bool writing;
	bool direct;             /* read: fd is O_DIRECT, read through p->io */
	atomic_bool verified;    /* read: the stored bytes matched their checksum */
	struct blockid id;
	uint64_t payload;        /* file offset of byte 0 of the block */
	uint64_t size;           /* logical size (write: max(written end, declared)) */
	uint64_t ino;
	bool counted;            /* read: counted in its entry's opens */
	atomic_uint_fast64_t ra_end; /* read: stored bytes asked to be read ahead, up to */
	struct disk_header *hdr; /* read, native layout */
	uint64_t *coff;          /* read: stored offset of each chunk (nchunks + 1 entries) */
	pthread_mutex_t lock;    /* read: reads may run in parallel; protects cbuf, verified */
	char *cbuf;              /* read: the last chunk checked whole, for partial reads */
	uint32_t cbuf_chunk;     /* which chunk cbuf holds, UINT32_MAX if none */
	struct tier_chunk *ctab; /* read: the chunk table in tier form */
	pthread_mutex_t pf_lock; /* read, direct: protects the four below and windows' refs */
	struct window *win[NWIN]; /* consecutive windows, the oldest first */
	unsigned nwin;
	uint64_t win_next;       /* where the next window starts */
	bool streaming;          /* byte 0 was read: the block is being read whole */
	bool runs;               /* TIER_OPEN_RUNS of a raw block: no windows */
	struct block_attr attr;  /* read */
	uint64_t room;           /* write: payload bytes make_room() has allowed for */
	uint64_t promised;       /* write: all the room promised (header too), given back at end */
	uint64_t bound;          /* write, TIER_RESERVE_SHRINK: payload bytes it stays within */
	int dfd;                 /* write, aio: the temp file O_DIRECT, or -1 */
	char *stages[NSTAGE];    /* write, aio: STAGE bytes each, written in turn */
	struct io_req *wreq[NSTAGE]; /* the write in flight from each stage, or NULL */
	uint64_t woff[NSTAGE];   /* ... of payload bytes [woff, woff + wlen) */
	size_t wlen[NSTAGE];
	int werr;                /* the first failed O_DIRECT write: every later call fails */
	unsigned cur;            /* the stage being filled: it holds [stage_off, +stage_len) */
	uint64_t stage_off;      /* 4 KiB-aligned */
	size_t stage_len;
	struct hash_state *xx;   /* write: running checksum of bytes [0, hashed) */
	uint64_t hashed;
	char tmp[PATH_MAX];      /* write: temp file */
};

static int stage_flush(struct phandle *h);
static int io_error(int rc);

static struct posix *posix_of(struct tier *t)
{
	return t->priv;
}

static uint64_t payload_off(const struct posix *p)
{
	return p->layout == LAYOUT_NATIVE ? DISK_HEADER_SIZE : 0;
}

void posix_block_path(const struct posix *p, const struct blockid *id, char *out, size_t len)
{
	char hex[BLOCKID_HEX_LEN + 1];

	blockid_format(id, hex);
	snprintf(out, len, "%s/%.3s/%s", p->data, hex, hex);
}

void posix_shard_path(const struct posix *p, const struct blockid *id, char *out, size_t len)
{
	char hex[BLOCKID_HEX_LEN + 1];

	blockid_format(id, hex);
	snprintf(out, len, "%s/%.3s", p->data, hex);
}

int posix_fsync_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY), rc = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd))
		rc = -errno;
	close(fd);
	return rc;
}

/* --- durability ------------------------------------------------------------------------ */

/* Filesystems whose syncfs() writes every dirty file and directory of it to its disk. */
static bool syncfs_is_durable(const char *path)
{
	struct statfs s;

	if (statfs(path, &s))
		return false;
	switch ((unsigned long)s.f_type) {
	case EXT4_SUPER_MAGIC: /* ext2, ext3 and ext4 alike */
	case XFS_SUPER_MAGIC:
	case BTRFS_SUPER_MAGIC:
	case F2FS_SUPER_MAGIC:
	case TMPFS_MAGIC:      /* nothing to write; as durable as any of its files */
		return true;
	default:
		return false;
	}
}

/*
 * Make every commit numbered up to seq durable with one syncfs(), shared: a caller that finds
 * a sync running waits for it, and starts another only if that one began before its commit.
 * A failed sync fails every caller it covered (-EIO; the kernel reports a writeback error
 * once, so a sync after it proves nothing about the same bytes).
 */
static int sync_upto(struct posix *p, uint64_t seq)
{
	int rc = 0;

	pthread_mutex_lock(&p->sync_lock);
	while (rc == 0 && p->durable_seq < seq) {
		uint64_t upto, round;

		if (p->syncing) {
			round = p->sync_round;
			while (p->sync_round == round)
				pthread_cond_wait(&p->synced, &p->sync_lock);
			if (p->last_rc && p->last_upto >= seq)
				rc = p->last_rc;
			continue;
		}
		p->syncing = true;
		pthread_mutex_unlock(&p->sync_lock);
		pthread_mutex_lock(&p->lock);
		upto = p->commit_seq;
		pthread_mutex_unlock(&p->lock);
		rc = syncfs(p->lock_fd) ? -errno : 0;
		counter_add(&p->syncs, 1);
		if (rc)
			log_err("STORE %s: syncfs: %s", p->root, strerror(-rc));
		rc = rc ? -EIO : 0;
		pthread_mutex_lock(&p->sync_lock);
		p->syncing = false;
		p->sync_round++;
		p->last_upto = upto;
		p->last_rc = rc;
		if (rc == 0 && upto > p->durable_seq)
			p->durable_seq = upto;
		pthread_cond_broadcast(&p->synced);
	}
	pthread_mutex_unlock(&p->sync_lock);
	return rc;
}

static bool is_expired(int64_t deadline, int64_t now)
{
	return deadline && now >= deadline;
}

/* --- index ------------------------------------------------------------------------------- */

static void lru_unlink(struct pentry *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
}

void posix_lru_touch(struct posix *p, struct pentry *e)
{
	if (e->next)
		lru_unlink(e);
	e->next = &p->lru;
	e->prev = p->lru.prev;
	p->lru.prev->next = e;
	p->lru.prev = e;
}

/* Take an entry out of the index and free it. p->lock held. */
static void index_del(struct posix *p, struct pentry *e)
{
	p->phys_used -= e->phys;
	p->expired_held -= e->expired_held;
	idmap_remove(&p->map, &e->node);
	lru_unlink(e);
	free(e);
}

void posix_index_put(struct posix *p, struct pentry *e)
{
	struct idnode *n = idmap_find(&p->map, &e->node.id);

	if (n)
		index_del(p, PE(n));
	if (idmap_insert(&p->map, &e->node)) {
		free(e); /* cannot index it: the file stays on disk and is found at the next start */
		return;
	}
	e->next = NULL;
	posix_lru_touch(p, e);
	p->phys_used += e->phys;
	if (e->deadline)
		dlheap_push(&p->deadlines, e->deadline, &e->node.id);
}

/* Remove the entry of id if its inode is ino (any inode if ino == 0). p->lock held. */
bool posix_index_drop(struct posix *p, const struct blockid *id, uint64_t ino)
{
	struct idnode *n = idmap_find(&p->map, id);

	if (!n || (ino && PE(n)->ino != ino))
		return false;
	index_del(p, PE(n));
	return true;
}

static uint64_t capacity_now(struct posix *p, uint64_t used);

/* A shared STORE: did a host open the block within SHARED_USED_NS? Opens set the file's
 * atime (posix_touch()); its atime at the commit is its mtime. */
static bool shared_used(int64_t atime, int64_t fmtime)
{
	return atime > fmtime + 1000000000LL && atime > wall_ns() - SHARED_USED_NS;
}

/* Remove the file at path, if it is still version ino (0: whatever it is). On a shared STORE
 * another host may have renamed a newer version over the name since this one was chosen:
 * whatever is there is moved aside (a temp name of this host), and put back if it is newer;
 * and an eviction (cold) leaves a file alone that a host used lately. */
void posix_remove_file(struct posix *p, const char *path, uint64_t ino, bool cold)
{
	char trash[PATH_MAX];
	struct stat st;

	if (p->shared_ns < 0 || !ino) {
		if (unlink(path) && errno != ENOENT)
			log_warn("cannot remove %s: %s", path, strerror(errno));
		return;
	}
	/* an eviction spares a newer version, and one that a host used since it was chosen */
	if (cold && (lstat(path, &st) || st.st_ino != ino ||
		     shared_used(timespec_ns(&st.st_atim), timespec_ns(&st.st_mtim))))
		return;
	snprintf(trash, sizeof(trash), "%s%s.%s.%d.%llu", path, TEMP_MARK, p->host, (int)getpid(),
		 (unsigned long long)atomic_fetch_add(&p->temp_seq, 1));
	if (rename(path, trash)) {
		if (errno != ENOENT)
			log_warn("cannot remove %s: %s", path, strerror(errno));
		return;
	}
	if (lstat(trash, &st) == 0 && st.st_ino != ino && link(trash, path) && errno != EEXIST)
		log_warn("cannot put %s back: %s", path, strerror(errno));
	unlink(trash);
}

/*
 * Delete the files of blocks taken out of the index (expired, evicted, removed), each only if
 * no newer version of its id was published since: a commit renames its file into place under
 * p->lock, so checking the index and unlinking under it never deletes a new version's file.
 * `bytes`, what the files take, was added to p->unlinking when they left the index: room is
 * not handed out again until the files are really gone (see make_room()).
 */
static void unlink_blocks(struct posix *p, const struct victim *v, int n, uint64_t bytes)
{
	for (int i = 0; i < n; i++) {
		char path[PATH_MAX];

		posix_block_path(p, &v[i].id, path, sizeof(path));
		pthread_mutex_lock(&p->lock);
		if (!idmap_find(&p->map, &v[i].id))
			posix_remove_file(p, path, v[i].ino, v[i].cold);
		pthread_mutex_unlock(&p->lock);
	}
	pthread_mutex_lock(&p->lock);
	p->unlinking -= bytes;
	if (!p->unlinking)
		pthread_cond_broadcast(&p->unlinked);
	pthread_mutex_unlock(&p->lock);
}

/*
 * Take expired blocks nobody reads out of the index, earliest deadline first, until `want`
 * bytes are freed or max ids are collected into ids. Returns how many. p->lock held.
 */
static int take_expired(struct posix *p, int64_t now, struct victim *ids, int max,
			uint64_t *freed, uint64_t want)
{
	struct dl_entry again[64];
	int n = 0, nagain = 0;

	while (n < max && *freed < want && dlheap_top(&p->deadlines) &&
	       dlheap_top(&p->deadlines)->deadline <= now) {
		struct dl_entry d = *dlheap_top(&p->deadlines);
		struct idnode *x;

		dlheap_pop(&p->deadlines);
		x = idmap_find(&p->map, &d.id);
		if (!x || PE(x)->deadline != d.deadline)
			continue; /* stale */
		if (PE(x)->opens) {
			/* still read: no longer a block for statfs, and tried again by the next
			 * sweep (beyond these, when found) */
			if (!PE(x)->expired_held) {
				PE(x)->expired_held = true;
				p->expired_held++;
			}
			if (nagain < (int)(sizeof(again) / sizeof(again[0])))
				again[nagain++] = d;
			continue;
		}
		*freed += PE(x)->phys;
		ids[n++] = (struct victim){ d.id, PE(x)->ino, false };
		counter_add(&p->expirations, 1);
		index_del(p, PE(x));
	}
	for (int i = 0; i < nagain; i++)
		dlheap_push(&p->deadlines, again[i].deadline, &again[i].id);
	return n;
}

/*
 * Make room for `need` more physical bytes: remove the coldest blocks that nobody reads,
 * expired ones first. 0, or -ENOSPC if even that cannot free enough (nothing is removed then
 * beyond what was already expired).
 *
 * `worst` (>= need) is what the caller may yet ask for in all, counting `need`: a writer whose
 * bytes come in steps (a compressed block) evicts for a step only if its whole bound could be
 * made room for, so a block that can never fit fails before it empties the store.
 *
 * No decision is taken while files that left the index are still being unlinked: their bytes
 * are out of phys_used but still on disk, and a writer granted them now would push the store
 * past its capacity for as long as the unlink takes.
 */
static int make_room(struct posix *p, uint64_t need, uint64_t worst)
{
	struct victim victims[64];
	struct pentry *cand[64];
	int64_t now = mono_ns();
	uint64_t cap, want, want_worst, freed = 0, more = 0, spare = 0;
	int nv = 0, nc = 0, rc = 0;

	pthread_mutex_lock(&p->lock);
	while (p->unlinking)
		pthread_cond_wait(&p->unlinked, &p->lock);
	if (p->shared_ns >= 0 && __atomic_load_n(&p->lease_fd, __ATOMIC_RELAXED) < 0) {
		/* a shared STORE: its reclaimer, which knows all of it, keeps it to capacity */
		p->pending += need;
		pthread_mutex_unlock(&p->lock);
		return 0;
	}
	/* open reservations have been promised their room already */
	cap = capacity_now(p, p->phys_used);
	if (p->phys_used + p->pending + need <= cap) {
		p->pending += need;
		pthread_mutex_unlock(&p->lock);
		return 0;
	}
	want = p->phys_used + p->pending + need - cap;
	want_worst = want + (worst > need ? worst - need : 0);
	/* expired blocks go first, whatever happens next: they are invisible anyway */
	nv = take_expired(p, now, victims, 32, &freed, want);
	/* then the coldest ones nobody reads, but only if that frees enough; `spare` counts
	 * the blocks beyond them that could go for the rest of `worst` */
	for (struct pentry *e = p->lru.next; e != &p->lru && freed + more + spare < want_worst;
	     e = e->next) {
		if (e->opens || (p->shared_ns >= 0 && shared_used(e->atime, e->fmtime)))
			continue; /* read here, or (shared) used lately by some host */
		if (freed + more >= want) {
			spare += e->phys;
		} else if (nc < 64) {
			cand[nc++] = e;
			more += e->phys;
		} else {
			break;
		}
	}
	if (freed + more < want || freed + more + spare < want_worst) {
		rc = -ENOSPC;
	} else {
		for (int i = 0; i < nc && nv < 64; i++) {
			victims[nv++] = (struct victim){ cand[i]->node.id, cand[i]->ino, true };
			freed += cand[i]->phys;
			counter_add(&p->evictions, 1);
			index_del(p, cand[i]);
		}
		p->pending += need; /* written after the unlinks below have returned */
	}
	p->unlinking += freed;
	pthread_mutex_unlock(&p->lock);
	unlink_blocks(p, victims, nv, freed);
	return rc;
}

void posix_trim(struct posix *p)
{
	make_room(p, 0, 0);
}

/* Give back room promised to a reservation. */
static void release_room(struct posix *p, uint64_t room)
{
	pthread_mutex_lock(&p->lock);
	p->pending -= room < p->pending ? room : p->pending;
	pthread_mutex_unlock(&p->lock);
}

/*
 * Move a damaged block file to STORE/quarantine/ and forget it. With ino set, only if the name
 * still holds that inode (a newer version may have replaced it since it was opened). Counted
 * once per file: whoever finds it gone already does nothing.
 */
void posix_quarantine(struct posix *p, const char *path, const struct blockid *id,
		      uint64_t ino, const char *why)
{
	char qdir[PATH_MAX], dst[PATH_MAX];
	const char *base = strrchr(path, '/');
	struct stat st;
	bool moved;
	int err = 0;

	if (ino && (lstat(path, &st) || st.st_ino != ino))
		return;
	snprintf(qdir, sizeof(qdir), "%s/quarantine", p->root);
	mkdir(qdir, 0700);
	snprintf(dst, sizeof(dst), "%s/%s.%lld", qdir, base ? base + 1 : path,
		 (long long)wall_ns());
	moved = rename(path, dst) == 0;
	if (!moved && errno != ENOENT) {
		err = errno;
		moved = unlink(path) == 0;
	}
	if (id) {
		pthread_mutex_lock(&p->lock);
		posix_index_drop(p, id, ino);
		pthread_mutex_unlock(&p->lock);
	}
	if (!moved) {
		if (err)
			log_warn("%s is damaged (%s) but cannot be moved to quarantine: %s", path,
				 why, strerror(err));
		return;
	}
	atomic_fetch_add(&p->quarantined, 1);
	log_warn("quarantined %s: %s", path, why);
}

/*
 * The file of inode ino, which the index holds for id, is no longer at path (removed or
 * replaced behind the daemon's back): forget that entry. A newer version committed since has
 * another inode and stays.
 */
static void forget_stale(struct posix *p, const char *path, const struct blockid *id,
			 uint64_t ino)
{
	struct stat st;

	if (!lstat(path, &st) && st.st_ino == ino)
		return;
	pthread_mutex_lock(&p->lock);
	posix_index_drop(p, id, ino);
	pthread_mutex_unlock(&p->lock);
}

/* --- reading ----------------------------------------------------------------------------- */

void posix_fill_attr(const struct pentry *e, struct block_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->size = e->size;
	a->stored = e->phys;
	a->mtime = e->mtime;
	a->atime = e->atime;
	a->deadline = e->deadline;
	a->version = e->ino;
	a->where = TIER_DISK;
	a->codec = e->codec;
}

static int posix_lookup(struct tier *t, const struct blockid *id, struct block_attr *attr)
{
	struct posix *p = posix_of(t);
	bool ask = p->shared_ns >= 0; /* a shared STORE: unless the entry is recent enough */
	struct idnode *n;
	int rc = -ENOENT;

	pthread_mutex_lock(&p->lock);
	n = idmap_find(&p->map, id);
	if (n && ask && mono_ns() - PE(n)->checked <= p->shared_ns)
		ask = false;
	if (!ask && n && !is_expired(PE(n)->deadline, mono_ns())) {
		if (attr)
			posix_fill_attr(PE(n), attr);
		rc = 0;
	}
	pthread_mutex_unlock(&p->lock);
	return ask ? posix_shared_lookup(p, id, attr) : rc;
}

/* A query of many ids on a shared STORE: lookups on PRESENT_THREADS threads at once, each a
 * round trip to the shared filesystem for an id this host does not know. */
#define PRESENT_THREADS 8
#define PRESENT_PER_THREAD 8

struct present_job {
	struct tier *t;
	const struct blockid *ids;
	uint8_t *hit;
	size_t n;
	atomic_size_t next;
};

static void *present_worker(void *arg)
{
	struct present_job *j = arg;
	size_t i;

	while ((i = atomic_fetch_add(&j->next, 1)) < j->n)
		if (!j->hit[i])
			j->hit[i] = posix_lookup(j->t, &j->ids[i], NULL) == 0;
	return NULL;
}

static void present_shared(struct tier *t, const struct blockid *ids, size_t n, uint8_t *hit)
{
	struct present_job j = { .t = t, .ids = ids, .hit = hit, .n = n };
	pthread_t th[PRESENT_THREADS - 1];
	size_t nth = n / PRESENT_PER_THREAD, started = 0;

	if (nth > PRESENT_THREADS - 1)
		nth = PRESENT_THREADS - 1;
	while (started < nth && pthread_create(&th[started], NULL, present_worker, &j) == 0)
		started++;
	present_worker(&j);
	while (started > 0)
		pthread_join(th[--started], NULL);
}

static void posix_present(struct tier *t, const struct blockid *ids, size_t n, uint8_t *hit)
{
	struct posix *p = posix_of(t);
	int64_t now = mono_ns();

	if (p->shared_ns >= 0) {
		present_shared(t, ids, n, hit);
		return;
	}
	pthread_mutex_lock(&p->lock);
	for (size_t i = 0; i < n; i++) {
		struct idnode *x;

		if (hit[i])
			continue;
		x = idmap_find(&p->map, &ids[i]);
		hit[i] = x && !is_expired(PE(x)->deadline, now);
	}
	pthread_mutex_unlock(&p->lock);
}

static struct phandle *new_handle(struct posix *p, const struct blockid *id)
{
	struct phandle *h = calloc(1, sizeof(*h));

	if (!h)
		return NULL;
	h->base.tier = &p->tier;
	h->fd = h->dfd = -1;
	h->id = *id;
	h->payload = payload_off(p);
	h->cbuf_chunk = UINT32_MAX;
	pthread_mutex_init(&h->lock, NULL);
	pthread_mutex_init(&h->pf_lock, NULL);
	return h;
}

static void free_handle(struct phandle *h)
{
	if (h->promised)
		release_room(posix_of(h->base.tier), h->promised);
	/* before the descriptors close: a write the depth held back is submitted by its wait,
	 * with the descriptor number it was planned with, which a file opened by another
	 * thread meanwhile could have taken (the stage's bytes would land in that file) */
	for (unsigned i = 0; i < NSTAGE; i++) {
		if (h->wreq[i])
			io_write_wait(posix_of(h->base.tier)->io, h->wreq[i]); /* it reads the stage */
		if (h->stages[i]) /* pooled: fresh memory would cost a fault per page each block */
			io_buf_put(posix_of(h->base.tier)->io, h->stages[i], STAGE);
	}
	for (unsigned i = 0; i < h->nwin; i++) {
		io_prefetch_drop(posix_of(h->base.tier)->io, h->win[i]->r);
		free(h->win[i]);
	}
	if (h->fd >= 0)
		close(h->fd);
	if (h->dfd >= 0)
		close(h->dfd);
	free(h->xx);
	free(h->hdr);
	free(h->coff);
	free(h->cbuf);
	free(h->ctab);
	pthread_mutex_destroy(&h->pf_lock);
	pthread_mutex_destroy(&h->lock);
	free(h);
}

/* Count a read handle in (or out of) its entry's opens, and refresh its recency. */
static void pin(struct posix *p, struct phandle *h, bool in)
{
	struct idnode *n;

	pthread_mutex_lock(&p->lock);
	n = idmap_find(&p->map, &h->id);
	if (n && PE(n)->ino == h->ino) {
		if (in) {
			PE(n)->opens++;
			PE(n)->atime = wall_ns();
			posix_lru_touch(p, PE(n));
			h->counted = true;
		} else if (h->counted) {
			PE(n)->opens--;
		}
	}
	pthread_mutex_unlock(&p->lock);
}

/* Read the file of a read handle: through the IO engine if it is O_DIRECT. */
static ssize_t hread(struct phandle *h, void *buf, size_t len, uint64_t off)
{
	if (h->direct)
		return io_pread(posix_of(h->base.tier)->io, h->fd, buf, len, off);
	return io_pread_full(h->fd, buf, len, off);
}

/* GlusterFS answers an open of a name that another client renames onto with ESTALE now and
 * then (the kernel's own retry of the lookup does not always cover it): a few more tries. */
int posix_open_file(const char *path, int flags)
{
	for (int tries = 0;; tries++) {
		int fd = open(path, flags);

		if (fd >= 0 || errno != ESTALE || tries >= 4)
			return fd;
	}
}

/* Open the file of a read handle, O_DIRECT if the handle reads that way and the file takes it
 * (O_NONBLOCK: a FIFO put in place of a block file must not park the thread). The descriptor,
 * or -1 and errno. */
static int open_read(struct phandle *h, const char *path)
{
	int flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
	int fd = posix_open_file(path, flags | (h->direct ? O_DIRECT : 0));

	if (fd < 0 && errno == EINVAL && h->direct) {
		h->direct = false; /* this one file refuses O_DIRECT: read it through the cache */
		fd = posix_open_file(path, flags);
	}
	return fd;
}

static int posix_open(struct tier *t, const struct blockid *id, unsigned flags,
		      struct tier_handle **out)
{
	struct posix *p = posix_of(t);
	char path[PATH_MAX];
	uint8_t raw[DISK_HEADER_SIZE];
	struct block_attr la;
	struct phandle *h;
	struct stat st;
	int rc, err = 0;

	rc = posix_lookup(t, id, &la);
	if (rc) {
		if (!(flags & TIER_OPEN_INTERNAL))
			counter_add(&p->misses, 1);
		return rc;
	}
	if (!(flags & TIER_OPEN_INTERNAL))
		counter_add(&p->hits, 1);
	h = new_handle(p, id);
	if (!h)
		return -ENOMEM;
	posix_block_path(p, id, path, sizeof(path));
	h->direct = io_engine_direct(p->io);
	h->fd = open_read(h, path);
	if (h->fd < 0 || fstat(h->fd, &st))
		err = errno;
	if (err || !S_ISREG(st.st_mode)) {
		struct stat ls;

		rc = err == ENOENT ? -ENOENT : -EIO;
		if (lstat(path, &ls) == 0 && !S_ISREG(ls.st_mode))
			posix_quarantine(p, path, id, ls.st_ino, "not a regular file");
		else if (err && err != ENOENT)
			log_warn("cannot open %s: %s", path, strerror(err));
		forget_stale(p, path, id, la.version);
		goto err;
	}
	h->ino = st.st_ino;
	if (h->direct)
		fcntl(h->fd, F_SETFL, O_DIRECT); /* a regular file: O_NONBLOCK is not for its IO */
	pin(p, h, true);
	if (p->layout == LAYOUT_UCM) {
		h->size = (uint64_t)st.st_size;
		h->verified = true; /* raw bytes carry no checksum */
		memset(&h->attr, 0, sizeof(h->attr));
		h->attr.size = h->size;
		h->attr.stored = (uint64_t)st.st_blocks * 512;
		h->attr.mtime = timespec_ns(&st.st_mtim);
		h->attr.version = h->ino;
		h->attr.where = TIER_DISK;
		*out = &h->base;
		return 0;
	}
	h->hdr = malloc(sizeof(*h->hdr));
	rc = -ENOMEM;
	if (!h->hdr)
		goto err;
	rc = (int)hread(h, raw, sizeof(raw), 0);
	if (rc != (int)sizeof(raw) || disk_header_decode(raw, h->hdr) ||
	    !blockid_eq(&h->hdr->id, id) ||
	    (uint64_t)st.st_size < DISK_HEADER_SIZE + h->hdr->stored_size) {
		posix_quarantine(p, path, id, h->ino, "bad header");
		forget_stale(p, path, id, la.version);
		rc = -EIO;
		goto err;
	}
	h->size = h->hdr->stored_size; /* reads address the stored payload */
	if (h->hdr->nchunks) {
		h->coff = malloc((h->hdr->nchunks + 1) * sizeof(*h->coff));
		h->ctab = malloc(h->hdr->nchunks * sizeof(*h->ctab));
		rc = -ENOMEM;
		if (!h->coff || !h->ctab)
			goto err;
		h->coff[0] = 0;
		for (uint32_t i = 0; i < h->hdr->nchunks; i++) {
			h->coff[i + 1] = h->coff[i] + h->hdr->chunk[i].len;
			h->ctab[i].len = h->hdr->chunk[i].len;
			h->ctab[i].csum = h->hdr->chunk[i].csum;
		}
	}
	memset(&h->attr, 0, sizeof(h->attr));
	h->attr.size = h->hdr->raw_size;
	h->attr.stored = (uint64_t)st.st_blocks * 512;
	h->attr.mtime = h->hdr->mtime;
	h->attr.deadline = h->hdr->deadline ? wall_to_mono(h->hdr->deadline) : 0;
	h->attr.version = h->ino;
	h->attr.where = TIER_DISK;
	h->attr.codec = h->hdr->codec;
	h->runs = (flags & TIER_OPEN_RUNS) && h->hdr->codec == CODEC_RAW;
	*out = &h->base;
	return 0;
err:
	if (h->counted)
		pin(p, h, false);
	free_handle(h);
	return rc;
}

/* Check the whole payload of a read handle against its checksum, once. 0 or -EIO. */
static int verify_whole(struct phandle *h)
{
	struct posix *p = posix_of(h->base.tier);
	char *buf;
	struct hash_state *st;
	uint64_t off = 0, n = h->hdr->stored_size;
	int rc = 0;

	if (h->verified)
		return 0;
	buf = malloc(VERIFY_CHUNK);
	st = hash_new();
	if (!buf || !st) {
		rc = -ENOMEM;
		goto out;
	}
	/* all of it is read now, in order: one deep queue rather than a readahead window */
	if (n >= READ_AHEAD_MIN && !h->direct)
		posix_fadvise(h->fd, (off_t)h->payload, (off_t)n, POSIX_FADV_WILLNEED);
	while (off < n) {
		size_t len = n - off < VERIFY_CHUNK ? (size_t)(n - off) : VERIFY_CHUNK;
		ssize_t r = hread(h, buf, len, h->payload + off);

		if (r != (ssize_t)len) {
			rc = -EIO;
			break;
		}
		hash_update(st, buf, len);
		off += len;
	}
	if (rc == 0 && hash_digest(st) != h->hdr->csum) {
		counter_add(&p->checksum_failures, 1);
		rc = -EIO;
	}
out:
	if (rc == -EIO) {
		char path[PATH_MAX];

		posix_block_path(p, &h->id, path, sizeof(path));
		posix_quarantine(p, path, &h->id, h->ino, "checksum mismatch");
	}
	h->verified = rc == 0;
	free(buf);
	free(st);
	return rc;
}

static void damaged(struct phandle *h, const char *why)
{
	struct posix *p = posix_of(h->base.tier);
	char path[PATH_MAX];

	posix_block_path(p, &h->id, path, sizeof(path));
	posix_quarantine(p, path, &h->id, h->ino, why);
}

static void posix_damaged(struct tier_handle *th, const char *why)
{
	if (!((struct phandle *)th)->writing)
		damaged((struct phandle *)th, why);
}

/*
 * After a read of stored bytes [off, end): keep the kernel reading READ_AHEAD ahead of a
 * stream of reads that began at the start of the payload (a block being loaded whole, by its
 * reader and the pipeline's worker together), so that the disk sees a deep queue rather than
 * the default readahead window. A read elsewhere (one shard) asks for nothing: a deep queue
 * behind it would delay the next reader's own read. Called after the read, never before.
 */
static void read_ahead(struct phandle *h, uint64_t off, uint64_t end)
{
	uint64_t ra = atomic_load(&h->ra_end), to;

	if (h->direct || h->size < READ_AHEAD_MIN || (off != 0 && (ra == 0 || off > ra)) ||
	    end + READ_AHEAD / 2 <= ra)
		return;
	to = end + READ_AHEAD < h->size ? end + READ_AHEAD : h->size;
	if (to <= ra || !atomic_compare_exchange_strong(&h->ra_end, &ra, to))
		return;
	if (ra < end)
		ra = end;
	if (to > ra)
		posix_fadvise(h->fd, (off_t)(h->payload + ra), (off_t)(to - ra),
			      POSIX_FADV_WILLNEED);
}

/* A reader is done with w. pf_lock held. */
static void window_put(struct phandle *h, struct window *w)
{
	if (--w->refs == 0) {
		io_prefetch_drop(posix_of(h->base.tier)->io, w->r);
		free(w);
	}
}

/*
 * Move a stream's windows along with a read at stored byte so: drop the windows two or more
 * behind it (the threads loading a block take its chunks nearly, not strictly, in order: a
 * read may come a few chunks late), and start new ones until NWIN are kept. pf_lock held.
 */
static void windows_follow(struct phandle *h, uint64_t so)
{
	while (h->nwin && so >= h->win[0]->start + 2 * (uint64_t)PREFETCH) {
		window_put(h, h->win[0]);
		memmove(&h->win[0], &h->win[1], --h->nwin * sizeof(h->win[0]));
	}
	if (h->nwin == 0 && h->win_next < so)
		h->win_next = so & ~(uint64_t)(IO_ALIGN - 1); /* the reads jumped ahead */
	while (h->nwin < NWIN && h->win_next < h->size) {
		struct window *w = malloc(sizeof(*w));
		uint64_t len = h->size - h->win_next < PREFETCH ? h->size - h->win_next : PREFETCH;

		if (!w)
			break;
		w->r = io_prefetch(posix_of(h->base.tier)->io, h->fd, h->payload + h->win_next,
				   (size_t)len);
		w->start = h->win_next;
		w->refs = 1;
		h->win[h->nwin++] = w;
		h->win_next += PREFETCH;
	}
}

/*
 * Read stored bytes [so, so + len) of a chunked block. With O_DIRECT there is no kernel
 * readahead, so the handle does its own. Once a read from byte 0 leaves more to read (a
 * block being loaded whole, by its reader and the pipeline's threads together, in nearly the
 * order of its chunks), the bytes after it are read ahead in consecutive windows of PREFETCH
 * bytes, NWIN of them from the one before the latest read on, which the engine keeps filling
 * (tiers/io.c) while the callers check and decode what they took. A read takes its bytes from
 * the windows that hold them (two, if it straddles), waiting only up to its own last byte
 * and without the handle's lock; what no window holds (that first read, one behind the
 * windows, a window that could not start) it reads for itself. Bytes read or -errno.
 */
static ssize_t stream_read(struct phandle *h, char *dst, size_t len, uint64_t so)
{
	struct io_engine *io = posix_of(h->base.tier)->io;
	struct window *use[3];
	unsigned nuse = 0, i;
	uint64_t end = so + len;
	size_t got = 0;
	ssize_t n;

	if (!h->direct || h->runs)
		return hread(h, dst, len, h->payload + so);
	pthread_mutex_lock(&h->pf_lock);
	if (so == 0 && len < h->size && !h->streaming) {
		h->streaming = true;
		h->win_next = len & ~(size_t)(IO_ALIGN - 1);
	}
	if (h->streaming)
		windows_follow(h, so);
	for (i = 0; i < h->nwin && nuse < 3; i++) {
		struct window *w = h->win[i];

		if (nuse == 0 && (so < w->start || so >= w->start + PREFETCH))
			continue;
		if (!w->r)
			break;
		w->refs++;
		use[nuse++] = w;
		if (end <= w->start + PREFETCH)
			break;
	}
	pthread_mutex_unlock(&h->pf_lock);
	for (i = 0; i < nuse; i++) {
		struct window *w = use[i];
		uint64_t at = so + got, wend = w->start + PREFETCH < end ? w->start + PREFETCH : end;
		const char *b;

		if (at < w->start || at >= w->start + PREFETCH)
			break; /* the window before came short */
		n = io_prefetch_wait(io, w->r, (size_t)(wend - w->start), &b);
		if (n <= (ssize_t)(at - w->start))
			break;
		if ((uint64_t)n > wend - w->start)
			n = (ssize_t)(wend - w->start);
		memcpy(dst + got, b + (at - w->start), (size_t)(w->start + (uint64_t)n - at));
		got += (size_t)(w->start + (uint64_t)n - at);
	}
	if (nuse) {
		pthread_mutex_lock(&h->pf_lock);
		for (i = 0; i < nuse; i++)
			window_put(h, use[i]);
		pthread_mutex_unlock(&h->pf_lock);
	}
	if (got < len) {
		n = hread(h, dst + got, len - got, h->payload + so + got);
		if (n < 0)
			return n;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

/* Read chunks [i, j) whole into dst with one read (one deep request) and check each.
 * 0 or -EIO. */
static int read_chunks(struct phandle *h, uint32_t i, uint32_t j, char *dst)
{
	uint64_t len = h->coff[j] - h->coff[i];

	if (stream_read(h, dst, (size_t)len, h->coff[i]) != (ssize_t)len) {
		damaged(h, "file too short");
		return -EIO;
	}
	counter_add(&posix_of(h->base.tier)->bytes_read, len);
	for (uint32_t k = i; k < j; k++) {
		if (hash64(dst + (h->coff[k] - h->coff[i]), h->hdr->chunk[k].len) !=
		    h->hdr->chunk[k].csum) {
			counter_add(&posix_of(h->base.tier)->checksum_failures, 1);
			damaged(h, "chunk checksum mismatch");
			return -EIO;
		}
	}
	return 0;
}

/* Read [off, off+len) of a chunked payload, checking every chunk it touches. */
static ssize_t read_chunked(struct phandle *h, char *buf, size_t len, uint64_t off)
{
	uint64_t end = off + len;
	uint32_t lo = 0, hi = h->hdr->nchunks;

	/* the first chunk that ends after off */
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (h->coff[mid + 1] <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (uint32_t i = lo; i < h->hdr->nchunks && h->coff[i] < end; i++) {
		uint64_t cs = h->coff[i], ce = h->coff[i + 1];
		uint64_t a = off > cs ? off : cs, b = end < ce ? end : ce;
		int rc;

		if (a == cs && b == ce) {
			uint32_t j = i + 1; /* and the whole chunks after it */

			while (j < h->hdr->nchunks && h->coff[j + 1] <= end)
				j++;
			rc = read_chunks(h, i, j, buf + (cs - off));
			if (rc)
				return rc;
			i = j - 1;
			continue;
		}
		pthread_mutex_lock(&h->lock);
		rc = 0;
		if (h->cbuf_chunk != i) {
			/* a stored chunk is never longer than its raw bytes, nor than the payload */
			uint64_t cb = h->hdr->chunk_size < h->hdr->stored_size ? h->hdr->chunk_size
										: h->hdr->stored_size;

			if (!h->cbuf && !(h->cbuf = malloc(cb ? cb : 1)))
				rc = -ENOMEM;
			h->cbuf_chunk = UINT32_MAX;
			if (rc == 0)
				rc = read_chunks(h, i, i + 1, h->cbuf);
			if (rc == 0)
				h->cbuf_chunk = i;
		}
		if (rc == 0)
			memcpy(buf + (a - off), h->cbuf + (a - cs), b - a);
		pthread_mutex_unlock(&h->lock);
		if (rc)
			return rc;
	}
	read_ahead(h, off, end);
	return (ssize_t)len;
}

static ssize_t posix_read(struct tier_handle *th, void *buf, size_t len, uint64_t off)
{
	struct phandle *h = (struct phandle *)th;
	ssize_t n;
	int rc;

	if (off >= h->size)
		return 0;
	if (len > h->size - off)
		len = (size_t)(h->size - off);
	if (h->writing) {
		rc = h->dfd >= 0 ? stage_flush(h) : 0;
		return rc ? io_error(rc) : io_pread_full(h->fd, buf, len, h->payload + off);
	}
	if (h->coff)
		return read_chunked(h, buf, len, off);
	if (!h->verified && !(off == 0 && len == h->size)) {
		pthread_mutex_lock(&h->lock);
		rc = verify_whole(h);
		pthread_mutex_unlock(&h->lock);
		if (rc)
			return rc;
	}
	n = hread(h, buf, len, h->payload + off);
	if (n < 0)
		return -EIO;
	counter_add(&posix_of(th->tier)->bytes_read, (uint64_t)n);
	if ((size_t)n != len) {
		if (!h->verified) {
			char path[PATH_MAX];

			posix_block_path(posix_of(th->tier), &h->id, path, sizeof(path));
			posix_quarantine(posix_of(th->tier), path, &h->id, h->ino, "file too short");
		}
		return -EIO;
	}
	read_ahead(h, off, off + len);
	if (!h->verified) {
		/* a whole-block read: check exactly the bytes about to be returned */
		if (hash64(buf, len) != h->hdr->csum) {
			char path[PATH_MAX];

			counter_add(&posix_of(th->tier)->checksum_failures, 1);

			posix_block_path(posix_of(th->tier), &h->id, path, sizeof(path));
			posix_quarantine(posix_of(th->tier), path, &h->id, h->ino, "checksum mismatch");
			return -EIO;
		}
		h->verified = true;
	}
	return n;
}

static int posix_layout(struct tier_handle *th, struct block_layout *out)
{
	struct phandle *h = (struct phandle *)th;

	memset(out, 0, sizeof(*out));
	out->stored = h->size;
	if (h->hdr) {
		out->codec = h->hdr->codec;
		out->chunk_size = h->hdr->chunk_size;
		out->nchunks = h->hdr->nchunks;
		out->chunk = h->ctab;
		out->whole = !h->ctab; /* verify_whole() */
	}
	return 0;
}

static int posix_stat(struct tier_handle *th, struct block_attr *attr)
{
	struct phandle *h = (struct phandle *)th;

	if (h->writing) {
		memset(attr, 0, sizeof(*attr));
		attr->size = h->size;
		attr->where = TIER_DISK;
		return 0;
	}
	*attr = h->attr;
	return 0;
}

static void posix_close(struct tier_handle *th)
{
	struct phandle *h = (struct phandle *)th;

	if (h->counted)
		pin(posix_of(th->tier), h, false);
	free_handle(h);
}

/* --- writing ----------------------------------------------------------------------------- */

/* Create h->tmp exclusively, making its shard directory if needed. 0 or -errno. */
static int create_temp(struct phandle *h, const char *dir)
{
	for (int attempt = 0; attempt < 2; attempt++) {
		h->fd = open(h->tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (h->fd >= 0)
			return 0;
		if (errno != ENOENT || attempt)
			break;
		if (mkdir(dir, 0700) && errno != EEXIST)
			return -errno;
	}
	return -errno;
}

static int open_temp(struct posix *p, struct phandle *h)
{
	char dir[PATH_MAX], hex[BLOCKID_HEX_LEN + 1];

	posix_shard_path(p, &h->id, dir, sizeof(dir));
	blockid_format(&h->id, hex);
	if (p->layout == LAYOUT_UCM) {
		/* UCM's own temp name, unless another writer of this id holds it */
		snprintf(h->tmp, sizeof(h->tmp), "%s/%s.tmp", dir, hex);
		if (create_temp(h, dir) == 0)
			return 0;
	}
	snprintf(h->tmp, sizeof(h->tmp), "%s/%s" TEMP_MARK ".%s.%d.%llu", dir, hex, p->host,
		 (int)getpid(), (unsigned long long)atomic_fetch_add(&p->temp_seq, 1));
	return create_temp(h, dir);
}

/* Give the temp file of a direct writer the blocks of payload [off, off + len) ahead of its
 * writes: a direct write past the end of a file waits for its size to change (ext4 does it
 * before io_submit returns). Commit cuts the file to the bytes written. */
static void allocate(struct phandle *h, uint64_t off, uint64_t len)
{
	if (fallocate(h->fd, 0, (off_t)(h->payload + off), (off_t)len) && errno != EOPNOTSUPP)
		log_debug("fallocate of %s: %s", h->tmp, strerror(errno));
}

/* Room is given to a reservation whose bytes are fewer than its bound (TIER_RESERVE_SHRINK)
 * in steps of an eighth of the bound, at least this much. */
#define ROOM_STEP_MIN (64u << 10)

static uint64_t room_step(uint64_t bound)
{
	uint64_t step = buf_round(bound / 8);

	return step < ROOM_STEP_MIN ? ROOM_STEP_MIN : step;
}

static int posix_reserve(struct tier *t, const struct blockid *id, unsigned flags,
			 uint64_t size_hint, struct tier_handle **out)
{
	struct posix *p = posix_of(t);
	uint64_t room = buf_round(size_hint), bound = 0;
	struct phandle *h;
	int rc;

	if ((flags & TIER_RESERVE_EXCL) && posix_lookup(t, id, NULL) == 0)
		return -EEXIST;
	if ((flags & TIER_RESERVE_SHRINK) && size_hint) {
		bound = room;
		room = bound < room_step(bound) ? bound : room_step(bound);
	}
	rc = make_room(p, payload_off(p) + room, payload_off(p) + (bound ? bound : room));
	if (rc)
		return rc;
	h = new_handle(p, id);
	if (!h) {
		release_room(p, payload_off(p) + room);
		return -ENOMEM;
	}
	h->writing = true;
	h->verified = true;
	h->room = room;
	h->bound = bound;
	h->promised = payload_off(p) + h->room;
	h->xx = hash_new();
	if (!h->xx) {
		free_handle(h);
		return -ENOMEM;
	}
	rc = open_temp(p, h);
	if (rc) {
		free_handle(h);
		return rc == -ENOSPC || rc == -EDQUOT ? -ENOSPC : rc;
	}
	/* aio: a stream of writes from byte 0 goes to the disk O_DIRECT (see posix_write) */
	if (io_engine_direct(p->io)) {
		bool mem = true;

		for (unsigned i = 0; i < NSTAGE; i++)
			mem = mem && (h->stages[i] = io_buf_get(p->io, STAGE)) != NULL;
		if (mem)
			h->dfd = open(h->tmp, O_WRONLY | O_DIRECT | O_CLOEXEC);
		if (h->dfd >= 0 && room)
			allocate(h, 0, room);
	}
	*out = &h->base;
	return 0;
}

static int io_error(int rc)
{
	return rc == -ENOSPC || rc == -EDQUOT ? -ENOSPC : (rc == -ENOMEM ? rc : -EIO);
}

/* Write aligned [off, off + len) of the payload O_DIRECT; on a full filesystem, free a
 * little and try once more. len or -errno. */
static ssize_t write_direct(struct phandle *h, const char *buf, size_t len, uint64_t off)
{
	struct posix *p = posix_of(h->base.tier);
	ssize_t n = io_pwrite(p->io, h->dfd, buf, len, h->payload + off);

	if ((n == -ENOSPC || n == -EDQUOT) && make_room(p, len + (1u << 20), len + (1u << 20)) == 0) {
		h->promised += len + (1u << 20);
		n = io_pwrite(p->io, h->dfd, buf, len, h->payload + off);
	}
	return n;
}

/* Wait for the write from stage i, if any; one that found the filesystem full is written
 * again once room was made. 0 or -errno. */
static int stage_wait(struct phandle *h, unsigned i)
{
	struct io_req *r = h->wreq[i];
	ssize_t n;

	if (!r)
		return h->werr;
	h->wreq[i] = NULL;
	n = io_write_wait(posix_of(h->base.tier)->io, r);
	if (n == -ENOSPC || n == -EDQUOT)
		n = write_direct(h, h->stages[i], h->wlen[i], h->woff[i]);
	if (!h->werr && n != (ssize_t)h->wlen[i])
		h->werr = n < 0 ? (int)n : -EIO;
	return h->werr;
}

static int stages_wait(struct phandle *h)
{
	int rc = 0;

	for (unsigned i = 0; i < NSTAGE; i++) {
		int r = stage_wait(h, i);

		rc = rc ? rc : r;
	}
	return rc;
}

/* The current stage is full: start writing it and take the next one (once its own write is
 * done). 0 or -errno. */
static int stage_submit(struct phandle *h)
{
	struct posix *p = posix_of(h->base.tier);
	unsigned i = h->cur;

	h->woff[i] = h->stage_off;
	h->wlen[i] = STAGE;
	h->wreq[i] = io_write_start(p->io, h->dfd, h->stages[i], STAGE, h->payload + h->stage_off);
	if (!h->wreq[i] && !h->werr && write_direct(h, h->stages[i], STAGE, h->stage_off) != STAGE)
		h->werr = -EIO;
	h->stage_off += STAGE;
	h->stage_len = 0;
	h->cur = (i + 1) % NSTAGE;
	return stage_wait(h, h->cur);
}

/*
 * Write everything staged and wait for it, the last page padded with zeros, and keep that
 * partial page staged (the next bytes of the stream complete it; it is written again).
 * 0 or -errno.
 */
static int stage_flush(struct phandle *h)
{
	size_t whole = h->stage_len & ~(size_t)(IO_ALIGN - 1), padded = buf_round(h->stage_len);
	char *st = h->stages[h->cur];
	int rc = stages_wait(h);
	ssize_t n;

	if (rc || !h->stage_len)
		return rc;
	memset(st + h->stage_len, 0, padded - h->stage_len);
	n = write_direct(h, st, padded, h->stage_off);
	if (n != (ssize_t)padded)
		return h->werr = n < 0 ? (int)n : -EIO;
	if (whole) {
		memmove(st, st + whole, h->stage_len - whole);
		h->stage_off += whole;
		h->stage_len -= whole;
	}
	return 0;
}

/* From now on the handle writes through the page cache: what is staged goes out first. */
static int stop_direct(struct phandle *h)
{
	int rc = h->dfd >= 0 ? stage_flush(h) : h->werr;

	if (h->dfd >= 0)
		close(h->dfd);
	h->dfd = -1;
	return rc;
}

/* Append to the O_DIRECT stream, through the stages (the caller's buffer is its own again
 * when write returns; the disk writes a stage while the next fills). len or -errno. */
static ssize_t append_direct(struct phandle *h, const char *buf, size_t len)
{
	size_t left = len;

	while (left) {
		size_t c = STAGE - h->stage_len < left ? STAGE - h->stage_len : left;

		memcpy(h->stages[h->cur] + h->stage_len, buf, c);
		h->stage_len += c;
		buf += c;
		left -= c;
		if (h->stage_len == STAGE) {
			int rc = stage_submit(h);

			if (rc)
				return rc;
		}
	}
	return (ssize_t)len;
}

static ssize_t posix_write(struct tier_handle *th, const void *buf, size_t len, uint64_t off)
{
	struct phandle *h = (struct phandle *)th;
	ssize_t n;

	if (off + len > h->room) {
		/* growing past the room given so far: stay within the capacity, a step at a time
		 * for a block that is bounded (and only while its bound could fit) */
		uint64_t room = buf_round(off + len), worst = room;
		int rc;

		if (h->bound && room < h->bound) {
			if (room < h->room + room_step(h->bound))
				room = h->room + room_step(h->bound);
			if (room > h->bound)
				room = h->bound;
			worst = h->bound;
		}
		rc = make_room(posix_of(th->tier), room - h->room, worst - h->room);
		if (rc)
			return rc;
		if (h->dfd >= 0 && h->bound)
			allocate(h, h->room, room - h->room);
		h->promised += room - h->room;
		h->room = room;
	}
	if (h->dfd >= 0 && off == h->stage_off + h->stage_len) {
		n = append_direct(h, buf, len);
	} else {
		n = stop_direct(h); /* not a stream from byte 0 (any more) */
		if (n == 0)
			n = io_pwrite_full(h->fd, buf, len, h->payload + off);
		if ((n == -ENOSPC || n == -EDQUOT) &&
		    make_room(posix_of(th->tier), buf_round(len) + (1u << 20),
			      buf_round(len) + (1u << 20)) == 0) {
			/* the filesystem filled up (others write to it too): free a little, once */
			h->promised += buf_round(len) + (1u << 20);
			n = io_pwrite_full(h->fd, buf, len, h->payload + off);
		}
	}
	if (n < 0)
		return io_error((int)n);
	counter_add(&posix_of(th->tier)->bytes_written, (uint64_t)n);
	if (off == h->hashed) {
		hash_update(h->xx, buf, len);
		h->hashed += len;
	} else if (off < h->hashed) {
		h->hashed = UINT64_MAX; /* overwritten: hash again at commit */
	}
	if (off + len > h->size)
		h->size = off + len;
	return n;
}

static int posix_truncate(struct tier_handle *th, uint64_t size)
{
	struct phandle *h = (struct phandle *)th;
	int rc = stop_direct(h);

	if (rc)
		return io_error(rc);
	if (ftruncate(h->fd, (off_t)(h->payload + size)))
		return io_error(-errno);
	if (size < h->hashed)
		h->hashed = UINT64_MAX;
	h->size = size;
	return 0;
}

/* Put a block layout into a header. 0, or -EINVAL for a layout the format cannot hold. */
static int set_layout(struct disk_header *hd, const struct block_layout *l)
{
	if (!l)
		return 0;
	if (l->nchunks > DISK_MAX_CHUNKS || (l->codec != CODEC_RAW && !l->nchunks))
		return -EINVAL;
	hd->codec = l->codec;
	hd->stored_size = l->stored;
	hd->chunk_size = l->chunk_size;
	hd->nchunks = l->nchunks;
	for (uint32_t i = 0; i < l->nchunks; i++) {
		hd->chunk[i].len = l->chunk[i].len;
		hd->chunk[i].csum = l->chunk[i].csum;
	}
	return 0;
}

/* The checksum of the first `size` payload bytes, hashing the file again if needed. */
static int payload_checksum(struct phandle *h, uint64_t size, uint64_t *out)
{
	char *buf;
	uint64_t off = 0;

	if (h->hashed == size) {
		*out = hash_digest(h->xx);
		return 0;
	}
	buf = malloc(VERIFY_CHUNK);
	if (!buf)
		return -ENOMEM;
	hash_reset(h->xx);
	while (off < size) {
		size_t len = size - off < VERIFY_CHUNK ? (size_t)(size - off) : VERIFY_CHUNK;
		ssize_t n = io_pread_full(h->fd, buf, len, h->payload + off);

		if (n < 0) {
			free(buf);
			return -EIO;
		}
		if ((size_t)n < len)
			memset(buf + n, 0, len - (size_t)n); /* a hole at the end reads as zeros */
		hash_update(h->xx, buf, len);
		off += len;
	}
	free(buf);
	*out = hash_digest(h->xx);
	return 0;
}

static int posix_commit(struct tier_handle *th, const struct block_meta *meta, unsigned flags,
			struct tier_handle **rd)
{
	struct phandle *h = (struct phandle *)th;
	struct posix *p = posix_of(th->tier);
	char path[PATH_MAX], dir[PATH_MAX];
	struct pentry *e = calloc(1, sizeof(*e));
	bool durable = p->durable || (flags & TIER_COMMIT_DURABLE);
	uint64_t stored = meta->size, seq;
	uint32_t codec = CODEC_RAW;
	struct stat st;
	bool indexable;
	int rc = -ENOMEM;

	if (!e)
		goto err;
	/* the index must be able to take the block once it is renamed into place */
	pthread_mutex_lock(&p->lock);
	indexable = idmap_reserve(&p->map, &h->id) == 0;
	pthread_mutex_unlock(&p->lock);
	if (!indexable)
		goto err;
	rc = stop_direct(h); /* every payload byte in the file before the header describes it */
	if (rc)
		goto err_io;
	if (p->layout == LAYOUT_NATIVE) {
		struct disk_header *hd = calloc(1, sizeof(*hd));
		uint8_t *raw = malloc(DISK_HEADER_SIZE);

		if (!hd || !raw) {
			free(hd);
			free(raw);
			rc = -ENOMEM;
			goto err;
		}
		hd->id = h->id;
		hd->raw_size = hd->stored_size = meta->size;
		hd->codec = CODEC_RAW;
		hd->mtime = meta->mtime;
		hd->deadline = meta->deadline ? mono_to_wall(meta->deadline) : 0;
		rc = set_layout(hd, meta->layout);
		if (rc == 0)
			rc = payload_checksum(h, hd->stored_size, &hd->csum);
		if (rc == 0) {
			disk_header_encode(hd, raw);
			rc = (int)io_pwrite_full(h->fd, raw, DISK_HEADER_SIZE, 0);
			if (rc >= 0)
				rc = ftruncate(h->fd,
					       (off_t)(DISK_HEADER_SIZE + buf_round(hd->stored_size)))
					     ? -errno : 0;
		}
		stored = hd->stored_size;
		codec = hd->codec;
		free(hd);
		free(raw);
	} else {
		rc = ftruncate(h->fd, (off_t)meta->size) ? -errno : 0;
	}
	if (rc)
		goto err_io;
	/* the bytes before the name: a layout=ucm file has no checksum to tell a torn one, and
	 * the other hosts of a shared STORE must find every byte once they find the name (some
	 * distributed filesystems show a file's length to other clients only after a flush) */
	if (((durable && (!p->syncfs || p->layout == LAYOUT_UCM)) || p->shared_ns >= 0) &&
	    fdatasync(h->fd)) {
		rc = -errno;
		goto err_io;
	}
	if (fstat(h->fd, &st)) {
		rc = -errno;
		goto err_io;
	}
	posix_block_path(p, &h->id, path, sizeof(path));
	e->node.id = h->id;
	e->size = meta->size;
	e->stored = stored;
	e->phys = (uint64_t)st.st_blocks * 512;
	e->ino = st.st_ino;
	e->mtime = meta->mtime;
	e->atime = wall_ns();
	e->checked = mono_ns();
	e->deadline = meta->deadline;
	e->codec = codec;
	/* the rename and the index entry together: unlink_blocks() of an older version taken
	 * out of the index (expiry, eviction) never deletes this file */
	pthread_mutex_lock(&p->lock);
	if (rename(h->tmp, path)) {
		rc = -errno;
		pthread_mutex_unlock(&p->lock);
		goto err_io;
	}
	/* the rename moved the file's ctime: the index snapshot identifies files by it */
	if (fstat(h->fd, &st) == 0) {
		e->ctime = timespec_ns(&st.st_ctim);
		e->fmtime = timespec_ns(&st.st_mtim);
	}
	seq = e->seq = ++p->commit_seq;
	posix_index_put(p, e);
	pthread_mutex_unlock(&p->lock);
	h->tmp[0] = '\0';
	if (durable && p->syncfs) {
		rc = sync_upto(p, seq);
	} else if (durable) {
		counter_add(&p->syncs, 1);
		posix_shard_path(p, &h->id, dir, sizeof(dir));
		rc = posix_fsync_dir(dir) ? -EIO : 0;
	}
	if (rc) {
		if (rd)
			*rd = NULL;
		free_handle(h);
		return rc; /* published, not known to be durable: fsync it again */
	}
	if (rd && posix_open(&p->tier, &h->id, 0, rd))
		*rd = NULL; /* published; the caller reopens if it still wants it */
	free_handle(h);
	return 0;
err_io:
	rc = io_error(rc);
err:
	free(e);
	tier_posix_ops.abort(th);
	return rc;
}

static void posix_abort(struct tier_handle *th)
{
	struct phandle *h = (struct phandle *)th;

	if (h->tmp[0])
		unlink(h->tmp);
	free_handle(h);
}

/* --- other ops --------------------------------------------------------------------------- */

static int posix_remove(struct tier *t, const struct blockid *id)
{
	struct posix *p = posix_of(t);
	struct idnode *n;
	uint64_t phys = 0;
	bool live = false;

	pthread_mutex_lock(&p->lock);
	n = idmap_find(&p->map, id);
	if (n) {
		live = !is_expired(PE(n)->deadline, mono_ns());
		phys = PE(n)->phys;
		index_del(p, PE(n));
	}
	p->unlinking += phys;
	pthread_mutex_unlock(&p->lock);
	unlink_blocks(p, &(struct victim){ *id, 0, false }, 1, phys); /* whatever is there: rm */
	return live ? 0 : -ENOENT; /* an expired block is already absent */
}

static int posix_touch(struct tier *t, const struct blockid *id)
{
	struct posix *p = posix_of(t);
	int64_t now = wall_ns();
	bool tell = false;
	struct idnode *n;

	pthread_mutex_lock(&p->lock);
	n = idmap_find(&p->map, id);
	if (n && is_expired(PE(n)->deadline, mono_ns()))
		n = NULL;
	if (n) {
		PE(n)->atime = now;
		posix_lru_touch(p, PE(n));
		/* a shared STORE: the other hosts (its reclaimer) learn it from the file's atime */
		tell = p->shared_ns >= 0 && now - PE(n)->touched > SHARED_TOUCH_NS;
		if (tell)
			PE(n)->touched = now;
	}
	pthread_mutex_unlock(&p->lock);
	if (tell) {
		struct timespec ts[2] = { { .tv_sec = now / 1000000000, .tv_nsec = now % 1000000000 },
					  { .tv_nsec = UTIME_OMIT } };
		char path[PATH_MAX];

		posix_block_path(p, id, path, sizeof(path));
		if (utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW))
			log_debug("cannot set the atime of %s: %s", path, strerror(errno));
	}
	return n ? 0 : -ENOENT;
}

static void push_deadline(struct idnode *n, void *arg)
{
	if (PE(n)->deadline)
		dlheap_push(arg, PE(n)->deadline, &n->id);
}

/* Drop the stale entries of the TTL index. p->lock held. */
static void rebuild_deadlines(struct posix *p)
{
	dlheap_clear(&p->deadlines);
	idmap_foreach_safe(&p->map, push_deadline, &p->deadlines);
}

static int posix_set_deadline(struct tier *t, const struct blockid *id, int64_t deadline)
{
	struct posix *p = posix_of(t);
	char path[PATH_MAX];
	uint8_t *raw = NULL;
	struct disk_header *hd = NULL;
	struct stat st = { 0 };
	struct idnode *n;
	int fd = -1, rc = 0;

	if (posix_lookup(t, id, NULL))
		return -ENOENT; /* absent or already expired */
	if (p->layout == LAYOUT_NATIVE) {
		posix_block_path(p, id, path, sizeof(path));
		raw = malloc(DISK_HEADER_SIZE);
		hd = malloc(sizeof(*hd));
		fd = open(path, O_RDWR | O_CLOEXEC);
		if (!raw || !hd)
			rc = -ENOMEM;
		else if (fd < 0)
			rc = errno == ENOENT ? -ENOENT : -EIO;
		else if (io_pread_full(fd, raw, DISK_HEADER_SIZE, 0) != DISK_HEADER_SIZE ||
			 disk_header_decode(raw, hd))
			rc = -EIO;
		if (rc == 0) {
			hd->deadline = deadline ? mono_to_wall(deadline) : 0;
			disk_header_encode(hd, raw);
			if (io_pwrite_full(fd, raw, DISK_HEADER_SIZE, 0) != DISK_HEADER_SIZE ||
			    fstat(fd, &st))
				rc = -EIO;
		}
		if (fd >= 0)
			close(fd);
		free(raw);
		free(hd);
		if (rc)
			return rc;
	}
	pthread_mutex_lock(&p->lock);
	n = idmap_find(&p->map, id);
	if (n && p->layout == LAYOUT_NATIVE && PE(n)->ino == (uint64_t)st.st_ino) {
		PE(n)->ctime = timespec_ns(&st.st_ctim);
		PE(n)->fmtime = timespec_ns(&st.st_mtim);
	}
	if (n) {
		PE(n)->deadline = deadline;
		if (deadline)
			dlheap_push(&p->deadlines, deadline, id);
		if (p->deadlines.n > 2 * p->map.count + 64)
			rebuild_deadlines(p);
	}
	pthread_mutex_unlock(&p->lock);
	return n ? 0 : -ENOENT;
}

static void posix_sweep(struct tier *t)
{
	struct posix *p = posix_of(t);
	struct victim ids[64];
	uint64_t freed;
	int n;

	do {
		freed = 0;
		pthread_mutex_lock(&p->lock);
		n = take_expired(p, mono_ns(), ids, 64, &freed, UINT64_MAX);
		p->unlinking += freed;
		pthread_mutex_unlock(&p->lock);
		unlink_blocks(p, ids, n, freed);
	} while (n == 64);
	if (p->shared_ns >= 0) {
		posix_shared_reap(p);
		posix_reclaim(p);
	}
}

static int posix_sync(struct tier *t, const struct blockid *id)
{
	struct posix *p = posix_of(t);
	char path[PATH_MAX];
	struct idnode *n;
	uint64_t seq = 0;
	int fd, rc = 0;

	if (p->syncfs) {
		pthread_mutex_lock(&p->lock);
		n = idmap_find(&p->map, id);
		if (n) /* found at start: durable once a sync of this daemon has run */
			seq = PE(n)->seq ? PE(n)->seq : 1;
		pthread_mutex_unlock(&p->lock);
		return n ? sync_upto(p, seq) : -ENOENT;
	}
	counter_add(&p->syncs, 1);
	posix_block_path(p, id, path, sizeof(path));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ENOENT : -EIO;
	if (fdatasync(fd))
		rc = -EIO;
	close(fd);
	posix_shard_path(p, id, path, sizeof(path));
	if (rc == 0 && posix_fsync_dir(path))
		rc = -EIO;
	return rc;
}

struct list_ctx {
	struct idvec ids;
	int64_t now;
};

static void collect(struct idnode *n, void *arg)
{
	struct list_ctx *l = arg;

	if (!is_expired(PE(n)->deadline, l->now))
		idvec_push(&l->ids, &n->id); /* best effort under memory exhaustion */
}

static int posix_list_shard(struct tier *t, unsigned shard, tier_list_fn fn, void *arg)
{
	struct posix *p = posix_of(t);
	struct list_ctx l = { .now = mono_ns() };

	if (p->shared_ns >= 0)
		return posix_shared_list(p, shard, fn, arg);
	pthread_mutex_lock(&p->lock);
	idmap_shard_foreach(&p->map, shard, collect, &l);
	pthread_mutex_unlock(&p->lock);
	for (size_t i = 0; i < l.ids.n; i++)
		if (fn(&l.ids.v[i], arg))
			break;
	idvec_free(&l.ids);
	return 0;
}

/* Capacity in physical bytes given `used`: disk_size, or until the filesystem has 5% free. */
static uint64_t capacity_now(struct posix *p, uint64_t used)
{
	uint64_t total, avail, reserve, cap = __atomic_load_n(&p->capacity, __ATOMIC_RELAXED);
	struct statvfs sv;

	if (cap)
		return cap; /* disk_size= (of a shared STORE: the least of its live hosts') */
	if (statvfs(p->data, &sv))
		return UINT64_MAX;
	total = (uint64_t)sv.f_blocks * sv.f_frsize;
	avail = (uint64_t)sv.f_bavail * sv.f_frsize;
	reserve = total / 20;
	return used + (avail > reserve ? avail - reserve : 0);
}

/* The size most of the COMMON_SAMPLE most recently used blocks have (a majority vote: exact
 * when most share one size, as the blocks of one deployment do), 0 if none. p->lock held. */
#define COMMON_SAMPLE 64
static uint64_t common_size(struct posix *p)
{
	uint64_t cand = 0;
	unsigned votes = 0, n = 0;

	for (struct pentry *e = p->lru.prev; e != &p->lru && n < COMMON_SAMPLE; e = e->prev, n++) {
		if (votes == 0)
			cand = e->size;
		votes += e->size == cand ? 1 : -1u;
	}
	return cand;
}

uint64_t posix_capacity(struct posix *p, uint64_t used)
{
	return capacity_now(p, used);
}

static int posix_usage(struct tier *t, struct tier_usage *u)
{
	struct posix *p = posix_of(t);
	struct statvfs sv;

	pthread_mutex_lock(&p->lock);
	u->used = p->phys_used;
	u->blocks = p->map.count - p->expired_held;
	u->common_size = common_size(p);
	pthread_mutex_unlock(&p->lock);
	if (statvfs(p->data, &sv))
		memset(&sv, 0, sizeof(sv));
	u->fs_free = (uint64_t)sv.f_bavail * sv.f_frsize;
	u->capacity = capacity_now(p, u->used);
	return 0;
}

static void drop_entry(struct idnode *n, void *arg)
{
	idmap_remove(arg, n);
	free(PE(n));
}

static void posix_destroy(struct tier *t)
{
	struct posix *p = posix_of(t);

	posix_save_index(p);
	posix_reclaim_stop(p);
	io_engine_destroy(p->io);
	idmap_foreach_safe(&p->map, drop_entry, &p->map);
	idmap_destroy(&p->map);
	dlheap_free(&p->deadlines);
	if (p->locked && (ftruncate(p->lock_fd, 0) ||
			  pwrite(p->lock_fd, LOCK_STOPPED, strlen(LOCK_STOPPED), 0) < 0))
		log_debug("cannot mark the lock of STORE %s as stopped", p->root);
	if (p->lock_fd >= 0)
		close(p->lock_fd);
	pthread_cond_destroy(&p->unlinked);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->synced);
	pthread_mutex_destroy(&p->sync_lock);
	pthread_mutex_destroy(&p->shards_lock);
	free(p->root);
	free(p->data);
	free(p);
}

/* A shared STORE's own figures, labelled by its identity alone: every host reports the same
 * ones, so a dashboard takes one of them (max by store_id), never their sum. */
static void shared_metrics(struct posix *p, struct metrics *m)
{
	char hex[BLOCKID_HEX_LEN + 1], l[64];
	struct store_usage u;
	struct blockid id;

	memcpy(id.b, p->store_id, sizeof(id.b));
	blockid_format(&id, hex);
	snprintf(l, sizeof(l), "store_id=\"%s\"", hex);
	pthread_mutex_lock(&p->lock);
	u = p->usage;
	pthread_mutex_unlock(&p->lock);
	metrics_gauge(m, "ucmfs_store_blocks", "Blocks in the shared STORE, all hosts' (from its "
		      "reclaimer's last walk).", l, (double)u.blocks);
	metrics_gauge(m, "ucmfs_store_bytes", "Bytes the shared STORE's block files take.", l,
		      (double)u.bytes);
	metrics_gauge(m, "ucmfs_store_capacity_bytes", "Capacity of the shared STORE.", l,
		      (double)u.capacity);
	metrics_gauge(m, "ucmfs_store_usage_age_seconds", "Age of the shared STORE's figures "
		      "(-1: none yet).", l, u.at ? (double)(wall_ns() / 1000000000 - u.at) : -1.0);
	metrics_gauge(m, "ucmfs_store_reclaimer", "1 on the host that reclaims for the shared "
		      "STORE.", l, __atomic_load_n(&p->lease_fd, __ATOMIC_RELAXED) >= 0 ? 1.0 : 0.0);
}

static void posix_metrics(struct tier *t, struct metrics *m)
{
	struct posix *p = posix_of(t);
	char store[PATH_MAX + 32], l[PATH_MAX + 64], *o;
	struct tier_usage u;

	/* store="<root>", escaped as the exposition format wants */
	o = store + snprintf(store, sizeof(store), "store=\"");
	for (const char *c = p->root; *c && o < store + sizeof(store) - 4; c++) {
		if (*c == '\\' || *c == '"')
			*o++ = '\\';
		*o++ = *c == '\n' ? 'n' : *c;
	}
	*o++ = '"';
	*o = '\0';
	snprintf(l, sizeof(l), "tier=\"disk\",%s", store);
	posix_usage(t, &u);
	metrics_counter(m, "ucmfs_tier_hits_total", "Opens served by the tier.", l,
			counter_get(&p->hits));
	metrics_counter(m, "ucmfs_tier_misses_total", "Opens the tier could not serve.", l,
			counter_get(&p->misses));
	metrics_counter(m, "ucmfs_tier_bytes_in_total", "Bytes stored into the tier.", l,
			counter_get(&p->bytes_written));
	metrics_counter(m, "ucmfs_tier_bytes_out_total", "Bytes read from the tier.", l,
			counter_get(&p->bytes_read));
	metrics_counter(m, "ucmfs_tier_expirations_total", "Blocks removed at their TTL.", l,
			counter_get(&p->expirations));
	metrics_counter(m, "ucmfs_tier_evictions_total", "Blocks evicted to make room.", l,
			counter_get(&p->evictions));
	metrics_counter(m, "ucmfs_disk_syncs_total", "Flushes that made blocks durable: syncfs "
			"calls, or per-block fdatasyncs on a network filesystem.", l,
			counter_get(&p->syncs));
	if (p->shared_ns >= 0)
		metrics_counter(m, "ucmfs_disk_store_lookups_total",
				"Block files looked up on a shared STORE: for an id this host did "
				"not know, or knew for longer than shared= allows.", l,
				counter_get(&p->store_lookups));
	if (p->shared_ns >= 0)
		shared_metrics(p, m);
	metrics_gauge(m, "ucmfs_tier_blocks", "Committed blocks resident in the tier.", l,
		      (double)u.blocks);
	metrics_gauge(m, "ucmfs_tier_bytes", "Bytes the tier holds.", l, (double)u.used);
	metrics_gauge(m, "ucmfs_tier_capacity_bytes", "Capacity of the tier.", l,
		      (double)u.capacity);
	metrics_counter(m, "ucmfs_checksum_failures_total",
			"Stored bytes that did not match their checksum.", store,
			counter_get(&p->checksum_failures));
	metrics_counter(m, "ucmfs_quarantined_total", "Damaged block files moved to quarantine.",
			store, atomic_load(&p->quarantined));
	metrics_counter(m, "ucmfs_temp_files_removed_total",
			"Leftover temp files removed: at start, and those of other hosts that died.", store,
			atomic_load(&p->temp_removed));
	metrics_counter(m, "ucmfs_start_blocks_from_index_total",
			"Blocks indexed at start from the index saved at the last clean stop.",
			store, atomic_load(&p->from_snapshot));
	metrics_counter(m, "ucmfs_skipped_entries_total",
			"Entries of the store that are not block files, skipped at start.", store,
			atomic_load(&p->skipped));
	io_engine_metrics(p->io, m, store);
}

void posix_counters(struct tier *t, struct posix_counters *out)
{
	struct posix *p = posix_of(t);

	out->quarantined = atomic_load(&p->quarantined);
	out->temp_removed = atomic_load(&p->temp_removed);
	out->skipped = atomic_load(&p->skipped);
	out->from_snapshot = atomic_load(&p->from_snapshot);
}

const struct tier_ops tier_posix_ops = {
	.name = "posix",
	.destroy = posix_destroy,
	.lookup = posix_lookup,
	.present = posix_present,
	.open = posix_open,
	.read = posix_read,
	.layout = posix_layout,
	.damaged = posix_damaged,
	.stat = posix_stat,
	.close = posix_close,
	.reserve = posix_reserve,
	.write = posix_write,
	.truncate = posix_truncate,
	.commit = posix_commit,
	.abort = posix_abort,
	.remove = posix_remove,
	.touch = posix_touch,
	.set_deadline = posix_set_deadline,
	.sync = posix_sync,
	.list_shard = posix_list_shard,
	.usage = posix_usage,
	.sweep = posix_sweep,
	.metrics = posix_metrics,
};

/* --- start: lock, scan, recover ---------------------------------------------------------- */

/* Only one daemon per host uses a store at a time: the next one waits for the previous one
 * to finish writing its blocks (an unmount returns before the daemon has exited). */
static int lock_store(struct posix *p, unsigned wait_s)
{
	char path[PATH_MAX], pid[64];
	int64_t give_up = mono_ns() + (int64_t)wait_s * 1000000000;
	bool said = false;

	snprintf(path, sizeof(path), "%s/.lock.%s", p->root, p->host);
	p->lock_fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (p->lock_fd < 0) {
		int rc = -errno;

		log_err("cannot open the lock file %s of STORE %s: %s", path, p->root,
			strerror(errno));
		return rc;
	}
	while (flock(p->lock_fd, LOCK_EX | LOCK_NB)) {
		if (errno != EWOULDBLOCK) {
			int rc = -errno;

			log_err("cannot lock %s: %s", path, strerror(errno));
			return rc;
		}
		if (mono_ns() >= give_up) {
			log_err("STORE %s is in use by another ucmfs on this host", p->root);
			return -EBUSY;
		}
		if (!said)
			log_info("waiting for the previous ucmfs of STORE %s to finish", p->root);
		said = true;
		usleep(50000);
	}
	p->locked = true;
	snprintf(pid, sizeof(pid), "%d\ndisk_size=%llu\n", (int)getpid(),
		 (unsigned long long)p->capacity);
	if (ftruncate(p->lock_fd, 0) == 0 && pwrite(p->lock_fd, pid, strlen(pid), 0) < 0)
		log_debug("cannot write pid to %s", path);
	return 0;
}

/*
 * The STORE's identity: 16 random bytes in STORE/.store-id (as hex), made by the first start
 * of any host. Several hosts may start at once on a new shared STORE: each writes its own temp
 * file and links it to the name; the first link wins and everyone reads what it holds. Without
 * it (a STORE that cannot be written) the id stays zero and no index snapshot is trusted.
 */
static void store_identity(struct posix *p)
{
	char path[PATH_MAX], tmp[PATH_MAX], hex[BLOCKID_HEX_LEN + 2];
	struct blockid id;
	ssize_t n = -1;
	int fd;

	snprintf(path, sizeof(path), "%s/.store-id", p->root);
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0 && errno == ENOENT && getrandom(id.b, sizeof(id.b), 0) == sizeof(id.b)) {
		snprintf(tmp, sizeof(tmp), "%s/.store-id%s.%s.%d", p->root, TEMP_MARK, p->host,
			 (int)getpid());
		blockid_format(&id, hex);
		strcat(hex, "\n");
		fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd >= 0 && io_pwrite_full(fd, hex, strlen(hex), 0) >= 0 && fsync(fd) == 0 &&
		    link(tmp, path) && errno != EEXIST)
			log_warn("cannot create %s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		unlink(tmp);
		posix_fsync_dir(p->root);
		fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	}
	if (fd >= 0)
		n = io_pread_full(fd, hex, BLOCKID_HEX_LEN, 0);
	if (n == BLOCKID_HEX_LEN && blockid_parse(hex, BLOCKID_HEX_LEN, &id) == 0)
		memcpy(p->store_id, id.b, sizeof(p->store_id));
	else
		log_warn("STORE %s has no readable .store-id; the index saved at a stop will not be "
			 "used", p->root);
	if (fd >= 0)
		close(fd);
}

static int make_dir(const char *path)
{
	if (mkdir(path, 0700) && errno != EEXIST) {
		int rc = -errno;

		log_err("cannot create STORE directory %s: %s", path, strerror(errno));
		return rc;
	}
	return 0;
}

/* The IO engine of read handles: aio if asked for and the filesystem of STORE takes
 * O_DIRECT, else psync (said once in the log). 0 or -errno. */
static int start_io(struct posix *p, const struct posix_config *cfg)
{
	struct io_config ic = { .aio = cfg->aio, .depth = cfg->io_depth,
				.timeout_ns = cfg->io_timeout_ns,
				.test_stall_ns = cfg->io_test_stall_ns };
	int rc;

	if (ic.aio && (rc = io_probe_direct(p->data, p->host)) != 0) {
		log_info("io=aio: STORE %s does not take O_DIRECT (%s); using io=psync for it",
			 p->root, strerror(-rc));
		ic.aio = false;
	}
	if (ic.aio) {
		rc = io_engine_create(&ic, &p->io);
		if (rc == 0)
			return 0;
		log_info("io=aio: no AIO context for STORE %s (%s); using io=psync for it",
			 p->root, strerror(-rc));
		ic.aio = false;
	}
	rc = io_engine_create(&ic, &p->io);
	if (rc)
		log_err("STORE %s: cannot start its IO engine: %s", p->root, strerror(-rc));
	return rc;
}

int posix_create(const struct posix_config *cfg, struct tier **out)
{
	struct posix *p = calloc(1, sizeof(*p));
	struct stat st;
	int rc = -ENOMEM;

	if (!p)
		return -ENOMEM;
	p->lock_fd = -1;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->unlinked, NULL);
	pthread_mutex_init(&p->sync_lock, NULL);
	pthread_cond_init(&p->synced, NULL);
	pthread_mutex_init(&p->shards_lock, NULL);
	p->commit_seq = 1; /* blocks found at start count as commit 1 */
	idmap_init(&p->map);
	p->lru.next = p->lru.prev = &p->lru;
	p->layout = cfg->layout;
	p->durable = cfg->durable;
	p->capacity = p->own_capacity = cfg->capacity;
	p->lease_fd = -1;
	p->walk_shard = BLOCKID_SHARDS;
	p->shared_ns = cfg->shared ? cfg->shared_check_ms * 1000000 : -1;
	if (gethostname(p->host, sizeof(p->host) - 1) || !p->host[0])
		snprintf(p->host, sizeof(p->host), "localhost");
	for (char *c = p->host; *c; c++)
		if (*c == '.' || *c == '/')
			*c = '_';
	if (strlen(cfg->root) > PATH_MAX - 256) {
		log_err("STORE path is too long: %.64s...", cfg->root);
		rc = -ENAMETOOLONG;
		goto err;
	}
	rc = make_dir(cfg->root);
	if (rc)
		goto err;
	if (stat(cfg->root, &st) || !S_ISDIR(st.st_mode)) {
		log_err("STORE %s is not a directory", cfg->root);
		rc = -ENOTDIR;
		goto err;
	}
	/* absolute: the daemon changes its directory to / when it starts serving */
	rc = -ENOMEM;
	p->root = realpath(cfg->root, NULL);
	if (!p->root)
		goto err;
	if (p->layout == LAYOUT_NATIVE) {
		if (asprintf(&p->data, "%s/data", p->root) < 0) {
			p->data = NULL;
			goto err;
		}
	} else {
		p->data = strdup(p->root);
		if (!p->data)
			goto err;
	}
	rc = make_dir(p->data);
	if (rc == 0 && (stat(p->data, &st) || !S_ISDIR(st.st_mode))) {
		rc = -ENOTDIR;
		log_err("STORE %s: %s is not a directory", p->root, p->data);
	}
	if (rc == 0 && access(p->data, R_OK | W_OK | X_OK)) {
		rc = -errno;
		log_err("STORE %s is not writable: %s", p->data, strerror(errno));
	}
	if (rc == 0)
		rc = lock_store(p, cfg->lock_wait_s);
	if (rc == 0)
		store_identity(p);
	p->syncfs = syncfs_is_durable(p->data);
	if (rc == 0)
		rc = start_io(p, cfg);
	if (rc == 0)
		rc = posix_scan(p);
	if (rc)
		goto err;
	p->tier.ops = &tier_posix_ops;
	p->tier.priv = p;
	p->opened = true;
	*out = &p->tier;
	return 0;
err:
	p->tier.priv = p;
	posix_destroy(&p->tier);
	return rc;
}

/* The disk tier by name: the STORE's directories (several: striped over them), disk_size=,
 * layout=, io=, io_depth=, io_timeout= and durable of its options. A directory that cannot be
 * opened is logged by posix_create() (err stays empty: one line, not two). */
static int posix_plugin_create(const struct tier_setup *s, struct tier **out)
{
	const struct ucm_options *o = s->options;
	struct posix_config xc = {
		.layout = o->layout,
		.durable = o->durable,
		.capacity = o->disk_size,
		.lock_wait_s = 120,
		.aio = o->io == IO_AIO,
		.io_depth = o->io_depth ? o->io_depth : AIO_DEPTH,
		.io_timeout_ns = o->io_timeout_ms * 1000000,
		.shared = o->shared_ms >= 0,
		.shared_check_ms = o->shared_ms,
	};
	struct tier *dirs[UCM_MAX_STORES];
	int rc = 0;

	if (o->nstores == 0) {
		snprintf(s->err, s->errlen, "posix needs a STORE directory, not 'none'");
		return -EINVAL;
	}
	for (int i = 0; i < o->nstores && rc == 0; i++) {
		xc.root = o->stores[i];
		rc = posix_create(&xc, &dirs[i]); /* logs why it fails */
		if (rc) {
			while (i-- > 0)
				tier_destroy(dirs[i]);
		}
	}
	if (rc == 0 && o->nstores == 1)
		*out = dirs[0];
	else if (rc == 0 && (rc = stripe_create(dirs, o->nstores, out)))
		snprintf(s->err, s->errlen, "posix cannot stripe its STORE: %s", strerror(-rc));
	return rc;
}

const struct tier_plugin tier_posix_plugin = {
	.abi = UCMFS_TIER_ABI,
	.name = "posix",
	.keys = (const char *const[]){ "path", "disk_size", "layout", "io", "io_depth",
				       "io_timeout", NULL },
	.kind = TIER_KIND_STORE,
	.create = posix_plugin_create,
};
