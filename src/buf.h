/*
 * Block buffers: 4 KiB-aligned (usable for O_DIRECT), sized in whole pages, able to grow in
 * place. Large buffers are anonymous mappings, so growing one moves page tables, not bytes.
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

/* Free p (NULL is fine); size is the size given to buf_alloc()/buf_resize(). */
void buf_free(void *p, size_t size);

#endif
