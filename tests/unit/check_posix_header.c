/* The 4 KiB header of layout=native block files (tiers/posix_header.h). */
#include <errno.h>
#include <string.h>
#include <xxhash.h>

#include "tests/unit/unit.h"
#include "tiers/posix_header.h"
#include "tiers/tier.h"

/* Field offsets, as documented in tiers/posix_header.h. */
enum {
	OFF_MAGIC = 0, OFF_VERSION = 8, OFF_HSIZE = 12, OFF_ID = 16, OFF_RAW = 32,
	OFF_STORED = 40, OFF_CODEC = 48, OFF_FLAGS = 52, OFF_DEADLINE = 56, OFF_MTIME = 64,
	OFF_CSUM = 72, OFF_CHUNK_SIZE = 80, OFF_NCHUNKS = 84, OFF_RESERVED = 88,
	OFF_TABLE = 128, OFF_HCSUM = 4088,
};

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

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* Recompute the header checksum after an edit, so that only the edited field is wrong. */
static void reseal(uint8_t *raw)
{
	put64(raw + OFF_HCSUM, XXH3_64bits(raw, OFF_HCSUM));
}

static struct disk_header plain_header(void)
{
	struct disk_header h;

	memset(&h, 0, sizeof(h));
	h.id = ut_id(42);
	h.raw_size = 5 * 1048576 + 17;
	h.stored_size = h.raw_size;
	h.codec = CODEC_RAW;
	h.deadline = 1700000000123456789LL;
	h.mtime = 1690000000987654321LL;
	h.csum = 0x0123456789abcdefULL;
	return h;
}

/* A compressed block in 1 MiB chunks: 3.5 MiB raw, 4 chunks. */
static struct disk_header chunked_header(void)
{
	struct disk_header h = plain_header();
	uint64_t total = 0;

	h.codec = CODEC_ZSTD_SHUF2;
	h.raw_size = 3 * 1048576 + 524288;
	h.chunk_size = 1048576;
	h.nchunks = 4;
	for (uint32_t i = 0; i < h.nchunks; i++) {
		h.chunk[i].len = 700000 + 1000 * i;
		h.chunk[i].csum = 0x1111111111111111ULL * (i + 1);
		total += h.chunk[i].len;
	}
	h.stored_size = total;
	return h;
}

static void expect_same(const struct disk_header *a, const struct disk_header *b)
{
	ck_assert(blockid_eq(&a->id, &b->id));
	ck_assert_uint_eq(a->raw_size, b->raw_size);
	ck_assert_uint_eq(a->stored_size, b->stored_size);
	ck_assert_uint_eq(a->codec, b->codec);
	ck_assert_int_eq(a->deadline, b->deadline);
	ck_assert_int_eq(a->mtime, b->mtime);
	ck_assert_uint_eq(a->csum, b->csum);
	ck_assert_uint_eq(a->chunk_size, b->chunk_size);
	ck_assert_uint_eq(a->nchunks, b->nchunks);
	for (uint32_t i = 0; i < a->nchunks; i++) {
		ck_assert_uint_eq(a->chunk[i].len, b->chunk[i].len);
		ck_assert_uint_eq(a->chunk[i].csum, b->chunk[i].csum);
	}
}

static void expect_bad(const uint8_t *raw, const char *what)
{
	struct disk_header out;
	int rc = disk_header_decode(raw, &out);

	ck_assert_msg(rc == -EBADMSG, "%s: decode = %d, want -EBADMSG", what, rc);
}

START_TEST(test_posix_header_round_trip)
{
	struct disk_header h = plain_header(), out;
	uint8_t raw[DISK_HEADER_SIZE];

	disk_header_encode(&h, raw);
	ck_assert_mem_eq(raw, "UCMFSBLK", 8);
	ck_assert_int_eq(disk_header_decode(raw, &out), 0);
	expect_same(&h, &out);

	/* the documented layout, field by field (little-endian) */
	ck_assert_uint_eq(raw[OFF_VERSION], DISK_HEADER_VERSION);
	ck_assert_uint_eq(raw[OFF_HSIZE] | raw[OFF_HSIZE + 1] << 8, DISK_HEADER_SIZE);
	ck_assert_mem_eq(raw + OFF_ID, h.id.b, 16);
	ck_assert_uint_eq(get64(raw + OFF_RAW), h.raw_size);
	ck_assert_uint_eq(get64(raw + OFF_STORED), h.stored_size);
	ck_assert_uint_eq(get64(raw + OFF_DEADLINE), (uint64_t)h.deadline);
	ck_assert_uint_eq(get64(raw + OFF_MTIME), (uint64_t)h.mtime);
	ck_assert_uint_eq(get64(raw + OFF_CSUM), h.csum);
	ck_assert_uint_eq(get64(raw + OFF_HCSUM), XXH3_64bits(raw, OFF_HCSUM));

	/* no deadline, empty block */
	h.deadline = 0;
	h.raw_size = h.stored_size = 0;
	disk_header_encode(&h, raw);
	ck_assert_int_eq(disk_header_decode(raw, &out), 0);
	expect_same(&h, &out);
}
END_TEST

