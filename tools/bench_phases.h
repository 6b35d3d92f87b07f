/*
 * ucm-bench driver state (ucm-bench.c) and its phases (bench_phases.c).
 *
 * The run is one global, R: the configuration, the paths of the temporary tree, the two
 * daemons (ucmfs and nullfs) and the floors measured once and used by later rows. Phases run
 * one after the other on the main thread; each records what it measured as `struct fig`s and
 * adds its rows, so that a failure leaves a row with the reason instead of ending the run.
 */
#ifndef UCM_BENCH_PHASES_H
#define UCM_BENCH_PHASES_H

#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "tools/bench_util.h"

#define MAX_SIZES 8
#define POOL_MAX_BYTES (256ull << 20)
#define POOL_MAX_BLOCKS 16
#define META_BLOCK 4096
#define LOOKUP_IDS 1000

struct cfg {
	bool quick, keep;
	bool loads_only;    /* --loads-only: the prefetch phase alone */
	bool writes_only;   /* --writes-only: writes until on disk, ucmfs and plain dir */
	uint64_t sizes[MAX_SIZES];
	unsigned nsizes;
	uint64_t blocks;    /* 0: per-size default */
	unsigned threads;
	uint64_t meta;      /* 4 KiB blocks of the metadata phase */
	uint64_t mount_blocks; /* 4 KiB blocks of the store whose mount is timed */
	double mixed_secs;
	unsigned depth;     /* raw disk queue depth */
	double min_secs;    /* least length of a repeatable measurement (memcpy, zstd, hot) */
	unsigned batches;   /* stat/query batches (median) */
	unsigned phase_limit;
	uint64_t seed;
	const char *dir, *mnt, *ucmfs, *nullfs, *opts, *json;
};

/* One measured figure: a value, or NaN and why (note). A note may also qualify a value. */
struct fig {
	double v;
	char note[300];
};

#define FIG_NONE { NAN, "" }

struct run {
	struct cfg c;
	char tmp[PATH_MAX], store[PATH_MAX], meta_store[PATH_MAX], mnt[PATH_MAX];
	char nmnt[PATH_MAX], plain[PATH_MAX], log[PATH_MAX], nlog[PATH_MAX];
	char ucmfs[PATH_MAX], nullfs[PATH_MAX];
	const char *ucm_mnt;  /* R.mnt, or --mnt */
	bool can_drop;        /* drop_caches works (root) */
	struct daemon ucm, null;
	uint64_t mem_size;    /* ucmfs mem_size= */
	unsigned failures;
	/* floors measured once (first size) */
	struct fig zr_plain, zr_shuf, zc_plain, zd_plain, zc_shuf, zd_shuf;
	struct fig disk_w, disk_r, disk_shard[2];
	/* from the first size, for the floors section and the mixed rows */
	uint64_t b0;
	struct fig memcpy0, null_rd0, null_rb0, null_w0, pagecache0;
	struct fig mx[5], nmx[5];
};

extern struct run R;

/* --- ucm-bench.c ------------------------------------------------------------------------ */

/* Record a result: rc != 0 makes it a failure (NaN, the last error as note, counted). */
void fig_set(struct fig *f, int rc, double v);
/* Not measured, for a reason that is not a failure of this figure. */
void fig_skip(struct fig *f, const char *why);
/* Qualify a value (kept only if the figure has no note yet). */
void fig_note(struct fig *f, const char *note);
/* Add a row from a figure and its floor; the note of either explains a gap. */
void emit(const char *id, uint64_t block, const char *figure, const struct fig *v,
	  const char *unit, enum row_kind kind, const char *floor_name, const struct fig *fl);

/* Name the phase (progress line, watchdog message) and re-arm the watchdog. */
void phase_start(const char *name);

/* Mount ucmfs on store at R.mnt. 0 or -errno. */
int ucm_start(const char *store);
/* Stop the daemon, drop the page cache if asked, start a fresh one (--mnt: drop only). */
int ucm_remount(const char *store, bool drop);
int ucm_stop(void);
/* Mount nullfs at R.nmnt: files of `size` bytes, readdir lists `entries` names. */
int null_start(uint64_t size, uint64_t entries);
/* Why a cold read may not be cold (NULL when it is). */
const char *cold_note(void);
/* Blocks of a workload at this size (--blocks or 1 GiB / 256 MiB worth, at least 4). */
uint64_t blocks_for(uint64_t bsize);

/* --- bench_phases.c --------------------------------------------------------------------- */

/* Every figure at one block size, and its rows; the first size also measures the floors
 * that are measured once (zstd, raw disk) and the mixed workload. */
void run_size(uint64_t bsize, bool first);
/* --writes-only: writes until on disk of one size, ucmfs and the plain dir, twice each. */
void run_writes(uint64_t bsize);
/* Creates, readdir, peak RSS and lookups on 4 KiB blocks, and their rows. */
void run_meta(void);
/* The rows of the mixed workload and of the floors section (after every phase). */
void mixed_rows(void);
void floor_rows(void);

/* --- bench_prefetch.c ------------------------------------------------------------------- */

/* Loads from disk (user.ucm.prefetch, fresh and warm daemon; readers of cold blocks) against
 * fio's best depth; their rows. */
void run_prefetch(void);
void prefetch_rows(void);

/* --- bench_routing.c ------------------------------------------------------------------- */

/* Disk bytes and write + fsync time of a mix of blocks, half with a 5 s TTL, through a peer
 * that keeps those in memory against the one default chain; their rows. */
void run_routing(void);

/* --- bench_hitrate.c -------------------------------------------------------------------- */

/* Hit ratio of the memory tier under each policy on a Zipf read stream through a mount, the
 * same trace through the policies' code, all against Belady's OPT; their rows. */
void run_hitrate(void);

/* --- bench_mount.c ---------------------------------------------------------------------- */

/* Time to mount a store of --mount-blocks blocks, cold and warm, against a stat walk. */
void run_mount(void);

#endif
