/*
 * ucm-bench floors that need no mount (bench_util.h): memcpy, zstd level 1 plain and with a
 * 2-byte plane shuffle, and the raw disk through libaio with O_DIRECT.
 */
#include <errno.h>
#include <fcntl.h>
#include <libaio.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zstd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "tools/bench_util.h"

/* Short measurements alternated and reduced to their median: drift weighs on all alike. */
#define TRIALS 5

double floor_memcpy(const struct pool *p, double min_secs)
{
	char *dst = bench_alloc(p->bsize);
	double trial[TRIALS];
	unsigned i = 0;

	if (!dst) {
		bench_fail(ENOMEM, "memcpy buffer");
		return NAN;
	}
	memcpy(dst, p->buf[0], p->bsize); /* warm up */
	for (int t = 0; t < TRIALS; t++) {
		uint64_t bytes = 0;
		double t0 = now_s(), el;

		do {
			memcpy(dst, p->buf[i++ % p->n], p->bsize);
			/* keep the copy from being optimised away */
			__asm__ __volatile__("" : : "r"(dst) : "memory");
			bytes += p->bsize;
		} while ((el = now_s() - t0) < min_secs / TRIALS);
		trial[t] = (double)bytes / el / 1e9;
	}
	free(dst);
	return median(trial, TRIALS);
}

/* --- fresh memory ------------------------------------------------------------------------ */

struct toucher {
	char *mem;
	size_t len;
};

static void *touch_main(void *arg)
{
	struct toucher *t = arg;

	for (size_t off = 0; off < t->len; off += 4096)
		t->mem[off] = 1;
	return NULL;
}

double floor_first_touch(uint64_t bytes, unsigned threads)
{
	pthread_t tid[64];
	struct toucher tt[64];
	bool joined[64];
	size_t share;
	double t0, secs;
	char *mem;

	threads = threads < 1 ? 1 : threads > 64 ? 64 : threads;
	share = (size_t)(bytes / threads + 4095) & ~(size_t)4095;
	mem = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
		   0);
	if (mem == MAP_FAILED) {
		bench_fail(errno, "mmap %llu bytes", (unsigned long long)bytes);
		return NAN;
	}
	madvise(mem, (size_t)bytes, MADV_HUGEPAGE);
	t0 = now_s();
	for (unsigned i = 0; i < threads; i++) {
		size_t off = (size_t)i * share;

		tt[i] = (struct toucher){ mem + off, off >= bytes ? 0 : bytes - off < share ?
							  (size_t)bytes - off : share };
		/* a thread that cannot start leaves its share to this one */
		joined[i] = pthread_create(&tid[i], NULL, touch_main, &tt[i]) == 0;
		if (!joined[i])
			touch_main(&tt[i]);
	}
	for (unsigned i = 0; i < threads; i++)
		if (joined[i])
			pthread_join(tid[i], NULL);
	secs = now_s() - t0;
	munmap(mem, (size_t)bytes);
	return secs;
}

/* --- zstd ------------------------------------------------------------------------------ */

/*
 * Split the low and high bytes of each 16-bit value into two planes (bf16/fp16), and back.
 * Vectorised where SSE2 exists: the floor is the fastest shuffle, not a typical one.
 */
static void shuffle2(char *dst, const char *src, size_t len)
{
	size_t half = len / 2, i = 0;

#ifdef __SSE2__
	const __m128i mask = _mm_set1_epi16(0x00ff);

	for (; i + 16 <= half; i += 16) {
		__m128i a = _mm_loadu_si128((const __m128i *)(src + 2 * i));
		__m128i b = _mm_loadu_si128((const __m128i *)(src + 2 * i + 16));
		__m128i lo = _mm_packus_epi16(_mm_and_si128(a, mask), _mm_and_si128(b, mask));
		__m128i hi = _mm_packus_epi16(_mm_srli_epi16(a, 8), _mm_srli_epi16(b, 8));

		_mm_storeu_si128((__m128i *)(dst + i), lo);
		_mm_storeu_si128((__m128i *)(dst + half + i), hi);
	}
#endif
	for (; i < half; i++) {
		dst[i] = src[2 * i];
		dst[half + i] = src[2 * i + 1];
	}
	if (len & 1)
		dst[len - 1] = src[len - 1];
}