START_TEST(test_posix_header_round_trip_chunks)
{
	struct disk_header h = chunked_header(), out;
	uint8_t raw[DISK_HEADER_SIZE];

	disk_header_encode(&h, raw);
	ck_assert_int_eq(disk_header_decode(raw, &out), 0);
	expect_same(&h, &out);

	/* the largest table that fits */
	memset(&h, 0, sizeof(h));
	h.id = ut_id(7);
	h.codec = CODEC_ZSTD_PLAIN;
	h.chunk_size = 65536;
	h.nchunks = DISK_MAX_CHUNKS;
	h.raw_size = (uint64_t)DISK_MAX_CHUNKS * 65536 - 100;
	for (uint32_t i = 0; i < h.nchunks; i++) {
		h.chunk[i].len = 1000 + i;
		h.chunk[i].csum = ut_mix(i);
		h.stored_size += h.chunk[i].len;
	}
	disk_header_encode(&h, raw);
	ck_assert_int_eq(disk_header_decode(raw, &out), 0);
	expect_same(&h, &out);
	ck_assert_uint_le(OFF_TABLE + 12 * DISK_MAX_CHUNKS, OFF_HCSUM);

	/* every codec survives */
	for (uint32_t c = 0; c < 5; c++) {
		if (c == 3)
			continue;
		h = chunked_header();
		h.codec = c;
		if (c == CODEC_RAW) {
			h.nchunks = h.chunk_size = 0;
			h.stored_size = h.raw_size;
		}
		disk_header_encode(&h, raw);
		ck_assert_int_eq(disk_header_decode(raw, &out), 0);
		ck_assert_uint_eq(out.codec, c);
	}
}
END_TEST

START_TEST(test_posix_header_every_byte_flip)
{
	const struct disk_header hs[2] = { plain_header(), chunked_header() };
	uint8_t good[DISK_HEADER_SIZE], raw[DISK_HEADER_SIZE];
	struct disk_header out;

	for (int k = 0; k < 2; k++) {
		disk_header_encode(&hs[k], good);
		ck_assert_int_eq(disk_header_decode(good, &out), 0);
		for (unsigned off = 0; off < DISK_HEADER_SIZE; off++) {
			/* every single-bit flip and the whole-byte flip of every byte */
			for (unsigned bit = 0; bit <= 8; bit++) {
				int rc;

				memcpy(raw, good, sizeof(raw));
				raw[off] ^= bit < 8 ? (uint8_t)(1u << bit) : 0xff;
				rc = disk_header_decode(raw, &out);
				UT_CHECK(rc == -EBADMSG,
					 "header %d: flip 0x%02x at byte %u not detected (%d)", k,
					 bit < 8 ? 1u << bit : 0xffu, off, rc);
			}
		}
	}
}
END_TEST

START_TEST(test_posix_header_bad_magic)
{
	struct disk_header h = plain_header();
	uint8_t raw[DISK_HEADER_SIZE];

	disk_header_encode(&h, raw);
	memcpy(raw, "UCMFSBLL", 8);
	reseal(raw);
	expect_bad(raw, "magic UCMFSBLL");
	memcpy(raw, "ucmfsblk", 8);
	reseal(raw);
	expect_bad(raw, "magic ucmfsblk");
	memset(raw, 0, 8);
	reseal(raw);
	expect_bad(raw, "zero magic");
	/* an all-zero block (a hole, a fresh file) */
	memset(raw, 0, sizeof(raw));
	expect_bad(raw, "all zero");
}
END_TEST

START_TEST(test_posix_header_bad_version)
{
	struct disk_header h = plain_header();
	uint8_t raw[DISK_HEADER_SIZE];
	static const uint32_t bad[] = { 0, 2, 3, 0x100, 0xffffffffu };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		disk_header_encode(&h, raw);
		put32(raw + OFF_VERSION, bad[i]);
		reseal(raw);
		expect_bad(raw, "version");
	}
}
END_TEST

START_TEST(test_posix_header_bad_header_size)
{
	struct disk_header h = plain_header();
	uint8_t raw[DISK_HEADER_SIZE];
	static const uint32_t bad[] = { 0, 4095, 4097, 8192, 512 };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		disk_header_encode(&h, raw);
		put32(raw + OFF_HSIZE, bad[i]);
		reseal(raw);
		expect_bad(raw, "header size");
	}
}
END_TEST

START_TEST(test_posix_header_bad_checksum)
{
	struct disk_header h = plain_header();
	uint8_t raw[DISK_HEADER_SIZE];

	disk_header_encode(&h, raw);
	put64(raw + OFF_HCSUM, get64(raw + OFF_HCSUM) + 1);
	expect_bad(raw, "header checksum");
	/* a field changed without resealing */
	disk_header_encode(&h, raw);
	put64(raw + OFF_RAW, h.raw_size + 4096);
	put64(raw + OFF_STORED, h.raw_size + 4096);
	expect_bad(raw, "size changed without reseal");
}
END_TEST

