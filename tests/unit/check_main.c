/*
 * The unit test runner: `check_unit [SUITE]` runs one suite (meson registers each suite as
 * its own test, so failures are counted per suite); with no argument it runs them all;
 * `check_unit --list` prints the suite names.
 *
 * The same file is the runner of check_fault (built with -DUCM_FAULT_RUNNER): the fault
 * injection suites of check_fault.c live in their own executable because it is linked with
 * --wrap for the allocation functions (tests/unit/fault_tier.h), which no other suite
 * should run under.
 *
 * Tests run in forked children (check's CK_FORK default; CK_FORK=no in the environment
 * turns it off), so a crash or a sanitizer abort is one failed test, not a dead runner.
 * Temporary directories go under one base directory made here and removed at the end.
 * The code under test logs nothing unless UCM_TEST_LOG is set.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/log.h"
#include "tests/unit/unit.h"

#ifdef UCM_FAULT_RUNNER
#define RUNNER "check_fault"
/* suites of check_fault.c */
Suite *fault_tier_suite(void);
Suite *fault_disk_suite(void);
Suite *fault_below_suite(void);
Suite *fault_mem_suite(void);
Suite *fault_alloc_suite(void);

static const struct {
	const char *name;
	Suite *(*make)(void);
} fixed[] = {
	{ "fault_tier", fault_tier_suite },
	{ "fault_disk", fault_disk_suite },
	{ "fault_below", fault_below_suite },
	{ "fault_mem", fault_mem_suite },
	{ "fault_alloc", fault_alloc_suite },
};

/* no tier contract suites in this runner */
static unsigned contract_count(void)
{
	return 0;
}

static Suite *contract_suite(unsigned k)
{
	(void)k;
	return NULL;
}

static const char *contract_name(unsigned k)
{
	(void)k;
	return NULL;
}
#else
#define RUNNER "check_unit"
/* suites of check_cache_model.c, check_compress.c, check_shuffle.c, check_buf.c,
 * check_io.c, check_bdi.c, check_inode.c, check_peer.c, check_plugin.c */
Suite *cache_model_suite(void);
Suite *compress_suite(void);
Suite *shuffle_suite(void);
Suite *buf_suite(void);
Suite *io_suite(void);
Suite *bdi_suite(void);
Suite *inode_suite(void);
Suite *peer_suite(void);
Suite *plugin_suite(void);
Suite *hash_suite(void);

static const struct {
	const char *name;
	Suite *(*make)(void);
} fixed[] = {
	{ "blockid", blockid_suite },
	{ "units", units_suite },
	{ "options", options_suite },
	{ "posix_header", posix_header_suite },
	{ "extents", extents_suite },
	{ "idmap", idmap_suite },
	{ "cache", cache_suite },
	{ "posix", posix_suite },
	{ "pipeline", pipeline_suite },
	{ "cache_model", cache_model_suite },
	{ "compress", compress_suite },
	{ "shuffle", shuffle_suite },
	{ "buf", buf_suite },
	{ "io", io_suite },
	{ "bdi", bdi_suite },
	{ "inode", inode_suite },
	{ "peer", peer_suite },
	{ "plugin", plugin_suite },
	{ "hash", hash_suite },
};

#define contract_count tier_contract_count
#define contract_suite tier_contract_suite
#define contract_name tier_contract_name
#endif

#define NFIXED (sizeof(fixed) / sizeof(fixed[0]))

/* Every suite, in order; the tier contract suites after the module suites. */
static size_t nsuites(void)
{
	return NFIXED + contract_count();
}

static const char *suite_name(size_t i)
{
	return i < NFIXED ? fixed[i].name : contract_name((unsigned)(i - NFIXED));
}

static Suite *make_suite(size_t i)
{
	return i < NFIXED ? fixed[i].make() : contract_suite((unsigned)(i - NFIXED));
}

int main(int argc, char **argv)
{
	const char *want = argc > 1 ? argv[1] : NULL;
	const char *tmp = getenv("TMPDIR");
	char base[PATH_MAX];
	SRunner *sr = NULL;
	bool known = !want;
	int failed;

	for (size_t i = 0; i < nsuites(); i++) {
		if (want && !strcmp(want, "--list"))
			printf("%s\n", suite_name(i));
		else if (want && !strcmp(want, suite_name(i)))
			known = true;
	}
	if (want && !strcmp(want, "--list"))
		return 0;
	if (!known) {
		fprintf(stderr, RUNNER ": no suite named '%s' (try --list)\n", want);
		return 2;
	}
	/* the daemon's log lines are expected noise in error tests: UCM_TEST_LOG=N shows
	 * levels up to N (0 errors ... 3 debug) */
	log_set_level(getenv("UCM_TEST_LOG") ? atoi(getenv("UCM_TEST_LOG")) : -1);
	snprintf(base, sizeof(base), "%s/ucmfs-unit.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(base)) {
		perror("mkdtemp");
		return 2;
	}
	ut_set_tmpbase(base);

	for (size_t i = 0; i < nsuites(); i++) {
		if (want && strcmp(want, suite_name(i)))
			continue;
		if (!sr)
			sr = srunner_create(make_suite(i));
		else
			srunner_add_suite(sr, make_suite(i));
	}
	srunner_run(sr, want, NULL, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	ut_rmtree(base);
	return failed ? 1 : 0;
}
