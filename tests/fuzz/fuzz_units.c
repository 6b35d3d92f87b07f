/*
 * Fuzzes the small parsers of names and values (src/blockid.c, src/units.c): blockid_parse(),
 * blockid_parse_name(), parse_size(), parse_duration_ms(), parse_u64(), format_size(), and
 * blockid_format(), blockid_sort() and struct idvec on ids made of the input.
 *
 * Properties:
 * - each parser agrees with an independent model of its grammar (DESIGN.md section 2 and the
 *   comments in the headers): same verdict (0, -EINVAL, -ERANGE) and same value;
 * - a BlockId is accepted exactly when it is 32 lowercase hex digits, and formatting it gives
 *   the same text back; any 16 bytes format to a name that parses back to them; blockid_shard()
 *   is the value of the first three hex digits;
 * - format_size() and parse_size() round-trip every 64-bit value, and a short buffer receives
 *   a NUL-terminated prefix of the full text, nothing past its end;
 * - a parsed duration formatted as "<N>ms" parses back to itself, and now plus it in
 *   nanoseconds fits in an int64_t on any clock (at most 2^62 ns);
 * - blockid_sort() orders ids like strcmp() orders their names, as a permutation.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/blockid.h"
#include "src/units.h"
#include "tests/fuzz/fuzz.h"

static bool is_lower_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

static int hexdigit(char c)
{
	return c <= '9' ? c - '0' : c - 'a' + 10;
}

/* --- models of the grammars -------------------------------------------------------------- */

/* Leading digits: their count, and whether their value overflows 64 bits. */
static size_t model_digits(const char *s, unsigned __int128 *v, bool *over)
{
	size_t n = 0;

	*v = 0;
	*over = false;
	for (; s[n] >= '0' && s[n] <= '9'; n++) {
		*v = *v * 10 + (unsigned)(s[n] - '0');
		if (*v > UINT64_MAX) {
			*over = true;
			*v = (unsigned __int128)UINT64_MAX + 1; /* saturate, keep scanning */
		}
	}
	return n;
}

static int model_u64(const char *s, uint64_t *out)
{
	unsigned __int128 v;
	bool over;
	size_t n = model_digits(s, &v, &over);

	if (over)
		return -ERANGE;
	if (!n || s[n])
		return -EINVAL;
	*out = (uint64_t)v;
	return 0;
}

static int model_size(const char *s, uint64_t *out)
{
	unsigned __int128 v;
	bool over;
	size_t n = model_digits(s, &v, &over);
	const char *u = s + n;
	int shift;

	if (over)
		return -ERANGE;
	if (!n)
		return -EINVAL;
	switch (*u) {
	case '\0': *out = (uint64_t)v; return 0;
	case 'k': case 'K': shift = 10; break;
	case 'm': case 'M': shift = 20; break;
	case 'g': case 'G': shift = 30; break;
	case 't': case 'T': shift = 40; break;
	default: return -EINVAL;
	}
	u++;
	if (strcmp(u, "") && strcmp(u, "B") && strcmp(u, "iB"))
		return -EINVAL;
	v <<= shift;
	if (v > UINT64_MAX)
		return -ERANGE;
	*out = (uint64_t)v;
	return 0;
}

static int model_duration(const char *s, int64_t *out)
{
	static const struct {
		const char *unit;
		uint64_t ms;
	} units[] = { { "", 1 }, { "ms", 1 }, { "s", 1000 }, { "m", 60000 },
		      { "h", 3600000 }, { "d", 86400000 } };
	unsigned __int128 v;
	bool over;
	size_t n;

	if (!strcmp(s, "none")) {
		*out = TTL_NONE;
		return 0;
	}
	n = model_digits(s, &v, &over);
	if (over)
		return -ERANGE;
	if (!n)
		return -EINVAL;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(s + n, units[i].unit))
			continue;
		/* now + the result in nanoseconds must fit in an int64_t on either clock:
		 * at most 2^62 ns (src/units.c) */
		if (v * units[i].ms * 1000000 > INT64_MAX / 2)
			return -ERANGE;
		*out = (int64_t)(v * units[i].ms);
		return 0;
	}
	return -EINVAL;
}

/* --- checks ------------------------------------------------------------------------------ */

static void check_blockid_text(const char *s, size_t len)
{
	struct blockid id, id2;
	char hex[BLOCKID_HEX_LEN + 1];
	bool want = len == BLOCKID_HEX_LEN;
	int rc;

	for (size_t i = 0; want && i < len; i++)
		want = is_lower_hex(s[i]);
	rc = blockid_parse(s, len, &id);
	CHECK(rc == 0 || rc == -EINVAL);
	CHECK((rc == 0) == want);
	if (rc == 0) {
		blockid_format(&id, hex);
		CHECK(memcmp(hex, s, BLOCKID_HEX_LEN) == 0 && hex[BLOCKID_HEX_LEN] == '\0');
		CHECK(blockid_shard(&id) ==
		      (unsigned)(hexdigit(s[0]) << 8 | hexdigit(s[1]) << 4 | hexdigit(s[2])));
		CHECK(blockid_shard(&id) < BLOCKID_SHARDS);
	}

	/* the NUL-terminated form: the same verdict as the text up to its first NUL */
	char *name = malloc(len + 1);

	CHECK(name);
	memcpy(name, s, len);
	name[len] = '\0';
	rc = blockid_parse_name(name, &id2);
	CHECK(rc == blockid_parse(name, strlen(name), &id));
	if (rc == 0)
		CHECK(blockid_eq(&id, &id2));
	free(name);
}

