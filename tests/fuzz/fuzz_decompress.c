/*
 * Fuzzes the read path of the compress stage (tiers/compress.c: c_open(), c_read(),
 * decode_chunk(), unshuffle) fed damaged stored blocks, over a stand-in disk tier that keeps
 * one block in memory in the on-disk format of layout=native (tiers/posix_header.c) and, like
 * tiers/posix.c, refuses a header that does not decode and may check chunk checksums.
 *
 * The first input byte picks the mode:
 *   0  round trip: KV-like (or zero, random, mixed) data written through the compress tier
 *      as the pipeline's dump writes it (a TIER_RESERVE_SEQ reservation in pieces), read
 *      back, then damaged as the next bytes say and read again:
 *        payload bytes flipped, checksums checked (what ucmfs does),
 *        payload bytes flipped, checksums not checked (the decoder sees damaged frames),
 *        header bytes flipped,
 *        header fields changed and the header resealed (a crafted file);
 *   1  arbitrary bytes: the input is the stored payload of a compressed block whose chunk
 *      table the input also chooses, with correct checksums (the decoder sees the bytes).
 *
 * Properties:
 * - a block written whole reads back byte for byte, whole and in random ranges; its layout
 *   holds together (stored length == bytes written, no chunk longer than its raw bytes);
 * - a read never writes outside its buffer and returns the count asked for (clipped at the
 *   end of the block) or -EIO, never anything else and never a crash, whatever the damage;
 * - with checksums checked, a read after damage gives -EIO or exactly the original bytes;
 * - a changed header byte makes the block unreadable (open fails);
 * - a chunk stored raw (stored length == raw length) reads back as its stored bytes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "tests/fuzz/fuzz.h"
#include "tiers/compress.h"
#include "tiers/posix_header.h"
#include "tools/kvgen.h"

#define MAX_RAW (48u << 10)

/* --- a disk tier holding one block in memory -------------------------------------------- */

static struct {
	uint8_t hdr[DISK_HEADER_SIZE];
	uint8_t *payload;
	size_t len, cap;
	bool verify;         /* check chunk checksums on read, as tiers/posix.c does */
	unsigned reserves;   /* reservations not yet committed or aborted */
	unsigned opens;      /* read handles not yet closed */
} disk;

struct mhandle {
	struct tier_handle base;
	bool writer;
	struct disk_header hd;
	struct tier_chunk tab[DISK_MAX_CHUNKS];
	uint64_t coff[DISK_MAX_CHUNKS + 1];
};

static void md_destroy(struct tier *t)
{
}

static int md_reserve(struct tier *t, const struct blockid *id, unsigned flags, uint64_t hint,
		      struct tier_handle **out)
{
	struct mhandle *h = calloc(1, sizeof(*h));

	CHECK(h);
	CHECK(!(flags & TIER_RESERVE_SEQ)); /* the compress tier encodes; below sees bytes */
	h->base.tier = t;
	h->writer = true;
	h->hd.id = *id;
	disk.len = 0;
	disk.reserves++;
	*out = &h->base;
	return 0;
}

static ssize_t md_write(struct tier_handle *th, const void *buf, size_t len, uint64_t off)
{
	CHECK(((struct mhandle *)th)->writer);
	if (off + len > disk.cap) {
		size_t cap = off + len + 4096;
		uint8_t *p = realloc(disk.payload, cap);

		CHECK(p);
		disk.payload = p;
		disk.cap = cap;
	}
	if (off > disk.len)
		memset(disk.payload + disk.len, 0, off - disk.len);
	memcpy(disk.payload + off, buf, len);
	if (off + len > disk.len)
		disk.len = off + len;
	return (ssize_t)len;
}

static int md_commit(struct tier_handle *th, const struct block_meta *meta, unsigned flags,
		     struct tier_handle **rd)
{
	struct mhandle *h = (struct mhandle *)th;
	const struct block_layout *l = meta->layout;
	struct disk_header *hd = &h->hd;
	uint64_t total = 0;

