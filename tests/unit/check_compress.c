/*
 * The compress stage (tiers/compress.c) over a disk tier (tiers/posix.c, layout native):
 * round trips for every codec configuration on KV-like and other data at awkward sizes,
 * the codec each block records, random access that decodes only the chunks it covers, and
 * damage on disk (a flipped payload byte, a truncated file, a wrong chunk table) that must
 * end in -EIO or -ENOENT, never in wrong bytes.
 *
 * Blocks are written as the pipeline's dump writes them: one TIER_RESERVE_SEQ reservation
 * with the size as hint, written in order in pieces of varying sizes, then committed.
 * Every test uses a chunk size of CS (64 KiB) unless it says otherwise, so blocks of a few
 * chunks stay small.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/clock.h"
#include "tests/unit/tier_util.h"
#include "tests/unit/unit.h"
#include "tiers/compress.h"
#include "tiers/posix.h"
#include "tiers/posix_header.h"
#include "tools/kvgen.h"

#define KB 1024u
#define CS (64u * KB)

/* --- configurations and data ------------------------------------------------------------- */

struct codec_cfg {
	const char *name;
	bool zstd;
	unsigned shuffle;
	uint32_t codec; /* what a compressible block records (auto: on KV bf16) */
};

static const struct codec_cfg codecs[] = {
	{ "raw", false, 0, CODEC_RAW },
	{ "zstd", true, 1, CODEC_ZSTD_PLAIN },
	{ "shuffle2", true, 2, CODEC_ZSTD_SHUF2 },
	{ "shuffle4", true, 4, CODEC_ZSTD_SHUF4 },
	{ "auto", true, 0, CODEC_ZSTD_SHUF2 },
};

#define AUTO (&codecs[4])

#define NCODECS (int)(sizeof(codecs) / sizeof(codecs[0]))
/* loop tests over the zstd configurations only: index _i + 1 */
#define NZSTD (NCODECS - 1)

enum kind { D_KV, D_BF16, D_FP16, D_FP32, D_ZERO, D_RANDOM, NKINDS };

static const char *const kind_name[] = { "kv-bf16", "bf16", "fp16", "fp32", "zeros", "random" };

/* Little-endian values of `width` bytes from v, the odd tail from random bytes. */
static void fill_values(uint8_t *p, size_t n, unsigned width, uint64_t seed,
			uint64_t (*value)(uint64_t r))
{
	uint64_t s = seed;
	size_t i = 0;

	for (; i + width <= n; i += width) {
		uint64_t v = value(ut_rand(&s));

		for (unsigned k = 0; k < width; k++)
			p[i + k] = (uint8_t)(v >> (8 * k));
	}
	for (; i < n; i++)
		p[i] = (uint8_t)ut_rand(&s);
}

/* fp16 of magnitude 2^-4 .. 1: a random sign, 4 exponents, a random 10-bit mantissa */
static uint64_t fp16_value(uint64_t r)
{
	return (r & 1) << 15 | (11 + (r >> 1) % 4) << 10 | ((r >> 8) & 0x3ff);
}

/* fp32 of magnitude 2^-7 .. 1: a random sign, 6 exponents, a random 23-bit mantissa */
static uint64_t fp32_value(uint64_t r)
{
	return (r & 1) << 31 | (120 + (r >> 1) % 6) << 23 | ((r >> 8) & 0x7fffff);
}

static void fill(enum kind k, uint8_t *p, size_t n, uint64_t seed)
{
	struct blockid id = ut_id(seed);
	uint64_t s = seed;

	switch (k) {
	case D_KV:
		kvgen_fill(p, n, seed);
		break;
	case D_BF16:
		ut_fill(&id, seed, p, n, 0);
		break;
	case D_FP16:
		fill_values(p, n, 2, seed, fp16_value);
		break;
	case D_FP32:
		fill_values(p, n, 4, seed, fp32_value);
		break;
	case D_ZERO:
		memset(p, 0, n);
		break;
	default:
		for (size_t i = 0; i < n; i++)
			p[i] = (uint8_t)ut_rand(&s);
		break;
	}
}

/* A buffer of n bytes of kind k (malloc'ed, at least 1 byte). */
static uint8_t *make_data(enum kind k, size_t n, uint64_t seed)
{
	uint8_t *p = malloc(n ? n : 1);

	ck_assert_ptr_nonnull(p);
	fill(k, p, n, seed);
	return p;
}

/* --- a compress tier over a posix tier --------------------------------------------------- */

struct zfix {
	char dir[PATH_MAX];  /* the STORE */
	struct tier *posix;  /* owned by t */
	struct tier *t;
	uint32_t chunk_size;
};

static void zfix_open_io(struct zfix *z, const struct codec_cfg *c, uint32_t chunk_size,
			bool aio)
{
	struct compress_config cfg = { .zstd = c->zstd, .level = 1, .shuffle = c->shuffle,
				       .chunk_size = chunk_size };
	char base[PATH_MAX];

	ut_mkdtemp(base, sizeof(base));
	snprintf(z->dir, sizeof(z->dir), "%s/store", base);
	z->posix = tu_posix_io(z->dir, LAYOUT_NATIVE, aio);
	ck_assert_int_eq(compress_create(&cfg, z->posix, &z->t), 0);
	z->chunk_size = chunk_size;
}

static void zfix_open(struct zfix *z, const struct codec_cfg *c, uint32_t chunk_size)
{
	zfix_open_io(z, c, chunk_size, false);
}

static void zfix_close(struct zfix *z)
{
	tier_destroy(z->t);
	z->t = z->posix = NULL;
}

static void block_file(const struct zfix *z, const struct blockid *id, char *out, size_t len)
{
	tu_block_path(z->dir, LAYOUT_NATIVE, id, out, len);
}

