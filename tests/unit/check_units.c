/* Sizes and durations as users write them (src/units.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "src/units.h"
#include "tests/unit/unit.h"

static uint64_t size_ok(const char *s)
{
	uint64_t v = 12345;
	int rc = parse_size(s, &v);

	ck_assert_msg(rc == 0, "parse_size(\"%s\") = %d, want 0", s, rc);
	return v;
}

static void size_err(const char *s, int want)
{
	uint64_t v = 12345;
	int rc = parse_size(s, &v);

	ck_assert_msg(rc == want, "parse_size(\"%s\") = %d, want %d", s, rc, want);
}

static int64_t dur_ok(const char *s)
{
	int64_t v = 12345;
	int rc = parse_duration_ms(s, &v);

	ck_assert_msg(rc == 0, "parse_duration_ms(\"%s\") = %d, want 0", s, rc);
	return v;
}

static void dur_err(const char *s, int want)
{
	int64_t v = 12345;
	int rc = parse_duration_ms(s, &v);

	ck_assert_msg(rc == want, "parse_duration_ms(\"%s\") = %d, want %d", s, rc, want);
}

START_TEST(test_units_size_suffixes)
{
	ck_assert_uint_eq(size_ok("0"), 0);
	ck_assert_uint_eq(size_ok("1"), 1);
	ck_assert_uint_eq(size_ok("4097"), 4097);
	ck_assert_uint_eq(size_ok("4K"), 4096);
	ck_assert_uint_eq(size_ok("4k"), 4096);
	ck_assert_uint_eq(size_ok("4KiB"), 4096);
	ck_assert_uint_eq(size_ok("4KB"), 4096);
	ck_assert_uint_eq(size_ok("1M"), 1ULL << 20);
	ck_assert_uint_eq(size_ok("1m"), 1ULL << 20);
	ck_assert_uint_eq(size_ok("64MiB"), 64ULL << 20);
	ck_assert_uint_eq(size_ok("64MB"), 64ULL << 20);
	ck_assert_uint_eq(size_ok("8G"), 8ULL << 30);
	ck_assert_uint_eq(size_ok("8g"), 8ULL << 30);
	ck_assert_uint_eq(size_ok("8GiB"), 8ULL << 30);
	ck_assert_uint_eq(size_ok("1T"), 1ULL << 40);
	ck_assert_uint_eq(size_ok("1t"), 1ULL << 40);
	ck_assert_uint_eq(size_ok("3TB"), 3ULL << 40);
	ck_assert_uint_eq(size_ok("0K"), 0);
	ck_assert_uint_eq(size_ok("007"), 7);
	ck_assert_uint_eq(size_ok("1536K"), 1536ULL << 10);
}
END_TEST

START_TEST(test_units_size_limits)
{
	ck_assert_uint_eq(size_ok("18446744073709551615"), UINT64_MAX);
	ck_assert_uint_eq(size_ok("16777215T"), 16777215ULL << 40);
	ck_assert_uint_eq(size_ok("17179869183G"), 17179869183ULL << 30);
	ck_assert_uint_eq(size_ok("18014398509481983K"), 18014398509481983ULL << 10);
}
END_TEST

START_TEST(test_units_size_errors)
{
	size_err("", -EINVAL);
	size_err("K", -EINVAL);
	size_err("-1", -EINVAL);
	size_err("+1", -EINVAL);
	size_err("-1K", -EINVAL);
	size_err("1.5", -EINVAL);
	size_err("1.5G", -EINVAL);
	size_err(".5G", -EINVAL);
	size_err("1,5G", -EINVAL);
	size_err("4X", -EINVAL);
	size_err("4P", -EINVAL);
	size_err("4E", -EINVAL);
	size_err("4 K", -EINVAL);
	size_err(" 4K", -EINVAL);
	size_err("4K ", -EINVAL);
	size_err("4KK", -EINVAL);
	size_err("4Kx", -EINVAL);
	size_err("4KiBx", -EINVAL);
	size_err("4Ki", -EINVAL);
	size_err("4KBB", -EINVAL);
	size_err("0x10", -EINVAL);
	size_err("1e3", -EINVAL);
	size_err("12abc", -EINVAL);
}
END_TEST

START_TEST(test_units_size_overflow)
{
	size_err("18446744073709551616", -ERANGE);
	size_err("99999999999999999999999999", -ERANGE);
	size_err("16777216T", -ERANGE);
	size_err("17179869184G", -ERANGE);
	size_err("17592186044416M", -ERANGE);
	size_err("18014398509481984K", -ERANGE);
	size_err("18446744073709551615K", -ERANGE);
}
END_TEST

START_TEST(test_units_duration_units)
{
	ck_assert_int_eq(dur_ok("500ms"), 500);
	ck_assert_int_eq(dur_ok("0ms"), 0);
	ck_assert_int_eq(dur_ok("30s"), 30000);
	ck_assert_int_eq(dur_ok("10m"), 600000);
	ck_assert_int_eq(dur_ok("2h"), 7200000);
	ck_assert_int_eq(dur_ok("1d"), 86400000);
	ck_assert_int_eq(dur_ok("7d"), 7 * 86400000LL);
	ck_assert_int_eq(dur_ok("250"), 250);
	ck_assert_int_eq(dur_ok("60000"), 60000);
	ck_assert_int_eq(dur_ok("0"), 0);
	ck_assert(dur_ok("none") == TTL_NONE);
	/* a hundred years is a valid TTL */
	ck_assert_int_eq(dur_ok("36500d"), 36500LL * 86400000);
}
END_TEST

