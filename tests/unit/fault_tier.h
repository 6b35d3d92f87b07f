/*
 * Fault injection for the tier suites (tests/unit/check_fault.c).
 *
 * 1. The fault tier: a `struct tier` that wraps any tier and forwards every op to it, but
 *    fails chosen calls with an error tier.h lets that op return, or delays them. It counts
 *    the calls of a chosen set of ops; the Nth counted call faults (and the `times - 1` after
 *    it), and/or each counted call faults with a probability drawn from a seeded generator,
 *    so a run is reproducible from (nth, seed). It can sit anywhere in a stack: below the
 *    pipeline in place of the disk side, between compress and posix, or as the memory tier.
 *
 *    A failed call does not reach the wrapped tier, and follows tier.h's handle rules: a
 *    failed open or reserve makes no handle; a failed commit gives the handle back (the
 *    wrapped reservation is aborted), except when tier.h says the caller keeps it (any
 *    failure of a TIER_COMMIT_LOADED admission, -EIO with TIER_COMMIT_TRY). close, abort and
 *    the other void ops cannot fail; they can be delayed.
 *
 * 2. Allocation faults: when check_fault is linked with
 *    -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=aligned_alloc,--wrap=posix_memalign,
 *    --wrap=free,--wrap=mmap,--wrap=mremap (tests/unit/meson.build; the tier and util
 *    libraries are static, so their calls are redirected; shared libraries such as zstd,
 *    xxhash and libc's own strdup/opendir are not), fault_alloc_arm() makes the Nth
 *    allocation from then on fail (NULL / MAP_FAILED, errno ENOMEM). Under ASan the real
 *    functions are ASan's interceptors, so everything stays checked.
 *
 * Threads: the fault tier may be used, armed and disarmed from any thread (a mutex orders the
 * decisions). Allocation faults count either the arming thread's allocations only
 * (FA_THIS_THREAD: deterministic, whatever the workers do) or every thread's (FA_ALL_THREADS);
 * the counter is atomic, so exactly one allocation fails either way.
 */
#ifndef UCM_TESTS_FAULT_TIER_H
#define UCM_TESTS_FAULT_TIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tiers/tier.h"

/* The ops of struct tier_ops, one bit each in fault_plan.ops. */
enum fault_op {
	FOP_LOOKUP, FOP_PRESENT, FOP_OPEN, FOP_READ, FOP_LAYOUT, FOP_DATA, FOP_MAP, FOP_STAT,
	FOP_CLOSE, FOP_RESERVE, FOP_WRITE, FOP_TRUNCATE, FOP_SET_DURABLE, FOP_COMMIT, FOP_ABORT,
	FOP_REMOVE, FOP_TOUCH, FOP_SET_DEADLINE, FOP_SET_TTL, FOP_MARK_CLEAN, FOP_SYNC,
	FOP_LIST_SHARD, FOP_USAGE, FOP_SWEEP, FOP_DRAIN, FOP_METRICS,
	FOP_COUNT
};

#define FAULT_BIT(op) (1u << (op))
/* The ops tier.h gives an error other than -ENOENT (a miss is not a device fault). */
#define FAULT_FAILABLE                                                                       \
	(FAULT_BIT(FOP_OPEN) | FAULT_BIT(FOP_READ) | FAULT_BIT(FOP_RESERVE) |                  \
	 FAULT_BIT(FOP_WRITE) | FAULT_BIT(FOP_TRUNCATE) | FAULT_BIT(FOP_COMMIT) |               \
	 FAULT_BIT(FOP_SET_DEADLINE) | FAULT_BIT(FOP_SYNC))
#define FAULT_ALL_OPS ((1u << FOP_COUNT) - 1)

enum fault_action { FAULT_FAIL, FAULT_DELAY };

struct fault_plan {
	enum fault_action action;
	/* The ops counted (FAULT_BIT()s; 0 = FAULT_FAILABLE). With FAULT_FAIL only the failable
	 * ones among them are counted. */
	unsigned ops;
	uint64_t nth;       /* the nth counted call (1 = the first) faults; 0 = none by number */
	uint32_t times;     /* ... and the times - 1 after it (0 = 1; UINT32_MAX = all: a dead
			       device) */
	double probability; /* each counted call faults with this probability (0 = never) */
	uint64_t seed;      /* of the generator behind probability */
	/* -EIO, -ENOSPC or -ENOMEM (0 = -EIO). An op that tier.h does not let return it fails
	 * with the first error it may return: read, set_deadline and sync -EIO; truncate
	 * -ENOSPC. */
	int err;
	uint64_t delay_ns;  /* FAULT_DELAY: nanosleep this long, then forward the call */
};

struct fault_stats {
	uint64_t calls;      /* counted calls since fault_arm() */
	uint64_t faults;     /* calls failed or delayed since fault_arm() */
	uint64_t first_n;    /* the counted number of the first fault (0 = none yet) */
	enum fault_op first_op;
	int first_err;       /* what it returned (0 for a delay) */
	uint64_t seen[FOP_COUNT]; /* every call of each op since creation, counted or not */
};

/* Wrap `inner`, which the fault tier owns from then on (also on failure: 0 or -ENOMEM). The
 * fault tier has the ops that `inner` has (NULL where it has NULL). Starts disarmed. */
int fault_tier_create(struct tier *inner, struct tier **out);

/* Follow `plan` from now on; the counters start again from zero. */
void fault_arm(struct tier *t, const struct fault_plan *plan);
/* Forward everything from now on (the counters stay readable). */
void fault_disarm(struct tier *t);
void fault_get_stats(struct tier *t, struct fault_stats *out);
/* The wrapped tier. */
struct tier *fault_inner(struct tier *t);
/* Is this tier a fault tier? */
bool fault_is(const struct tier *t);

const char *fault_op_name(enum fault_op op);
/* The error a failed call of op returns when the plan asks for err (see fault_plan.err). */
int fault_error_for(enum fault_op op, int err);

/* --- allocation faults (only in an executable linked with the --wrap flags above) -------- */

enum fault_alloc_scope { FA_THIS_THREAD, FA_ALL_THREADS };

/* Count allocations from now on; the nth one fails (0 = none: only count). */
void fault_alloc_arm(uint64_t nth, enum fault_alloc_scope scope);
/* Stop counting and failing. Returns how many allocations were counted since armed. */
uint64_t fault_alloc_disarm(void);
/* Has the armed failure happened? */
bool fault_alloc_fired(void);
/* Where the failed allocation was made: "file+0xoffset" (for addr2line -f -i -e file), "-"
 * if none failed. */
void fault_alloc_fired_site(char *buf, size_t len);
/* Were the --wrap flags in effect (is anything counted at all)? */
bool fault_alloc_available(void);
/*
 * The allocations of the wrapped call sites (the static libraries and the test files, not
 * libc's or zstd's own) are tracked while they live, with their call site. Bytes they hold
 * now, or -1 if there were too many to track: equal before and after a piece of work that
 * gives back all it took, so a leak detector that works without a sanitizer (ASan or not).
 * Mappings are left out: src/buf.c keeps slabs mapped for reuse, and a leaked block buffer
 * comes with a leaked heap object that owns it.
 */
int64_t fault_alloc_in_use(void);
/* The sequence number of the last tracked allocation: a mark for fault_alloc_report(). */
uint64_t fault_alloc_mark(void);
/* Describe into buf the live allocations made after mark ("size bytes from file+0xoffset",
 * for addr2line -f -e file 0xoffset). Returns how many there are. */
size_t fault_alloc_report(uint64_t mark, char *buf, size_t len);

#endif