static void unshuffle2(char *dst, const char *src, size_t len)
{
	size_t half = len / 2, i = 0;

#ifdef __SSE2__
	for (; i + 16 <= half; i += 16) {
		__m128i lo = _mm_loadu_si128((const __m128i *)(src + i));
		__m128i hi = _mm_loadu_si128((const __m128i *)(src + half + i));

		_mm_storeu_si128((__m128i *)(dst + 2 * i), _mm_unpacklo_epi8(lo, hi));
		_mm_storeu_si128((__m128i *)(dst + 2 * i + 16), _mm_unpackhi_epi8(lo, hi));
	}
#endif
	for (; i < half; i++) {
		dst[2 * i] = src[i];
		dst[2 * i + 1] = src[half + i];
	}
	if (len & 1)
		dst[len - 1] = src[len - 1];
}

struct zbufs {
	ZSTD_CCtx *cc;
	ZSTD_DCtx *dc;
	char *tmp, *out, *back;
	char *frame[2];   /* block 0 compressed plain, shuffled */
	size_t flen[2];
	size_t bound;
};

/* Compress one block (shuffled first if shuf) into z->out. Its length, or -errno. */
static ssize_t zstd_one(struct zbufs *z, const char *src, size_t len, bool shuf)
{
	size_t c;

	if (shuf) {
		shuffle2(z->tmp, src, len);
		src = z->tmp;
	}
	c = ZSTD_compressCCtx(z->cc, z->out, z->bound, src, len, 1);
	if (ZSTD_isError(c))
		return bench_fail(0, "ZSTD_compress: %s", ZSTD_getErrorName(c));
	return (ssize_t)c;
}

/* Decompress frame `v` of block 0 into z->back (unshuffled if v == 1). 0 or -errno. */
static int zstd_back(struct zbufs *z, size_t len, int v)
{
	size_t d = ZSTD_decompressDCtx(z->dc, v ? z->tmp : z->back, len, z->frame[v], z->flen[v]);

	if (ZSTD_isError(d) || d != len)
		return bench_fail(0, "ZSTD_decompress: %s",
				  ZSTD_isError(d) ? ZSTD_getErrorName(d) : "short");
	if (v)
		unshuffle2(z->back, z->tmp, len);
	return 0;
}

/* Compress (dec = false) or decompress pool blocks for secs; GB/s of raw bytes, or NaN. */
static double zstd_trial(const struct pool *p, struct zbufs *z, int v, bool dec, double secs,
			 unsigned *next)
{
	uint64_t bytes = 0;
	double t0 = now_s(), el;

	do {
		if (dec ? zstd_back(z, p->bsize, v) < 0 :
			  zstd_one(z, p->buf[(*next)++ % p->n], p->bsize, v) < 0)
			return NAN;
		bytes += p->bsize;
	} while ((el = now_s() - t0) < secs);
	return (double)bytes / el / 1e9;
}

/*
 * The ratios over every pool block, then TRIALS rounds that time each of the four
 * operations in turn (so that the machine's drift weighs on all alike); medians.
 */
static int zstd_measure(const struct pool *p, struct zbufs *z, double min_secs,
			struct zstd_res *r)
{
	double tr[4][TRIALS], *out[4] = { &r->c_plain, &r->c_shuf, &r->d_plain, &r->d_shuf };
	uint64_t raw = 0, comp[2] = { 0, 0 };
	unsigned next = 0;
	ssize_t c;

	for (unsigned i = 0; i < p->n; i++) {
		for (int v = 0; v < 2; v++) {
			c = zstd_one(z, p->buf[i], p->bsize, v);
			if (c < 0)
				return (int)c;
			comp[v] += (uint64_t)c;
			if (i == 0) {
				memcpy(z->frame[v], z->out, (size_t)c);
				z->flen[v] = (size_t)c;
			}
		}
		raw += p->bsize;
	}
	r->ratio_plain = (double)raw / (double)comp[0];
	r->ratio_shuf = (double)raw / (double)comp[1];
	for (int v = 0; v < 2; v++) {
		int rc = zstd_back(z, p->bsize, v);

		if (rc)
			return rc;
		if (memcmp(z->back, p->buf[0], p->bsize))
			return bench_fail(0, "zstd round trip changed the data");
	}
	for (int t = 0; t < TRIALS; t++)
		for (int k = 0; k < 4; k++) {
			tr[k][t] = zstd_trial(p, z, k & 1, k >= 2, min_secs / TRIALS, &next);
			if (isnan(tr[k][t]))
				return -EIO;
		}
	for (int k = 0; k < 4; k++)
		*out[k] = median(tr[k], TRIALS);
	return 0;
}

