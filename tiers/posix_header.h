/*
 * The 4 KiB header at the start of every block file of layout=native.
 *
 *   offset  size  field (little-endian)
 *        0     8  magic "UCMFSBLK"
 *        8     4  format version (1)
 *       12     4  header size (4096): the payload starts here, 4 KiB aligned
 *       16    16  block id
 *       32     8  raw (logical) size
 *       40     8  stored size (payload bytes)
 *       48     4  codec (enum tier_codec)
 *       52     4  flags (0)
 *       56     8  TTL deadline, wall-clock ns since the epoch (0 = none)
 *       64     8  commit time, wall-clock ns since the epoch
 *       72     8  XXH3-64 of the stored bytes
 *       80     4  chunk size in raw bytes (0 = the payload is one piece)
 *       84     4  number of chunks in the chunk table
 *       88    40  reserved, zero
 *      128  3960  chunk table: per chunk, stored length (u32) and XXH3-64 (u64)
 *     4088     8  XXH3-64 of bytes 0..4087
 */
#ifndef UCM_POSIX_HEADER_H
#define UCM_POSIX_HEADER_H

#include <stdint.h>

#include "src/blockid.h"

#define DISK_HEADER_SIZE 4096u
#define DISK_HEADER_VERSION 1u
#define DISK_MAX_CHUNKS 330u /* (4088 - 128) / 12 */
/* The largest chunk_size: what a 64 GiB block (the largest max_block) needs in 330 chunks,
 * rounded up; readers allocate a chunk's worth of memory. */
#define DISK_MAX_CHUNK_SIZE (256u << 20)

struct disk_chunk {
	uint32_t len;   /* stored bytes */
	uint64_t csum;  /* XXH3-64 of them */
};

struct disk_header {
	struct blockid id;
	uint64_t raw_size;
	uint64_t stored_size;
	uint32_t codec;
	int64_t deadline; /* wall ns, 0 = none */
	int64_t mtime;    /* wall ns */
	uint64_t csum;    /* of all stored bytes */
	uint32_t chunk_size;
	uint32_t nchunks;
	struct disk_chunk chunk[DISK_MAX_CHUNKS];
};

/* Encode h into out (DISK_HEADER_SIZE bytes), computing the header checksum. */
void disk_header_encode(const struct disk_header *h, uint8_t *out);

/*
 * Decode and validate DISK_HEADER_SIZE bytes: magic, version, header size, header checksum,
 * a known codec, zero flags and reserved bytes, a chunk table that fits and adds up to the
 * stored size, stored == raw for the raw codec. Returns 0 or -EBADMSG.
 */
int disk_header_decode(const uint8_t *in, struct disk_header *h);

#endif
