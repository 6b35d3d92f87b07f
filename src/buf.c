#include "src/buf.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/*
 * Large buffers (MMAP_MIN and up) are anonymous mappings of their own, so that growing one
 * moves page tables, not bytes. Small ones come from slabs: one mapping per small block would
 * soon exhaust the process's map count (vm.max_map_count, 65530) with hundreds of thousands
 * of blocks, and a page-aligned allocation from malloc costs about a page of padding each
 * (a 4 KiB block took 8 KiB).
 *
 * A slab is an ARENA-aligned mapping of ARENA bytes: its first page holds its header, the
 * rest is cut into slots of one size class (a whole number of pages below MMAP_MIN). A free
 * is given the size, hence the class; the slab is the address rounded down to ARENA. Each
 * class keeps its slabs that have free slots on a list under its own lock; a slab that
 * becomes empty is unmapped, or, if it is the class's last one with free slots, keeps its
 * mapping and gives its pages back (so an idle class costs no memory).
 */
#define MMAP_MIN BUF_FILE_MIN
#define ARENA (2u << 20)
#define NCLASS (MMAP_MIN / BUF_ALIGN)

struct slot {
	struct slot *next;
};

struct slab {
	struct slab *prev, *next; /* on its class's list while it has a free slot */
	struct slot *free;        /* free slots */
	uint32_t used, nslots;
	uint32_t fresh;           /* slots [fresh, nslots) have never been handed out */
	bool listed;
};

static struct slab_class {
	pthread_mutex_t lock;
	struct slab *partial;
	uint32_t npartial;
} classes[NCLASS] = { [0 ... NCLASS - 1] = { .lock = PTHREAD_MUTEX_INITIALIZER } };

static size_t mapped_len(size_t size)
{
	return buf_round(size ? size : 1);
}

static bool mapped(size_t size)
{
	return mapped_len(size) >= MMAP_MIN;
}

static char *slot_addr(struct slab *s, size_t len, uint32_t i)
{
	return (char *)s + BUF_ALIGN + (size_t)i * len;
}

static void list_add(struct slab_class *c, struct slab *s)
{
	s->prev = NULL;
	s->next = c->partial;
	if (c->partial)
		c->partial->prev = s;
	c->partial = s;
	s->listed = true;
	c->npartial++;
}

static void list_del(struct slab_class *c, struct slab *s)
{
	if (s->prev)
		s->prev->next = s->next;
	else
		c->partial = s->next;
	if (s->next)
		s->next->prev = s->prev;
	s->listed = false;
	c->npartial--;
}

