/*
 * The compress stage: between memory and disk, so hot blocks are never compressed.
 *
 * DESIGN
 *
 * A block is stored as independent chunks of chunk_size raw bytes (the last may be shorter),
 * each compressed on its own and listed in the block's chunk table (stored length and
 * checksum), so a read of one shard of a cold block reads and decodes only the chunks it
 * covers. A chunk that does not shrink by at least 1/32 is stored raw (its stored length then
 * equals its raw length). The codec of a block is chosen once, on its first chunk (up to 256 KiB):
 * zstd on the plain bytes, or zstd after a byte-plane shuffle of width 2 or 4 (shuffle=auto
 * tries both widths and keeps the smallest); if the sample does not shrink by 1/32 at all,
 * the whole block is stored raw without trying the other chunks.
 *
 * Writes come in two kinds. A reservation made with TIER_RESERVE_SEQ (the pipeline's dump of
 * a committed block from memory) is encoded as it arrives: every full chunk is compressed and
 * written below at once, so commit only adds the header. Any other reservation (a block that
 * did not fit in memory and is written straight to disk) is passed through raw.
 * A sequential reservation that is hurried (someone waits for it to be on disk while other
 * dumps keep the CPU busy, tiers/pipeline_jobs.c) stores its chunks still to come raw, under
 * the codec already chosen; the pipeline writes such a block again later.
 *
 * Reads of a compressed block check each chunk (the disk tier verifies its checksum), decode
 * it and copy out the range asked for; the last chunk decoded for a partial read is kept with
 * the handle for the next one. Blocks stored raw are passed through untouched.
 *
 * Threads: every thread that encodes or decodes owns its zstd contexts and scratch buffers
 * (thread-specific data, freed when the thread exits); nothing here takes a lock.
 */
#include "tiers/compress.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "src/buf.h"
#include "src/hash.h"
#include "src/metrics.h"
#include "src/options.h"
#include "tiers/posix_header.h"
#include "tiers/shuffle.h"

#define DEFAULT_CHUNK (256u << 10)
/* The codec is chosen on the whole first chunk: zstd codes 128 KiB blocks with one entropy
 * table each, so a smaller sample cannot tell the codecs apart. */
#define SAMPLE (256u << 10)

struct ctier {
	struct tier tier;
	struct tier *below;
	bool zstd;
	int level;
	unsigned shuffle;
	uint32_t chunk_size;
	atomic_uint_fast64_t raw_bytes, stored_bytes, chunks_decoded;
};

/* What both kinds of handle start with. */
struct chandle {
	struct tier_handle base;
	struct tier_handle *lh;  /* the handle below */
	bool writer;
};

struct cwh { /* write handle */
	struct tier_handle base;
	struct tier_handle *lh;  /* the reservation below */
	bool writer;             /* true */
	bool seq;                /* encoding as it arrives */
	bool decided;            /* codec chosen */
	uint32_t codec;
	uint32_t chunk_size;
	uint64_t next;           /* next raw offset expected */
	char *pend;              /* partial chunk */
	uint32_t npend;
	struct tier_chunk *tab;
	uint32_t ntab, cap;
	uint64_t stored;         /* payload bytes written below */
	bool all_raw;            /* every chunk so far stored raw */
	bool hurried;            /* c_hurry(): the chunks still to come are stored raw */
	int err;
};

struct crh { /* read handle */
	struct tier_handle base;
	struct tier_handle *lh;
	bool writer;             /* false */
	struct block_layout lay;
	uint64_t size;           /* raw size */
	uint64_t *soff;          /* stored offset of each chunk */
	pthread_mutex_t lock;    /* reads may run in parallel: protects dec and dec_chunk */
	char *dec;               /* the last chunk decoded for a partial read */
	uint32_t dec_chunk;
};

static struct ctier *ct_of(struct tier *t)
{
	return t->priv;
}

/* --- per-thread zstd contexts and scratch ------------------------------------------------ */

