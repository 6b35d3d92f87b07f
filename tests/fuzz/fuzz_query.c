/*
 * Fuzzes lookup query files (fs/query.c): content written through query_write() in pieces
 * (in order, backwards over holes, or O_APPEND), optionally truncated, then the answers of
 * getxattr user.ucm.hits / .prefix / .last and setxattr user.ucm.ttl over a stand-in
 * pipeline whose presence rule comes from the input.
 *
 * The text parser of a query (parse_text(), parse_ids()) is static and works on a struct
 * qfile, so this file includes fs/query.c and drives it through its own entry points.
 *
 * Input: byte 0 = presence salt; byte 1 = how the content is written; byte 2 = truncation;
 * byte 3 = length L of the TTL value that follows (L bytes); the rest is the content.
 *
 * Properties, against an independent model of DESIGN.md section 4 (ids as lowercase hex
 * separated by whitespace, in request order; anything else is EINVAL):
 * - the content read back is exactly what was written (zeros in holes), whatever the order;
 * - hits has one '0'/'1' per id, prefix counts the leading hits, last is the index of the
 *   last hit or -1; asking twice (the parsed ids are cached) gives the same answers, and a
 *   change of the content is seen by the next answer;
 * - a TTL value is accepted exactly when the model accepts it, and then every listed present
 *   block with a deadline is extended to a deadline in the future (no overflow);
 * - the bytes held by query files are accounted and given back.
 */
#include "fs/query.c"

#include "tests/fuzz/fuzz.h"

#define MAX_IDS 4096

/* --- a pipeline that only knows which ids are present ------------------------------------ */

static uint8_t salt;
static unsigned deadline_calls;
static int64_t deadline_min_want;

static bool is_present(const struct blockid *id)
{
	return ((id->b[15] ^ salt) & 3) != 0;
}

static void fake_present(struct tier *t, const struct blockid *ids, size_t n, uint8_t *hit)
{
	for (size_t i = 0; i < n; i++)
		if (!hit[i] && is_present(&ids[i]))
			hit[i] = 1;
}

static int fake_lookup(struct tier *t, const struct blockid *id, struct block_attr *a)
{
	if (!is_present(id))
		return -ENOENT;
	memset(a, 0, sizeof(*a));
	a->where = TIER_MEM;
	a->deadline = (id->b[14] & 1) ? 1 : 0; /* a deadline long past, or none */
	return 0;
}

static int fake_set_deadline(struct tier *t, const struct blockid *id, int64_t deadline)
{
	CHECK(is_present(id) && (id->b[14] & 1));
	deadline_calls++;
	if (deadline < deadline_min_want)
		deadline_min_want = deadline;
	return 0;
}

static const struct tier_ops fake_ops = {
	.name = "fake",
	.present = fake_present,
	.lookup = fake_lookup,
	.set_deadline = fake_set_deadline,
};

static struct tier fake_tier = { .ops = &fake_ops };
static struct ucmfs fs;

/* the open files of fs/fs.c, for query files only */
struct fh *fh_new(struct ucmfs *ufs, enum fh_kind kind, int flags)
{
	struct fh *fh = calloc(1, sizeof(*fh));

	(void)ufs;
	if (fh) {
		fh->kind = kind;
		fh->open_flags = flags;
	}
	return fh;
}

void fh_free(struct ucmfs *ufs, struct fh *fh)
{
	CHECK(fh->kind == FH_QUERY);
	query_close(ufs, fh->q);
	free(fh);
}

/* --- the model --------------------------------------------------------------------------- */