int floor_zstd(const struct pool *p, double min_secs, struct zstd_res *r)
{
	struct zbufs z = { 0 };
	int rc = -ENOMEM;

	z.bound = ZSTD_compressBound(p->bsize);
	z.cc = ZSTD_createCCtx();
	z.dc = ZSTD_createDCtx();
	z.tmp = bench_alloc(p->bsize);
	z.out = bench_alloc(z.bound);
	z.back = bench_alloc(p->bsize);
	z.frame[0] = bench_alloc(z.bound);
	z.frame[1] = bench_alloc(z.bound);
	if (!z.cc || !z.dc || !z.tmp || !z.out || !z.back || !z.frame[0] || !z.frame[1])
		bench_fail(ENOMEM, "zstd buffers");
	else
		rc = zstd_measure(p, &z, min_secs, r);
	ZSTD_freeCCtx(z.cc);
	ZSTD_freeDCtx(z.dc);
	free(z.tmp);
	free(z.out);
	free(z.back);
	free(z.frame[0]);
	free(z.frame[1]);
	return rc;
}

/* --- raw disk -------------------------------------------------------------------------- */

#define MAX_DEPTH 256

struct aio {
	io_context_t ctx;
	int fd;
	unsigned depth;
	struct iocb cb[MAX_DEPTH];
	char *slot[MAX_DEPTH];
};

static int aio_res(const struct io_event *ev, size_t want, const char *what)
{
	long res = (long)ev->res;

	if (res < 0)
		return bench_fail((int)-res, "raw disk %s", what);
	if ((size_t)res != want)
		return bench_fail(0, "raw disk %s: %ld bytes instead of %zu", what, res, want);
	return 0;
}

/* Stream `bytes` through the file in REQ_SIZE requests kept `depth` deep. 0 or -errno. */
static int aio_stream(struct aio *a, bool write, uint64_t bytes)
{
	struct io_event ev[MAX_DEPTH];
	struct iocb *one[1];
	uint64_t next = 0, done = 0;
	unsigned inflight = 0;
	int n, rc;

	for (unsigned s = 0; s < a->depth && next < bytes; s++, next += REQ_SIZE) {
		if (write)
			io_prep_pwrite(&a->cb[s], a->fd, a->slot[s], REQ_SIZE, (long long)next);
		else
			io_prep_pread(&a->cb[s], a->fd, a->slot[s], REQ_SIZE, (long long)next);
		a->cb[s].data = (void *)(uintptr_t)s;
		one[0] = &a->cb[s];
		rc = io_submit(a->ctx, 1, one);
		if (rc != 1)
			return bench_fail(rc < 0 ? -rc : EIO, "io_submit");
		inflight++;
	}
	while (done < bytes) {
		n = io_getevents(a->ctx, 1, (long)inflight, ev, NULL);
		if (n == -EINTR)
			continue;
		if (n < 0)
			return bench_fail(-n, "io_getevents");
		for (int e = 0; e < n; e++) {
			unsigned s = (unsigned)(uintptr_t)ev[e].data;

			rc = aio_res(&ev[e], REQ_SIZE, write ? "write" : "read");
			if (rc)
				return rc;
			done += REQ_SIZE;
			inflight--;
			if (next >= bytes)
				continue;
			if (write)
				io_prep_pwrite(&a->cb[s], a->fd, a->slot[s], REQ_SIZE,
					       (long long)next);
			else
				io_prep_pread(&a->cb[s], a->fd, a->slot[s], REQ_SIZE,
					      (long long)next);
			a->cb[s].data = (void *)(uintptr_t)s;
			one[0] = &a->cb[s];
			rc = io_submit(a->ctx, 1, one);
			if (rc != 1)
				return bench_fail(rc < 0 ? -rc : EIO, "io_submit");
			inflight++;
			next += REQ_SIZE;
		}
	}
	return 0;
}