struct tls {
	ZSTD_CCtx *cctx;
	ZSTD_DCtx *dctx;
	char *buf[2];
	size_t len[2];
};

static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;

static void tls_free(void *p)
{
	struct tls *t = p;

	if (!t)
		return;
	ZSTD_freeCCtx(t->cctx);
	ZSTD_freeDCtx(t->dctx);
	free(t->buf[0]);
	free(t->buf[1]);
	free(t);
}

static void tls_make_key(void)
{
	pthread_key_create(&tls_key, tls_free);
}

static struct tls *tls_get(void)
{
	struct tls *t;

	pthread_once(&tls_once, tls_make_key);
	t = pthread_getspecific(tls_key);
	if (t)
		return t;
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->cctx = ZSTD_createCCtx();
	t->dctx = ZSTD_createDCtx();
	if (!t->cctx || !t->dctx || pthread_setspecific(tls_key, t)) {
		tls_free(t);
		return NULL;
	}
	return t;
}

/* Scratch buffer i of at least n bytes, or NULL. */
/* Scratch buffer i of this thread, at least n bytes, 4 KiB-aligned so that a read of stored
 * bytes into it goes straight from the disk (O_DIRECT). Its contents are not kept. It grows
 * by powers of two: blocks' stored sizes differ a little, and each new buffer is fresh memory
 * to fault in. From BUF_HUGE on it is made of huge pages, as the IO engine's own memory is
 * (tiers/io.c, "Writes"): the disk read all the stored bytes of a prefetched block into 4
 * KiB pages at a third of its rate into huge pages (a prefetch of 1 GiB of zstd blocks
 * loaded 1.0 GB/s, now 1.5-1.8; docs/BENCHMARKS.md). */
static char *scratch(struct tls *t, int i, size_t n)
{
	if (t->len[i] < n) {
		size_t cap = 64u << 10;
		void *p;

		while (cap < n)
			cap *= 2;
		if (!(p = buf_io_alloc(cap)))
			return NULL;
		free(t->buf[i]);
		t->buf[i] = p;
		t->len[i] = cap;
	}
	return t->buf[i];
}

static unsigned codec_width(uint32_t codec)
{
	return codec == CODEC_ZSTD_SHUF2 ? 2 : codec == CODEC_ZSTD_SHUF4 ? 4 : 1;
}

/*
 * Compress n bytes of src with codec into t->buf[0]. Returns the compressed length, or n if
 * the result would not be smaller by 1/32 (the chunk is then stored raw), or -errno.
 */
static ssize_t encode(struct tls *t, int level, uint32_t codec, const char *src, size_t n)
{
	size_t bound = ZSTD_compressBound(n), z;
	unsigned w = codec_width(codec);
	char *dst = scratch(t, 0, bound);
	const char *in = src;

	if (!dst)
		return -ENOMEM;
	if (w > 1) {
		char *sh = scratch(t, 1, n);

		if (!sh)
			return -ENOMEM;
		shuffle_bytes(sh, src, n, w);
		in = sh;
	}
	z = ZSTD_compressCCtx(t->cctx, dst, bound, in, n, level);
	if (ZSTD_isError(z) || z >= n - n / 32)
		return (ssize_t)n;
	return (ssize_t)z;
}

/* Choose a block's codec from a sample of its first chunk. */
static uint32_t choose_codec(struct ctier *c, struct tls *t, const char *src, size_t n)
{
	static const uint32_t tries[] = { CODEC_ZSTD_PLAIN, CODEC_ZSTD_SHUF2, CODEC_ZSTD_SHUF4 };
	size_t sample = n < SAMPLE ? n : SAMPLE;
	uint32_t best = CODEC_RAW;
	ssize_t best_len = (ssize_t)sample;

	if (!c->zstd || n == 0)
		return CODEC_RAW;
	if (c->shuffle == 1)
		return CODEC_ZSTD_PLAIN;
	if (c->shuffle == 2)
		return CODEC_ZSTD_SHUF2;
	if (c->shuffle == 4)
		return CODEC_ZSTD_SHUF4;
	for (size_t i = 0; i < sizeof(tries) / sizeof(tries[0]); i++) {
		ssize_t z = encode(t, c->level, tries[i], src, sample);

		if (z > 0 && z < best_len) {
			best_len = z;
			best = tries[i];
		}
	}
	return best;
}

