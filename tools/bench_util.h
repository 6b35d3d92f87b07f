/*
 * ucm-bench internals shared by tools/ucm-bench.c and tools/bench_*.c:
 *   bench_util.c    clock, result rows (table and JSON), child daemons and mounts, files
 *   bench_work.c    the workloads, run on any directory (ucmfs, nullfs or a plain dir)
 *   bench_floors.c  the floors that need no mount: memcpy, zstd, raw disk through libaio
 */
#ifndef UCM_BENCH_UTIL_H
#define UCM_BENCH_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define MiB (1ull << 20)
#define REQ_SIZE MiB /* the request size of every streaming read and raw IO */

/* --- clock and errors ------------------------------------------------------------------ */

/* Seconds on the monotonic clock. */
double now_s(void);

/*
 * The last failure of a workload or floor, as one line ("open 0123...: Input/output error"),
 * kept per thread; bench_fail() records it and returns -err (err is a positive errno).
 */
int bench_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *bench_last_error(void);

/* Median of n doubles (sorts them). */
double median(double *v, size_t n);
/* The p-th percentile (0..100) of n sorted doubles, nearest rank. */
double percentile_sorted(const double *v, size_t n, double p);

/* "16M", "128K", "4097": a size as the user would type it. */
const char *size_label(uint64_t bytes, char *buf, size_t len);

/* --- result rows ----------------------------------------------------------------------- */

/* RATE: more is better, ratio = value / floor. COST: less is better, ratio = floor / value. */
enum row_kind { ROW_RATE, ROW_COST };

/*
 * Add a row. id is the stable key (tests and scripts use it), block the block size it was
 * measured at (0: none). A NaN value or floor means "not measured"; note says why (if NULL
 * and the value is NaN, the last error is used). Rows are printed in the order added.
 */
void row_add(const char *id, uint64_t block, const char *figure, double value, const char *unit,
	     enum row_kind kind, const char *floor_name, double floor, const char *note);

/* Print the table, its legend and the notes. */
void rows_print(FILE *f);
/* Write the rows as JSON ({"meta": {...}, "rows": [...]}); meta_json is an object body. */
int rows_write_json(const char *path, const char *meta_json);
/* Number of rows whose value is NaN (failed or skipped). */
unsigned rows_missing(void);

/* --- processes and mounts -------------------------------------------------------------- */

struct daemon {
	pid_t pid;          /* 0 when not running */
	char mnt[4096];
	char log[4096];
};

/*
 * Run argv (argv[0] a path) with stdout and stderr to log, and wait until mnt is a FUSE mount
 * (at most mount_wait_s seconds). 0, or -errno with the reason recorded (the daemon is then
 * stopped and reaped).
 */
extern double mount_wait_s;
int daemon_start(struct daemon *d, char *const argv[], const char *mnt, const char *log);

/*
 * Unmount (fusermount3 -u) and wait for the daemon to exit. 0, or -errno with the reason
 * recorded (exit status, timeout: the daemon is then killed).
 */
int daemon_stop(struct daemon *d);

/* Peak resident set of a process (VmHWM) in bytes, or -errno. */
long long proc_peak_rss(pid_t pid);

/* Unmount and kill every daemon still running (signal handlers and exit paths). */
void daemons_kill_all(void);

/* Print the last lines of a daemon's log to stderr. */
void daemon_log_tail(const struct daemon *d, int lines);

/* --- files ----------------------------------------------------------------------------- */

/* sync, then drop the page cache, dentries and inodes. 0 or -errno (-EACCES unless root). */
int drop_caches(void);

/* Drop the cached pages of every file under dir (fadvise; needs no privilege). 0 or -errno. */
int drop_tree_cache(const char *dir);

/* Remove a tree, never crossing into another filesystem (a mount left behind). */
int rm_rf(const char *path);
/* The values of the metric lines "name value" of the mount's /.ucm/stats, one read of the
 * file: v[i] for names[i] (with its labels, if any, exactly as printed), n at most 32.
 * 0, or -errno (recorded) if the file cannot be read or lacks one of them. */
int stats_values(const char *mnt, const char *const *names, double *v, unsigned n);


/* The filesystem type of path (statfs f_type), or 0. */
long fs_type(const char *path);
#define TMPFS_MAGIC_ 0x01021994
#define FUSE_MAGIC_ 0x65735546

/* A page-aligned, pre-touched buffer (NULL if out of memory). Free with free(). */
void *bench_alloc(size_t bytes);

/* --- data and names -------------------------------------------------------------------- */

/* A pool of distinct KV-like blocks (kvgen); block i of a workload uses buf[i % n]. */
struct pool {
	uint64_t bsize;
	unsigned n;
	char **buf;
};

int pool_make(struct pool *p, uint64_t bsize, unsigned n, uint64_t seed);
void pool_free(struct pool *p);

static inline const char *pool_block(const struct pool *p, uint64_t i)
{
	return p->buf[i % p->n];
}

/* The 32-hex name of block i of a set (salt): a well-mixed 128-bit id. */
void block_name(char out[33], uint64_t salt, uint64_t i);

/* --- workloads (bench_work.c) ---------------------------------------------------------- */

/* A set of blocks: n files named block_name(salt, i) in dir, each bsize bytes of pool data. */
struct wl {
	const char *dir;
	const struct pool *pool;
	uint64_t salt;
	uint64_t n;
	uint64_t bsize;
};

