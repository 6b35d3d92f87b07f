/*
 * The tier contract (tests/unit/check_tier_contract.c) as a suite for any tier: check_unit
 * runs it against each factory of its table, ucm-tier-check (tools/ucm_tier_check.c)
 * against a store loaded from a library.
 */
#ifndef UCM_TESTS_TIER_CONTRACT_H
#define UCM_TESTS_TIER_CONTRACT_H

#include <check.h>
#include <limits.h>

#include "tests/unit/tier_util.h"

/* The tier one test case runs against: made by a factory, destroyed at the end of the case. */
struct tfix {
	struct tier *t;        /* set by the factory */
	struct tu_stack stack; /* pipeline factories */
	char dir[PATH_MAX];    /* a temporary directory, if the factory made one */
	unsigned flags;        /* the factory's TC_* */
};

/* The tier is held only to what tier.h promises a store (TIER_KIND_STORE), not to what the
 * built-in tiers also report (block_attr.where). */
#define TC_STORE 1u

/*
 * The contract as the suite `name` (test cases core, errors, concurrency), each case run
 * against a tier that open() makes in the case's process. The name must outlive the run.
 * NULL once a process has made four.
 */
Suite *tier_contract_suite_for(const char *name, void (*open)(struct tfix *fx), unsigned flags);

#endif