START_TEST(test_posix_header_unknown_codec)
{
	struct disk_header h = plain_header();
	uint8_t raw[DISK_HEADER_SIZE];
	static const uint32_t bad[] = { 3, 5, 6, 99, 0x80000000u, 0xffffffffu };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		disk_header_encode(&h, raw);
		put32(raw + OFF_CODEC, bad[i]);
		reseal(raw);
		expect_bad(raw, "codec");
	}
}
END_TEST

START_TEST(test_posix_header_raw_stored_mismatch)
{
	struct disk_header h = plain_header();
	uint8_t raw[DISK_HEADER_SIZE];

	h.stored_size = h.raw_size - 1;
	disk_header_encode(&h, raw);
	expect_bad(raw, "raw codec, stored < raw");
	h.stored_size = h.raw_size + 1;
	disk_header_encode(&h, raw);
	expect_bad(raw, "raw codec, stored > raw");
	h.raw_size = 0;
	h.stored_size = 4096;
	disk_header_encode(&h, raw);
	expect_bad(raw, "raw codec, empty block with stored bytes");
}
END_TEST

START_TEST(test_posix_header_flags_and_reserved)
{
	struct disk_header h = plain_header();
	uint8_t raw[DISK_HEADER_SIZE];

	disk_header_encode(&h, raw);
	put32(raw + OFF_FLAGS, 1);
	reseal(raw);
	expect_bad(raw, "flags");
	for (unsigned off = OFF_RESERVED; off < OFF_TABLE; off++) {
		disk_header_encode(&h, raw);
		raw[off] = 0x5a;
		reseal(raw);
		expect_bad(raw, "reserved byte");
	}
	/* the unused part of the chunk table must be zero too */
	for (unsigned off = OFF_TABLE; off < OFF_HCSUM; off += 97) {
		disk_header_encode(&h, raw);
		raw[off] = 1;
		reseal(raw);
		expect_bad(raw, "unused chunk table byte");
	}
}
END_TEST

START_TEST(test_posix_header_chunk_table_inconsistent)
{
	struct disk_header h;
	uint8_t raw[DISK_HEADER_SIZE];

	/* one chunk too few / too many for raw_size / chunk_size */
	h = chunked_header();
	h.stored_size -= h.chunk[3].len;
	h.nchunks = 3;
	disk_header_encode(&h, raw);
	expect_bad(raw, "too few chunks");
	h = chunked_header();
	h.chunk[4].len = 10;
	h.chunk[4].csum = 1;
	h.stored_size += 10;
	h.nchunks = 5;
	disk_header_encode(&h, raw);
	expect_bad(raw, "too many chunks");
	/* lengths that do not add up to the stored size */
	h = chunked_header();
	h.stored_size += 1;
	disk_header_encode(&h, raw);
	expect_bad(raw, "chunk lengths > stored");
	h = chunked_header();
	h.stored_size -= 1;
	disk_header_encode(&h, raw);
	expect_bad(raw, "chunk lengths < stored");
	/* chunks without a chunk size, a chunk size without chunks */
	h = chunked_header();
	h.chunk_size = 0;
	disk_header_encode(&h, raw);
	expect_bad(raw, "chunks without chunk size");
	h = chunked_header();
	h.nchunks = 0;
	disk_header_encode(&h, raw);
	expect_bad(raw, "chunk size without chunks");
	/* a chunk count past the table */
	h = chunked_header();
	disk_header_encode(&h, raw);
	put32(raw + OFF_NCHUNKS, DISK_MAX_CHUNKS + 1);
	reseal(raw);
	expect_bad(raw, "nchunks > DISK_MAX_CHUNKS");
	put32(raw + OFF_NCHUNKS, 0xffffffffu);
	reseal(raw);
	expect_bad(raw, "nchunks = 2^32-1");
	/* a raw size near 2^64 must not wrap the chunk count */
	h = chunked_header();
	h.raw_size = UINT64_MAX - 10;
	h.nchunks = 1;
	h.chunk_size = 1u << 31;
	h.chunk[0].len = (uint32_t)h.stored_size;
	h.stored_size = h.chunk[0].len;
	disk_header_encode(&h, raw);
	expect_bad(raw, "raw size near 2^64");
}
END_TEST

Suite *posix_header_suite(void)
{
	Suite *s = suite_create("posix_header");
	TCase *core = ut_tcase("core", UT_TIMEOUT), *errors = ut_tcase("errors", UT_TIMEOUT);

	tcase_add_test(core, test_posix_header_round_trip);
	tcase_add_test(core, test_posix_header_round_trip_chunks);
	tcase_add_test(errors, test_posix_header_every_byte_flip);
	tcase_add_test(errors, test_posix_header_bad_magic);
	tcase_add_test(errors, test_posix_header_bad_version);
	tcase_add_test(errors, test_posix_header_bad_header_size);
	tcase_add_test(errors, test_posix_header_bad_checksum);
	tcase_add_test(errors, test_posix_header_unknown_codec);
	tcase_add_test(errors, test_posix_header_raw_stored_mismatch);
	tcase_add_test(errors, test_posix_header_flags_and_reserved);
	tcase_add_test(errors, test_posix_header_chunk_table_inconsistent);
	suite_add_tcase(s, core);
	suite_add_tcase(s, errors);
	return s;
}
