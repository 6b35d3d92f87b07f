/*
 * XXH3-64, the checksum of every stored byte (DESIGN.md section 5: chunk and payload
 * checksums), computed with the widest vectors the CPU has.
 *
 * The shared libxxhash is built for any x86-64 (SSE2); with AVX2 the same hash of bytes just
 * read from disk runs about twice as fast (15.6 against 29.5 GB/s here), and a load checks
 * every byte it reads: the checksum was over half of the daemon's time in a prefetch
 * (docs/BENCHMARKS.md). src/hash_impl.c is compiled once for the baseline and once for AVX2;
 * the first call picks one by what the CPU says. The values are the same either way.
 */
#ifndef UCM_HASH_H
#define UCM_HASH_H

#include <stddef.h>
#include <stdint.h>

uint64_t hash64(const void *p, size_t len);

/* A running hash of bytes given in order (XXH3-64 of all of them). */
struct hash_state {
	_Alignas(64) unsigned char opaque[640];
};

/* A new state, reset (free() it), or NULL. */
struct hash_state *hash_new(void);
void hash_reset(struct hash_state *st);
void hash_update(struct hash_state *st, const void *p, size_t len);
uint64_t hash_digest(const struct hash_state *st);

/* Which variant the process uses: "avx2" or "baseline". */
const char *hash_variant(void);

#endif
