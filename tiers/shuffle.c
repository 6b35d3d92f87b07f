#include "tiers/shuffle.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/*
 * Each direction has a vector part for x86-64 (SSE2 is part of its baseline, so no run-time
 * dispatch) that handles 16 values per step, and a scalar part for the rest and for other
 * machines. Both produce the layout tiers/shuffle.h describes, byte for byte: blocks written
 * on one machine read back on another. A 16 MiB bf16 block takes ~1 ms each way instead of
 * ~4 with the scalar loops (18-19 GB/s against 3.9), which a load from disk waited for.
 *
 * The unshuffle writes an output of NT_MIN bytes or more that is 16-byte aligned with
 * non-temporal stores: a load decodes each chunk into a small scratch buffer and unshuffles
 * it into the block's buffer, 16 MiB that no cache holds, and ordinary stores first read each
 * line of it into the cache. 256 KiB chunks into 1 GiB of blocks: 7.9 GB/s with ordinary
 * stores, 22.9 with non-temporal ones (docs/BENCHMARKS.md "Reads the disk takes as they are
 * cut"). A store fence ends them, before whoever hands the bytes on takes a lock. Smaller
 * outputs (a reader's copy, likely read again at once) keep ordinary stores.
 */

#define NT_MIN (64u << 10)

#if defined(__SSE2__)
typedef __m128i v16;

static v16 load16(const uint8_t *p)
{
	return _mm_loadu_si128((const v16 *)p);
}

static void store16(uint8_t *p, v16 v)
{
	_mm_storeu_si128((v16 *)p, v);
}

/* A store of 16 bytes; with nt (p then 16-byte aligned), one that sends them to memory
 * without reading the line first. */
static inline void put16(uint8_t *p, v16 v, bool nt)
{
	if (nt)
		_mm_stream_si128((v16 *)p, v);
	else
		store16(p, v);
}

static bool streams(const uint8_t *d, size_t n)
{
	return n >= NT_MIN && ((uintptr_t)d & 15) == 0;
}

/* values [0, m & ~15) of width 2; returns how many were done */
static size_t shuffle2_vec(uint8_t *lo, uint8_t *hi, const uint8_t *s, size_t m)
{
	const v16 low = _mm_set1_epi16(0x00ff);
	size_t i = 0;

	for (; i + 16 <= m; i += 16) {
		v16 a = load16(s + 2 * i), b = load16(s + 2 * i + 16);

		/* each 16-bit lane is one value: its low byte to lo, its high byte to hi (the
		 * lanes are 0..255 after the mask or the shift, so packing saturates nothing) */
		store16(lo + i, _mm_packus_epi16(_mm_and_si128(a, low), _mm_and_si128(b, low)));
		store16(hi + i, _mm_packus_epi16(_mm_srli_epi16(a, 8), _mm_srli_epi16(b, 8)));
	}
	return i;
}

static size_t unshuffle2_vec(uint8_t *d, const uint8_t *lo, const uint8_t *hi, size_t m)
{
	bool nt = streams(d, 2 * m);
	size_t i = 0;

	for (; i + 16 <= m; i += 16) {
		v16 a = load16(lo + i), b = load16(hi + i);

		put16(d + 2 * i, _mm_unpacklo_epi8(a, b), nt);
		put16(d + 2 * i + 16, _mm_unpackhi_epi8(a, b), nt);
	}
	if (nt)
		_mm_sfence();
	return i;
}

static size_t shuffle4_vec(uint8_t *d, const uint8_t *s, size_t m)
{
	const v16 low = _mm_set1_epi32(0xff);
	size_t i = 0;

	for (; i + 16 <= m; i += 16) {
		v16 x[4];

		for (int j = 0; j < 4; j++)
			x[j] = load16(s + 4 * i + 16 * j);
		for (int k = 0; k < 4; k++) {
			v16 a[4];

			/* byte k of each 32-bit lane, as a lane of 0..255, packed down to bytes */
			for (int j = 0; j < 4; j++)
				a[j] = _mm_and_si128(_mm_srli_epi32(x[j], 8 * k), low);
			store16(d + (size_t)k * m + i,
				_mm_packus_epi16(_mm_packs_epi32(a[0], a[1]),
						 _mm_packs_epi32(a[2], a[3])));
		}
	}
	return i;
}

static size_t unshuffle4_vec(uint8_t *d, const uint8_t *s, size_t m)
{
	bool nt = streams(d, 4 * m);
	size_t i = 0;

	for (; i + 16 <= m; i += 16) {
		v16 p0 = load16(s + i), p1 = load16(s + m + i);
		v16 p2 = load16(s + 2 * m + i), p3 = load16(s + 3 * m + i);
		/* bytes 0,1 of values 0-7 and 8-15, then bytes 2,3 of the same */
		v16 t0 = _mm_unpacklo_epi8(p0, p1), t1 = _mm_unpackhi_epi8(p0, p1);
		v16 t2 = _mm_unpacklo_epi8(p2, p3), t3 = _mm_unpackhi_epi8(p2, p3);

		put16(d + 4 * i, _mm_unpacklo_epi16(t0, t2), nt);
		put16(d + 4 * i + 16, _mm_unpackhi_epi16(t0, t2), nt);
		put16(d + 4 * i + 32, _mm_unpacklo_epi16(t1, t3), nt);
		put16(d + 4 * i + 48, _mm_unpackhi_epi16(t1, t3), nt);
	}
	if (nt)
		_mm_sfence();
	return i;
}
#else
static size_t shuffle2_vec(uint8_t *lo, uint8_t *hi, const uint8_t *s, size_t m)
{
	(void)lo, (void)hi, (void)s, (void)m;
	return 0;
}

static size_t unshuffle2_vec(uint8_t *d, const uint8_t *lo, const uint8_t *hi, size_t m)
{
	(void)d, (void)lo, (void)hi, (void)m;
	return 0;
}

static size_t shuffle4_vec(uint8_t *d, const uint8_t *s, size_t m)
{
	(void)d, (void)s, (void)m;
	return 0;
}

static size_t unshuffle4_vec(uint8_t *d, const uint8_t *s, size_t m)
{
	(void)d, (void)s, (void)m;
	return 0;
}
#endif

void shuffle_bytes(void *out, const void *in, size_t n, unsigned width)
{
	const uint8_t *s = in;
	uint8_t *d = out;
	size_t m = n / width, i = 0;

	if (width == 2) {
		uint8_t *lo = d, *hi = d + m;

		for (i = shuffle2_vec(lo, hi, s, m); i < m; i++) {
			lo[i] = s[2 * i];
			hi[i] = s[2 * i + 1];
		}
	} else {
		if (width == 4)
			i = shuffle4_vec(d, s, m);
		for (; i < m; i++)
			for (unsigned k = 0; k < width; k++)
				d[k * m + i] = s[width * i + k];
	}
	memcpy(d + m * width, s + m * width, n - m * width);
}

void unshuffle_bytes(void *out, const void *in, size_t n, unsigned width)
{
	const uint8_t *s = in;
	uint8_t *d = out;
	size_t m = n / width, i = 0;

	if (width == 2) {
		const uint8_t *lo = s, *hi = s + m;

		for (i = unshuffle2_vec(d, lo, hi, m); i < m; i++) {
			d[2 * i] = lo[i];
			d[2 * i + 1] = hi[i];
		}
	} else {
		if (width == 4)
			i = unshuffle4_vec(d, s, m);
		for (; i < m; i++)
			for (unsigned k = 0; k < width; k++)
				d[width * i + k] = s[k * m + i];
	}
	memcpy(d + m * width, s + m * width, n - m * width);
}
