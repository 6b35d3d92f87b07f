/*
 * Fuzzes the 4 KiB block file header of layout=native and its chunk table
 * (tiers/posix_header.c: disk_header_decode(), disk_header_encode()).
 *
 * The first input byte picks how the rest becomes a header:
 *   0  the bytes as they are (what a damaged or foreign file holds);
 *   1  the bytes with magic, version and header size set and the header checksum resealed,
 *      so that the field checks behind the checksum are reached (a crafted file);
 *   2  a consistent header built from numbers in the input, through the encoder.
 *
 * Properties:
 * - decode returns 0 or -EBADMSG, reads nothing past the 4096 bytes and writes nothing past
 *   the struct;
 * - what decodes is canonical: encoding the decoded header gives back the same 4096 bytes;
 * - a decoded header is one the readers can use (tiers/posix.c, tiers/compress.c): a known
 *   codec, stored == raw for the raw codec, a chunk size of at most DISK_MAX_CHUNK_SIZE
 *   (readers allocate a chunk), at most DISK_MAX_CHUNKS chunks covering the raw size
 *   exactly, no stored chunk longer than chunk_size, stored lengths that add up to the
 *   stored size, and a chunk table whenever the codec is not raw (the compress tier reads
 *   compressed blocks chunk by chunk and divides by chunk_size);
 * - encode then decode of a consistent header gives the same fields back;
 * - any change of one byte of an encoded header is detected.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "tests/fuzz/fuzz.h"
#include "tiers/posix_header.h"
#include "tiers/tier.h"

#define OFF_HCSUM (DISK_HEADER_SIZE - 8u)
#ifndef DISK_MAX_CHUNK_SIZE
#define DISK_MAX_CHUNK_SIZE (256u << 20) /* the bound tiers/posix_header.h gives */
#endif

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static bool known_codec(uint32_t c)
{
	return c == CODEC_RAW || c == CODEC_ZSTD_PLAIN || c == CODEC_ZSTD_SHUF2 ||
	       c == CODEC_ZSTD_SHUF4;
}

/* What every reader of a decoded header relies on. */
static void check_usable(const struct disk_header *h)
{
	uint64_t total = 0;

	CHECK(known_codec(h->codec));
	if (h->codec == CODEC_RAW)
		CHECK(h->stored_size == h->raw_size);
	CHECK(h->nchunks <= DISK_MAX_CHUNKS);
	CHECK(!h->nchunks == !h->chunk_size);
	/* readers allocate a chunk: the header cannot make them allocate gigabytes */
	CHECK(h->chunk_size <= DISK_MAX_CHUNK_SIZE);
	/* c_read() in tiers/compress.c divides by chunk_size for any codec but raw */
	if (h->codec != CODEC_RAW)
		CHECK(h->nchunks > 0);
	if (!h->nchunks)
		return;
	CHECK((uint64_t)(h->nchunks - 1) * h->chunk_size < h->raw_size);
	CHECK(h->raw_size <= (uint64_t)h->nchunks * h->chunk_size);
	for (uint32_t i = 0; i < h->nchunks; i++) {
		/* a stored chunk is never longer than chunk_size (the buffers readers use) */
		CHECK(h->chunk[i].len <= h->chunk_size);
		total += h->chunk[i].len;
	}
	CHECK(total == h->stored_size);
}

static void check_decode(const uint8_t *in)
{
	struct disk_header *h = malloc(sizeof(*h));
	uint8_t *again = malloc(DISK_HEADER_SIZE);
	int rc;

	CHECK(h && again);
	rc = disk_header_decode(in, h);
	CHECK(rc == 0 || rc == -EBADMSG);
	if (rc == 0) {
		check_usable(h);
		disk_header_encode(h, again);
		CHECK(memcmp(again, in, DISK_HEADER_SIZE) == 0);
	}
	free(h);
	free(again);
}

/* A consistent header from the input; the encoder must keep every field. */
static void check_built(struct fin *f)
{
	struct disk_header *h = calloc(1, sizeof(*h)), *back = malloc(sizeof(*h));
	uint8_t *raw = malloc(DISK_HEADER_SIZE);
	static const uint32_t codecs[] = { CODEC_RAW, CODEC_ZSTD_PLAIN, CODEC_ZSTD_SHUF2,
					   CODEC_ZSTD_SHUF4 };
	int rc;

	CHECK(h && back && raw);
	for (size_t i = 0; i < BLOCKID_LEN; i++)
		h->id.b[i] = fin_u8(f);
	h->codec = codecs[fin_u8(f) % 4];
	h->deadline = (int64_t)fin_u64(f);
	h->mtime = (int64_t)fin_u64(f);
	h->csum = fin_u64(f);
	h->nchunks = fin_below(f, DISK_MAX_CHUNKS + 1);
	if (h->codec != CODEC_RAW && !h->nchunks)
		h->nchunks = 1;
	if (h->nchunks) {
		uint64_t last;

		h->chunk_size = 1 + fin_u32(f) % DISK_MAX_CHUNK_SIZE;
		last = 1 + fin_u32(f) % h->chunk_size;
		h->raw_size = (uint64_t)(h->nchunks - 1) * h->chunk_size + last;
		for (uint32_t i = 0; i < h->nchunks; i++) {
			uint32_t rlen = i + 1 < h->nchunks ? h->chunk_size : (uint32_t)last;

			h->chunk[i].len = h->codec == CODEC_RAW ? rlen : fin_u32(f) % (rlen + 1ull);
			h->chunk[i].csum = fin_u64(f);
			h->stored_size += h->chunk[i].len;
		}
	} else {
		h->raw_size = h->stored_size = fin_u64(f);
	}
	disk_header_encode(h, raw);
	rc = disk_header_decode(raw, back);
	CHECK(rc == 0);
	CHECK(blockid_eq(&h->id, &back->id));
	CHECK(h->raw_size == back->raw_size && h->stored_size == back->stored_size);
	CHECK(h->codec == back->codec && h->deadline == back->deadline);
	CHECK(h->mtime == back->mtime && h->csum == back->csum);
	CHECK(h->chunk_size == back->chunk_size && h->nchunks == back->nchunks);
	for (uint32_t i = 0; i < h->nchunks; i++)
		CHECK(h->chunk[i].len == back->chunk[i].len &&
		      h->chunk[i].csum == back->chunk[i].csum);

	/* one changed byte anywhere: the header checksum (or the field check) rejects it */
	uint32_t at = fin_below(f, DISK_HEADER_SIZE);
	uint8_t x = fin_u8(f) | 1;

	raw[at] ^= x;
	CHECK(disk_header_decode(raw, back) == -EBADMSG);
	free(h);
	free(back);
	free(raw);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fin f = { data, size };
	uint8_t mode = fin_u8(&f) % 3;
	uint8_t *in;

	if (mode == 2) {
		check_built(&f);
		return 0;
	}
	/* exactly DISK_HEADER_SIZE bytes on the heap, so that ASan sees any read past them */
	in = calloc(1, DISK_HEADER_SIZE);
	CHECK(in);
	memcpy(in, f.p, f.n < DISK_HEADER_SIZE ? f.n : DISK_HEADER_SIZE);
	if (mode == 1) {
		memcpy(in, "UCMFSBLK", 8);
		put32(in + 8, DISK_HEADER_VERSION);
		put32(in + 12, DISK_HEADER_SIZE);
		put64(in + OFF_HCSUM, XXH3_64bits(in, OFF_HCSUM));
	}
	check_decode(in);
	free(in);
	return 0;
}
