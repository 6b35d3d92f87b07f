/*
 * Block buffers: 4 KiB-aligned (usable for O_DIRECT), sized in whole pages, able to grow in
 * place. Large buffers are mappings of their own, so growing one moves page tables, not bytes:
 * anonymous memory, or, once buf_use_files() has succeeded, each one a file of a private tmpfs
 * that the kernel can also read directly (FUSE passthrough: buf_file()).
 */
#ifndef UCM_BUF_H
#define UCM_BUF_H

#include <stdbool.h>
#include <stddef.h>

#define BUF_ALIGN 4096
/* Buffers of this size and up are aligned to it and use transparent huge pages (buf.c). */
#define BUF_HUGE (2u << 20)

static inline size_t buf_round(size_t n)
{
	return (n + BUF_ALIGN - 1) & ~(size_t)(BUF_ALIGN - 1);
}

/* A zero-filled buffer of buf_round(size) bytes (at least one page), or NULL. With populate,
 * the kernel faults every page in at once (cheaper than a fault per page when all of it will
 * be written soon; costly when the caller wants its first bytes quickly). */
void *buf_alloc(size_t size, bool populate);

/* Grow or shrink p from old_size to new_size bytes, keeping the contents; NULL on failure
 * (p is then left as it was). Both sizes are the ones given to buf_alloc()/buf_resize(). */
void *buf_resize(void *p, size_t old_size, size_t new_size);

/* Free p (NULL is fine); size is the size given to buf_alloc()/buf_resize(). A buffer that
 * buf_file() exposed keeps its bytes for whoever still maps its file. */
void buf_free(void *p, size_t size);

/* Working memory of n bytes that the disk reads into or writes from (O_DIRECT), freed with
 * free(), or NULL: 4 KiB-aligned, and from BUF_HUGE on aligned to it and made of transparent
 * huge pages, so that a request is a few pieces of memory for the disk, not one per page. */
void *buf_io_alloc(size_t n);

/* What large buffers are made of. */
enum buf_kind {
	BUF_ANON,       /* anonymous memory (transparent huge pages where madvise allows) */
	BUF_TMPFS,      /* files of a private tmpfs, 4 KiB pages */
	BUF_TMPFS_HUGE, /* files of a private tmpfs mounted huge=within_size: 2 MiB pages */
};

/*
 * From now on, make every large buffer (BUF_FILE_MIN bytes and up) a file of a tmpfs that this
 * process mounts for itself, never attached to any directory (fsopen/fsmount: no system
 * setting is read or changed; it needs CAP_SYS_ADMIN) and gone with the process. Call before
 * the first buf_alloc(). The tmpfs asks for 2 MiB pages (huge=within_size) and does without
 * them if the kernel refuses. 0, or -errno with a reason in why; buffers stay anonymous then.
 */
#define BUF_FILE_MIN (256u << 10)
int buf_use_files(char *why, size_t len);

enum buf_kind buf_kind(void);
const char *buf_kind_name(enum buf_kind kind);

/*
 * A new descriptor (O_RDWR, close-on-exec; the caller closes it) of the file that holds the
 * buffer p of cap bytes, cut to `size` bytes (size <= cap) so that it reads as exactly those
 * bytes. From then on the file is the caller's to hand out: the caller must not write into p
 * again nor give it to buf_resize(); buf_free() unlinks the file and leaves its pages to those
 * that still map it. -ENOTSUP if p is not a file (anonymous memory, or a small buffer).
 */
int buf_file(void *p, size_t cap, size_t size);

/*
 * Take back a buffer of cap bytes whose file buf_file() handed out, if nobody else has that
 * file open or mapped any more (the kernel grants a write lease on it): 0, and p is an
 * ordinary buffer again (holding stale bytes). Otherwise -EBUSY (or another -errno) and p has
 * been freed as by buf_free(). Someone who may still get the file (a kernel backing id, an
 * open descriptor the caller knows of) must be gone first: only one who has it already is
 * seen.
 */
int buf_reclaim(void *p, size_t cap);

#endif
