#include "src/buf.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/*
 * Small buffers come from the allocator (page-aligned), large ones are anonymous mappings:
 * one mapping per small block would soon exhaust the process's map count
 * (vm.max_map_count, 65530) with hundreds of thousands of blocks.
 */
#define MMAP_MIN (256u << 10)

static size_t mapped_len(size_t size)
{
	return buf_round(size ? size : 1);
}

static bool mapped(size_t size)
{
	return mapped_len(size) >= MMAP_MIN;
}

void *buf_alloc(size_t size, bool populate)
{
	size_t len = mapped_len(size);
	void *p;

	if (!mapped(size)) {
		p = aligned_alloc(BUF_ALIGN, len);
		if (p)
			memset(p, 0, len);
		return p;
	}
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
	if (mapped(old_size) && mapped(new_size)) {
		q = mremap(p, mapped_len(old_size), mapped_len(new_size), MREMAP_MAYMOVE);
		return q == MAP_FAILED ? NULL : q;
	}
	/* to or from the allocator: copy what fits */
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
	if (mapped(size))
		munmap(p, mapped_len(size));
	else
		free(p);
}