/* A piece length for a sequential write: tiny, around a chunk, or large. */
static size_t piece_len(uint64_t *rng, uint32_t cs)
{
	uint64_t r = ut_rand(rng);

	switch (r % 8) {
	case 0:
		return 1 + (size_t)(r >> 8) % 16;
	case 1:
		return 1 + (size_t)(r >> 8) % 8192;
	case 2:
		return cs - 1;
	case 3:
		return cs;
	case 4:
		return cs + 1;
	case 5:
		return 3 * (size_t)cs + 5;
	default:
		return 1 + (size_t)(r >> 8) % (2 * (size_t)cs);
	}
}

/*
 * Write data[0, size) as the pipeline's dump does: a sequential reservation with the size as
 * hint, pieces in order, commit (a block of size 0 gets a truncate(0), as the dump gives
 * it). Returns commit's result; fails the test if a write fails.
 */
static int put_seq(struct tier *t, const struct blockid *id, const uint8_t *data, uint64_t size,
		   uint64_t *rng, uint32_t cs)
{
	struct tier_handle *h;
	struct block_meta m = tu_meta(size, 0);
	int rc = t->ops->reserve(t, id, TIER_RESERVE_SEQ, size, &h);

	ck_assert_msg(rc == 0, "%s: reserve = %d", ut_hex(id), rc);
	for (uint64_t off = 0; off < size;) {
		size_t n = piece_len(rng, cs);
		ssize_t w;

		if (n > size - off)
			n = (size_t)(size - off);
		w = t->ops->write(h, data + off, n, off);
		ck_assert_msg(w == (ssize_t)n, "%s: write(%zu at %llu) = %zd", ut_hex(id), n,
			      (unsigned long long)off, w);
		off += n;
	}
	if (size == 0)
		ck_assert_int_eq(t->ops->truncate(h, 0), 0);
	return t->ops->commit(h, &m, 0, NULL);
}

/* Read [off, off+len) through h; 0 if it matched data (a read past the end must be short),
 * else the negative error of the read. Wrong bytes or a wrong count fail the test. */
static int read_range(struct tier_handle *h, const uint8_t *data, uint64_t size, uint64_t off,
		      uint64_t len, const char *what)
{
	uint64_t want = off >= size ? 0 : (len < size - off ? len : size - off);
	uint8_t *buf = malloc(len ? len : 1);
	ssize_t n;

	ck_assert_ptr_nonnull(buf);
	n = tier_read(h, buf, len, off);
	if (n < 0) {
		free(buf);
		return (int)n;
	}
	ck_assert_msg((uint64_t)n == want, "%s: read(off %llu, len %llu) = %zd, want %llu", what,
		      (unsigned long long)off, (unsigned long long)len, n,
		      (unsigned long long)want);
	for (uint64_t i = 0; i < want; i++)
		if (buf[i] != data[off + i])
			ck_abort_msg("%s: read(off %llu, len %llu): wrong byte at %llu", what,
				     (unsigned long long)off, (unsigned long long)len,
				     (unsigned long long)(off + i));
	free(buf);
	return 0;
}

/* read_range() that must succeed. */
static void expect_range(struct tier_handle *h, const uint8_t *data, uint64_t size,
			 uint64_t off, uint64_t len, const char *what)
{
	int rc = read_range(h, data, size, off, len, what);

	ck_assert_msg(rc == 0, "%s: read(off %llu, len %llu) = %d", what,
		      (unsigned long long)off, (unsigned long long)len, rc);
}

/* A random range: anywhere, across a chunk boundary, in or past the last partial chunk, one
 * whole chunk, or the whole block. */
static void random_range(uint64_t *rng, uint64_t size, uint32_t cs, uint64_t *off,
			 uint64_t *len)
{
	uint64_t r = ut_rand(rng), nch = size ? (size + cs - 1) / cs : 0;

	switch (r % 6) {
	case 0:
		*off = size ? (r >> 8) % (size + 1) : 0;
		*len = ut_rand(rng) % (3 * (uint64_t)cs);
		break;
	case 1: /* across boundary k */
		if (nch > 1) {
			uint64_t k = 1 + (r >> 8) % (nch - 1), a = 1 + ut_rand(rng) % 3000;

			*off = k * cs - a;
			*len = a + 1 + ut_rand(rng) % 3000;
			break;
		}
		/* fall through */
	case 2: { /* the last chunk, up to and past the end */
		uint64_t last = nch ? (nch - 1) * (uint64_t)cs : 0;

		*off = last + (size > last ? (r >> 8) % (size - last) : 0);
		*len = size - *off + ut_rand(rng) % 100;
		break;
	}
	case 3: /* one whole chunk */
		*off = nch ? ((r >> 8) % nch) * cs : 0;
		*len = cs;
		break;
	case 4: /* a small range */
		*off = size ? (r >> 8) % size : 0;
		*len = 1 + ut_rand(rng) % 64;
		break;
	default:
		*off = 0;
		*len = size + 1;
		break;
	}
}

/* Open id, check its size and codec, read it whole and in random ranges. */
static void check_block(struct tier *t, const struct blockid *id, const uint8_t *data,
			uint64_t size, uint64_t *rng, uint32_t cs, const char *what)
{
	struct tier_handle *h, *h2;
	struct block_attr a, la;

	ck_assert_msg(t->ops->open(t, id, 0, &h) == 0, "%s: open", what);
	ck_assert_int_eq(h->tier->ops->stat(h, &a), 0);
	ck_assert_int_eq(tu_lookup(t, id, &la), 0);
	ck_assert_msg(a.size == size && la.size == size, "%s: size %llu/%llu, want %llu", what,
		      (unsigned long long)a.size, (unsigned long long)la.size,
		      (unsigned long long)size);
	ck_assert_msg(a.codec == la.codec, "%s: handle codec %u, lookup codec %u", what, a.codec,
		      la.codec);
	expect_range(h, data, size, 0, size + 1, what);
	expect_range(h, data, size, size, 10, what);
	for (int i = 0; i < 24; i++) {
		uint64_t off, len;

		random_range(rng, size, cs, &off, &len);
		expect_range(h, data, size, off, len, what);
		/* a fresh handle has nothing decoded yet */
		if (i % 6 == 0) {
			ck_assert_int_eq(t->ops->open(t, id, 0, &h2), 0);
			expect_range(h2, data, size, off, len, what);
			tier_close(h2);
		}
	}
	tier_close(h);
}