/* A fresh ARENA-aligned slab of slots of len bytes, or NULL. */
static struct slab *slab_new(size_t len)
{
	char *m = mmap(NULL, 2 * ARENA, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uintptr_t a;
	struct slab *s;

	if (m == MAP_FAILED)
		return NULL;
	a = ((uintptr_t)m + ARENA - 1) & ~(uintptr_t)(ARENA - 1);
	if (a > (uintptr_t)m)
		munmap(m, a - (uintptr_t)m);
	munmap((char *)a + ARENA, (uintptr_t)m + 2 * ARENA - a - ARENA);
	s = (struct slab *)a;
	s->nslots = (uint32_t)((ARENA - BUF_ALIGN) / len);
	POISON(slot_addr(s, len, 0), (size_t)s->nslots * len);
	return s;
}

static void *slab_alloc(size_t len)
{
	struct slab_class *c = &classes[len / BUF_ALIGN - 1];
	struct slab *s;
	char *p;
	bool fresh;

	pthread_mutex_lock(&c->lock);
	s = c->partial;
	if (!s) {
		s = slab_new(len);
		if (!s) {
			pthread_mutex_unlock(&c->lock);
			return NULL;
		}
		list_add(c, s);
	}
	fresh = !s->free;
	if (fresh) {
		p = slot_addr(s, len, s->fresh++);
		UNPOISON(p, len);
	} else {
		p = (char *)s->free;
		UNPOISON(p, len);
		s->free = s->free->next;
	}
	if (++s->used == s->nslots)
		list_del(c, s);
	pthread_mutex_unlock(&c->lock);
	if (!fresh)
		memset(p, 0, len); /* a fresh slot is still the mapping's zero page */
	return p;
}

static void slab_free(void *p, size_t len)
{
	struct slab_class *c = &classes[len / BUF_ALIGN - 1];
	struct slab *s = (struct slab *)((uintptr_t)p & ~(uintptr_t)(ARENA - 1));
	struct slot *f = p;

	pthread_mutex_lock(&c->lock);
	f->next = s->free;
	s->free = f;
	POISON((char *)p + sizeof(*f), len - sizeof(*f));
	if (!s->listed)
		list_add(c, s);
	if (--s->used == 0 && c->npartial > 1) {
		list_del(c, s);
		munmap(s, ARENA);
	} else if (s->used == 0) {
		/* the class's last slab: keep the mapping, give its pages back; every slot is
		 * fresh (zero) again */
		s->free = NULL;
		s->fresh = 0;
		UNPOISON(slot_addr(s, len, 0), (size_t)s->nslots * len);
		madvise(slot_addr(s, len, 0), (size_t)s->nslots * len, MADV_DONTNEED);
		POISON(slot_addr(s, len, 0), (size_t)s->nslots * len);
	}
	pthread_mutex_unlock(&c->lock);
}

/*
 * A mapping of BUF_HUGE or more bytes starts on a BUF_HUGE boundary and asks for transparent
 * huge pages (MADV_HUGEPAGE: the machine's setting is usually "madvise"): its first touch then
 * costs one fault per 2 MiB instead of one per 4 KiB. A block loaded from disk is written
 * into a fresh buffer, and on a virtual machine the 4096 faults of a 16 MiB block took longer
 * than reading it from the disk (filling a fresh 16 MiB mapping: 55 ms, 4 ms with huge pages;
 * docs/BENCHMARKS.md "Fresh memory"). Where huge pages are not available the advice fails
 * and nothing changes.
 */
void *buf_io_alloc(size_t n)
{
	void *p;

	if (posix_memalign(&p, n >= BUF_HUGE ? BUF_HUGE : BUF_ALIGN, n))
		return NULL;
	if (n >= BUF_HUGE)
		madvise(p, n, MADV_HUGEPAGE);
	return p;
}

static void *map_huge(size_t len, bool populate)
{
	char *m = mmap(NULL, len + BUF_HUGE, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uintptr_t a;

	if (m == MAP_FAILED)
		return NULL;
	a = ((uintptr_t)m + BUF_HUGE - 1) & ~(uintptr_t)(BUF_HUGE - 1);
	if (a > (uintptr_t)m)
		munmap(m, a - (uintptr_t)m);
	munmap((char *)a + len, (uintptr_t)m + BUF_HUGE - a);
	madvise((void *)a, len, MADV_HUGEPAGE);
#ifdef MADV_POPULATE_WRITE
	if (populate)
		madvise((void *)a, len, MADV_POPULATE_WRITE);
#else
	(void)populate;
#endif
	return (void *)a;
}

/*
 * Buffers as files (buf_use_files()). Every mapped buffer is then a file of a private tmpfs,
 * mapped shared, and named after the address of its mapping ("7f2a4c000000"): the name is
 * unique while the mapping lives, and buf_file() finds the file from the pointer alone, with
 * no table to keep. A name is taken only by whoever holds the mapping at that address: a file
 * is created after its address is reserved, unlinked before its mapping goes, and renamed to
 * its new place (reserved first) before mremap() moves it there.
 */
static int files_dir = -1;             /* the private tmpfs's root; -1: anonymous buffers */
static enum buf_kind kind = BUF_ANON;

static void file_name(const void *p, char name[32])
{
	snprintf(name, 32, "%lx", (unsigned long)(uintptr_t)p);
}

static bool as_file(size_t size)
{
	return files_dir >= 0 && mapped(size);
}

/* An unused range of len bytes (aligned to BUF_HUGE if it is that large), mapped PROT_NONE
 * until a file is mapped over it; NULL if the address space is full. */
static void *reserve_range(size_t len)
{
	size_t align = len >= BUF_HUGE ? BUF_HUGE : BUF_ALIGN;
	char *m = mmap(NULL, len + align - BUF_ALIGN, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	uintptr_t a;

	if (m == MAP_FAILED)
		return NULL;
	a = ((uintptr_t)m + align - 1) & ~(uintptr_t)(align - 1);
	if (a > (uintptr_t)m)
		munmap(m, a - (uintptr_t)m);
	if ((uintptr_t)m + len + align - BUF_ALIGN > a + len)
		munmap((char *)a + len, (uintptr_t)m + len + align - BUF_ALIGN - a - len);
	return (void *)a;
}

/*
 * Give a buffer file its pages now, touched: pwrite() of zeros. fallocate() would allocate
 * them without a touch, and tmpfs zeroes such a page at its first fault, which on a virtual
 * machine is the slow first touch (docs/BENCHMARKS.md "Fresh memory"): the writer of the
 * block paid it. pwrite takes no lock of the address space (MADV_POPULATE_WRITE would hold
 * mmap_lock for the whole buffer, and every mmap, munmap and page fault of the daemon's other
 * threads would wait for it: a cold read took 220 ms while the prefaulter ran). Its source is
 * never written, so it reads the kernel's zero page. Each write covers a whole huge page: a
 * write of part of a new one has tmpfs zero the rest first (a memset, then the copy over it:
 * half of the prefaulter's time went to that memset with 1 MiB writes). 0 or -1.
 */
static int file_populate(int fd, size_t len)
{
	static char zeros[BUF_HUGE];

	for (size_t off = 0; off < len;) {
		size_t n = len - off < sizeof(zeros) ? len - off : sizeof(zeros);
		ssize_t w = pwrite(fd, zeros, n, (off_t)off);

		if (w <= 0)
			return -1;
		off += (size_t)w;
	}
	return 0;
}

static void *file_alloc(size_t len, bool populate)
{
	char name[32];
	void *a = reserve_range(len), *p;
	int fd;

	if (!a)
		return NULL;
	file_name(a, name);
	fd = openat(files_dir, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		munmap(a, len);
		return NULL;
	}
	/* populated, mapping its pages later costs a minor fault per 2 MiB */
	if (ftruncate(fd, (off_t)len) || (populate && file_populate(fd, len)))
		p = MAP_FAILED;
	else
		p = mmap(a, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		unlinkat(files_dir, name, 0);
		munmap(a, len);
		return NULL;
	}
	return p;
}

static void file_free(void *p, size_t len)
{
	char name[32];

	file_name(p, name);
	unlinkat(files_dir, name, 0);
	munmap(p, len);
}

/* Grow or shrink a file buffer from ol to nl bytes (both whole pages, both mapped sizes). */
static void *file_resize(void *p, size_t ol, size_t nl)
{
	char name[32], to[32];
	void *dst, *q;
	int fd;

	file_name(p, name);
	fd = openat(files_dir, name, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	if (nl < ol) {
		q = mremap(p, ol, nl, 0);
		if (q != MAP_FAILED && ftruncate(fd, (off_t)nl))
			q = p; /* the tail stays allocated: harmless */
		close(fd);
		return q == MAP_FAILED ? NULL : q;
	}
	dst = reserve_range(nl);
	file_name(dst, to);
	if (!dst || ftruncate(fd, (off_t)nl) || renameat(files_dir, name, files_dir, to)) {
		if (dst)
			munmap(dst, nl);
		close(fd);
		return NULL;
	}
	close(fd);
	q = mremap(p, ol, nl, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
	if (q == MAP_FAILED) {
		renameat(files_dir, to, files_dir, name);
		munmap(dst, nl);
		return NULL;
	}
	return q;
}

static int mount_private_tmpfs(bool huge, char *why, size_t len)
{
	int fs = fsopen("tmpfs", FSOPEN_CLOEXEC), mnt, rc;
	const char *step = "fsopen";

	if (fs < 0)
		goto fail;
	step = "fsconfig";
	/* no size or inode limit of its own: the memory tier counts its bytes */
	if (fsconfig(fs, FSCONFIG_SET_STRING, "size", "0", 0) ||
	    fsconfig(fs, FSCONFIG_SET_STRING, "nr_inodes", "0", 0) ||
	    fsconfig(fs, FSCONFIG_SET_STRING, "mode", "0700", 0) ||
	    (huge && fsconfig(fs, FSCONFIG_SET_STRING, "huge", "within_size", 0)) ||
	    fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0))
		goto fail;
	step = "fsmount";
	mnt = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID |
					   MOUNT_ATTR_NOEXEC);
	if (mnt < 0)
		goto fail;
	close(fs);
	files_dir = mnt;
	kind = huge ? BUF_TMPFS_HUGE : BUF_TMPFS;
	return 0;
fail:
	rc = -errno;
	snprintf(why, len, "a private tmpfs: %s: %s", step, strerror(errno));
	if (fs >= 0)
		close(fs);
	return rc;
}

int buf_use_files(char *why, size_t len)
{
	if (files_dir >= 0)
		return 0;
	if (mount_private_tmpfs(true, why, len) == 0)
		return 0;
	return mount_private_tmpfs(false, why, len);
}

enum buf_kind buf_kind(void)
{
	return kind;
}

const char *buf_kind_name(enum buf_kind k)
{
	switch (k) {
	case BUF_TMPFS:
		return "tmpfs";
	case BUF_TMPFS_HUGE:
		return "tmpfs-huge";
	default:
		return "anon";
	}
}

int buf_file(void *p, size_t cap, size_t size)
{
	char name[32];
	struct stat st;
	int fd, rc;

	if (!p || !as_file(cap) || size > mapped_len(cap))
		return -ENOTSUP;
	file_name(p, name);
	fd = openat(files_dir, name, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) || ((uint64_t)st.st_size != size && ftruncate(fd, (off_t)size))) {
		rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

int buf_reclaim(void *p, size_t cap)
{
	size_t len = mapped_len(cap);
	char name[32];
	int fd, rc = 0;

	if (!p || !as_file(cap)) {
		buf_free(p, cap);
		return -ENOTSUP;
	}
	file_name(p, name);
	/* our own mapping holds the file too: swap it for an empty range at the same place */
	if (mmap(p, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
		 0) == MAP_FAILED) {
		rc = -errno;
		file_free(p, len);
		return rc;
	}
	fd = openat(files_dir, name, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		rc = -errno;
	/* a write lease is granted only to the file's one opener: nobody else reads or maps it
	 * (a mapping keeps its file open) */
	else if (fcntl(fd, F_SETLEASE, F_WRLCK))
		rc = errno == EAGAIN ? -EBUSY : -errno;
	else
		fcntl(fd, F_SETLEASE, F_UNLCK);
	/* whole again (buf_file() cut it to the block's size), and mapped as before */
	if (rc == 0 && ftruncate(fd, (off_t)len))
		rc = -errno;
	if (rc == 0 &&
	    mmap(p, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED)
		rc = -errno;
	if (fd >= 0)
		close(fd);
	if (rc)
		file_free(p, len); /* unlinked: its pages stay with those who map it */
	return rc;
}

void *buf_alloc(size_t size, bool populate)
{
	size_t len = mapped_len(size);
	void *p;

	if (!mapped(size))
		return slab_alloc(len);
	if (as_file(size))
		return file_alloc(len, populate);
	if (len >= BUF_HUGE)
		return map_huge(len, populate);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | (populate ? MAP_POPULATE : 0), -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

void *buf_resize(void *p, size_t old_size, size_t new_size)
{
	void *q;

	if (!p)
		return buf_alloc(new_size, false);
	if (mapped_len(old_size) == mapped_len(new_size))
		return p;
	if (as_file(old_size) && as_file(new_size))
		return file_resize(p, mapped_len(old_size), mapped_len(new_size));
	if (mapped(old_size) && mapped(new_size)) {
		size_t ol = mapped_len(old_size), nl = mapped_len(new_size);

		if (nl > ol && nl >= BUF_HUGE) {
			/* a block written without a declared size grows 1, 2, 4, ... MiB: it goes
			 * to a place of its own on a huge-page boundary, with huge pages, so that
			 * each 2 MiB it grows into takes one fault. Under 2 MiB its bytes are
			 * copied (their small pages would keep the first 2 MiB from being one huge
			 * page); from 2 MiB on its pages move as they are. */
			void *dst = map_huge(nl, false);

			if (dst && ol < BUF_HUGE) {
				memcpy(dst, p, ol);
				munmap(p, ol);
				return dst;
			}
			if (dst) {
				q = mremap(p, ol, nl, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
				if (q != MAP_FAILED) {
					/* the move kept p's advice */
					madvise(q, nl, MADV_HUGEPAGE);
					return q;
				}
				munmap(dst, nl);
			}
		}
		q = mremap(p, ol, nl, MREMAP_MAYMOVE);
		return q == MAP_FAILED ? NULL : q;
	}
	/* between slab classes, or to or from a mapping: copy what fits */
	q = buf_alloc(new_size, false);
	if (!q)
		return NULL;
	memcpy(q, p, mapped_len(old_size) < mapped_len(new_size) ? mapped_len(old_size)
								 : mapped_len(new_size));
	buf_free(p, old_size);
	return q;
}

void buf_free(void *p, size_t size)
{
	if (!p)
		return;
	if (as_file(size))
		file_free(p, mapped_len(size));
	else if (mapped(size))
		munmap(p, mapped_len(size));
	else
		slab_free(p, mapped_len(size));
}