	CHECK(h->writer && !rd);
	hd->raw_size = hd->stored_size = meta->size;
	hd->codec = CODEC_RAW;
	hd->mtime = meta->mtime;
	if (l) {
		/* what tiers/posix.c accepts (set_layout()), and what the format promises */
		CHECK(l->nchunks <= DISK_MAX_CHUNKS);
		CHECK(l->codec == CODEC_RAW || l->nchunks);
		CHECK(!l->nchunks == !l->chunk_size);
		for (uint32_t i = 0; i < l->nchunks; i++) {
			uint64_t rs = (uint64_t)i * l->chunk_size;
			uint64_t rlen = meta->size - rs < l->chunk_size ? meta->size - rs
									: l->chunk_size;

			CHECK(rs < meta->size);
			CHECK(l->chunk[i].len <= rlen);
			total += l->chunk[i].len;
		}
		CHECK(!l->nchunks || (uint64_t)l->nchunks * l->chunk_size >= meta->size);
		CHECK(total == l->stored);
		hd->codec = l->codec;
		hd->stored_size = l->stored;
		hd->chunk_size = l->chunk_size;
		hd->nchunks = l->nchunks;
		for (uint32_t i = 0; i < l->nchunks; i++) {
			hd->chunk[i].len = l->chunk[i].len;
			hd->chunk[i].csum = l->chunk[i].csum;
		}
	}
	/* the tier below holds exactly the stored bytes, and the checksums are theirs */
	CHECK(disk.len == hd->stored_size);
	total = 0;
	for (uint32_t i = 0; i < hd->nchunks; i++) {
		uint32_t len = hd->chunk[i].len;

		CHECK(hd->chunk[i].csum == XXH3_64bits(disk.payload + total, len));
		total += len;
	}
	hd->csum = XXH3_64bits(disk.payload, disk.len);
	disk_header_encode(hd, disk.hdr);
	disk.reserves--;
	free(h);
	return 0;
}

static void md_abort(struct tier_handle *th)
{
	disk.reserves--;
	free(th);
}

static int md_open(struct tier *t, const struct blockid *id, unsigned flags,
		   struct tier_handle **out)
{
	struct mhandle *h = calloc(1, sizeof(*h));

	CHECK(h);
	h->base.tier = t;
	if (disk_header_decode(disk.hdr, &h->hd) || disk.len < h->hd.stored_size) {
		free(h);
		return -EIO; /* tiers/posix.c quarantines it */
	}
	for (uint32_t i = 0; i < h->hd.nchunks; i++) {
		h->tab[i].len = h->hd.chunk[i].len;
		h->tab[i].csum = h->hd.chunk[i].csum;
		h->coff[i + 1] = h->coff[i] + h->hd.chunk[i].len;
	}
	disk.opens++;
	*out = &h->base;
	return 0;
}

static ssize_t md_read(struct tier_handle *th, void *buf, size_t len, uint64_t off)
{
	struct mhandle *h = (struct mhandle *)th;
	uint64_t size = h->writer ? disk.len : h->hd.stored_size, end;

	if (off >= size)
		return 0;
	if (len > size - off)
		len = (size_t)(size - off);
	end = off + len;
	if (!h->writer && disk.verify) {
		if (!h->hd.nchunks && XXH3_64bits(disk.payload, size) != h->hd.csum)
			return -EIO;
		for (uint32_t i = 0; i < h->hd.nchunks; i++) {
			if (h->coff[i + 1] <= off || h->coff[i] >= end)
				continue;
			if (XXH3_64bits(disk.payload + h->coff[i], h->tab[i].len) != h->tab[i].csum)
				return -EIO;
		}
	}
	memcpy(buf, disk.payload + off, len);
	return (ssize_t)len;
}

static int md_layout(struct tier_handle *th, struct block_layout *out)
{
	struct mhandle *h = (struct mhandle *)th;

	memset(out, 0, sizeof(*out));
	out->codec = h->hd.codec;
	out->chunk_size = h->hd.chunk_size;
	out->nchunks = h->hd.nchunks;
	out->stored = h->hd.stored_size;
	out->chunk = h->tab;
	return 0;
}

static int md_stat(struct tier_handle *th, struct block_attr *a)
{
	struct mhandle *h = (struct mhandle *)th;

	memset(a, 0, sizeof(*a));
	a->size = h->writer ? disk.len : h->hd.raw_size;
	a->stored = h->writer ? disk.len : h->hd.stored_size;
	a->codec = h->hd.codec;
	a->where = TIER_DISK;
	return 0;
}

static void md_close(struct tier_handle *th)
{
	CHECK(!((struct mhandle *)th)->writer);
	disk.opens--;
	free(th);
}

static const struct tier_ops md_ops = {
	.name = "memdisk",
	.destroy = md_destroy,
	.open = md_open,
	.read = md_read,
	.layout = md_layout,
	.stat = md_stat,
	.close = md_close,
	.reserve = md_reserve,
	.write = md_write,
	.commit = md_commit,
	.abort = md_abort,
};

static struct tier md_tier = { .ops = &md_ops };

/* --- the compress tiers under test ------------------------------------------------------- */

