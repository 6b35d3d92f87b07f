/*
 * ucm-tier-check LIB.so [KEY=VALUE ...]: the daemon's tier contract against a store built as
 * a plugin (tiers/tier.h, "Tiers as plugins").
 *
 * The library is loaded as the daemon loads it (tiers/plugin.c) and must describe a store.
 * Every test case of tests/unit/check_tier_contract.c then runs against a store it creates
 * with the KEY=VALUE options and path=DIR, a fresh empty directory (the cases expect an empty
 * store): under $TMPDIR, or under the directory of a path= option. What it makes there is
 * removed at the end. The cases run as check runs them, one forked
 * process each; CK_VERBOSITY=verbose lists every case, CK_FORK=no runs them in this process
 * (for a debugger). The last line says how many passed and failed; the exit status is 0 only
 * if all passed, 1 if one failed or the library cannot be loaded or created, 2 on bad usage.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/tier_contract.h"
#include "tests/unit/tier_util.h"
#include "tests/unit/unit.h"
#include "tiers/plugin.h"

#define MAX_PARAMS 64

static const char *lib;
static struct tier_param param[MAX_PARAMS];
static size_t nparam;

static void open_lib(struct tfix *fx)
{
	fx->t = tu_plugin_store(lib, param, nparam, fx->dir, sizeof(fx->dir));
}

static int usage(void)
{
	fprintf(stderr, "usage: ucm-tier-check LIB.so [KEY=VALUE ...]\n"
			"Runs the tier contract against the store that LIB.so describes, created "
			"with the KEY=VALUE options\nand path=DIR, a fresh directory for each case "
			"(made in $TMPDIR, or in the directory of path=).\n");
	return 2;
}

/* Load the library and make one store in a directory of base, so that a library that
 * cannot be checked says why once, not in every case. (Outside the cases: no check asserts,
 * which is why the directory is made here.) */
static int try_library(const char *base)
{
	struct tier_param all[MAX_PARAMS + 1];
	struct tier *t = NULL;
	struct tier_ref ref;
	char err[512], dir[PATH_MAX], none[1];
	int rc = tier_ref_get(lib, &ref, err, sizeof(err));

	if (rc == 0 && ref.plugin->kind != TIER_KIND_STORE) {
		snprintf(err, sizeof(err), "tier library %s describes %s, which is a %s: only a "
			 "store can be checked", lib, ref.plugin->name,
			 ref.plugin->kind == TIER_KIND_STAGE ? "stage" : "memory tier");
		rc = -EINVAL;
	}
	if (rc == 0)
		tier_ref_put(&ref);
	snprintf(dir, sizeof(dir), "%s/try.XXXXXX", base);
	if (rc == 0 && !mkdtemp(dir)) {
		snprintf(err, sizeof(err), "mkdtemp %s: %s", dir, strerror(errno));
		rc = -errno;
	}
	memcpy(all, param, nparam * sizeof(*param));
	all[nparam] = (struct tier_param){ "path", dir };
	if (rc == 0)
		rc = tu_plugin_create(lib, all, nparam + 1, none, sizeof(none), &t, err,
				      sizeof(err));
	if (rc == 0)
		tier_destroy(t);
	if (rc)
		fprintf(stderr, "ucm-tier-check: %s\n", err);
	return rc;
}

int main(int argc, char **argv)
{
	const char *tmp = getenv("TMPDIR"), *in = tmp && *tmp ? tmp : "/tmp";
	char base[PATH_MAX];
	SRunner *sr;
	Suite *s;
	int run, failed;

	if (argc < 2 || argv[1][0] == '-')
		return usage();
	lib = argv[1];
	for (int i = 2; i < argc; i++) {
		char *eq = strchr(argv[i], '=');

		if (!eq || eq == argv[i] || nparam == MAX_PARAMS) {
			fprintf(stderr, "ucm-tier-check: '%s' is not KEY=VALUE\n", argv[i]);
			return usage();
		}
		*eq = '\0';
		if (!strcmp(argv[i], "path"))
			in = eq + 1; /* where the cases' directories go */
		else
			param[nparam++] = (struct tier_param){ argv[i], eq + 1 };
	}
	snprintf(base, sizeof(base), "%s/ucm-tier-check.XXXXXX", in);
	if (!mkdtemp(base)) {
		fprintf(stderr, "ucm-tier-check: mkdtemp %s: %s\n", base, strerror(errno));
		return 1;
	}
	ut_set_tmpbase(base);
	if (try_library(base)) {
		ut_rmtree(base);
		return 1;
	}

	s = tier_contract_suite_for("tier contract", open_lib, TC_STORE);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	run = srunner_ntests_run(sr);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	ut_rmtree(base);
	printf("%d passed, %d failed\n", run - failed, failed);
	return failed ? 1 : 0;
}
