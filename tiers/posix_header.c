#include "tiers/posix_header.h"

#include <errno.h>
#include <string.h>

#include "src/hash.h"
#include "tiers/tier.h"

static const char magic[8] = { 'U', 'C', 'M', 'F', 'S', 'B', 'L', 'K' };

#define OFF_TABLE 128u
#define OFF_CSUM (DISK_HEADER_SIZE - 8u)

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

static uint32_t get32(const uint8_t *p)
{
	uint32_t v = 0;

	for (int i = 3; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

void disk_header_encode(const struct disk_header *h, uint8_t *out)
{
	memset(out, 0, DISK_HEADER_SIZE);
	memcpy(out, magic, sizeof(magic));
	put32(out + 8, DISK_HEADER_VERSION);
	put32(out + 12, DISK_HEADER_SIZE);
	memcpy(out + 16, h->id.b, BLOCKID_LEN);
	put64(out + 32, h->raw_size);
	put64(out + 40, h->stored_size);
	put32(out + 48, h->codec);
	put32(out + 52, 0);
	put64(out + 56, (uint64_t)h->deadline);
	put64(out + 64, (uint64_t)h->mtime);
	put64(out + 72, h->csum);
	put32(out + 80, h->chunk_size);
	put32(out + 84, h->nchunks);
	for (uint32_t i = 0; i < h->nchunks && i < DISK_MAX_CHUNKS; i++) {
		put32(out + OFF_TABLE + 12 * i, h->chunk[i].len);
		put64(out + OFF_TABLE + 12 * i + 4, h->chunk[i].csum);
	}
	put64(out + OFF_CSUM, hash64(out, OFF_CSUM));
}

static bool zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

static bool known_codec(uint32_t c)
{
	return c == CODEC_RAW || c == CODEC_ZSTD_PLAIN || c == CODEC_ZSTD_SHUF2 ||
	       c == CODEC_ZSTD_SHUF4;
}

int disk_header_decode(const uint8_t *in, struct disk_header *h)
{
	uint64_t total = 0;

	if (memcmp(in, magic, sizeof(magic)) || get32(in + 8) != DISK_HEADER_VERSION ||
	    get32(in + 12) != DISK_HEADER_SIZE)
		return -EBADMSG;
	if (get64(in + OFF_CSUM) != hash64(in, OFF_CSUM))
		return -EBADMSG;
	memcpy(h->id.b, in + 16, BLOCKID_LEN);
	h->raw_size = get64(in + 32);
	h->stored_size = get64(in + 40);
	h->codec = get32(in + 48);
	h->deadline = (int64_t)get64(in + 56);
	h->mtime = (int64_t)get64(in + 64);
	h->csum = get64(in + 72);
	h->chunk_size = get32(in + 80);
	h->nchunks = get32(in + 84);
	if (get32(in + 52) || !zero(in + 88, 40) || !known_codec(h->codec))
		return -EBADMSG;
	if (h->codec == CODEC_RAW && h->stored_size != h->raw_size)
		return -EBADMSG;
	if (h->nchunks > DISK_MAX_CHUNKS || (h->nchunks && !h->chunk_size) ||
	    (!h->nchunks && h->chunk_size) || h->chunk_size > DISK_MAX_CHUNK_SIZE)
		return -EBADMSG;
	/* compressed bytes are always chunked: the compress tier reads them chunk by chunk */
	if (h->codec != CODEC_RAW && !h->nchunks)
		return -EBADMSG;
	if (!zero(in + OFF_TABLE + 12 * h->nchunks,
		  OFF_CSUM - OFF_TABLE - 12 * h->nchunks))
		return -EBADMSG;
	for (uint32_t i = 0; i < h->nchunks; i++) {
		h->chunk[i].len = get32(in + OFF_TABLE + 12 * i);
		h->chunk[i].csum = get64(in + OFF_TABLE + 12 * i + 4);
		if (h->chunk[i].len > h->chunk_size)
			return -EBADMSG; /* a stored chunk is never longer than its raw bytes */
		total += h->chunk[i].len;
	}
	if (h->nchunks) {
		/* the chunks cover the raw size exactly and their stored lengths add up */
		uint64_t want = (h->raw_size + h->chunk_size - 1) / h->chunk_size;

		if (want != h->nchunks || total != h->stored_size)
			return -EBADMSG;
	}
	return 0;
}
