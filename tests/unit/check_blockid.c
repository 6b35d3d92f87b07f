/* BlockId: parsing, formatting, shards, order (src/blockid.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/blockid.h"
#include "tests/unit/unit.h"

static const char good[] = "0123456789abcdeffedcba9876543210";

START_TEST(test_blockid_parse_format_round_trip)
{
	struct blockid id, again;
	char hex[BLOCKID_HEX_LEN + 1];

	ck_assert_int_eq(blockid_parse(good, 32, &id), 0);
	ck_assert_uint_eq(id.b[0], 0x01);
	ck_assert_uint_eq(id.b[7], 0xef);
	ck_assert_uint_eq(id.b[8], 0xfe);
	ck_assert_uint_eq(id.b[15], 0x10);
	blockid_format(&id, hex);
	ck_assert_str_eq(hex, good);

	/* every byte value, in every position, survives format -> parse */
	for (unsigned n = 0; n < 4096; n++) {
		id = ut_id(n);
		id.b[n % 16] = (uint8_t)n;
		blockid_format(&id, hex);
		ck_assert_uint_eq(strlen(hex), 32);
		for (int i = 0; i < 32; i++)
			ck_assert_msg((hex[i] >= '0' && hex[i] <= '9') ||
					      (hex[i] >= 'a' && hex[i] <= 'f'),
				      "format wrote '%c' in %s", hex[i], hex);
		ck_assert_int_eq(blockid_parse(hex, 32, &again), 0);
		ck_assert(blockid_eq(&id, &again));
		ck_assert_int_eq(blockid_parse_name(hex, &again), 0);
		ck_assert(blockid_eq(&id, &again));
	}
}
END_TEST

START_TEST(test_blockid_parse_not_nul_terminated)
{
	char buf[64];
	struct blockid id, ref;

	/* s need not be NUL-terminated: only len characters are read */
	memcpy(buf, good, 32);
	memcpy(buf + 32, "ffff", 4);
	ck_assert_int_eq(blockid_parse(buf, 32, &id), 0);
	ck_assert_int_eq(blockid_parse_name(good, &ref), 0);
	ck_assert(blockid_eq(&id, &ref));
}
END_TEST

START_TEST(test_blockid_all_zero_and_all_f)
{
	struct blockid id;
	char hex[BLOCKID_HEX_LEN + 1];

	ck_assert_int_eq(blockid_parse_name("00000000000000000000000000000000", &id), 0);
	for (int i = 0; i < 16; i++)
		ck_assert_uint_eq(id.b[i], 0);
	ck_assert_uint_eq(blockid_shard(&id), 0);
	ck_assert_int_eq(blockid_parse_name("ffffffffffffffffffffffffffffffff", &id), 0);
	for (int i = 0; i < 16; i++)
		ck_assert_uint_eq(id.b[i], 0xff);
	ck_assert_uint_eq(blockid_shard(&id), BLOCKID_SHARDS - 1);
	blockid_format(&id, hex);
	ck_assert_str_eq(hex, "ffffffffffffffffffffffffffffffff");
}
END_TEST

START_TEST(test_blockid_shard_is_first_three_hex)
{
	char hex[BLOCKID_HEX_LEN + 1], first[4];
	uint64_t seed = 7;

	for (unsigned s = 0; s < BLOCKID_SHARDS; s++) {
		struct blockid id = ut_id_in_shard(s, s);

		ck_assert_uint_eq(blockid_shard(&id), s);
	}
	for (int n = 0; n < 10000; n++) {
		struct blockid id = ut_id(ut_rand(&seed));

		blockid_format(&id, hex);
		memcpy(first, hex, 3);
		first[3] = '\0';
		ck_assert_uint_eq(blockid_shard(&id), strtoul(first, NULL, 16));
		ck_assert_uint_lt(blockid_shard(&id), BLOCKID_SHARDS);
	}
}
END_TEST

static int cmp_hex(const void *a, const void *b)
{
	return strcmp(a, b);
}

START_TEST(test_blockid_sort_is_hex_order)
{
	enum { N = 2000 };
	static struct blockid ids[N];
	static char hex[N][BLOCKID_HEX_LEN + 1], sorted[N][BLOCKID_HEX_LEN + 1];

	for (int i = 0; i < N; i++) {
		ids[i] = ut_id((uint64_t)i);
		if (i % 7 == 0) /* ids sharing long prefixes */
			ids[i].b[0] = ids[i].b[1] = 0x42;
		if (i % 11 == 0 && i)
			ids[i] = ids[i - 1]; /* duplicates */
		blockid_format(&ids[i], hex[i]);
	}
	memcpy(sorted, hex, sizeof(hex));
	qsort(sorted, N, sizeof(sorted[0]), cmp_hex);
	blockid_sort(ids, N);
	for (int i = 0; i < N; i++) {
		char h[BLOCKID_HEX_LEN + 1];

		blockid_format(&ids[i], h);
		ck_assert_str_eq(h, sorted[i]);
		if (i)
			ck_assert_int_le(blockid_cmp(&ids[i - 1], &ids[i]), 0);
	}
}
END_TEST

START_TEST(test_blockid_cmp_matches_strcmp)
{
	uint64_t seed = 99;

	for (int n = 0; n < 10000; n++) {
		struct blockid a = ut_id(ut_rand(&seed)), b = ut_id(ut_rand(&seed));
		char ha[BLOCKID_HEX_LEN + 1], hb[BLOCKID_HEX_LEN + 1];
		int c, s;

		if (n % 3 == 0)
			memcpy(b.b, a.b, 1 + n % 15); /* common prefix */
		blockid_format(&a, ha);
		blockid_format(&b, hb);
		c = blockid_cmp(&a, &b);
		s = strcmp(ha, hb);
		ck_assert_int_eq(c < 0, s < 0);
		ck_assert_int_eq(c == 0, s == 0);
		ck_assert_int_eq(blockid_eq(&a, &b), s == 0);
	}
}
END_TEST