static void check_id_bytes(const uint8_t *p, size_t n)
{
	size_t cnt = n / BLOCKID_LEN > 64 ? 64 : n / BLOCKID_LEN;
	struct blockid *ids, *sorted;
	struct idvec iv = { 0 };
	char hex[BLOCKID_HEX_LEN + 1], prev[BLOCKID_HEX_LEN + 1];

	if (!cnt)
		return;
	ids = malloc(cnt * sizeof(*ids));
	sorted = malloc(cnt * sizeof(*sorted));
	CHECK(ids && sorted);
	for (size_t i = 0; i < cnt; i++) {
		struct blockid back;

		memcpy(ids[i].b, p + i * BLOCKID_LEN, BLOCKID_LEN);
		blockid_format(&ids[i], hex);
		CHECK(strlen(hex) == BLOCKID_HEX_LEN);
		CHECK(blockid_parse(hex, BLOCKID_HEX_LEN, &back) == 0);
		CHECK(blockid_eq(&back, &ids[i]));
		CHECK(blockid_hash(&back) == blockid_hash(&ids[i]));
		CHECK(idvec_push(&iv, &ids[i]) == 0);
	}
	CHECK(iv.n == cnt && iv.cap >= cnt);
	CHECK(memcmp(iv.v, ids, cnt * sizeof(*ids)) == 0);
	idvec_free(&iv);
	CHECK(iv.v == NULL && iv.n == 0);

	memcpy(sorted, ids, cnt * sizeof(*ids));
	blockid_sort(sorted, cnt);
	for (size_t i = 0; i < cnt; i++) {
		blockid_format(&sorted[i], hex);
		if (i)
			CHECK(strcmp(prev, hex) <= 0);
		memcpy(prev, hex, sizeof(hex));
	}
	/* a permutation: every id of the input is there as many times as before */
	for (size_t i = 0; i < cnt; i++) {
		size_t a = 0, b = 0;

		for (size_t j = 0; j < cnt; j++) {
			a += blockid_eq(&ids[i], &ids[j]);
			b += blockid_eq(&ids[i], &sorted[j]);
		}
		CHECK(a == b);
	}
	free(ids);
	free(sorted);
}

static void check_format_size(uint64_t v)
{
	char full[32], *small;
	uint64_t back = 0;

	format_size(v, full, sizeof(full));
	CHECK(strlen(full) < 24);
	CHECK(parse_size(full, &back) == 0 && back == v);
	for (size_t len = 1; len <= strlen(full) + 1; len++) {
		small = (char *)fz_guarded(len);
		format_size(v, small, len);
		CHECK(fz_guard_ok((uint8_t *)small, len));
		CHECK(strlen(small) == len - 1 || strlen(small) == strlen(full));
		CHECK(strncmp(small, full, strlen(small)) == 0);
		free(small);
	}
}

static void check_strings(const char *s)
{
	uint64_t u = 0, mu = 0;
	int64_t d = 0, md = 0;
	int rc, mrc;

	rc = parse_u64(s, &u);
	mrc = model_u64(s, &mu);
	CHECK(rc == mrc);
	if (rc == 0)
		CHECK(u == mu);

	rc = parse_size(s, &u);
	mrc = model_size(s, &mu);
	CHECK(rc == mrc);
	if (rc == 0) {
		CHECK(u == mu);
		check_format_size(u);
	}

	rc = parse_duration_ms(s, &d);
	mrc = model_duration(s, &md);
	CHECK(rc == mrc);
	if (rc == 0) {
		char buf[48];
		int64_t back;

		CHECK(d == md);
		if (d != TTL_NONE) {
			CHECK(d >= 0 && d <= INT64_MAX / 2 / 1000000);
			snprintf(buf, sizeof(buf), "%" PRId64 "ms", d);
			CHECK(parse_duration_ms(buf, &back) == 0 && back == d);
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	uint64_t v = 0;

	CHECK(s);
	memcpy(s, data, size);
	s[size] = '\0';

	/* the whole input as a name (NULs included), then each window of 32 as one */
	check_blockid_text(s, size);
	for (size_t off = 1; size > BLOCKID_HEX_LEN && off + BLOCKID_HEX_LEN <= size && off < 8;
	     off++)
		check_blockid_text(s + off, BLOCKID_HEX_LEN);
	check_id_bytes(data, size);

	/* the input up to its first NUL as a value, then every NUL-separated piece */
	for (const char *p = s; p <= s + size; p += strlen(p) + 1)
		check_strings(p);

	/* the first 8 bytes as a size, and a few shifted forms of it */
	for (size_t i = 0; i < 8 && i < size; i++)
		v |= (uint64_t)data[i] << (8 * i);
	check_format_size(v);
	check_format_size(v << 10);
	check_format_size(v << 20);
	check_format_size(v << 40);
	check_format_size(v >> 13 << 30);
	free(s);
	return 0;
}
