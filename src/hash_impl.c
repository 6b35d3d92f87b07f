/*
 * One variant of src/hash.h's functions, named hash_<what>_<HASH_VARIANT>: meson compiles this
 * file once per variant, with the variant's instruction set (-mavx2 for avx2), and
 * xxhash.h picks its vector code from the flags the compiler was given.
 */
#include <stdalign.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "src/hash.h"

#define CAT(a, b) a##_##b
#define NAME(what, variant) CAT(what, variant)
#define FN(what) NAME(what, HASH_VARIANT)

_Static_assert(sizeof(XXH3_state_t) <= sizeof(struct hash_state), "hash_state too small");
_Static_assert(alignof(XXH3_state_t) <= alignof(struct hash_state), "hash_state misaligned");

uint64_t FN(hash64)(const void *p, size_t len);
void FN(hash_reset)(struct hash_state *st);
void FN(hash_update)(struct hash_state *st, const void *p, size_t len);
uint64_t FN(hash_digest)(const struct hash_state *st);

uint64_t FN(hash64)(const void *p, size_t len)
{
	return XXH3_64bits(p, len);
}

void FN(hash_reset)(struct hash_state *st)
{
	XXH3_state_t *x = (XXH3_state_t *)(void *)st;

	XXH3_INITSTATE(x);
	XXH3_64bits_reset(x);
}

void FN(hash_update)(struct hash_state *st, const void *p, size_t len)
{
	XXH3_64bits_update((XXH3_state_t *)(void *)st, p, len);
}

uint64_t FN(hash_digest)(const struct hash_state *st)
{
	return XXH3_64bits_digest((const XXH3_state_t *)(const void *)st);
}
