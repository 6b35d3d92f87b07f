/*
 * kvgen: reproducible bf16 data shaped like the K/V activations that an inference engine
 * stores in a KV-cache block. Benchmarks and tests use it instead of random bytes (which no
 * codec can shrink) or zeros (which every codec shrinks to nothing).
 *
 * The buffer is a sequence of planes, one per (layer, K or V): KVGEN_TOKENS tokens of
 * KVGEN_CHANNELS channels (8 KV heads of dimension 128), row-major, little-endian bf16. Each
 * plane draws per-channel parameters: a scale log-uniform over two orders of magnitude, a few
 * outlier channels (about 1 in 64) ten to thirty times larger with a constant offset, as K
 * caches show; the values are scale * a normal-like variate (+ offset). A buffer whose size is
 * not a multiple of a plane ends with a partial plane; an odd last byte is the low byte of a
 * value.
 *
 * zstd -1 on this data gives about 1.2 plain and 1.4 with a 2-byte plane shuffle, the figures
 * measured on real KV caches (DESIGN.md section 6).
 */
#ifndef UCM_KVGEN_H
#define UCM_KVGEN_H

#include <stddef.h>
#include <stdint.h>

#define KVGEN_CHANNELS 1024
#define KVGEN_TOKENS 16
#define KVGEN_PLANE_BYTES (KVGEN_CHANNELS * KVGEN_TOKENS * 2)

/*
 * Fill buf with `bytes` bytes of KV-like bf16 data made from seed. Deterministic: the same
 * (bytes, seed) always gives the same bytes, on every machine, and the first k bytes of a
 * buffer do not depend on its total size. Thread-safe (no global state).
 */
void kvgen_fill(void *buf, size_t bytes, uint64_t seed);

#endif