/* --- writing ----------------------------------------------------------------------------- */

static int add_chunk(struct cwh *w, uint32_t len, uint64_t csum)
{
	if (w->ntab == w->cap) {
		uint32_t cap = w->cap ? w->cap * 2 : 16;
		struct tier_chunk *v = realloc(w->tab, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		w->tab = v;
		w->cap = cap;
	}
	w->tab[w->ntab].len = len;
	w->tab[w->ntab].csum = csum;
	w->ntab++;
	return 0;
}

/* Encode one chunk of n raw bytes and write it below. */
static int encode_chunk(struct ctier *c, struct cwh *w, const char *src, uint32_t n)
{
	struct tls *t = tls_get();
	const char *out = src;
	ssize_t z = n, wr;
	int rc;

	if (!t)
		return -ENOMEM;
	if (!w->decided && !w->hurried) {
		w->codec = choose_codec(c, t, src, n);
		w->decided = true;
	}
	if (w->codec != CODEC_RAW && !w->hurried) {
		z = encode(t, c->level, w->codec, src, n);
		if (z < 0)
			return (int)z;
		if (z < n)
			out = t->buf[0];
	}
	if (w->ntab >= DISK_MAX_CHUNKS)
		return -EFBIG;
	wr = w->lh->tier->ops->write(w->lh, out, (size_t)z, w->stored);
	if (wr < 0)
		return (int)wr;
	rc = add_chunk(w, (uint32_t)z, hash64(out, (size_t)z));
	if (rc)
		return rc;
	if (z < n)
		w->all_raw = false;
	w->stored += (uint64_t)z;
	atomic_fetch_add(&c->raw_bytes, n);
	atomic_fetch_add(&c->stored_bytes, (uint64_t)z);
	return 0;
}

/* Raw bytes per chunk for a block of `size`: the default, or more so the table fits. */
static uint32_t chunk_size_for(const struct ctier *c, uint64_t size)
{
	uint64_t cs = c->chunk_size;

	if (size > cs * DISK_MAX_CHUNKS)
		cs = (size + DISK_MAX_CHUNKS - 1) / DISK_MAX_CHUNKS;
	return (uint32_t)((cs + 4095) & ~4095ull);
}

static int c_reserve(struct tier *t, const struct blockid *id, unsigned flags, uint64_t size_hint,
		     struct tier_handle **out)
{
	struct ctier *c = ct_of(t);
	struct cwh *w = calloc(1, sizeof(*w));
	int rc;

	if (!w)
		return -ENOMEM;
	w->base.tier = t;
	w->writer = true;
	w->all_raw = true;
	w->seq = (flags & TIER_RESERVE_SEQ) != 0;
	/* encoded as it arrives: what goes below is at most the raw size, often much less */
	flags &= ~TIER_RESERVE_SEQ;
	rc = c->below->ops->reserve(c->below, id, w->seq ? flags | TIER_RESERVE_SHRINK : flags,
				    size_hint, &w->lh);
	if (rc) {
		free(w);
		return rc;
	}
	w->chunk_size = chunk_size_for(c, size_hint);
	*out = &w->base;
	return 0;
}

static ssize_t c_write(struct tier_handle *th, const void *buf, size_t len, uint64_t off)
{
	struct cwh *w = (struct cwh *)th;
	struct ctier *c = ct_of(th->tier);
	const char *src = buf;
	size_t left = len;
	int rc = 0;

	if (!w->seq)
		return w->lh->tier->ops->write(w->lh, buf, len, off);
	if (w->err)
		return w->err;
	if (off != w->next)
		return -EINVAL; /* a sequential reservation written out of order */
	while (left && rc == 0) {
		if (w->npend == 0 && left >= w->chunk_size) {
			rc = encode_chunk(c, w, src, w->chunk_size);
			src += w->chunk_size;
			left -= w->chunk_size;
			continue;
		}
		if (!w->pend && !(w->pend = malloc(w->chunk_size))) {
			rc = -ENOMEM;
			break;
		}
		size_t take = w->chunk_size - w->npend < left ? w->chunk_size - w->npend : left;

		memcpy(w->pend + w->npend, src, take);
		w->npend += (uint32_t)take;
		src += take;
		left -= take;
		if (w->npend == w->chunk_size) {
			rc = encode_chunk(c, w, w->pend, w->npend);
			w->npend = 0;
		}
	}
	if (rc) {
		w->err = rc;
		return rc;
	}
	w->next += len;
	return (ssize_t)len;
}

/* Someone waits: the chunks still to come go below as they are. Worth writing again later
 * unless the block was found incompressible anyway. */
static bool c_hurry(struct tier_handle *th)
{
	struct cwh *w = (struct cwh *)th;
	bool was = w->hurried;

	if (!w->seq || !ct_of(th->tier)->zstd)
		return false;
	w->hurried = true;
	return !was && !(w->decided && w->codec == CODEC_RAW);
}

static int c_truncate(struct tier_handle *th, uint64_t size)
{
	struct cwh *w = (struct cwh *)th;

	if (!w->seq)
		return w->lh->tier->ops->truncate(w->lh, size);
	return size == w->next ? 0 : -EINVAL;
}

static void free_writer(struct cwh *w)
{
	free(w->pend);
	free(w->tab);
	free(w);
}

static int c_commit(struct tier_handle *th, const struct block_meta *meta, unsigned flags,
		    struct tier_handle **rd)
{
	struct cwh *w = (struct cwh *)th;
	struct ctier *c = ct_of(th->tier);
	struct block_layout lay;
	struct block_meta m = *meta;
	int rc = w->err;

	if (rd)
		*rd = NULL;
	if (!w->seq) {
		rc = w->lh->tier->ops->commit(w->lh, meta, flags, NULL);
		free_writer(w);
		return rc;
	}
	if (rc == 0 && w->npend)
		rc = encode_chunk(c, w, w->pend, w->npend);
	if (rc == 0 && w->next != meta->size)
		rc = -EIO; /* the block was not written whole */
	if (rc) {
		w->lh->tier->ops->abort(w->lh);
		free_writer(w);
		return rc;
	}
	lay.codec = w->all_raw ? CODEC_RAW : w->codec;
	lay.chunk_size = w->ntab ? w->chunk_size : 0; /* an empty block has no chunks */
	lay.nchunks = w->ntab;
	lay.stored = w->stored;
	lay.chunk = w->tab;
	m.layout = &lay;
	rc = w->lh->tier->ops->commit(w->lh, &m, flags, NULL);
	free_writer(w);
	return rc;
}

static void c_abort(struct tier_handle *th)
{
	struct cwh *w = (struct cwh *)th;

	w->lh->tier->ops->abort(w->lh);
	free_writer(w);
}

/* --- reading ----------------------------------------------------------------------------- */

static int c_open(struct tier *t, const struct blockid *id, unsigned flags,
		  struct tier_handle **out)
{
	struct ctier *c = ct_of(t);
	struct crh *h = calloc(1, sizeof(*h));
	struct block_attr a;
	int rc;

	if (!h)
		return -ENOMEM;
	h->base.tier = t;
	h->dec_chunk = UINT32_MAX;
	rc = c->below->ops->open(c->below, id, flags, &h->lh);
	if (rc) {
		free(h);
		return rc;
	}
	pthread_mutex_init(&h->lock, NULL);
	c->below->ops->stat(h->lh, &a);
	h->size = a.size;
	memset(&h->lay, 0, sizeof(h->lay));
	if (c->below->ops->layout)
		c->below->ops->layout(h->lh, &h->lay);
	if (h->lay.codec != CODEC_RAW) {
		h->soff = malloc((h->lay.nchunks + 1) * sizeof(*h->soff));
		if (!h->soff) {
			tier_close(h->lh);
			pthread_mutex_destroy(&h->lock);
			free(h);
			return -ENOMEM;
		}
		h->soff[0] = 0;
		for (uint32_t i = 0; i < h->lay.nchunks; i++)
			h->soff[i + 1] = h->soff[i] + h->lay.chunk[i].len;
	}
	*out = &h->base;
	return 0;
}

/* Decode chunk i, whose slen stored bytes are at src, into rlen bytes at dst. 0, -EIO. */
static int decode_stored(struct ctier *c, struct crh *h, struct tls *t, uint32_t i,
			 const char *src, char *dst, size_t rlen)
{
	uint32_t slen = h->lay.chunk[i].len;
	unsigned w = codec_width(h->lay.codec);
	char *d;
	size_t z;

	atomic_fetch_add(&c->chunks_decoded, 1);
	if (slen == rlen) {
		memcpy(dst, src, rlen); /* stored raw */
		return 0;
	}
	d = w > 1 ? scratch(t, 1, rlen) : dst;
	if (!d)
		return -ENOMEM;
	z = ZSTD_decompressDCtx(t->dctx, d, rlen, src, slen);
	if (ZSTD_isError(z) || z != rlen) {
		/* right checksums, wrong content (a writer's bug, another codec version): the
		 * file is damaged all the same, never to be tried again */
		if (h->lh->tier->ops->damaged)
			h->lh->tier->ops->damaged(h->lh, "a chunk does not decode");
		return -EIO;
	}
	if (w > 1)
		unshuffle_bytes(dst, d, rlen, w);
	return 0;
}

/* Read the stored bytes of chunks [i, j) with one read below (one deep request; the disk
 * tier checks every chunk) and decode them into dst, which holds their raw bytes. */
static int decode_chunks(struct ctier *c, struct crh *h, uint32_t i, uint32_t j, char *dst)
{
	struct tls *t = tls_get();
	uint64_t slen = h->soff[j] - h->soff[i], cs = h->lay.chunk_size;
	char *s;
	ssize_t n;

	if (!t || !(s = scratch(t, 0, slen ? (size_t)slen : 1)))
		return -ENOMEM;
	n = tier_read(h->lh, s, (size_t)slen, h->soff[i]);
	if (n != (ssize_t)slen)
		return n < 0 ? (int)n : -EIO;
	for (uint32_t k = i; k < j; k++) {
		uint64_t rs = (uint64_t)k * cs, re = rs + cs < h->size ? rs + cs : h->size;
		int rc = decode_stored(c, h, t, k, s + (h->soff[k] - h->soff[i]),
				       dst + (rs - (uint64_t)i * cs), (size_t)(re - rs));

		if (rc)
			return rc;
	}
	return 0;
}

static ssize_t c_read(struct tier_handle *th, void *buf, size_t len, uint64_t off)
{
	struct crh *h = (struct crh *)th;
	struct ctier *c = ct_of(th->tier);
	uint64_t cs = h->lay.chunk_size, end;
	char *out = buf;

	if (((struct chandle *)th)->writer) {
		/* a reservation: only a raw one can be read back (encoded ones are written once,
		 * in order, by the pipeline's dump, which never reads them) */
		if (((struct cwh *)th)->seq)
			return -EBADF;
		return tier_read(h->lh, buf, len, off);
	}
	if (h->lay.codec == CODEC_RAW)
		return tier_read(h->lh, buf, len, off);
	if (off >= h->size)
		return 0;
	if (len > h->size - off)
		len = (size_t)(h->size - off);
	end = off + len;
	for (uint64_t i = off / cs; i < h->lay.nchunks && i * cs < end; i++) {
		uint64_t rs = i * cs, re = rs + cs < h->size ? rs + cs : h->size;
		uint64_t a = off > rs ? off : rs, b = end < re ? end : re;
		int rc;

		if (a == rs && b == re) {
			uint64_t j = i + 1; /* and the whole chunks after it */

			while (j < h->lay.nchunks && (j + 1) * cs <= end)
				j++;
			if (j == h->lay.nchunks - 1 && h->size <= end)
				j++; /* the last chunk, shorter, ends at the end of the block */
			rc = decode_chunks(c, h, (uint32_t)i, (uint32_t)j, out + (rs - off));
			if (rc)
				return rc;
			i = j - 1;
			continue;
		}
		pthread_mutex_lock(&h->lock);
		rc = 0;
		if (h->dec_chunk != i) {
			/* no chunk decodes to more than the block (chunk_size is the header's) */
			if (!h->dec && !(h->dec = malloc(cs < h->size ? cs : h->size)))
				rc = -ENOMEM;
			h->dec_chunk = UINT32_MAX;
			if (rc == 0)
				rc = decode_chunks(c, h, (uint32_t)i, (uint32_t)i + 1, h->dec);
			if (rc == 0)
				h->dec_chunk = (uint32_t)i;
		}
		if (rc == 0)
			memcpy(out + (a - off), h->dec + (a - rs), b - a);
		pthread_mutex_unlock(&h->lock);
		if (rc)
			return rc;
	}
	return (ssize_t)len;
}

static int c_layout(struct tier_handle *th, struct block_layout *out)
{
	struct chandle *h = (struct chandle *)th;

	if (h->writer)
		return -EINVAL;
	*out = ((struct crh *)th)->lay;
	return 0;
}

static int c_stat(struct tier_handle *th, struct block_attr *attr)
{
	struct chandle *h = (struct chandle *)th;
	int rc = h->lh->tier->ops->stat(h->lh, attr);

	if (rc == 0 && h->writer && ((struct cwh *)th)->seq)
		attr->size = ((struct cwh *)th)->next; /* below holds encoded bytes */
	return rc;
}

static void c_close(struct tier_handle *th)
{
	struct crh *h = (struct crh *)th;

	tier_close(h->lh);
	pthread_mutex_destroy(&h->lock);
	free(h->soff);
	free(h->dec);
	free(h);
}

/* --- the rest passes through ------------------------------------------------------------- */

static int c_lookup(struct tier *t, const struct blockid *id, struct block_attr *attr)
{
	struct tier *b = ct_of(t)->below;

	return b->ops->lookup(b, id, attr);
}

static void c_present(struct tier *t, const struct blockid *ids, size_t n, uint8_t *hit)
{
	struct tier *b = ct_of(t)->below;

	b->ops->present(b, ids, n, hit);
}

static int c_remove(struct tier *t, const struct blockid *id)
{
	struct tier *b = ct_of(t)->below;

	return b->ops->remove(b, id);
}

static int c_touch(struct tier *t, const struct blockid *id)
{
	struct tier *b = ct_of(t)->below;

	return b->ops->touch(b, id);
}

static int c_set_deadline(struct tier *t, const struct blockid *id, int64_t deadline)
{
	struct tier *b = ct_of(t)->below;

	return b->ops->set_deadline(b, id, deadline);
}

static int c_sync(struct tier *t, const struct blockid *id)
{
	struct tier *b = ct_of(t)->below;

	return b->ops->sync(b, id);
}

static int c_list_shard(struct tier *t, unsigned shard, tier_list_fn fn, void *arg)
{
	struct tier *b = ct_of(t)->below;

	return b->ops->list_shard(b, shard, fn, arg);
}

static int c_usage(struct tier *t, struct tier_usage *u)
{
	struct tier *b = ct_of(t)->below;

	return b->ops->usage(b, u);
}

static void c_sweep(struct tier *t)
{
	struct tier *b = ct_of(t)->below;

	if (b->ops->sweep)
		b->ops->sweep(b);
}

static void c_metrics(struct tier *t, struct metrics *m)
{
	struct ctier *c = ct_of(t);
	uint64_t raw = atomic_load(&c->raw_bytes), st = atomic_load(&c->stored_bytes);

	metrics_counter(m, "ucmfs_compress_raw_bytes_total", "Raw bytes encoded for disk.", "",
			raw);
	metrics_counter(m, "ucmfs_compress_stored_bytes_total", "Bytes they were stored as.", "",
			st);
	metrics_gauge(m, "ucmfs_compression_ratio", "Raw bytes per stored byte, so far.", "",
		      st ? (double)raw / (double)st : 1.0);
	metrics_counter(m, "ucmfs_compress_chunks_decoded_total", "Chunks read and decoded.", "",
			atomic_load(&c->chunks_decoded));
	if (c->below->ops->metrics)
		c->below->ops->metrics(c->below, m);
}

static void c_destroy(struct tier *t)
{
	struct ctier *c = ct_of(t);

	tier_destroy(c->below);
	/* the calling thread's contexts; worker threads freed theirs when they exited */
	pthread_once(&tls_once, tls_make_key);
	tls_free(pthread_getspecific(tls_key));
	pthread_setspecific(tls_key, NULL);
	free(c);
}

const struct tier_ops tier_compress_ops = {
	.name = "compress",
	.destroy = c_destroy,
	.lookup = c_lookup,
	.present = c_present,
	.open = c_open,
	.read = c_read,
	.layout = c_layout,
	.stat = c_stat,
	.close = c_close,
	.reserve = c_reserve,
	.hurry = c_hurry,
	.write = c_write,
	.truncate = c_truncate,
	.commit = c_commit,
	.abort = c_abort,
	.remove = c_remove,
	.touch = c_touch,
	.set_deadline = c_set_deadline,
	.sync = c_sync,
	.list_shard = c_list_shard,
	.usage = c_usage,
	.sweep = c_sweep,
	.metrics = c_metrics,
};

void compress_counters(struct tier *t, struct compress_counters *out)
{
	struct ctier *c = ct_of(t);

	out->raw_bytes = atomic_load(&c->raw_bytes);
	out->stored_bytes = atomic_load(&c->stored_bytes);
	out->chunks_decoded = atomic_load(&c->chunks_decoded);
}

int compress_create(const struct compress_config *cfg, struct tier *below, struct tier **out)
{
	struct ctier *c = calloc(1, sizeof(*c));

	if (!c) {
		tier_destroy(below);
		return -ENOMEM;
	}
	c->below = below;
	c->zstd = cfg->zstd;
	c->level = cfg->level;
	c->shuffle = cfg->shuffle;
	c->chunk_size = cfg->chunk_size ? cfg->chunk_size : DEFAULT_CHUNK;
	c->tier.ops = &tier_compress_ops;
	c->tier.priv = c;
	*out = &c->tier;
	return 0;
}

/* The compress stage by name: compress= and shuffle= of its options. */
static int compress_plugin_create(const struct tier_setup *s, struct tier **out)
{
	const struct ucm_options *o = s->options;
	struct compress_config zc = {
		.zstd = o->codec != CODEC_NONE && o->layout == LAYOUT_NATIVE,
		.level = o->zstd_level,
		.shuffle = (unsigned)o->shuffle,
	};

	if (!s->below->ops->layout) {
		snprintf(s->err, s->errlen, "compress needs a store below that keeps how blocks "
			 "are stored (the layout operation; posix has it)");
		tier_destroy(s->below);
		return -EINVAL;
	}
	int rc = compress_create(&zc, s->below, out);

	if (rc)
		snprintf(s->err, s->errlen, "cannot create the compress stage: %s", strerror(-rc));
	return rc;
}

const struct tier_plugin tier_compress_plugin = {
	.abi = UCMFS_TIER_ABI,
	.name = "compress",
	.keys = (const char *const[]){ "compress", "shuffle", NULL },
	.kind = TIER_KIND_STAGE,
	.create = compress_plugin_create,
};
