/* The written ranges of a reservation (src/extents.h). */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "src/extents.h"
#include "tests/unit/unit.h"

/* The set must be sorted, disjoint, non-adjacent and without empty intervals. */
static void check_shape(const struct extents *e)
{
	for (uint32_t i = 0; i < e->n; i++) {
		UT_CHECK(e->v[i].start < e->v[i].end, "interval %u is empty [%llu,%llu)", i,
			 (unsigned long long)e->v[i].start, (unsigned long long)e->v[i].end);
		if (i)
			UT_CHECK(e->v[i - 1].end < e->v[i].start,
				 "intervals %u and %u touch or overlap", i - 1, i);
	}
	UT_CHECK(e->n <= e->cap, "n %u > cap %u", e->n, e->cap);
}

static void expect(const struct extents *e, uint32_t n, const uint64_t *pairs)
{
	check_shape(e);
	ck_assert_uint_eq(e->n, n);
	for (uint32_t i = 0; i < n; i++) {
		ck_assert_uint_eq(e->v[i].start, pairs[2 * i]);
		ck_assert_uint_eq(e->v[i].end, pairs[2 * i + 1]);
	}
}

#define EXPECT(e, ...)                                                                        \
	do {                                                                                  \
		const uint64_t p_[] = { __VA_ARGS__ };                                        \
		expect((e), sizeof(p_) / sizeof(p_[0]) / 2, p_);                              \
	} while (0)

START_TEST(test_extents_empty)
{
	struct extents e;

	extents_init(&e);
	ck_assert_uint_eq(e.n, 0);
	ck_assert_uint_eq(extents_end(&e), 0);
	ck_assert(extents_cover(&e, 0));
	ck_assert(!extents_cover(&e, 1));
	ck_assert_int_eq(extents_add(&e, 100, 0), 0); /* empty add: nothing */
	ck_assert_uint_eq(e.n, 0);
	extents_clip(&e, 0);
	ck_assert_uint_eq(e.n, 0);
	extents_free(&e);
	extents_free(&e); /* twice is fine */
}
END_TEST

START_TEST(test_extents_in_order)
{
	struct extents e;

	extents_init(&e);
	for (uint64_t off = 0; off < 1 << 20; off += 4096)
		ck_assert_int_eq(extents_add(&e, off, 4096), 0);
	EXPECT(&e, 0, 1 << 20);
	ck_assert_uint_eq(extents_end(&e), 1 << 20);
	ck_assert(extents_cover(&e, 1 << 20));
	ck_assert(!extents_cover(&e, (1 << 20) + 1));
	extents_free(&e);
}
END_TEST

START_TEST(test_extents_out_of_order)
{
	struct extents e;

	extents_init(&e);
	ck_assert_int_eq(extents_add(&e, 300, 100), 0);
	ck_assert_int_eq(extents_add(&e, 100, 100), 0);
	ck_assert_int_eq(extents_add(&e, 500, 100), 0);
	EXPECT(&e, 100, 200, 300, 400, 500, 600);
	ck_assert_uint_eq(extents_end(&e), 600);
	ck_assert(!extents_cover(&e, 1));
	ck_assert_int_eq(extents_add(&e, 0, 50), 0);
	EXPECT(&e, 0, 50, 100, 200, 300, 400, 500, 600);
	ck_assert(extents_cover(&e, 50));
	ck_assert(!extents_cover(&e, 51));
	/* fill the holes back to front */
	ck_assert_int_eq(extents_add(&e, 400, 100), 0);
	EXPECT(&e, 0, 50, 100, 200, 300, 600);
	ck_assert_int_eq(extents_add(&e, 200, 100), 0);
	EXPECT(&e, 0, 50, 100, 600);
	ck_assert_int_eq(extents_add(&e, 50, 50), 0);
	EXPECT(&e, 0, 600);
	ck_assert(extents_cover(&e, 600));
	extents_free(&e);
}
END_TEST

