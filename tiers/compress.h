/* The compress stage: see the design notes at the top of tiers/compress.c. */
#ifndef UCM_COMPRESS_H
#define UCM_COMPRESS_H

#include <stdint.h>

#include "tiers/tier.h"

struct compress_config {
	bool zstd;           /* false: store raw (still chunked and checksummed per chunk) */
	int level;           /* zstd level */
	unsigned shuffle;    /* 0 = auto, 1 = none, 2 or 4 = byte-plane width */
	uint32_t chunk_size; /* raw bytes per chunk; 0 = the default (256 KiB) */
};

/* A compress tier over `below`, which it owns from then on (also on failure). 0, -ENOMEM. */
int compress_create(const struct compress_config *cfg, struct tier *below, struct tier **out);

struct compress_counters {
	uint64_t raw_bytes;     /* raw bytes encoded */
	uint64_t stored_bytes;  /* bytes they became */
	uint64_t chunks_decoded;
};
void compress_counters(struct tier *t, struct compress_counters *out);

extern const struct tier_ops tier_compress_ops;

#endif