static bool space(char c)
{
	return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

static int nibble(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* The ids of text, or -1 if it holds anything else; at most MAX_IDS of them into ids. */
static long model_ids(const char *text, size_t len, struct blockid *ids)
{
	long n = 0;

	for (size_t i = 0; i < len;) {
		size_t j;

		while (i < len && space(text[i]))
			i++;
		if (i == len)
			break;
		for (j = i; j < len && !space(text[j]); j++)
			;
		if (j - i != BLOCKID_HEX_LEN)
			return -1;
		for (size_t k = 0; k < BLOCKID_LEN; k++) {
			int hi = nibble(text[i + 2 * k]), lo = nibble(text[i + 2 * k + 1]);

			if (hi < 0 || lo < 0)
				return -1;
			if (n < MAX_IDS)
				ids[n].b[k] = (uint8_t)(hi << 4 | lo);
		}
		n++;
		i = j;
	}
	return n;
}

static int model_ttl(const char *v, size_t size, int64_t *ms)
{
	char buf[64];

	while (size && (v[size - 1] == '\n' || v[size - 1] == ' ' || !v[size - 1]))
		size--;
	if (size == 0 || size >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, v, size);
	buf[size] = '\0';
	if (parse_duration_ms(buf, ms) || *ms == TTL_NONE)
		return -EINVAL;
	return 0;
}

/* --- checks ------------------------------------------------------------------------------ */

static int get(struct qfile *q, const char *name, char **value)
{
	return query_getxattr(&fs, (fuse_ino_t)(uintptr_t)q, name, value);
}

static void check_answers(struct qfile *q, const char *text, size_t len)
{
	static struct blockid ids[MAX_IDS];
	long n = model_ids(text, len, ids), prefix = 0, last = -1;
	char *v = NULL, want[32];
	int rc;

	rc = get(q, "user.ucm.hits", &v);
	if (n < 0) {
		CHECK(rc == -EINVAL);
		CHECK(get(q, "user.ucm.prefix", &v) == -EINVAL);
		CHECK(get(q, "user.ucm.last", &v) == -EINVAL);
		return;
	}
	CHECK(n <= MAX_IDS);
	CHECK(rc == n);
	for (long i = 0; i < n; i++) {
		bool hit = is_present(&ids[i]);

		CHECK(v[i] == (hit ? '1' : '0'));
		if (hit)
			last = i;
		if (hit && prefix == i)
			prefix++;
	}
	free(v);

	rc = get(q, "user.ucm.prefix", &v);
	snprintf(want, sizeof(want), "%ld", prefix);
	CHECK(rc == (int)strlen(want) && !memcmp(v, want, (size_t)rc));
	free(v);
	rc = get(q, "user.ucm.last", &v);
	snprintf(want, sizeof(want), "%ld", last);
	CHECK(rc == (int)strlen(want) && !memcmp(v, want, (size_t)rc));
	free(v);
	/* again, from the cached ids */
	rc = get(q, "user.ucm.hits", &v);
	CHECK(rc == n);
	for (long i = 0; i < n; i++)
		CHECK(v[i] == (is_present(&ids[i]) ? '1' : '0'));
	free(v);
}

static void check_ttl(struct qfile *q, const char *text, size_t len, const char *val,
		      size_t vlen)
{
	static struct blockid ids[MAX_IDS];
	long n = model_ids(text, len, ids);
	int64_t ms = 0, before;
	int want = model_ttl(val, vlen, &ms), rc;
	unsigned expect = 0;

	if (want == 0 && n < 0)
		want = -EINVAL;
	for (long i = 0; want == 0 && i < n; i++)
		expect += is_present(&ids[i]) && (ids[i].b[14] & 1);
	deadline_calls = 0;
	deadline_min_want = INT64_MAX;
	before = mono_ns();
	rc = query_setxattr(&fs, (fuse_ino_t)(uintptr_t)q, "user.ucm.ttl", val, vlen);
	CHECK(rc == want);
	if (rc == 0) {
		CHECK(deadline_calls == expect);
		/* the new deadlines lie ahead, ms from now (clamped, not wrapped) */
		if (expect)
			CHECK(deadline_min_want >= before);
	}
}

int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fs.pipe = &fake_tier;
	CHECK(query_init(&fs) == 0);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char more[] = " 00000000000000000000000000000003\n";
	struct fin f = { data, size };
	struct qdir *qd = fs.queries;
	uint8_t plan, cut, tlen;
	const char *ttl, *content;
	size_t len, mlen;
	struct qfile *q;
	struct fh *fh;
	char *model, *back, *v;
	uint64_t seed;

	if (size > 65536)
		return 0; /* MAX_IDS ids at most */
	salt = fin_u8(&f);
	plan = fin_u8(&f);
	cut = fin_u8(&f);
	tlen = fin_u8(&f) % 32;
	if (tlen > f.n)
		tlen = (uint8_t)f.n;
	ttl = (const char *)f.p;
	f.p += tlen;
	f.n -= tlen;
	content = (const char *)f.p;
	len = f.n;

	q = calloc(1, sizeof(*q));
	CHECK(q);
	q->kind = NODE_QUERY;
	q->listed = true;
	snprintf(q->name, sizeof(q->name), "fuzz");
	fh = fh_new(&fs, FH_QUERY, (plan & 3) == 3 ? O_WRONLY | O_APPEND : O_WRONLY);
	CHECK(fh);
	fh->q = q;
	q->opens = 1;

	/* the content in pieces of 1..32 bytes: forwards, backwards (over holes), appended */
	seed = plan >> 2;
	if ((plan & 3) == 0) {
		CHECK(query_write(&fs, fh, content, len, 0) == (ssize_t)len);
	} else if ((plan & 3) == 2) {
		size_t end = len;

		while (end) {
			size_t piece = 1 + fz_rand(&seed) % 32, off = end > piece ? end - piece : 0;

			CHECK(query_write(&fs, fh, content + off, end - off, off) ==
			      (ssize_t)(end - off));
			end = off;
		}
	} else {
		for (size_t off = 0; off < len;) {
			size_t piece = 1 + fz_rand(&seed) % 32;

			if (piece > len - off)
				piece = len - off;
			/* O_APPEND ignores the offset given */
			CHECK(query_write(&fs, fh, content + off, piece,
					  (plan & 3) == 3 ? 12345 : off) == (ssize_t)piece);
			off += piece;
		}
	}

	/* truncate: shorter, or longer with zeros */
	model = malloc(len + 64);
	CHECK(model);
	memcpy(model, content, len);
	mlen = len;
	if (cut & 0x80) {
		size_t by = cut & 0x3f, to = (cut & 0x40) ? len + by : len - (len < by ? len : by);

		CHECK(query_truncate(&fs, (fuse_ino_t)(uintptr_t)q, to) == 0);
		if (to > mlen)
			memset(model + mlen, 0, to - mlen);
		mlen = to;
	}
	back = malloc(mlen + 1);
	CHECK(back);
	CHECK(query_read(&fs, fh, back, mlen + 1, 0) == (ssize_t)mlen);
	CHECK(!memcmp(back, model, mlen));
	free(back);

	check_answers(q, model, mlen);
	CHECK(get(q, "user.ucm.prefetch", &v) == 4);
	CHECK(!strcmp(v, "none"));
	free(v);
	CHECK(get(q, "user.ucm.other", &v) == -ENODATA);
	check_ttl(q, model, mlen, ttl, tlen);

	/* one more id at the end: the next answer sees it */
	CHECK(query_write(&fs, fh, more, sizeof(more) - 1, mlen) == (ssize_t)(sizeof(more) - 1));
	model = realloc(model, mlen + sizeof(more));
	CHECK(model);
	memcpy(model + mlen, more, sizeof(more) - 1);
	mlen += sizeof(more) - 1;
	check_answers(q, model, mlen);

	fh_free(&fs, fh);
	CHECK(q->opens == 0);
	pthread_mutex_lock(&qd->lock);
	qd->total -= q->cap;
	CHECK(qd->total == 0);
	pthread_mutex_unlock(&qd->lock);
	qf_free(q);
	free(model);
	return 0;
}