/* The codec a block records: -1 when either the configured one or raw is fine (a block so
 * small that compressing it may not pay), -2 for any zstd codec. */
static int expected_codec(const struct codec_cfg *c, enum kind k, uint64_t size)
{
	if (!c->zstd || k == D_RANDOM || size == 0)
		return CODEC_RAW;
	if (size < 4 * KB)
		return -1;
	if (c->shuffle == 0) /* auto: any zstd codec (see test_compress_auto_picks_shuffle2) */
		return -2;
	return (int)c->codec;
}

static const uint64_t sizes[] = { 0, 1, 2, 3, 5, 4095, 4096, 4097, 4098, 4099, CS - 1, CS,
				  CS + 1, 3 * CS + 4099, 16 * CS + 2 };

#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* --- core -------------------------------------------------------------------------------- */

/* Every data kind at every size through one codec configuration. */
START_TEST(test_compress_round_trips)
{
	const struct codec_cfg *c = &codecs[_i];
	struct zfix z;
	uint64_t rng = 0xc0ffee + (uint64_t)_i;
	char what[128];

	zfix_open(&z, c, CS);
	for (int k = 0; k < NKINDS; k++) {
		for (size_t si = 0; si < NSIZES; si++) {
			uint64_t size = sizes[si];
			struct blockid id = ut_id(1000 + (uint64_t)k * 100 + si);
			uint8_t *data = make_data((enum kind)k, size, 31 * k + si);
			struct block_attr a;
			int want = expected_codec(c, (enum kind)k, size);

			snprintf(what, sizeof(what), "%s %s size %llu", c->name, kind_name[k],
				 (unsigned long long)size);
			ck_assert_msg(put_seq(z.t, &id, data, size, &rng, CS) == 0, "%s: commit",
				      what);
			check_block(z.t, &id, data, size, &rng, CS, what);
			ck_assert_int_eq(tu_lookup(z.t, &id, &a), 0);
			if (want >= 0)
				ck_assert_msg(a.codec == (uint32_t)want, "%s: codec %u, want %d",
					      what, a.codec, want);
			else if (want == -1)
				ck_assert_msg(a.codec == CODEC_RAW || a.codec == c->codec ||
						      (c->zstd && c->shuffle == 0),
					      "%s: codec %u", what, a.codec);
			else
				ck_assert_msg(a.codec != CODEC_RAW, "%s: stored raw", what);
			free(data);
		}
	}
	zfix_close(&z);
}
END_TEST

/* Blocks written before are read back right by a new tier over the same store. */
START_TEST(test_compress_reopen)
{
	const struct codec_cfg *c = &codecs[_i];
	struct compress_config cfg = { .zstd = c->zstd, .level = 1, .shuffle = c->shuffle,
				       .chunk_size = CS };
	struct zfix z;
	uint64_t rng = 5, size = 5 * CS + 1001;
	struct blockid id = ut_id(77);
	uint8_t *data = make_data(D_KV, size, 9);

	zfix_open(&z, c, CS);
	ck_assert_int_eq(put_seq(z.t, &id, data, size, &rng, CS), 0);
	zfix_close(&z);
	z.posix = tu_posix(z.dir, LAYOUT_NATIVE);
	ck_assert_int_eq(compress_create(&cfg, z.posix, &z.t), 0);
	check_block(z.t, &id, data, size, &rng, CS, c->name);
	zfix_close(&z);
	free(data);
}
END_TEST

/* The default chunk size (256 KiB) and a block of more chunks than the table holds (the
 * chunk size then grows so that the table fits). */
START_TEST(test_compress_chunk_sizes)
{
	struct zfix z;
	uint64_t rng = 11;
	uint64_t size = (uint64_t)DISK_MAX_CHUNKS * CS + 3 * CS + 7;
	struct blockid a = ut_id(501), b = ut_id(502);
	uint8_t *data = make_data(D_KV, size, 3);
	struct tier_handle *h;
	struct block_layout lay;

	zfix_open(&z, &codecs[4], 0);
	ck_assert_int_eq(put_seq(z.t, &a, data, (1u << 20) + 3, &rng, 256 * KB), 0);
	check_block(z.t, &a, data, (1u << 20) + 3, &rng, 256 * KB, "default chunk");
	zfix_close(&z);

	zfix_open(&z, &codecs[2], CS);
	ck_assert_int_eq(put_seq(z.t, &b, data, size, &rng, CS), 0);
	/* the disk tier's view of the stored block: the table fits, chunks cover the size */
	ck_assert_int_eq(z.posix->ops->open(z.posix, &b, 0, &h), 0);
	ck_assert_int_eq(z.posix->ops->layout(h, &lay), 0);
	ck_assert_uint_le(lay.nchunks, DISK_MAX_CHUNKS);
	ck_assert_uint_gt(lay.chunk_size, CS);
	ck_assert_uint_eq(((uint64_t)lay.nchunks - 1) * lay.chunk_size < size, 1);
	ck_assert_uint_ge((uint64_t)lay.nchunks * lay.chunk_size, size);
	tier_close(h);
	check_block(z.t, &b, data, size, &rng, lay.chunk_size, "many chunks");
	zfix_close(&z);
	free(data);
}
END_TEST