enum wmode {
	WM_DIRECT,       /* open(name, O_CREAT|O_WRONLY), pwrite, close: the ucmfs way */
	WM_TMP_RENAME,   /* write a temp file, rename: what engines do on a plain dir */
	WM_TMP_FSYNC,    /* the same with fsync before the rename */
};

/* Write every block; *secs is the wall time. 0 or -errno (recorded). */
int wl_write(const struct wl *w, enum wmode m, double *secs);
/* open(O_RDONLY), fsync, close every block (makes each durable on ucmfs). 0 or -errno. */
int wl_sync(const struct wl *w);
#define RD_DIRECT 1u /* open with O_DIRECT */
#define RD_DROP 2u   /* drop each file's page cache first (untimed): a first read reaches the
		      * filesystem even if it keeps its cache across opens */
#define RD_MMAP 4u   /* mmap(PROT_READ) the file after the open and copy out of the mapping
		      * `req` bytes at a time instead of pread (munmap before the close) */
/*
 * Read blocks with `req`-byte preads: open, one pass (timed with the open into *first, GB/s),
 * a second pass through the same descriptor if reread != NULL (GB/s), close. With min_secs 0,
 * every block once; else blocks 0, 1, ... (cycling) until the first passes took min_secs.
 * flags: RD_*. 0 or -errno.
 */
int wl_read(const struct wl *w, unsigned flags, size_t req, double min_secs, double *first,
	    double *reread);
/* Read every block back and compare it with the pool (untimed). 0, -EILSEQ or -errno. */
int wl_verify(const struct wl *w);
/*
 * Per block: open(O_DIRECT), pread one random shard at index * shard, close; the mean time of
 * one such read in microseconds. 0 or -errno.
 */
int wl_shards(const struct wl *w, size_t shard, uint64_t seed, double *mean_us);
/* sum(st_size) / sum(st_blocks * 512) over the set. 0 or -errno. */
int wl_stored_ratio(const struct wl *w, double *ratio);
/* Median time in microseconds of `batches` batches of `count` stat() calls on the set. */
int wl_stat(const struct wl *w, unsigned count, unsigned batches, double *us);
/*
 * Median time in microseconds of one prefix query of `count` ids of the set through qdir (a
 * /.ucm/query directory) as a client makes it: create the query file, write the ids, close,
 * getxattr user.ucm.prefix, which must say that they are all present; *answer_us the median
 * of the getxattr alone (the daemon's answer). 0 or -errno.
 */
int wl_query(const struct wl *w, const char *qdir, unsigned count, unsigned batches,
	     double *us, double *answer_us);
/* List dir; *entries (blocks only: names of 32 characters), *secs. 0 or -errno. */
int wl_readdir(const char *dir, uint64_t *entries, double *secs);
/* Remove the set's files (best effort). */
void wl_unlink(const struct wl *w);

struct mixed_res {
	double gbps;                   /* bytes read + written per second */
	double rp50, rp99, wp50, wp99; /* one block read / write, milliseconds */
	uint64_t reads, writes;
};

/*
 * `readers` threads read random blocks of w (open O_DIRECT, 1 MiB preads, close) while
 * `writers` threads write new blocks (set wsalt) the WM_DIRECT way, for secs seconds.
 * *written is how many new blocks were written (names block_name(wsalt, 0..*written-1)).
 */
int wl_mixed(const struct wl *w, uint64_t wsalt, unsigned readers, unsigned writers,
	     double secs, struct mixed_res *res, uint64_t *written);

/* --- floors without a mount (bench_floors.c) -------------------------------------------- */

/* Fresh memory made usable: `threads` threads write a byte of every 4 KiB page of their
 * shares of a new anonymous mapping of `bytes` (huge pages asked, as the daemon's block
 * memory is), then unmap it; seconds, NaN on failure. What any process pays before it can
 * use memory it never used: the kernel zeroes each page, and a virtual machine's host may
 * back it only then. */
double floor_first_touch(uint64_t bytes, unsigned threads);

/* memcpy of whole blocks from the pool into one buffer, one thread: GB/s, the median of
 * short trials (NaN on failure). */
double floor_memcpy(const struct pool *p, double min_secs);

struct zstd_res {
	double ratio_plain, ratio_shuf;  /* raw bytes / compressed bytes */
	double c_plain, d_plain;         /* compress, decompress GB/s of raw bytes */
	double c_shuf, d_shuf;           /* same with the 2-byte plane shuffle (included) */
};

/* zstd level 1 on each pool block, one thread: the ratios over the pool, the speeds as the
 * medians of alternated trials. Checks the round trip. 0 or -errno. */
int floor_zstd(const struct pool *p, double min_secs, struct zstd_res *r);

struct disk_res {
	double write_gbps, read_gbps; /* REQ_SIZE O_DIRECT requests at `depth` */
	double shard_us[2];           /* one O_DIRECT read of shard[i], queue depth 1 */
};

/*
 * The raw disk: a file of `bytes` at path, laid out, then overwritten (timed, with a final
 * fdatasync) and read back with REQ_SIZE O_DIRECT requests kept `depth` deep through libaio,
 * then `nshard` random shard reads of each size at depth 1. The file is removed. 0 or -errno.
 */
int floor_disk(const char *path, uint64_t bytes, const struct pool *p, unsigned depth,
	       const size_t shard[2], unsigned nshard, struct disk_res *r);

#endif