static const struct compress_config configs[] = {
	{ .zstd = true, .level = 1, .shuffle = 0, .chunk_size = 4096 },
	{ .zstd = true, .level = 1, .shuffle = 1, .chunk_size = 4096 },
	{ .zstd = true, .level = 1, .shuffle = 2, .chunk_size = 8192 },
	{ .zstd = true, .level = 1, .shuffle = 4, .chunk_size = 12288 },
	{ .zstd = true, .level = -5, .shuffle = 2, .chunk_size = 4096 },
	{ .zstd = true, .level = 3, .shuffle = 0, .chunk_size = 16384 },
	{ .zstd = false, .level = 1, .shuffle = 0, .chunk_size = 4096 },
	{ .zstd = true, .level = 1, .shuffle = 2, .chunk_size = 0 }, /* the default, 256 KiB */
};
#define NCONFIGS (sizeof(configs) / sizeof(configs[0]))

static struct tier *ctiers[NCONFIGS];
static const struct blockid the_id = { { 0xab, 0xcd, 0xef } };

/* --- data and reads ---------------------------------------------------------------------- */

static void make_data(uint8_t *buf, size_t n, uint8_t kind, uint64_t seed)
{
	uint64_t s = seed;

	switch (kind % 5) {
	case 0: /* KV-like bf16 */
		kvgen_fill(buf, n, seed);
		break;
	case 1: /* zeros: every chunk compresses to almost nothing */
		memset(buf, 0, n);
		break;
	case 2: /* random: stored raw */
		for (size_t i = 0; i < n; i++)
			buf[i] = (uint8_t)fz_rand(&s);
		break;
	case 3: /* KV-like with a random stretch: some chunks raw inside a compressed block */
		kvgen_fill(buf, n, seed);
		for (size_t i = n / 3; i < n / 3 + n / 4; i++)
			buf[i] = (uint8_t)fz_rand(&s);
		break;
	default: /* a small alphabet */
		for (size_t i = 0; i < n; i++)
			buf[i] = (uint8_t)("ucmfs"[fz_rand(&s) % 5]);
		break;
	}
}

/*
 * Read [off, off + len) through h into a guarded buffer. The result must be the count (the
 * range clipped at size) or -EIO; with want != NULL and exact, the bytes must be want's.
 * Returns the result.
 */
static ssize_t read_check(struct tier_handle *h, uint64_t size, uint64_t off, size_t len,
			  const uint8_t *want, bool exact)
{
	uint8_t *buf = fz_guarded(len);
	size_t count = off >= size ? 0 : (size - off < len ? (size_t)(size - off) : len);
	ssize_t n = tier_read(h, buf, len, off);

	CHECK(fz_guard_ok(buf, len));
	CHECK(n == -EIO || n == (ssize_t)count);
	if (exact)
		CHECK(n == (ssize_t)count);
	if (want && n >= 0)
		CHECK(!memcmp(buf, want + off, count));
	free(buf);
	return n;
}

/* Whole, then a few ranges from the input (f may be NULL; once it is used up, made up). */
static void read_all_ways(struct tier *t, uint64_t size, const uint8_t *want, bool exact,
			  struct fin *f)
{
	struct fin none = { NULL, 0 };
	struct tier_handle *h;
	uint64_t s = size;
	int rc = t->ops->open(t, &the_id, 0, &h);

	if (!f)
		f = &none;

	if (exact)
		CHECK(rc == 0);
	if (rc) {
		CHECK(rc == -EIO);
		return;
	}
	read_check(h, size, 0, size > MAX_RAW * 2 ? MAX_RAW * 2 : (size_t)size, want, exact);
	for (int i = 0; i < 6; i++) {
		uint64_t off = f->n ? fin_u32(f) : fz_rand(&s);
		size_t len = f->n ? fin_u16(f) : (size_t)(fz_rand(&s) % 9000);

		off %= size + 100;
		read_check(h, size, off, len, want, exact);
	}
	/* consecutive small reads: the decoded chunk kept with the handle */
	for (uint64_t off = 0; off < size && off < 3 * 4096 + 100; off += 1000)
		read_check(h, size, off, 1000, want, exact);
	tier_close(h);
}

/* Write n bytes of src through t as the pipeline's dump does. */
static void write_block(struct tier *t, const uint8_t *src, size_t n, uint64_t seed)
{
	struct tier_handle *w;
	struct block_meta m = { .size = n, .mtime = 1 };
	size_t off = 0;

	CHECK(t->ops->reserve(t, &the_id, TIER_RESERVE_SEQ, n, &w) == 0);
	while (off < n) {
		size_t piece = 1 + fz_rand(&seed) % (seed & 1 ? 20000 : 5000);

		if (piece > n - off)
			piece = n - off;
		CHECK(t->ops->write(w, src + off, piece, off) == (ssize_t)piece);
		off += piece;
	}
	CHECK(t->ops->commit(w, &m, 0, NULL) == 0);
	CHECK(disk.reserves == 0);
}