/* A reservation without TIER_RESERVE_SEQ passes through raw, in any order. */
START_TEST(test_compress_unsequenced_raw)
{
	struct zfix z;
	uint64_t rng = 2, size = 3 * CS + 100;
	struct blockid id = ut_id(600);
	uint8_t *data = make_data(D_KV, size, 1);
	struct tier_handle *h;
	struct block_meta m = tu_meta(size, 0);
	struct block_attr a;

	zfix_open(&z, &codecs[4], CS);
	ck_assert_int_eq(z.t->ops->reserve(z.t, &id, 0, size, &h), 0);
	/* back to front */
	for (uint64_t end = size; end > 0;) {
		uint64_t n = end > 40000 ? 40000 : end;

		ck_assert_int_eq(z.t->ops->write(h, data + end - n, n, end - n), (ssize_t)n);
		end -= n;
	}
	ck_assert_int_eq(z.t->ops->commit(h, &m, 0, NULL), 0);
	ck_assert_int_eq(tu_lookup(z.t, &id, &a), 0);
	ck_assert_uint_eq(a.codec, CODEC_RAW);
	check_block(z.t, &id, data, size, &rng, CS, "unsequenced");
	zfix_close(&z);
	free(data);
}
END_TEST

/* Compressible data is stored smaller, and the counters say so. */
START_TEST(test_compress_counts_bytes)
{
	const struct codec_cfg *c = &codecs[_i];
	struct zfix z;
	struct compress_counters cc;
	uint64_t rng = 8, size = 8 * CS;
	struct blockid id = ut_id(700);
	uint8_t *data = make_data(D_KV, size, 4);

	zfix_open(&z, c, CS);
	ck_assert_int_eq(put_seq(z.t, &id, data, size, &rng, CS), 0);
	compress_counters(z.t, &cc);
	ck_assert_uint_eq(cc.raw_bytes, size);
	if (c->zstd)
		ck_assert_msg(cc.stored_bytes < size - size / 32, "%s: %llu raw -> %llu stored",
			      c->name, (unsigned long long)cc.raw_bytes,
			      (unsigned long long)cc.stored_bytes);
	else
		ck_assert_uint_eq(cc.stored_bytes, size);
	zfix_close(&z);
	free(data);
}
END_TEST

/*
 * shuffle=auto on KV bf16 picks the 2-byte plane shuffle. With the default chunk size
 * (256 KiB) each plane of a chunk is a zstd block of its own (zstd codes 128 KiB blocks with
 * one entropy table each), which is what makes the shuffle pay.
 */
START_TEST(test_compress_auto_picks_shuffle2)
{
	static const uint64_t kv_sizes[] = { 256 * KB, (1u << 20) + 3, 3 * 256 * KB - 1 };
	struct zfix z;
	uint64_t rng = 14;

	zfix_open(&z, AUTO, 0);
	for (size_t i = 0; i < sizeof(kv_sizes) / sizeof(kv_sizes[0]); i++) {
		for (uint64_t seed = 1; seed <= 3; seed++) {
			struct blockid id = ut_id(1500 + 10 * i + seed);
			uint8_t *data = make_data(D_KV, kv_sizes[i], seed);
			struct block_attr a;

			ck_assert_int_eq(put_seq(z.t, &id, data, kv_sizes[i], &rng, 256 * KB), 0);
			ck_assert_int_eq(tu_lookup(z.t, &id, &a), 0);
			ck_assert_msg(a.codec == CODEC_ZSTD_SHUF2,
				      "KV bf16 of %llu bytes (seed %llu): codec %u",
				      (unsigned long long)kv_sizes[i], (unsigned long long)seed,
				      a.codec);
			check_block(z.t, &id, data, kv_sizes[i], &rng, 256 * KB, "auto");
			free(data);
		}
	}
	zfix_close(&z);
}
END_TEST

static uint64_t decoded(struct tier *t)
{
	struct compress_counters cc;

	compress_counters(t, &cc);
	return cc.chunks_decoded;
}

#define EXPECT_DECODED(t, before, n, what)                                                    \
	ck_assert_msg(decoded(t) - (before) == (n), "%s: %llu chunks decoded, want %d", what,   \
		      (unsigned long long)(decoded(t) - (before)), n)

/* Random access decodes only the chunks a read covers. */
START_TEST(test_compress_random_access_decodes_only_needed)
{
	const struct codec_cfg *c = &codecs[1 + _i];
	struct zfix z;
	uint64_t rng = 3, size = 8 * CS + 1000, d0;
	struct blockid id = ut_id(800);
	uint8_t *data = make_data(D_KV, size, 5);
	struct tier_handle *h;

	zfix_open(&z, c, CS);
	ck_assert_int_eq(put_seq(z.t, &id, data, size, &rng, CS), 0);

	ck_assert_int_eq(z.t->ops->open(z.t, &id, 0, &h), 0);
	d0 = decoded(z.t);
	EXPECT_DECODED(z.t, d0, 0, "open");
	expect_range(h, data, size, 3 * CS + 500, 100, c->name);
	EXPECT_DECODED(z.t, d0, 1, "100 bytes inside chunk 3");
	d0 = decoded(z.t);
	expect_range(h, data, size, 3 * CS + 9000, 4000, c->name);
	EXPECT_DECODED(z.t, d0, 0, "again inside chunk 3 (kept with the handle)");
	d0 = decoded(z.t);
	expect_range(h, data, size, 2 * CS, CS, c->name);
	EXPECT_DECODED(z.t, d0, 1, "chunk 2 whole");
	d0 = decoded(z.t);
	expect_range(h, data, size, 8 * CS + 10, 5000, c->name);
	EXPECT_DECODED(z.t, d0, 1, "the last, partial chunk");
	tier_close(h);

	ck_assert_int_eq(z.t->ops->open(z.t, &id, 0, &h), 0);
	d0 = decoded(z.t);
	expect_range(h, data, size, 5 * CS - 50, 100, c->name);
	EXPECT_DECODED(z.t, d0, 2, "across the boundary of chunks 4 and 5");
	tier_close(h);

	ck_assert_int_eq(z.t->ops->open(z.t, &id, 0, &h), 0);
	d0 = decoded(z.t);
	expect_range(h, data, size, 6 * CS - 1, 2 * CS + 2, c->name);
	EXPECT_DECODED(z.t, d0, 4, "across chunks 5, 6, 7 and 8");
	d0 = decoded(z.t);
	expect_range(h, data, size, 0, size, c->name);
	EXPECT_DECODED(z.t, d0, 9, "the whole block");
	tier_close(h);
	zfix_close(&z);
	free(data);
}
END_TEST