START_TEST(test_blockid_hash_spreads)
{
	/* ids that differ in one bit hash differently (the hash is used for buckets) */
	struct blockid a = ut_id(1), b;
	uint64_t h = blockid_hash(&a);

	ck_assert_uint_eq(blockid_hash(&a), h);
	for (int bit = 0; bit < 128; bit++) {
		b = a;
		b.b[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		ck_assert_uint_ne(blockid_hash(&b), h);
	}
}
END_TEST

/* --- errors ------------------------------------------------------------------------------ */

/* parse must fail and leave no partial result visible to the test (out is only checked
 * for success cases), for both entry points when the string is NUL-free */
static void expect_einval(const char *s, size_t len)
{
	struct blockid id;

	ck_assert_msg(blockid_parse(s, len, &id) == -EINVAL, "blockid_parse('%.*s', %zu) accepted",
		      (int)len, s, len);
	if (strlen(s) == len)
		ck_assert_msg(blockid_parse_name(s, &id) == -EINVAL,
			      "blockid_parse_name('%s') accepted", s);
}

START_TEST(test_blockid_wrong_length)
{
	char buf[80];

	expect_einval("", 0);
	for (size_t len = 1; len < sizeof(buf) - 1; len++) {
		if (len == 32)
			continue;
		memset(buf, 'a', len);
		buf[len] = '\0';
		expect_einval(buf, len);
	}
	expect_einval("0123456789abcdeffedcba987654321", 31);
	expect_einval("0123456789abcdeffedcba98765432100", 33);
}
END_TEST

START_TEST(test_blockid_uppercase_rejected)
{
	char buf[BLOCKID_HEX_LEN + 1];

	for (int i = 0; i < 32; i++) {
		for (char c = 'A'; c <= 'F'; c++) {
			memcpy(buf, "0123456789abcdeffedcba9876543210", 33);
			buf[i] = c;
			expect_einval(buf, 32);
		}
	}
	expect_einval("0123456789ABCDEFFEDCBA9876543210", 32);
}
END_TEST

START_TEST(test_blockid_non_hex_rejected)
{
	static const char bad[] = "ghzGZ-+ ./:;@`[{\x7f\x80\xff\t\n";
	char buf[BLOCKID_HEX_LEN + 1];

	for (int i = 0; i < 32; i++) {
		for (const char *c = bad; *c; c++) {
			memcpy(buf, good, 33);
			buf[i] = *c;
			expect_einval(buf, 32);
		}
	}
}
END_TEST

START_TEST(test_blockid_embedded_nul_rejected)
{
	char buf[BLOCKID_HEX_LEN + 1];
	struct blockid id;

	for (int i = 0; i < 32; i++) {
		memcpy(buf, good, 33);
		buf[i] = '\0';
		ck_assert_int_eq(blockid_parse(buf, 32, &id), -EINVAL);
		ck_assert_int_eq(blockid_parse_name(buf, &id), -EINVAL);
	}
}
END_TEST

START_TEST(test_blockid_parse_name_long_strings)
{
	static char big[1 << 16];
	struct blockid id;

	/* a valid id followed by anything is not a valid name */
	memcpy(big, good, 32);
	memset(big + 32, 'a', sizeof(big) - 33);
	big[sizeof(big) - 1] = '\0';
	ck_assert_int_eq(blockid_parse_name(big, &id), -EINVAL);
	big[33] = '\0';
	ck_assert_int_eq(blockid_parse_name(big, &id), -EINVAL); /* 33 chars */
	big[32] = '\0';
	ck_assert_int_eq(blockid_parse_name(big, &id), 0);
	memcpy(big, "0123456789abcdeffedcba9876543210.tmp", 37);
	ck_assert_int_eq(blockid_parse_name(big, &id), -EINVAL);
}
END_TEST

START_TEST(test_blockid_empty_rejected)
{
	struct blockid id;

	ck_assert_int_eq(blockid_parse("", 0, &id), -EINVAL);
	ck_assert_int_eq(blockid_parse_name("", &id), -EINVAL);
	ck_assert_int_eq(blockid_parse(good, 0, &id), -EINVAL);
}
END_TEST

Suite *blockid_suite(void)
{
	Suite *s = suite_create("blockid");
	TCase *core = ut_tcase("core", UT_TIMEOUT), *errors = ut_tcase("errors", UT_TIMEOUT);

	tcase_add_test(core, test_blockid_parse_format_round_trip);
	tcase_add_test(core, test_blockid_parse_not_nul_terminated);
	tcase_add_test(core, test_blockid_all_zero_and_all_f);
	tcase_add_test(core, test_blockid_shard_is_first_three_hex);
	tcase_add_test(core, test_blockid_sort_is_hex_order);
	tcase_add_test(core, test_blockid_cmp_matches_strcmp);
	tcase_add_test(core, test_blockid_hash_spreads);
	tcase_add_test(errors, test_blockid_wrong_length);
	tcase_add_test(errors, test_blockid_uppercase_rejected);
	tcase_add_test(errors, test_blockid_non_hex_rejected);
	tcase_add_test(errors, test_blockid_embedded_nul_rejected);
	tcase_add_test(errors, test_blockid_parse_name_long_strings);
	tcase_add_test(errors, test_blockid_empty_rejected);
	suite_add_tcase(s, core);
	suite_add_tcase(s, errors);
	return s;
}