START_TEST(test_extents_overlapping)
{
	struct extents e;

	extents_init(&e);
	ck_assert_int_eq(extents_add(&e, 100, 100), 0);
	ck_assert_int_eq(extents_add(&e, 150, 100), 0); /* overlaps the tail */
	EXPECT(&e, 100, 250);
	ck_assert_int_eq(extents_add(&e, 50, 100), 0); /* overlaps the head */
	EXPECT(&e, 50, 250);
	ck_assert_int_eq(extents_add(&e, 60, 10), 0); /* inside */
	EXPECT(&e, 50, 250);
	ck_assert_int_eq(extents_add(&e, 400, 10), 0);
	ck_assert_int_eq(extents_add(&e, 500, 10), 0);
	ck_assert_int_eq(extents_add(&e, 600, 10), 0);
	EXPECT(&e, 50, 250, 400, 410, 500, 510, 600, 610);
	/* one write swallowing several intervals */
	ck_assert_int_eq(extents_add(&e, 200, 405), 0);
	EXPECT(&e, 50, 610);
	/* covering everything */
	ck_assert_int_eq(extents_add(&e, 0, 10000), 0);
	EXPECT(&e, 0, 10000);
	extents_free(&e);
}
END_TEST

START_TEST(test_extents_adjacent_merge)
{
	struct extents e;

	extents_init(&e);
	ck_assert_int_eq(extents_add(&e, 10, 10), 0);
	ck_assert_int_eq(extents_add(&e, 30, 10), 0);
	EXPECT(&e, 10, 20, 30, 40);
	ck_assert_int_eq(extents_add(&e, 20, 10), 0); /* touches both */
	EXPECT(&e, 10, 40);
	ck_assert_int_eq(extents_add(&e, 0, 10), 0); /* touches the start */
	EXPECT(&e, 0, 40);
	ck_assert_int_eq(extents_add(&e, 40, 1), 0); /* touches the end */
	EXPECT(&e, 0, 41);
	ck_assert_int_eq(extents_add(&e, 100, 1), 0);
	ck_assert_int_eq(extents_add(&e, 99, 1), 0); /* touches a later interval's start */
	EXPECT(&e, 0, 41, 99, 101);
	ck_assert_int_eq(extents_add(&e, 42, 57), 0); /* one byte short of joining the first */
	EXPECT(&e, 0, 41, 42, 101);
	ck_assert_int_eq(extents_add(&e, 41, 1), 0);
	EXPECT(&e, 0, 101);
	extents_free(&e);
}
END_TEST

START_TEST(test_extents_clip_and_end)
{
	struct extents e;

	extents_init(&e);
	ck_assert_int_eq(extents_add(&e, 0, 100), 0);
	ck_assert_int_eq(extents_add(&e, 200, 100), 0);
	ck_assert_int_eq(extents_add(&e, 400, 100), 0);
	ck_assert_uint_eq(extents_end(&e), 500);
	extents_clip(&e, 1000); /* past the end: nothing */
	EXPECT(&e, 0, 100, 200, 300, 400, 500);
	extents_clip(&e, 450); /* inside the last */
	EXPECT(&e, 0, 100, 200, 300, 400, 450);
	ck_assert_uint_eq(extents_end(&e), 450);
	extents_clip(&e, 400); /* at the start of the last: it goes */
	EXPECT(&e, 0, 100, 200, 300);
	extents_clip(&e, 350); /* in a hole */
	EXPECT(&e, 0, 100, 200, 300);
	extents_clip(&e, 150); /* drops the second, keeps the first whole */
	EXPECT(&e, 0, 100);
	ck_assert_uint_eq(extents_end(&e), 100);
	extents_clip(&e, 1);
	EXPECT(&e, 0, 1);
	ck_assert(extents_cover(&e, 1));
	extents_clip(&e, 0);
	ck_assert_uint_eq(e.n, 0);
	ck_assert_uint_eq(extents_end(&e), 0);
	/* usable again after clipping to nothing */
	ck_assert_int_eq(extents_add(&e, 5, 5), 0);
	EXPECT(&e, 5, 10);
	extents_free(&e);
}
END_TEST