/* --- damage ------------------------------------------------------------------------------ */

static void read_header(const char *path, struct disk_header *hd)
{
	uint8_t raw[DISK_HEADER_SIZE];
	int fd = open(path, O_RDONLY);

	ck_assert_msg(fd >= 0, "open %s", path);
	ck_assert_int_eq(pread(fd, raw, sizeof(raw), 0), (ssize_t)sizeof(raw));
	close(fd);
	ck_assert_int_eq(disk_header_decode(raw, hd), 0);
}

/* Write a header back with a valid header checksum: only what the test changed is wrong. */
static void write_header(const char *path, const struct disk_header *hd)
{
	uint8_t raw[DISK_HEADER_SIZE];
	int fd = open(path, O_WRONLY);

	ck_assert_msg(fd >= 0, "open %s", path);
	disk_header_encode(hd, raw);
	ck_assert_int_eq(pwrite(fd, raw, sizeof(raw), 0), (ssize_t)sizeof(raw));
	close(fd);
}

static void flip_byte(const char *path, off_t off)
{
	int fd = open(path, O_RDWR);
	unsigned char b;

	ck_assert_msg(fd >= 0, "open %s", path);
	ck_assert_int_eq(pread(fd, &b, 1, off), 1);
	b ^= 0x5a;
	ck_assert_int_eq(pwrite(fd, &b, 1, off), 1);
	close(fd);
}

/* Stored offset of chunk i. */
static uint64_t chunk_off(const struct disk_header *hd, uint32_t i)
{
	uint64_t o = 0;

	for (uint32_t k = 0; k < i; k++)
		o += hd->chunk[k].len;
	return o;
}

static uint64_t quarantined(const struct zfix *z)
{
	struct posix_counters pc;

	posix_counters(z->posix, &pc);
	return pc.quarantined;
}

/* Files of id in STORE/quarantine. */
static int quarantine_files(const struct zfix *z, const struct blockid *id)
{
	char q[PATH_MAX];
	int n;

	snprintf(q, sizeof(q), "%s/quarantine", z->dir);
	n = ut_count_prefixed(q, ut_hex(id));
	return n < 0 ? 0 : n;
}

/* After damage was found: the block is gone (a new open or lookup misses). */
static void expect_gone(const struct zfix *z, const struct blockid *id)
{
	struct tier_handle *h;
	int rc = z->t->ops->open(z->t, id, 0, &h);

	ck_assert_msg(rc == -ENOENT || rc == -EIO, "open after damage = %d", rc);
	if (rc == 0)
		tier_close(h);
	ck_assert_int_eq(tu_lookup(z->t, id, NULL), -ENOENT);
	ck_assert_int_eq(quarantine_files(z, id), 1);
	ck_assert_uint_ge(quarantined(z), 1);
}

/* A flipped byte in chunk `bad`: reading it fails -EIO; reads of other chunks through
 * handles opened before give the right bytes or -EIO; the block is then gone. */
static void damaged_chunk(const struct codec_cfg *c, uint32_t bad, bool whole_first)
{
	struct zfix z;
	uint64_t rng = 21, size = 6 * CS + 777;
	struct blockid id = ut_id(900 + bad);
	uint8_t *data = make_data(D_KV, size, 6);
	struct disk_header hd;
	struct tier_handle *h, *h2;
	char path[PATH_MAX];
	int rc;

	zfix_open(&z, c, CS);
	ck_assert_int_eq(put_seq(z.t, &id, data, size, &rng, CS), 0);
	block_file(&z, &id, path, sizeof(path));
	read_header(path, &hd);
	ck_assert_uint_eq(hd.nchunks, 7);
	if (c->zstd)
		ck_assert_msg(hd.chunk[bad].len < CS, "%s: chunk %u stored raw", c->name, bad);
	flip_byte(path, (off_t)(DISK_HEADER_SIZE + chunk_off(&hd, bad) + hd.chunk[bad].len / 2));

	ck_assert_int_eq(z.t->ops->open(z.t, &id, 0, &h), 0);
	ck_assert_int_eq(z.t->ops->open(z.t, &id, 0, &h2), 0);
	/* chunk 0 is fine (unless it is the bad one) */
	rc = read_range(h2, data, size, 10, 100, c->name);
	ck_assert_int_eq(rc, bad == 0 ? -EIO : 0);
	if (whole_first)
		rc = read_range(h, data, size, 0, size, c->name);
	else
		rc = read_range(h, data, size, (uint64_t)bad * CS + 17, 200, c->name);
	ck_assert_msg(rc == -EIO, "%s: read of damaged chunk %u = %d", c->name, bad, rc);
	/* again, through the same handle: still no bytes */
	rc = read_range(h, data, size, (uint64_t)bad * CS + 1, CS - 2, c->name);
	ck_assert_msg(rc == -EIO, "%s: second read of damaged chunk %u = %d", c->name, bad, rc);
	/* other chunks through the open handles: right bytes or -EIO */
	for (uint32_t i = 0; i < 7; i++) {
		if (i == bad)
			continue;
		rc = read_range(h, data, size, (uint64_t)i * CS + 3, 500, c->name);
		ck_assert_msg(rc == 0 || rc == -EIO, "%s: read of chunk %u = %d", c->name, i, rc);
		rc = read_range(h2, data, size, (uint64_t)i * CS, CS, c->name);
		ck_assert_msg(rc == 0 || rc == -EIO, "%s: read of chunk %u = %d", c->name, i, rc);
	}
	tier_close(h);
	tier_close(h2);
	expect_gone(&z, &id);
	zfix_close(&z);
	free(data);
}

