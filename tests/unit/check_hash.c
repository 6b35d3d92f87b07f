/* XXH3-64 of stored bytes (src/hash.h): every variant gives libxxhash's value. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "src/hash.h"
#include "tests/unit/unit.h"

/* Lengths around each of XXH3's internal paths (0-16, 17-128, 129-240, stripes, blocks). */
static const size_t lens[] = { 0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1023, 1024,
			       1025, 4096, 65536 + 7, (1u << 20) + 4096 + 1 };

START_TEST(test_hash_matches_libxxhash)
{
	size_t max = (1u << 20) + 4096 + 1;
	unsigned char *buf = malloc(max + 64);
	uint64_t seed = 7;

	ck_assert_ptr_nonnull(buf);
	for (size_t i = 0; i < max + 64; i++)
		buf[i] = (unsigned char)ut_rand(&seed);
	for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++)
		for (size_t mis = 0; mis < 64; mis += 17) /* unaligned starts too */
			ck_assert_msg(hash64(buf + mis, lens[k]) == XXH3_64bits(buf + mis, lens[k]),
				      "hash64 (%s) of %zu bytes at +%zu differs from XXH3_64bits",
				      hash_variant(), lens[k], mis);
	free(buf);
}
END_TEST

START_TEST(test_hash_running_equals_one_shot)
{
	size_t len = (3u << 20) + 12345;
	unsigned char *buf = malloc(len);
	struct hash_state *st = hash_new();
	uint64_t seed = 11, want;

	ck_assert_ptr_nonnull(buf);
	ck_assert_ptr_nonnull(st);
	for (size_t i = 0; i < len; i++)
		buf[i] = (unsigned char)ut_rand(&seed);
	want = XXH3_64bits(buf, len);
	ck_assert(hash_digest(st) == XXH3_64bits(buf, 0));
	/* pieces of every size, as a block arrives in writes of any length */
	for (size_t off = 0, step = 1; off < len; step = step * 3 + 1) {
		size_t n = step % (1u << 20) + 1 < len - off ? step % (1u << 20) + 1 : len - off;

		hash_update(st, buf + off, n);
		off += n;
	}
	ck_assert(hash_digest(st) == want);
	hash_reset(st);
	hash_update(st, buf, len);
	ck_assert(hash_digest(st) == want);
	free(st);
	free(buf);
}
END_TEST

START_TEST(test_hash_variant_named)
{
	const char *v = hash_variant();

	ck_assert(!strcmp(v, "avx2") || !strcmp(v, "baseline"));
#if defined(__x86_64__) && defined(__GNUC__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx2"))
		ck_assert_str_eq(v, "avx2");
#endif
}
END_TEST

Suite *hash_suite(void)
{
	Suite *s = suite_create("hash");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_hash_matches_libxxhash);
	tcase_add_test(tc, test_hash_running_equals_one_shot);
	tcase_add_test(tc, test_hash_variant_named);
	suite_add_tcase(s, tc);
	return s;
}