START_TEST(test_units_duration_errors)
{
	dur_err("", -EINVAL);
	dur_err("ms", -EINVAL);
	dur_err("s", -EINVAL);
	dur_err("-5s", -EINVAL);
	dur_err("+5s", -EINVAL);
	dur_err("1.5s", -EINVAL);
	dur_err("5x", -EINVAL);
	dur_err("5 s", -EINVAL);
	dur_err("5s ", -EINVAL);
	dur_err(" 5s", -EINVAL);
	dur_err("5sec", -EINVAL);
	dur_err("5mss", -EINVAL);
	dur_err("5hm", -EINVAL);
	dur_err("1h30m", -EINVAL);
	dur_err("nonee", -EINVAL);
	dur_err("none ", -EINVAL);
	dur_err("never", -EINVAL);
	dur_err("5K", -EINVAL);
}
END_TEST

START_TEST(test_units_duration_overflow)
{
	dur_err("99999999999999999999999", -ERANGE);
	dur_err("9223372036854775808", -ERANGE); /* INT64_MAX + 1 ms */
	dur_err("9223372036854775807s", -ERANGE);
	dur_err("999999999999999999d", -ERANGE);
	dur_err("18446744073709551615h", -ERANGE);
}
END_TEST

START_TEST(test_units_parse_u64)
{
	uint64_t v = 1;

	ck_assert_int_eq(parse_u64("0", &v), 0);
	ck_assert_uint_eq(v, 0);
	ck_assert_int_eq(parse_u64("1024", &v), 0);
	ck_assert_uint_eq(v, 1024);
	ck_assert_int_eq(parse_u64("18446744073709551615", &v), 0);
	ck_assert_uint_eq(v, UINT64_MAX);
	ck_assert_int_eq(parse_u64("18446744073709551616", &v), -ERANGE);
	ck_assert_int_eq(parse_u64("", &v), -EINVAL);
	ck_assert_int_eq(parse_u64("-1", &v), -EINVAL);
	ck_assert_int_eq(parse_u64("+1", &v), -EINVAL);
	ck_assert_int_eq(parse_u64("1K", &v), -EINVAL);
	ck_assert_int_eq(parse_u64("1 ", &v), -EINVAL);
}
END_TEST

static void round_trip(uint64_t bytes)
{
	char buf[64];
	uint64_t back = ~bytes;
	int rc;

	format_size(bytes, buf, sizeof(buf));
	rc = parse_size(buf, &back);
	UT_CHECK(rc == 0, "format_size(%llu) = \"%s\", which parse_size rejects (%d)",
		 (unsigned long long)bytes, buf, rc);
	UT_CHECK(back == bytes, "format_size(%llu) = \"%s\" reads back as %llu",
		 (unsigned long long)bytes, buf, (unsigned long long)back);
}

START_TEST(test_units_format_size_round_trip)
{
	char buf[64];
	uint64_t seed = 3;

	format_size(1ULL << 30, buf, sizeof(buf));
	ck_assert_str_eq(buf, "1G");
	format_size(1536ULL << 10, buf, sizeof(buf));
	ck_assert_str_eq(buf, "1536K");
	format_size(4097, buf, sizeof(buf));
	ck_assert_str_eq(buf, "4097");
	format_size(0, buf, sizeof(buf));
	ck_assert_str_eq(buf, "0");
	format_size(1ULL << 50, buf, sizeof(buf));
	ck_assert_str_eq(buf, "1024T");

	round_trip(0);
	round_trip(1);
	round_trip(UINT64_MAX);
	round_trip(1ULL << 63);
	for (int sh = 0; sh < 64; sh++) {
		round_trip(1ULL << sh);
		round_trip((1ULL << sh) - 1);
		round_trip((1ULL << sh) + 1);
		round_trip(3ULL << sh >> 1);
	}
	for (int i = 0; i < 100000; i++) {
		uint64_t r = ut_rand(&seed);

		round_trip(r);
		round_trip(r << (r % 64));
		round_trip((r % 100000) << (10 * (r % 5)));
	}
}
END_TEST

Suite *units_suite(void)
{
	Suite *s = suite_create("units");
	TCase *core = ut_tcase("core", UT_TIMEOUT), *errors = ut_tcase("errors", UT_TIMEOUT);

	tcase_add_test(core, test_units_size_suffixes);
	tcase_add_test(core, test_units_size_limits);
	tcase_add_test(core, test_units_duration_units);
	tcase_add_test(core, test_units_parse_u64);
	tcase_add_test(core, test_units_format_size_round_trip);
	tcase_add_test(errors, test_units_size_errors);
	tcase_add_test(errors, test_units_size_overflow);
	tcase_add_test(errors, test_units_duration_errors);
	tcase_add_test(errors, test_units_duration_overflow);
	suite_add_tcase(s, core);
	suite_add_tcase(s, errors);
	return s;
}