START_TEST(test_compress_damaged_chunk)
{
	damaged_chunk(&codecs[_i], 2, false);
}
END_TEST

START_TEST(test_compress_damaged_last_chunk)
{
	damaged_chunk(&codecs[_i], 6, false);
}
END_TEST

START_TEST(test_compress_damaged_whole_read)
{
	damaged_chunk(&codecs[_i], 4, true);
}
END_TEST

/* A truncated block file: open fails -EIO (or the block is already gone), before any read;
 * a file truncated under an open handle fails the read -EIO. */
START_TEST(test_compress_truncated_file)
{
	const struct codec_cfg *c = &codecs[_i];
	struct zfix z;
	uint64_t rng = 4, size = 4 * CS + 999;
	uint8_t *data = make_data(D_KV, size, 7);
	struct disk_header hd;
	char path[PATH_MAX];

	zfix_open(&z, c, CS);
	for (int cut = 0; cut < 6; cut++) {
		struct blockid id = ut_id(1100 + (uint64_t)cut);
		struct tier_handle *h = NULL;
		uint64_t len;
		int rc;

		ck_assert_int_eq(put_seq(z.t, &id, data, size, &rng, CS), 0);
		block_file(&z, &id, path, sizeof(path));
		read_header(path, &hd);
		switch (cut) {
		case 0: len = 0; break;
		case 1: len = 100; break;
		case 2: len = DISK_HEADER_SIZE; break;
		case 3: len = DISK_HEADER_SIZE + hd.stored_size / 2; break;
		case 4: len = DISK_HEADER_SIZE + hd.stored_size - 1; break;
		default: len = DISK_HEADER_SIZE + chunk_off(&hd, 2) + 10; break;
		}
		if (cut == 5) /* under an open handle */
			ck_assert_int_eq(z.t->ops->open(z.t, &id, 0, &h), 0);
		ck_assert_int_eq(truncate(path, (off_t)len), 0);
		if (cut == 5) {
			expect_range(h, data, size, 0, 1000, c->name);
			rc = read_range(h, data, size, 3 * CS, 1000, c->name);
			ck_assert_msg(rc == -EIO, "%s: read past the cut = %d", c->name, rc);
			rc = read_range(h, data, size, 0, size, c->name);
			ck_assert_msg(rc == -EIO, "%s: whole read past the cut = %d", c->name, rc);
			tier_close(h);
		} else {
			rc = z.t->ops->open(z.t, &id, 0, &h);
			ck_assert_msg(rc == -EIO || rc == -ENOENT,
				      "%s: open of a file cut at %llu = %d", c->name,
				      (unsigned long long)len, rc);
		}
		ck_assert_int_eq(tu_lookup(z.t, &id, NULL), -ENOENT);
		ck_assert_int_eq(quarantine_files(&z, &id), 1);
	}
	zfix_close(&z);
	free(data);
}
END_TEST

/*
 * A reader of an old version that finds it damaged moves that version's file away, not the
 * file a newer commit has since put under the same name: the new version stays readable.
 */
START_TEST(test_compress_damaged_old_version_spares_new)
{
	const struct codec_cfg *c = &codecs[_i];
	struct zfix z;
	uint64_t rng = 12, size = 3 * CS + 5;
	struct blockid id = ut_id(1300);
	uint8_t *v1 = make_data(D_KV, size, 61), *v2 = make_data(D_KV, size, 62);
	struct disk_header hd;
	struct tier_handle *old;
	char path[PATH_MAX];
	int rc;

	zfix_open(&z, c, CS);
	ck_assert_int_eq(put_seq(z.t, &id, v1, size, &rng, CS), 0);
	ck_assert_int_eq(z.t->ops->open(z.t, &id, 0, &old), 0);
	block_file(&z, &id, path, sizeof(path));
	read_header(path, &hd);
	flip_byte(path, (off_t)(DISK_HEADER_SIZE + chunk_off(&hd, 1) + 100));
	/* a new version replaces the damaged one before anybody read it */
	ck_assert_int_eq(put_seq(z.t, &id, v2, size, &rng, CS), 0);
	rc = read_range(old, v1, size, CS + 10, 100, c->name);
	ck_assert_msg(rc == -EIO, "%s: read of the damaged old version = %d", c->name, rc);
	tier_close(old);
	ck_assert_int_eq(tu_lookup(z.t, &id, NULL), 0);
	ck_assert_msg(quarantine_files(&z, &id) == 0,
		      "%s: the new version's file was moved to quarantine (lookup finds it, "
		      "open = %d)", c->name, tu_try_read(z.t, &id, 0, size));
	check_block(z.t, &id, v2, size, &rng, CS, "the new version");
	zfix_close(&z);
	free(v1);
	free(v2);
}
END_TEST

/* One damaged file found by two readers (twice each) is one quarantined file, counted once. */
START_TEST(test_compress_damage_counted_once)
{
	const struct codec_cfg *c = &codecs[_i];
	struct zfix z;
	uint64_t rng = 13, size = 3 * CS + 5;
	struct blockid id = ut_id(1400);
	uint8_t *data = make_data(D_KV, size, 63);
	struct disk_header hd;
	struct tier_handle *h[2];
	char path[PATH_MAX];

	zfix_open(&z, c, CS);
	ck_assert_int_eq(put_seq(z.t, &id, data, size, &rng, CS), 0);
	block_file(&z, &id, path, sizeof(path));
	read_header(path, &hd);
	flip_byte(path, (off_t)(DISK_HEADER_SIZE + chunk_off(&hd, 2) + 100));
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(z.t->ops->open(z.t, &id, 0, &h[i]), 0);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(read_range(h[i % 2], data, size, 2 * CS + i, 10, c->name), -EIO);
	tier_close(h[0]);
	tier_close(h[1]);
	ck_assert_int_eq(quarantine_files(&z, &id), 1);
	ck_assert_msg(quarantined(&z) == 1, "%s: one damaged file counted %llu times", c->name,
		      (unsigned long long)quarantined(&z));
	zfix_close(&z);
	free(data);
}
END_TEST