/* Reseal the header after changing fields of hd (a file crafted to pass the checksum). */
static void craft_header(struct fin *f)
{
	static const uint32_t codecs[] = { CODEC_RAW, CODEC_ZSTD_PLAIN, CODEC_ZSTD_SHUF2,
					   CODEC_ZSTD_SHUF4 };
	struct disk_header *hd = calloc(1, sizeof(*hd));
	uint64_t sum;

	CHECK(hd);
	CHECK(disk_header_decode(disk.hdr, hd) == 0);
	for (int k = 0; k < 8 && f->n; k++) {
		uint8_t op = fin_u8(f);
		uint32_t v = fin_u32(f);

		switch (op % 8) {
		case 0: hd->codec = op & 8 ? v : codecs[v % 4]; break;
		case 1: hd->chunk_size = op & 8 ? v : 4096 * (v % 5); break;
		case 2: hd->nchunks = v % (DISK_MAX_CHUNKS + 1); break;
		case 3: hd->raw_size = op & 8 ? v : hd->raw_size + (int32_t)v % 9000; break;
		case 4:
			if (hd->nchunks)
				hd->chunk[(v >> 16) % hd->nchunks].len = op & 8 ? v : v & 0x3fff;
			break;
		case 5: /* make the stored size agree with the table */
			sum = 0;
			for (uint32_t i = 0; i < hd->nchunks && i < DISK_MAX_CHUNKS; i++)
				sum += hd->chunk[i].len;
			hd->stored_size = sum;
			break;
		case 6: /* make the table cover the raw size */
			if (hd->chunk_size)
				hd->nchunks = (uint32_t)((hd->raw_size + hd->chunk_size - 1) /
							 hd->chunk_size);
			if (hd->nchunks > DISK_MAX_CHUNKS)
				hd->nchunks = DISK_MAX_CHUNKS;
			break;
		default: /* checksums that match what is stored, so that reads reach the codec */
			sum = 0;
			for (uint32_t i = 0; i < hd->nchunks && i < DISK_MAX_CHUNKS; i++) {
				if (sum + hd->chunk[i].len <= disk.len)
					hd->chunk[i].csum = XXH3_64bits(disk.payload + sum,
									hd->chunk[i].len);
				sum += hd->chunk[i].len;
			}
			break;
		}
	}
	disk_header_encode(hd, disk.hdr);
	free(hd);
}

static void round_trip(struct fin *f)
{
	struct tier *t = ctiers[fin_u8(f) % NCONFIGS];
	uint8_t kind = fin_u8(f), damage = fin_u8(f) % 5;
	size_t n = fin_u16(f) % (MAX_RAW + 1);
	uint64_t seed = fin_u8(f);
	uint8_t *src = malloc(n ? n : 1);
	struct disk_header *hd = malloc(sizeof(*hd));

	CHECK(src && hd);
	make_data(src, n, kind, seed);
	disk.verify = true;
	write_block(t, src, n, seed ^ kind);
	CHECK(disk_header_decode(disk.hdr, hd) == 0);
	CHECK(hd->raw_size == n && hd->stored_size <= n);
	read_all_ways(t, n, src, true, NULL); /* the rest of the input is for the damage */

	switch (damage) {
	case 0: /* none: the reads above were the test */
		break;
	case 1: /* payload flips, checksums checked: -EIO or the right bytes */
	case 2: /* payload flips, checksums not checked: the decoder sees damaged frames */
		for (int k = 0; k < 16 && f->n >= 3 && disk.len; k++) {
			uint16_t at = fin_u16(f);
			uint8_t x = fin_u8(f);

			disk.payload[at % disk.len] ^= x ? x : 1;
		}
		disk.verify = damage == 1;
		read_all_ways(t, n, damage == 1 ? src : NULL, false, f);
		break;
	case 3: { /* a header byte changed: unreadable */
		struct tier_handle *h;
		uint16_t at = fin_u16(f) % DISK_HEADER_SIZE;
		uint8_t x = fin_u8(f);

		disk.hdr[at] ^= x ? x : 0x80;
		CHECK(t->ops->open(t, &the_id, 0, &h) == -EIO);
		break;
	}
	default: /* crafted header fields, optionally damaged payload */
		craft_header(f);
		disk.verify = f->n && (fin_u8(f) & 1);
		if (disk_header_decode(disk.hdr, hd) == 0)
			read_all_ways(t, hd->raw_size, NULL, false, f);
		break;
	}
	CHECK(disk.opens == 0);
	free(src);
	free(hd);
}

