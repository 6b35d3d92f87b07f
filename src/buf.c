#include "src/buf.h"

#include <sys/mman.h>

static size_t mapped_len(size_t size)
{
	return buf_round(size ? size : 1);
}

void *buf_alloc(size_t size, bool populate)
{
	void *p = mmap(NULL, mapped_len(size), PROT_READ | PROT_WRITE,
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
	q = mremap(p, mapped_len(old_size), mapped_len(new_size), MREMAP_MAYMOVE);
	return q == MAP_FAILED ? NULL : q;
}

void buf_free(void *p, size_t size)
{
	if (p)
		munmap(p, mapped_len(size));
}
