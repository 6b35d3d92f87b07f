/*
 * The byte-plane shuffle (tiers/shuffle.c): unshuffle_bytes() undoes shuffle_bytes() for
 * widths 2 and 4 at every small size and some large ones, and the shuffled bytes are laid
 * out as tiers/shuffle.h says: plane k holds byte k of every whole value, in order, and the
 * bytes past the last whole value follow unchanged. Outputs of 64 KiB and more, 16-byte
 * aligned, are written with non-temporal stores: the large sizes run with the output aligned
 * and not.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/unit.h"
#include "tiers/shuffle.h"

static const unsigned widths[] = { 2, 4 };

#define NWIDTHS (sizeof(widths) / sizeof(widths[0]))

/* Sizes beyond the small ones: around powers of two, odd, a multiple of 2 but not of 4. */
static const size_t large[] = { 127, 128, 129, 4095, 4096, 4097, 4098, 4099,
				65534, 65535, 65536, 65537, 262144 + 6, (1u << 20) + 3 };

#define NLARGE (sizeof(large) / sizeof(large[0]))

static void fill_random(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t s = seed;

	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)ut_rand(&s);
}

/* What tiers/shuffle.h promises for out = shuffle(in): checked byte by byte. */
static void check_layout(const uint8_t *out, const uint8_t *in, size_t n, unsigned w)
{
	size_t m = n / w;

	for (unsigned k = 0; k < w; k++)
		for (size_t i = 0; i < m; i++)
			UT_CHECK(out[k * m + i] == in[w * i + k],
				 "width %u size %zu: plane %u byte %zu is %02x, want input "
				 "byte %zu (%02x)",
				 w, n, k, i, out[k * m + i], w * i + k, in[w * i + k]);
	for (size_t i = m * w; i < n; i++)
		UT_CHECK(out[i] == in[i], "width %u size %zu: tail byte %zu changed", w, n, i);
}

/*
 * Shuffle then unshuffle n bytes and compare; check the layout; and check that neither
 * function writes outside [0, n) of its output (guard bytes around it). The outputs start
 * skew bytes past a 64-byte boundary.
 */
static void round_trip_at(size_t n, unsigned w, uint64_t seed, size_t skew)
{
	enum { GUARD = 64 };
	size_t cap = (n + 3 * GUARD + 63) & ~(size_t)63;
	uint8_t *in = malloc(n + 1), *sh0 = aligned_alloc(64, cap), *back0 = aligned_alloc(64, cap);
	uint8_t *sh = sh0 + skew, *back = back0 + skew;

	ck_assert(in && sh0 && back0);
	fill_random(in, n, seed);
	memset(sh, 0xa5, n + 2 * GUARD);
	memset(back, 0x5a, n + 2 * GUARD);
	shuffle_bytes(sh + GUARD, in, n, w);
	check_layout(sh + GUARD, in, n, w);
	unshuffle_bytes(back + GUARD, sh + GUARD, n, w);
	UT_CHECK(memcmp(back + GUARD, in, n) == 0, "width %u size %zu: round trip differs", w,
		 n);
	for (size_t i = 0; i < GUARD; i++) {
		UT_CHECK(sh[i] == 0xa5 && sh[GUARD + n + i] == 0xa5,
			 "width %u size %zu: shuffle wrote outside its output", w, n);
		UT_CHECK(back[i] == 0x5a && back[GUARD + n + i] == 0x5a,
			 "width %u size %zu: unshuffle wrote outside its output", w, n);
	}
	free(in);
	free(sh0);
	free(back0);
}

static void round_trip(size_t n, unsigned w, uint64_t seed)
{
	round_trip_at(n, w, seed, 0);
}

/* --- core -------------------------------------------------------------------------------- */

START_TEST(test_shuffle_small_sizes)
{
	unsigned w = widths[_i];

	for (size_t n = 0; n <= 70; n++)
		for (uint64_t seed = 1; seed <= 3; seed++)
			round_trip(n, w, seed * 1000 + n);
}
END_TEST

START_TEST(test_shuffle_large_sizes)
{
	static const size_t skews[] = { 0, 1, 8, 16 };
	unsigned w = widths[_i];

	for (size_t i = 0; i < NLARGE; i++)
		for (size_t k = 0; k < sizeof(skews) / sizeof(skews[0]); k++)
			round_trip_at(large[i], w, 77 + i, skews[k]);
}
END_TEST

/* A worked example of the layout, independent of check_layout(). */
START_TEST(test_shuffle_plane_layout_example)
{
	static const uint8_t in[] = { 0x10, 0x11, 0x20, 0x21, 0x30, 0x31, 0x40, 0x41, 0x50,
				      0x51, 0x99 };
	static const uint8_t w2[] = { 0x10, 0x20, 0x30, 0x40, 0x50, 0x11, 0x21, 0x31, 0x41,
				      0x51, 0x99 };
	static const uint8_t w4[] = { 0x10, 0x30, 0x11, 0x31, 0x20, 0x40, 0x21, 0x41, 0x50,
				      0x51, 0x99 };
	uint8_t out[sizeof(in)], back[sizeof(in)];

	shuffle_bytes(out, in, sizeof(in), 2);
	ck_assert_mem_eq(out, w2, sizeof(in));
	unshuffle_bytes(back, out, sizeof(in), 2);
	ck_assert_mem_eq(back, in, sizeof(in));
	shuffle_bytes(out, in, sizeof(in), 4);
	ck_assert_mem_eq(out, w4, sizeof(in));
	unshuffle_bytes(back, out, sizeof(in), 4);
	ck_assert_mem_eq(back, in, sizeof(in));
}
END_TEST

/* bf16-like values (w = 2): after the shuffle the high bytes are contiguous. */
START_TEST(test_shuffle_separates_high_bytes)
{
	enum { N = 4096 };
	uint16_t v[N];
	uint8_t out[2 * N];

	for (int i = 0; i < N; i++)
		v[i] = (uint16_t)(0x3c00 | (i & 0xff)); /* little-endian: low byte first */
	shuffle_bytes(out, v, sizeof(v), 2);
	for (int i = 0; i < N; i++) {
		ck_assert_uint_eq(out[i], (unsigned)(i & 0xff));
		ck_assert_uint_eq(out[N + i], 0x3c);
	}
}
END_TEST

Suite *shuffle_suite(void)
{
	Suite *s = suite_create("shuffle");
	TCase *core = ut_tcase("core", UT_TIMEOUT);

	tcase_add_loop_test(core, test_shuffle_small_sizes, 0, NWIDTHS);
	tcase_add_loop_test(core, test_shuffle_large_sizes, 0, NWIDTHS);
	tcase_add_test(core, test_shuffle_plane_layout_example);
	tcase_add_test(core, test_shuffle_separates_high_bytes);
	suite_add_tcase(s, core);
	return s;
}