/* The input as the stored payload of a compressed block, with a table it chooses. */
static void arbitrary(struct fin *f)
{
	static const uint32_t codecs[] = { CODEC_ZSTD_PLAIN, CODEC_ZSTD_SHUF2, CODEC_ZSTD_SHUF4 };
	struct tier *t = ctiers[fin_u8(f) % NCONFIGS];
	struct disk_header *hd = calloc(1, sizeof(*hd));
	struct tier_handle *h;
	uint64_t off = 0, count;
	uint8_t *buf;
	ssize_t n;

	CHECK(hd);
	hd->id = the_id;
	hd->codec = codecs[fin_u8(f) % 3];
	hd->chunk_size = 4096u * (1 + fin_u8(f) % 4);
	hd->nchunks = 1 + fin_u8(f) % 4;
	hd->raw_size = (uint64_t)(hd->nchunks - 1) * hd->chunk_size + 1 +
		       fin_u16(f) % hd->chunk_size;
	for (uint32_t i = 0; i + 1 < hd->nchunks; i++)
		hd->chunk[i].len = fin_u16(f);
	/* the rest of the input is the payload: each chunk as long as its table entry says
	 * (at most its raw length), the last one what remains */
	for (uint32_t i = 0; i < hd->nchunks; i++) {
		uint64_t rs = (uint64_t)i * hd->chunk_size;
		uint64_t rlen = hd->raw_size - rs < hd->chunk_size ? hd->raw_size - rs
								  : hd->chunk_size;
		uint64_t len = i + 1 < hd->nchunks ? hd->chunk[i].len % (rlen + 1) : rlen;

		if (len > f->n - off)
			len = f->n - off;
		hd->chunk[i].len = (uint32_t)len;
		off += len;
	}
	if (off > disk.cap) {
		disk.payload = realloc(disk.payload, off);
		CHECK(disk.payload);
		disk.cap = off;
	}
	if (off)
		memcpy(disk.payload, f->p, off);
	f->p += off;
	f->n -= off;
	disk.len = off;
	hd->stored_size = off;
	off = 0;
	for (uint32_t i = 0; i < hd->nchunks; i++) {
		hd->chunk[i].csum = XXH3_64bits(disk.payload + off, hd->chunk[i].len);
		off += hd->chunk[i].len;
	}
	hd->csum = XXH3_64bits(disk.payload, disk.len);
	disk_header_encode(hd, disk.hdr);
	disk.verify = true;
	CHECK(t->ops->open(t, &the_id, 0, &h) == 0);
	count = hd->raw_size;
	buf = fz_guarded(count);
	n = tier_read(h, buf, count, 0);
	CHECK(fz_guard_ok(buf, count));
	CHECK(n == -EIO || n == (ssize_t)count);
	if (n >= 0) {
		/* a chunk whose stored length is its raw length is stored raw */
		off = 0;
		for (uint32_t i = 0; i < hd->nchunks; i++) {
			uint64_t rs = (uint64_t)i * hd->chunk_size;
			uint64_t rlen = count - rs < hd->chunk_size ? count - rs : hd->chunk_size;

			if (hd->chunk[i].len == rlen)
				CHECK(!memcmp(buf + rs, disk.payload + off, rlen));
			off += hd->chunk[i].len;
		}
	}
	free(buf);
	tier_close(h);
	read_all_ways(t, hd->raw_size, NULL, false, f);
	free(hd);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	uint8_t *buf = malloc(MAX_RAW);
	uint8_t warm[] = { 0, 0, 0, 0, 0xff, 0xbf, 7 };

	CHECK(buf);
	for (size_t i = 0; i < NCONFIGS; i++)
		CHECK(compress_create(&configs[i], &md_tier, &ctiers[i]) == 0);
	/* this thread's zstd contexts and scratch buffers, made once outside the inputs */
	for (size_t i = 0; i < NCONFIGS; i++) {
		struct fin f = { warm, sizeof(warm) };

		warm[0] = (uint8_t)i;
		make_data(buf, MAX_RAW, 0, 1);
		round_trip(&f);
	}
	free(buf);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fin f = { data, size };

	if (fin_u8(&f) & 1)
		arbitrary(&f);
	else
		round_trip(&f);
	return 0;
}