enum table_damage {
	SWAP_LENGTHS,  /* the stored lengths of two chunks swapped */
	SWAP_ENTRIES,  /* two whole entries (length and checksum) swapped */
	SHIFT_LENGTH,  /* 100 bytes moved from one chunk's length to the next one's */
	SMALL_CHUNK_SIZE, /* the chunk size field 100 bytes smaller (still as many chunks) */
	BIG_CHUNK_SIZE,   /* the chunk size field 100 bytes larger (still as many chunks) */
	NDAMAGE
};

static const char *const damage_name[] = { "swapped lengths", "swapped entries",
					   "shifted length", "smaller chunk size",
					   "larger chunk size" };

/*
 * A chunk table that disagrees with the payload, with a valid header checksum: every read
 * through it gives the right bytes or -EIO (and the memory checkers see no overflow).
 * Reads that must touch a chunk the table misdescribes fail -EIO.
 */
static void wrong_table(const struct codec_cfg *c, enum table_damage dmg)
{
	struct zfix z;
	uint64_t rng = 9, size = 6 * CS + 777;
	struct blockid id = ut_id(1200 + dmg);
	uint8_t *data = make_data(D_KV, size, 8);
	struct disk_header hd;
	struct tier_handle *h;
	char path[PATH_MAX], what[128];
	uint32_t a = 0, b = 1;
	int rc;

	snprintf(what, sizeof(what), "%s, %s", c->name, damage_name[dmg]);
	zfix_open(&z, c, CS);
	ck_assert_int_eq(put_seq(z.t, &id, data, size, &rng, CS), 0);
	block_file(&z, &id, path, sizeof(path));
	read_header(path, &hd);
	ck_assert_uint_eq(hd.nchunks, 7);
	if (!c->zstd)
		b = 6; /* raw chunks all have the same length but the last */
	switch (dmg) {
	case SWAP_LENGTHS: {
		uint32_t t = hd.chunk[a].len;

		ck_assert_msg(hd.chunk[a].len != hd.chunk[b].len, "%s: equal lengths", what);
		hd.chunk[a].len = hd.chunk[b].len;
		hd.chunk[b].len = t;
		break;
	}
	case SWAP_ENTRIES: {
		struct disk_chunk t = hd.chunk[a];

		ck_assert_msg(hd.chunk[a].len != hd.chunk[b].len, "%s: equal lengths", what);
		hd.chunk[a] = hd.chunk[b];
		hd.chunk[b] = t;
		break;
	}
	case SHIFT_LENGTH:
		hd.chunk[0].len += 100;
		hd.chunk[1].len -= 100;
		break;
	case SMALL_CHUNK_SIZE:
		hd.chunk_size -= 100;
		break;
	default:
		hd.chunk_size += 100;
		break;
	}
	write_header(path, &hd);

	/* the disk tier may refuse such a header at open, or find the damage when it reads */
	rc = z.t->ops->open(z.t, &id, 0, &h);
	ck_assert_msg(rc == 0 || rc == -EIO, "%s: open = %d", what, rc);
	if (rc == 0) {
		/* a partial read in chunk 0, then the whole block, then each chunk */
		rc = read_range(h, data, size, 100, 1000, what);
		if (dmg != SMALL_CHUNK_SIZE && dmg != BIG_CHUNK_SIZE)
			ck_assert_msg(rc == -EIO, "%s: read in chunk 0 = %d", what, rc);
		rc = read_range(h, data, size, 0, size, what);
		if (c->zstd || (dmg != SMALL_CHUNK_SIZE && dmg != BIG_CHUNK_SIZE))
			ck_assert_msg(rc == -EIO, "%s: whole read = %d", what, rc);
		for (uint32_t i = 0; i < 7; i++) {
			rc = read_range(h, data, size, (uint64_t)i * CS + 5, 300, what);
			ck_assert_msg(rc == 0 || rc == -EIO, "%s: read in chunk %u = %d", what, i,
				      rc);
		}
		tier_close(h);
	}
	zfix_close(&z);
	free(data);
}

START_TEST(test_compress_wrong_chunk_table)
{
	wrong_table(&codecs[_i % NCODECS], (enum table_damage)(_i / NCODECS));
}
END_TEST

/* --- concurrency ------------------------------------------------------------------------ */

/* One of the threads reading one handle at once. */
struct reader_arg {
	struct tier_handle *h;
	const uint8_t *data;
	uint64_t size;
	atomic_uint *next; /* loader(): the next chunk no thread has taken */
	uint64_t seed;
	int bad; /* reads that failed or returned wrong bytes */
};

/* Read [off, off + len) through a->h into buf and count it bad unless it is the block's. */
static void check_range(struct reader_arg *a, uint8_t *buf, uint64_t off, uint64_t len)
{
	uint64_t want = off >= a->size ? 0 : (len < a->size - off ? len : a->size - off);
	ssize_t n = tier_read(a->h, buf, len, off);

	if (n != (ssize_t)want || memcmp(buf, a->data + off, (size_t)want))
		a->bad++;
}

/* Start `threads` threads of fn over h, each with its own seed, join them and check that
 * none read a wrong byte. */
static void read_in_threads(const char *name, void *(*fn)(void *), int threads,
			    struct tier_handle *h, const uint8_t *data, uint64_t size,
			    atomic_uint *next, uint64_t seed)
{
	struct reader_arg arg[8];
	pthread_t th[8];

	ck_assert_int_le(threads, 8);
	for (int i = 0; i < threads; i++) {
		arg[i] = (struct reader_arg){ .h = h, .data = data, .size = size, .next = next,
					      .seed = seed + (uint64_t)i };
		ck_assert_int_eq(pthread_create(&th[i], NULL, fn, &arg[i]), 0);
	}
	for (int i = 0; i < threads; i++) {
		pthread_join(th[i], NULL);
		ck_assert_msg(arg[i].bad == 0, "%s: thread %d: %d bad reads", name, i,
			      arg[i].bad);
	}
}

