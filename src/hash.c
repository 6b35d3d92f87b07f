#include "src/hash.h"

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#define DECLARE(v)                                                                  \
	uint64_t hash64_##v(const void *p, size_t len);                            \
	void hash_reset_##v(struct hash_state *st);                                \
	void hash_update_##v(struct hash_state *st, const void *p, size_t len);    \
	uint64_t hash_digest_##v(const struct hash_state *st);

DECLARE(baseline)
#ifdef UCM_HASH_AVX2
DECLARE(avx2)
#endif

struct variant {
	const char *name;
	uint64_t (*hash64)(const void *, size_t);
	void (*reset)(struct hash_state *);
	void (*update)(struct hash_state *, const void *, size_t);
	uint64_t (*digest)(const struct hash_state *);
};

static const struct variant baseline = { "baseline", hash64_baseline, hash_reset_baseline,
					 hash_update_baseline, hash_digest_baseline };
#ifdef UCM_HASH_AVX2
static const struct variant avx2 = { "avx2", hash64_avx2, hash_reset_avx2, hash_update_avx2,
				     hash_digest_avx2 };
#endif

static _Atomic(const struct variant *) chosen;

static const struct variant *pick(void)
{
	const struct variant *v = atomic_load_explicit(&chosen, memory_order_relaxed);

	if (v)
		return v;
	v = &baseline;
#ifdef UCM_HASH_AVX2
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx2"))
		v = &avx2;
#endif
	atomic_store_explicit(&chosen, v, memory_order_relaxed);
	return v;
}

uint64_t hash64(const void *p, size_t len)
{
	return pick()->hash64(p, len);
}

struct hash_state *hash_new(void)
{
	struct hash_state *st = aligned_alloc(alignof(struct hash_state), sizeof(*st));

	if (st)
		hash_reset(st);
	return st;
}

void hash_reset(struct hash_state *st)
{
	pick()->reset(st);
}

void hash_update(struct hash_state *st, const void *p, size_t len)
{
	pick()->update(st, p, len);
}

uint64_t hash_digest(const struct hash_state *st)
{
	return pick()->digest(st);
}

const char *hash_variant(void)
{
	return pick()->name;
}