START_TEST(test_extents_cover)
{
	struct extents e;

	extents_init(&e);
	ck_assert_int_eq(extents_add(&e, 1, 99), 0);
	ck_assert(!extents_cover(&e, 100)); /* byte 0 missing */
	ck_assert(extents_cover(&e, 0));
	ck_assert_int_eq(extents_add(&e, 0, 1), 0);
	ck_assert(extents_cover(&e, 100));
	ck_assert(extents_cover(&e, 50));
	ck_assert(!extents_cover(&e, 101));
	ck_assert_int_eq(extents_add(&e, 101, 10), 0); /* a one-byte hole at 100 */
	ck_assert(extents_cover(&e, 100));
	ck_assert(!extents_cover(&e, 101));
	ck_assert(!extents_cover(&e, 111));
	extents_free(&e);
}
END_TEST

START_TEST(test_extents_large_offsets)
{
	struct extents e;
	uint64_t big = 1ULL << 40;

	extents_init(&e);
	ck_assert_int_eq(extents_add(&e, big, 1ULL << 20), 0);
	ck_assert_int_eq(extents_add(&e, 0, big), 0);
	EXPECT(&e, 0, big + (1ULL << 20));
	ck_assert(extents_cover(&e, big + (1ULL << 20)));
	extents_free(&e);
}
END_TEST

/* A model: one bool per byte of a small universe. */
#define U 512

static void compare_model(const struct extents *e, const bool *m, int step)
{
	bool seen[U];
	uint64_t end = 0, hole = 0;

	check_shape(e);
	memset(seen, 0, sizeof(seen));
	for (uint32_t i = 0; i < e->n; i++) {
		UT_CHECK(e->v[i].end <= U, "interval past the universe");
		for (uint64_t b = e->v[i].start; b < e->v[i].end; b++)
			seen[b] = true;
	}
	for (int b = 0; b < U; b++) {
		UT_CHECK(seen[b] == m[b], "step %d: byte %d is %s in extents, %s in model", step,
			 b, seen[b] ? "set" : "clear", m[b] ? "set" : "clear");
		if (m[b])
			end = (uint64_t)b + 1;
	}
	UT_CHECK(extents_end(e) == end, "step %d: end %llu, model %llu", step,
		 (unsigned long long)extents_end(e), (unsigned long long)end);
	while (hole < U && m[hole])
		hole++;
	/* [0, size) is covered exactly when it ends at or before the first hole */
	for (uint64_t size = 0; size <= U; size++)
		UT_CHECK(extents_cover(e, size) == (size <= hole), "step %d: cover(%llu) wrong",
			 step, (unsigned long long)size);
}

START_TEST(test_extents_random_against_model)
{
	uint64_t seed = 12345;

	for (int round = 0; round < 200; round++) {
		struct extents e;
		bool m[U];

		extents_init(&e);
		memset(m, 0, sizeof(m));
		for (int step = 0; step < 60; step++) {
			uint64_t r = ut_rand(&seed);

			if (r % 13 == 0) {
				uint64_t size = ut_rand(&seed) % (U + 1);

				extents_clip(&e, size);
				for (uint64_t b = size; b < U; b++)
					m[b] = false;
			} else {
				/* mostly short writes, sometimes long ones, sometimes sequential */
				uint64_t off = ut_rand(&seed) % U, len;

				if (r % 5 == 0)
					off = extents_end(&e) < U ? extents_end(&e) : 0;
				len = (r % 7 == 0) ? ut_rand(&seed) % (U - off + 1)
						   : ut_rand(&seed) % 16;
				if (off + len > U)
					len = U - off;
				UT_CHECK(extents_add(&e, off, len) == 0, "add failed");
				for (uint64_t b = off; b < off + len; b++)
					m[b] = true;
			}
			compare_model(&e, m, round * 1000 + step);
		}
		extents_free(&e);
	}
}
END_TEST

Suite *extents_suite(void)
{
	Suite *s = suite_create("extents");
	TCase *core = ut_tcase("core", UT_TIMEOUT);

	tcase_add_test(core, test_extents_empty);
	tcase_add_test(core, test_extents_in_order);
	tcase_add_test(core, test_extents_out_of_order);
	tcase_add_test(core, test_extents_overlapping);
	tcase_add_test(core, test_extents_adjacent_merge);
	tcase_add_test(core, test_extents_clip_and_end);
	tcase_add_test(core, test_extents_cover);
	tcase_add_test(core, test_extents_large_offsets);
	tcase_add_test(core, test_extents_random_against_model);
	suite_add_tcase(s, core);
	return s;
}
