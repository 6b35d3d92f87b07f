/*
 * Shared declarations of the unit suites (check): the suite constructors that check_main.c
 * registers, and small helpers every suite uses (temporary directories, deterministic ids
 * and block contents, a seeded PRNG).
 *
 * Temporary directories live under one base directory that the runner creates before it
 * runs a suite and removes afterwards, so a test that fails half-way (check's fork mode
 * _exit()s the child) leaves nothing behind.
 */
#ifndef UCM_TESTS_UNIT_H
#define UCM_TESTS_UNIT_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "src/blockid.h"

/* Per-test timeout in seconds (CK_TIMEOUT_MULTIPLIER scales it, e.g. under sanitizers). */
#define UT_TIMEOUT 60
#define UT_TIMEOUT_SLOW 180

Suite *blockid_suite(void);
Suite *units_suite(void);
Suite *options_suite(void);
Suite *posix_header_suite(void);
Suite *extents_suite(void);
Suite *idmap_suite(void);
Suite *cache_suite(void);
Suite *posix_suite(void);
Suite *pipeline_suite(void);

/* The tier contract runs once per factory; suite k is named "tier_<factory name>". */
unsigned tier_contract_count(void);
Suite *tier_contract_suite(unsigned k);
const char *tier_contract_name(unsigned k);

/*
 * ck_assert_msg() without check's per-assertion bookkeeping (every passing ck_assert
 * records its location through the runner's message file): for assertions in loops that
 * run millions of times. Fails the test with the message when cond is false.
 */
#define UT_CHECK(cond, ...)                                                                   \
	do {                                                                                  \
		if (!(cond))                                                                  \
			ck_abort_msg(__VA_ARGS__);                                            \
	} while (0)

/* A TCase named name with the house timeout. */
TCase *ut_tcase(const char *name, int timeout_s);

/* Switch this process's large buffers to files of a private tmpfs (buf_use_files(), as the
 * daemon does for passthrough): true if they are; as root it must work (the test fails
 * otherwise), elsewhere false, said once on stderr. For checked fixtures (one test's child). */
bool ut_use_file_buffers(const char *who);

/* --- temporary directories --------------------------------------------------------------- */

/* Set by the runner: the base directory of this run. */
void ut_set_tmpbase(const char *dir);
/* A fresh empty directory under the base (aborts the test on failure). */
void ut_mkdtemp(char *out, size_t len);
/* rm -rf path (best effort). */
void ut_rmtree(const char *path);
/* Number of entries of a directory other than . and .., or -1 if it cannot be opened. */
int ut_count_entries(const char *dir);
/* Number of entries of dir whose name starts with prefix, or -1. */
int ut_count_prefixed(const char *dir, const char *prefix);

/* --- ids and contents -------------------------------------------------------------------- */

uint64_t ut_mix(uint64_t x);               /* splitmix64 finalizer */
uint64_t ut_rand(uint64_t *state);         /* splitmix64 step */

/* A deterministic id for n (well spread over shards). */
struct blockid ut_id(uint64_t n);
/* A deterministic id for n in shard `shard` (the first three hex characters). */
struct blockid ut_id_in_shard(unsigned shard, uint64_t n);
/* The hex name of id in a static per-thread buffer (for messages). */
const char *ut_hex(const struct blockid *id);

/* Content of block (id, seed): byte off is a pure function of (id, seed, off). The bytes
 * look like bf16 values and compress to about 2/3 (zstd, shuffled better). */
void ut_fill(const struct blockid *id, uint64_t seed, void *buf, size_t len, uint64_t off);
/* Index of the first byte of buf that differs from the content, or -1 if all match. */
long long ut_diff(const struct blockid *id, uint64_t seed, const void *buf, size_t len,
		  uint64_t off);

/* --- clocks ------------------------------------------------------------------------------ */

void ut_sleep_ms(unsigned ms);

#endif