static void *reader(void *p)
{
	struct reader_arg *a = p;
	uint64_t rng = a->seed;
	uint8_t *buf = malloc(3 * CS + 1);

	for (int i = 0; buf && i < 300; i++) {
		uint64_t off, len;

		random_range(&rng, a->size, CS, &off, &len);
		check_range(a, buf, off, len > 3 * CS ? 3 * CS : len);
	}
	if (!buf)
		a->bad++;
	free(buf);
	return NULL;
}

/* Reads of one handle may run in parallel (tiers/tier.h): the chunk kept for partial reads
 * is shared, every reader still gets its own bytes. */
START_TEST(test_compress_parallel_reads_one_handle)
{
	enum { THREADS = 4 };
	const struct codec_cfg *c = &codecs[_i];
	struct zfix z;
	uint64_t rng = 15, size = 9 * CS + 333;
	struct blockid id = ut_id(1600);
	uint8_t *data = make_data(D_KV, size, 64);
	struct tier_handle *h;

	zfix_open(&z, c, CS);
	ck_assert_int_eq(put_seq(z.t, &id, data, size, &rng, CS), 0);
	ck_assert_int_eq(z.t->ops->open(z.t, &id, 0, &h), 0);
	read_in_threads(c->name, reader, THREADS, h, data, size, NULL, 100);
	tier_close(h);
	zfix_close(&z);
	free(data);
}
END_TEST

/* As the pipeline's threads load a block: take the next chunk not yet taken and read it whole;
 * now and then also one far behind, or a range across two chunks. */
static void *loader(void *p)
{
	struct reader_arg *a = p;
	uint64_t rng = a->seed, nchunks = (a->size + CS - 1) / CS;
	uint8_t *buf = malloc(2 * CS);
	unsigned i;

	while (buf && (i = atomic_fetch_add(a->next, 1)) < nchunks) {
		uint64_t offs[3] = { (uint64_t)i * CS, UINT64_MAX, UINT64_MAX };
		unsigned r = (unsigned)ut_rand(&rng) % 16;

		if (r == 0 && i >= 100)
			offs[1] = (uint64_t)(i - 100) * CS; /* behind every read-ahead window */
		else if (r == 1)
			offs[2] = (uint64_t)i * CS + CS / 2; /* half of this chunk, half the next */
		for (int k = 0; k < 3; k++)
			if (offs[k] < a->size)
				check_range(a, buf, offs[k], CS);
	}
	if (!buf)
		a->bad++;
	free(buf);
	return NULL;
}

/* A block read whole O_DIRECT (io=aio) the way a load reads it: from chunk 0, by three threads
 * in nearly the order of its chunks. The disk tier reads ahead of them in windows (chunks
 * straddle their edges, some reads come from behind them), or, opened with TIER_OPEN_RUNS,
 * not at all for a raw block; every byte is the block's. */
START_TEST(test_compress_streamed_aio_reads)
{
	enum { THREADS = 3 };
	const struct codec_cfg *c = &codecs[_i];
	struct zfix z;
	uint64_t rng = 21, size = 200 * CS + 4321;
	struct blockid id = ut_id(1700);
	uint8_t *data = make_data(D_KV, size, 65);
	struct tier_handle *h;

	zfix_open_io(&z, c, CS, true);
	ck_assert_int_eq(put_seq(z.t, &id, data, size, &rng, CS), 0);
	for (int pass = 0; pass < 3; pass++) {
		atomic_uint next = 0;

		ck_assert_int_eq(z.t->ops->open(z.t, &id, pass == 2 ? TIER_OPEN_RUNS : 0, &h), 0);
		read_in_threads(c->name, loader, THREADS, h, data, size, &next,
				10 * (uint64_t)pass);
		tier_close(h);
	}
	zfix_close(&z);
	free(data);
}
END_TEST

Suite *compress_suite(void)
{
	Suite *s = suite_create("compress");
	TCase *core = ut_tcase("core", UT_TIMEOUT), *errors = ut_tcase("errors", UT_TIMEOUT);
	TCase *conc = ut_tcase("concurrency", UT_TIMEOUT);

	tcase_add_loop_test(core, test_compress_round_trips, 0, NCODECS);
	tcase_add_loop_test(core, test_compress_reopen, 0, NCODECS);
	tcase_add_test(core, test_compress_chunk_sizes);
	tcase_add_test(core, test_compress_unsequenced_raw);
	tcase_add_loop_test(core, test_compress_counts_bytes, 0, NCODECS);
	tcase_add_test(core, test_compress_auto_picks_shuffle2);
	tcase_add_loop_test(core, test_compress_random_access_decodes_only_needed, 0, NZSTD);
	tcase_add_loop_test(errors, test_compress_damaged_chunk, 0, NCODECS);
	tcase_add_loop_test(errors, test_compress_damaged_last_chunk, 0, NCODECS);
	tcase_add_loop_test(errors, test_compress_damaged_whole_read, 0, NCODECS);
	tcase_add_loop_test(errors, test_compress_truncated_file, 0, NCODECS);
	tcase_add_loop_test(errors, test_compress_damaged_old_version_spares_new, 0, NCODECS);
	tcase_add_loop_test(errors, test_compress_damage_counted_once, 0, NCODECS);
	tcase_add_loop_test(errors, test_compress_wrong_chunk_table, 0, NCODECS * NDAMAGE);
	tcase_add_loop_test(conc, test_compress_parallel_reads_one_handle, 0, NCODECS);
	tcase_add_loop_test(conc, test_compress_streamed_aio_reads, 0, NCODECS);
	suite_add_tcase(s, core);
	suite_add_tcase(s, errors);
	suite_add_tcase(s, conc);
	return s;
}
