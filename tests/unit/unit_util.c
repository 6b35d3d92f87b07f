/* Helpers shared by the unit suites; see unit.h. */
#include "tests/unit/unit.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "src/buf.h"

static char tmpbase[PATH_MAX] = "/tmp";

TCase *ut_tcase(const char *name, int timeout_s)
{
	TCase *tc = tcase_create(name);

	tcase_set_timeout(tc, timeout_s);
	return tc;
}

bool ut_use_file_buffers(const char *who)
{
	char why[256] = "";
	int rc = buf_use_files(why, sizeof(why));

	if (rc && geteuid() == 0)
		ck_abort_msg("%s: buf_use_files as root: %s", who, why);
	if (rc)
		fprintf(stderr, "%s: not root, nothing checked on file buffers (%s)\n", who, why);
	return rc == 0;
}

void ut_set_tmpbase(const char *dir)
{
	snprintf(tmpbase, sizeof(tmpbase), "%s", dir);
}

void ut_mkdtemp(char *out, size_t len)
{
	int n = snprintf(out, len, "%s/t.XXXXXX", tmpbase);

	ck_assert_msg(n > 0 && (size_t)n < len, "temp path too long");
	ck_assert_msg(mkdtemp(out) != NULL, "mkdtemp %s: %s", out, strerror(errno));
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

void ut_rmtree(const char *path)
{
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int ut_count_prefixed(const char *dir, const char *prefix)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (!strncmp(de->d_name, prefix, strlen(prefix)))
			n++;
	}
	closedir(d);
	return n;
}

int ut_count_entries(const char *dir)
{
	return ut_count_prefixed(dir, "");
}

uint64_t ut_mix(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

uint64_t ut_rand(uint64_t *state)
{
	*state += 0x9e3779b97f4a7c15ULL;
	return ut_mix(*state);
}

struct blockid ut_id(uint64_t n)
{
	struct blockid id;
	uint64_t a = ut_mix(n * 2 + 1), b = ut_mix(n * 2 + 2);

	for (int i = 0; i < 8; i++) {
		id.b[i] = (uint8_t)(a >> (8 * i));
		id.b[8 + i] = (uint8_t)(b >> (8 * i));
	}
	return id;
}

struct blockid ut_id_in_shard(unsigned shard, uint64_t n)
{
	struct blockid id = ut_id(n);

	id.b[0] = (uint8_t)(shard >> 4);
	id.b[1] = (uint8_t)((shard & 15) << 4 | (id.b[1] & 15));
	return id;
}

const char *ut_hex(const struct blockid *id)
{
	static __thread char hex[4][BLOCKID_HEX_LEN + 1];
	static __thread int next;
	char *s = hex[next++ & 3];

	blockid_format(id, s);
	return s;
}

/*
 * The 8-byte word w of block (id, seed): four little-endian 16-bit values shaped like bf16
 * numbers of one magnitude (a random low byte, a high byte from 0x3c..0x3f), so the bytes
 * compress (and compress better byte-plane shuffled), as KV-cache data does.
 */
static uint64_t word(const struct blockid *id, uint64_t seed, uint64_t w)
{
	uint64_t k, v;

	memcpy(&k, id->b, sizeof(k));
	v = ut_mix(k ^ ut_mix(seed + 0x51ed27) ^ (w * 0x9e3779b97f4a7c15ULL));
	return (v & 0x00ff00ff00ff00ffULL) |
	       ((((v >> 8) & 0x0003000300030003ULL) | 0x003c003c003c003cULL) << 8);
}

void ut_fill(const struct blockid *id, uint64_t seed, void *buf, size_t len, uint64_t off)
{
	uint8_t *p = buf;
	size_t i = 0;

	while (i < len) {
		uint64_t o = off + i, v = word(id, seed, o / 8);
		unsigned s = (unsigned)(o % 8);

		if (s == 0 && len - i >= 8) {
			for (unsigned k = 0; k < 8; k++)
				p[i + k] = (uint8_t)(v >> (8 * k));
			i += 8;
		} else {
			p[i++] = (uint8_t)(v >> (8 * s));
		}
	}
}

long long ut_diff(const struct blockid *id, uint64_t seed, const void *buf, size_t len,
		  uint64_t off)
{
	const uint8_t *p = buf;
	size_t i = 0;

	while (i < len) {
		uint64_t o = off + i, v = word(id, seed, o / 8);
		unsigned s = (unsigned)(o % 8);

		if (s == 0 && len - i >= 8) {
			for (unsigned k = 0; k < 8; k++)
				if (p[i + k] != (uint8_t)(v >> (8 * k)))
					return (long long)(i + k);
			i += 8;
		} else {
			if (p[i] != (uint8_t)(v >> (8 * s)))
				return (long long)i;
			i++;
		}
	}
	return -1;
}

void ut_sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}
