#include "src/blockid.h"

#include <errno.h>
#include <stdlib.h>

#include "src/hash.h"

/* Value plus one of each lowercase hex digit, 0 for every other byte. */
static const signed char hexval[256] = {
	['0'] = 0 + 1, ['1'] = 1 + 1, ['2'] = 2 + 1, ['3'] = 3 + 1, ['4'] = 4 + 1,
	['5'] = 5 + 1, ['6'] = 6 + 1, ['7'] = 7 + 1, ['8'] = 8 + 1, ['9'] = 9 + 1,
	['a'] = 10 + 1, ['b'] = 11 + 1, ['c'] = 12 + 1, ['d'] = 13 + 1, ['e'] = 14 + 1,
	['f'] = 15 + 1,
};

int blockid_parse(const char *s, size_t len, struct blockid *out)
{
	const unsigned char *u = (const unsigned char *)s;

	if (len != BLOCKID_HEX_LEN)
		return -EINVAL;
	for (size_t i = 0; i < BLOCKID_LEN; i++) {
		int hi = hexval[u[2 * i]] - 1, lo = hexval[u[2 * i + 1]] - 1;

		if ((hi | lo) < 0)
			return -EINVAL;
		out->b[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

int blockid_parse_name(const char *name, struct blockid *out)
{
	return blockid_parse(name, strnlen(name, BLOCKID_HEX_LEN + 1), out);
}

void blockid_format(const struct blockid *id, char out[BLOCKID_HEX_LEN + 1])
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < BLOCKID_LEN; i++) {
		out[2 * i] = digits[id->b[i] >> 4];
		out[2 * i + 1] = digits[id->b[i] & 15];
	}
	out[BLOCKID_HEX_LEN] = '\0';
}

uint64_t blockid_hash(const struct blockid *id)
{
	return hash64(id->b, BLOCKID_LEN);
}

static int cmp_ids(const void *a, const void *b)
{
	return blockid_cmp(a, b);
}

void blockid_sort(struct blockid *ids, size_t n)
{
	if (n > 1)
		qsort(ids, n, sizeof(*ids), cmp_ids);
}

int idvec_push(struct idvec *iv, const struct blockid *id)
{
	if (iv->n == iv->cap) {
		size_t cap = iv->cap ? iv->cap * 2 : 64;
		struct blockid *v = realloc(iv->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		iv->v = v;
		iv->cap = cap;
	}
	iv->v[iv->n++] = *id;
	return 0;
}

void idvec_free(struct idvec *iv)
{
	free(iv->v);
	iv->v = NULL;
	iv->n = iv->cap = 0;
}