/* Mean microseconds of `count` random aligned reads of `len` bytes, one at a time. */
static int aio_random(struct aio *a, uint64_t bytes, size_t len, unsigned count, double *us)
{
	struct io_event ev;
	struct iocb *one[1] = { &a->cb[0] };
	uint64_t rng = 0x2545f4914f6cdd1dull, slots = bytes / len;
	double t0 = now_s();
	int rc;

	for (unsigned i = 0; i < count; i++) {
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		io_prep_pread(&a->cb[0], a->fd, a->slot[0], len, (long long)((rng % slots) * len));
		rc = io_submit(a->ctx, 1, one);
		if (rc != 1)
			return bench_fail(rc < 0 ? -rc : EIO, "io_submit");
		do
			rc = io_getevents(a->ctx, 1, 1, &ev, NULL);
		while (rc == -EINTR);
		if (rc != 1)
			return bench_fail(rc < 0 ? -rc : EIO, "io_getevents");
		rc = aio_res(&ev, len, "shard read");
		if (rc)
			return rc;
	}
	*us = (now_s() - t0) / count * 1e6;
	return 0;
}

int floor_disk(const char *path, uint64_t bytes, const struct pool *p, unsigned depth,
	       const size_t shard[2], unsigned nshard, struct disk_res *r)
{
	struct aio *a = calloc(1, sizeof(*a));
	double t0;
	int rc;

	if (!a)
		return bench_fail(ENOMEM, "aio");
	depth = depth < 1 ? 1 : depth > MAX_DEPTH ? MAX_DEPTH : depth;
	bytes -= bytes % REQ_SIZE;
	if (bytes < (uint64_t)depth * REQ_SIZE)
		bytes = (uint64_t)depth * REQ_SIZE;
	a->depth = depth;
	a->fd = open(path, O_CREAT | O_TRUNC | O_RDWR | O_DIRECT, 0600);
	if (a->fd < 0) {
		rc = bench_fail(errno, "open(O_DIRECT) %s", path);
		free(a);
		return rc;
	}
	rc = io_setup((int)depth, &a->ctx);
	if (rc) {
		rc = bench_fail(-rc, "io_setup(%u)", depth);
		goto out_close;
	}
	for (unsigned s = 0; s < depth; s++) {
		a->slot[s] = bench_alloc(REQ_SIZE);
		if (!a->slot[s]) {
			rc = bench_fail(ENOMEM, "aio buffers");
			goto out;
		}
		/* KV data: REQ_SIZE bytes from the pool, wrapping */
		for (size_t off = 0; off < REQ_SIZE;) {
			const char *src = pool_block(p, s) + off % p->bsize;
			size_t n = p->bsize - off % p->bsize;

			n = n < REQ_SIZE - off ? n : REQ_SIZE - off;
			memcpy(a->slot[s] + off, src, n);
			off += n;
		}
	}
	/* lay the file out once, untimed, so that the timed pass measures the disk itself */
	if (fallocate(a->fd, 0, 0, (off_t)bytes) && errno != EOPNOTSUPP) {
		rc = bench_fail(errno, "fallocate %s", path);
		goto out;
	}
	rc = aio_stream(a, true, bytes);
	if (rc || fdatasync(a->fd))
		goto out_sync;
	t0 = now_s();
	rc = aio_stream(a, true, bytes);
	if (rc || fdatasync(a->fd))
		goto out_sync;
	r->write_gbps = (double)bytes / (now_s() - t0) / 1e9;
	t0 = now_s();
	rc = aio_stream(a, false, bytes);
	if (rc)
		goto out;
	r->read_gbps = (double)bytes / (now_s() - t0) / 1e9;
	for (int i = 0; i < 2 && !rc; i++)
		rc = aio_random(a, bytes, shard[i] > REQ_SIZE ? REQ_SIZE : shard[i], nshard,
				&r->shard_us[i]);
	goto out;
out_sync:
	if (!rc)
		rc = bench_fail(errno, "fdatasync %s", path);
out:
	io_destroy(a->ctx);
	for (unsigned s = 0; s < depth; s++)
		free(a->slot[s]);
out_close:
	close(a->fd);
	unlink(path);
	free(a);
	return rc;
}
