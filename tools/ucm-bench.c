/*
 * ucm-bench: ucmfs side by side with the floors that bound it, in one run, on the same data.
 *
 *   ucm-bench [--quick] [--block SIZE] [--blocks N] [--threads N] [--json FILE] ...
 *
 * It mounts a fresh ucmfs itself (build/ucmfs beside this program) on a temporary STORE under
 * --dir, or uses --mnt; mounts build/nullfs for the FUSE floors; and prints one table, a row
 * per figure: value, unit, the floor measured in this run and the ratio. See
 * docs/BENCHMARKS.md for what each row means.
 *
 * Phases (bench_phases.c), for each block size: the floors (memcpy; zstd and the raw disk
 * once), nullfs writes, the plain directory peer, then ucmfs: write, fsync, verify, hot reads
 * in trials alternated with nullfs's, mixed (first size only, nullfs then ucmfs), cold reads
 * (each from a fresh daemon with the page cache dropped). Then loads of a set of cold blocks
 * by prefetch and by parallel readers against fio (bench_prefetch.c). Then the disk bytes and
 * write + fsync time of blocks half of which live 5 s, through a peer that routes them by TTL
 * against the one default chain (bench_routing.c). Then creates, readdir and lookups on 4 KiB
 * blocks. A watchdog (alarm) ends a phase that hangs, so that a stuck daemon is a report, not
 * a stuck benchmark. This file: the figures, the mounts, the command line.
 * Then the memory tier's hit ratio per policy against Belady's OPT (bench_hitrate.c); last,
 * the time a daemon takes to mount a store of a million blocks (bench_mount.c).
 */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "src/units.h"
#include "tools/bench_phases.h"

struct run R;
static const char *phase = "start";

/* --- figures ----------------------------------------------------------------------------- */

void fig_set(struct fig *f, int rc, double v)
{
	if (rc) {
		f->v = NAN;
		snprintf(f->note, sizeof(f->note), "FAILED: %s", bench_last_error());
		fprintf(stderr, "ucm-bench: %s: %s\n", phase, bench_last_error());
		R.failures++;
	} else {
		f->v = v;
		f->note[0] = 0;
	}
}

void fig_skip(struct fig *f, const char *why)
{
	f->v = NAN;
	snprintf(f->note, sizeof(f->note), "%s", why);
}

void fig_note(struct fig *f, const char *note)
{
	if (!f->note[0] && note)
		snprintf(f->note, sizeof(f->note), "%s", note);
}

void emit(const char *id, uint64_t block, const char *figure, const struct fig *v,
	  const char *unit, enum row_kind kind, const char *floor_name, const struct fig *fl)
{
	const char *note = v->note[0] ? v->note : fl->note[0] ? fl->note : NULL;

	row_add(id, block, figure, v->v, unit, kind, floor_name, fl->v, note);
}

/* --- cleanup, signals, watchdog ---------------------------------------------------------- */

static void cleanup(void)
{
	daemons_kill_all();
	if (R.tmp[0] && !R.c.keep)
		rm_rf(R.tmp);
	else if (R.tmp[0])
		fprintf(stderr, "ucm-bench: kept %s (stores, logs)\n", R.tmp);
}

/* Every figure measured once starts as "not measured". */
static void figs_init(void)
{
	struct fig *all[] = { &R.zr_plain, &R.zr_shuf, &R.zc_plain, &R.zd_plain, &R.zc_shuf,
			      &R.zd_shuf, &R.disk_w, &R.disk_r, &R.disk_shard[0],
			      &R.disk_shard[1], &R.memcpy0, &R.null_rd0, &R.null_rb0, &R.null_w0,
			      &R.pagecache0 };

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		*all[i] = (struct fig)FIG_NONE;
	for (int i = 0; i < 5; i++)
		R.mx[i] = R.nmx[i] = (struct fig)FIG_NONE;
}

static void on_signal(int sig)
{
	if (sig == SIGALRM)
		fprintf(stderr, "ucm-bench: phase '%s' took over %u s: is a daemon stuck? "
				"stopping (logs: %s)\n", phase, R.c.phase_limit, R.tmp);
	else
		fprintf(stderr, "ucm-bench: signal %d in phase '%s', cleaning up\n", sig, phase);
	R.c.keep = R.c.keep || sig == SIGALRM;
	cleanup();
	_exit(sig == SIGALRM ? 3 : 128 + sig);
}

void phase_start(const char *name)
{
	phase = name;
	alarm(R.c.phase_limit);
	if (isatty(2))
		fprintf(stderr, "\r\033[K%s ...", name);
}

/* --- mounts ------------------------------------------------------------------------------ */

int ucm_start(const char *store)
{
	char opts[1400], mem[32];
	char *argv[] = { R.ucmfs, "-f", "-o", opts, (char *)store, R.mnt, NULL };

	/* the user's options come last, so that they win (mem_size= too) */
	snprintf(opts, sizeof(opts), "mem_size=%s%s%s", size_label(R.mem_size, mem, sizeof(mem)),
		 R.c.opts ? "," : "", R.c.opts ? R.c.opts : "");
	return daemon_start(&R.ucm, argv, R.mnt, R.log);
}

/*
 * (Re)mount ucmfs on store: stop the running daemon, drop the page cache if asked, start a
 * fresh one. With --mnt only the page cache is dropped. 0 or -errno.
 */
int ucm_remount(const char *store, bool drop)
{
	int rc = 0;

	if (R.c.mnt) {
		if (drop && R.can_drop)
			drop_caches();
		return 0;
	}
	if (R.ucm.pid)
		rc = daemon_stop(&R.ucm);
	if (rc)
		return rc;
	if (drop && R.can_drop)
		drop_caches();
	else if (drop)
		drop_tree_cache(store); /* not root: file by file */
	return ucm_start(store);
}

int ucm_stop(void)
{
	return R.c.mnt ? 0 : daemon_stop(&R.ucm);
}

int null_start(uint64_t size, uint64_t entries)
{
	char opts[128];
	char *argv[] = { R.nullfs, "-f", "-o", opts, R.nmnt, NULL };

	snprintf(opts, sizeof(opts), "size=%llu,entries=%llu", (unsigned long long)size,
		 (unsigned long long)entries);
	return daemon_start(&R.null, argv, R.nmnt, R.nlog);
}

const char *cold_note(void)
{
	if (R.c.mnt)
		return "--mnt: the daemon was not restarted, blocks may still be in its memory";
	if (!R.can_drop)
		return "not root: the store's page cache was dropped file by file (fadvise)";
	return NULL;
}

uint64_t blocks_for(uint64_t bsize)
{
	uint64_t n = R.c.blocks;

	if (!n)
		n = (R.c.quick ? 256ull << 20 : 1ull << 30) / bsize;
	return n < 4 ? 4 : n;
}

/* --- command line ---------------------------------------------------------------------- */

static const char usage_text[] =
	"usage: ucm-bench [OPTIONS]\n"
	"Measure ucmfs and the floors that bound it (memcpy, nullfs, raw disk, zstd, a plain\n"
	"directory) in one run on the same KV-like data; print a row per figure with its floor\n"
	"and the ratio. Needs /dev/fuse and fusermount3; run as root to drop the page cache.\n"
	"\n"
	"  --quick          reduced set, under a minute (one block size, 256 MiB per phase)\n"
	"  --block SIZE     block size, repeatable (default 16M 8M 2M, --quick 16M); the\n"
	"                   first also runs the mixed phase and the floors section\n"
	"  --blocks N       blocks per size (default 1 GiB worth, --quick 256 MiB, at least 4)\n"
	"  --threads N      mixed phase: N/2 readers and N/2 writers (default 4)\n"
	"  --meta N         4 KiB blocks of the create/readdir phase (default 100000, --quick 2000)\n"
	"  --time SEC       length of the mixed phase (default 10, --quick 2)\n"
	"  --mount-blocks N 4 KiB blocks of the store whose mount is timed (default 1000000,\n"
	"                   --quick 20000; 0 leaves the phase out)\n"
	"  --depth N        raw disk queue depth (default 16)\n"
	"  --dir DIR        where the temporary STORE, plain dir and raw file go (default\n"
	"                   /var/tmp); must not be tmpfs\n"
	"  --store DIR      the same: any directory, e.g. on a distributed filesystem (with\n"
	"                   --opts shared for a STORE that hosts share)\n"
	"  --mnt DIR        use this mounted ucmfs instead of mounting one (no cold restarts)\n"
	"  --ucmfs PATH     daemon (default: ucmfs beside this program)\n"
	"  --nullfs PATH    FUSE floor server (default: nullfs beside this program)\n"
	"  --opts OPTS      extra ucmfs -o options (after the bench's mem_size=)\n"
	"  --json FILE      also write the rows as JSON\n"
	"  --seed N         data and name seed (default 1)\n"
	"  --keep           keep the temporary directory (logs, store)\n"
	"  --loads-only     only the loads of cold blocks (prefetch, readers) and their fio floor\n"
	"  --writes-only    only the writes until on disk, ucmfs and the plain directory\n"
	"                   alternated twice, per --block size\n"
	"Exit status: 0 when every figure was measured, 1 if any failed, 2 on bad usage.\n";

static int usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "ucm-bench: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n(see ucm-bench --help)\n");
	return 2;
}

static int parse_args(int argc, char **argv, struct cfg *c)
{
	enum { O_QUICK = 256, O_BLOCK, O_BLOCKS, O_THREADS, O_META, O_TIME, O_DEPTH, O_DIR,
	       O_MNT, O_UCMFS, O_NULLFS, O_OPTS, O_JSON, O_SEED, O_KEEP, O_HELP, O_MOUNT,
	       O_LOADS, O_WRITES };
	static const struct option lo[] = {
		{ "quick", no_argument, NULL, O_QUICK },
		{ "block", required_argument, NULL, O_BLOCK },
		{ "blocks", required_argument, NULL, O_BLOCKS },
		{ "threads", required_argument, NULL, O_THREADS },
		{ "meta", required_argument, NULL, O_META },
		{ "time", required_argument, NULL, O_TIME },
		{ "depth", required_argument, NULL, O_DEPTH },
		{ "dir", required_argument, NULL, O_DIR },
		{ "store", required_argument, NULL, O_DIR },
		{ "mnt", required_argument, NULL, O_MNT },
		{ "ucmfs", required_argument, NULL, O_UCMFS },
		{ "nullfs", required_argument, NULL, O_NULLFS },
		{ "opts", required_argument, NULL, O_OPTS },
		{ "json", required_argument, NULL, O_JSON },
		{ "seed", required_argument, NULL, O_SEED },
		{ "keep", no_argument, NULL, O_KEEP },
		{ "mount-blocks", required_argument, NULL, O_MOUNT },
		{ "loads-only", no_argument, NULL, O_LOADS },
		{ "writes-only", no_argument, NULL, O_WRITES },
		{ "help", no_argument, NULL, O_HELP },
		{ NULL, 0, NULL, 0 }
	};
	uint64_t v, threads = 4, depth = 16, meta = 0, mount = UINT64_MAX;
	double secs = 0;
	char *end;
	int o;

	memset(c, 0, sizeof(*c));
	c->seed = 1;
	c->dir = "/var/tmp";
	while ((o = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (o) {
		case O_QUICK: c->quick = true; break;
		case O_KEEP: c->keep = true; break;
		case O_LOADS: c->loads_only = true; break;
		case O_WRITES: c->writes_only = true; break;
		case O_BLOCK:
			if (parse_size(optarg, &v) || v < 4096 || v % 4096 || v > (1ull << 30))
				return usage_error("--block %s: a SIZE, a multiple of 4K up to 1G",
						   optarg);
			if (c->nsizes == MAX_SIZES)
				return usage_error("at most 8 --block%s", "");
			c->sizes[c->nsizes++] = v;
			break;
		case O_BLOCKS:
			if (parse_u64(optarg, &c->blocks) || !c->blocks)
				return usage_error("--blocks %s: a positive number", optarg);
			break;
		case O_THREADS:
			if (parse_u64(optarg, &threads) || !threads || threads > 256)
				return usage_error("--threads %s: 1 to 256", optarg);
			break;
		case O_META:
			if (parse_u64(optarg, &meta) || !meta || meta > 100000000)
				return usage_error("--meta %s: a positive number", optarg);
			break;
		case O_TIME:
			secs = strtod(optarg, &end);
			if (*end || !(secs > 0) || secs > 3600)
				return usage_error("--time %s: seconds, more than 0", optarg);
			break;
		case O_DEPTH:
			if (parse_u64(optarg, &depth) || !depth || depth > 256)
				return usage_error("--depth %s: 1 to 256", optarg);
			break;
		case O_DIR: c->dir = optarg; break;
		case O_MNT: c->mnt = optarg; break;
		case O_UCMFS: c->ucmfs = optarg; break;
		case O_NULLFS: c->nullfs = optarg; break;
		case O_OPTS: c->opts = optarg; break;
		case O_JSON: c->json = optarg; break;
		case O_MOUNT:
			if (parse_u64(optarg, &mount) || mount > 100000000)
				return usage_error("--mount-blocks %s: 0 to 100000000", optarg);
			break;
		case O_SEED:
			if (parse_u64(optarg, &c->seed))
				return usage_error("--seed %s: a number", optarg);
			break;
		case 'h':
		case O_HELP:
			fputs(usage_text, stdout);
			return 1;
		default:
			return usage_error("unknown option%s", "");
		}
	}
	if (optind < argc)
		return usage_error("unexpected argument '%s'", argv[optind]);
	if (c->loads_only && c->writes_only)
		return usage_error("--loads-only and --writes-only exclude each other%s", "");
	if (!c->nsizes) {
		if (c->quick) {
			c->sizes[c->nsizes++] = 16 * MiB;
		} else {
			c->sizes[c->nsizes++] = 16 * MiB;
			c->sizes[c->nsizes++] = 8 * MiB;
			c->sizes[c->nsizes++] = 2 * MiB;
		}
	}
	c->threads = (unsigned)threads;
	c->depth = (unsigned)depth;
	c->meta = meta ? meta : c->quick ? 2000 : 100000;
	c->mount_blocks = mount != UINT64_MAX ? mount : c->quick ? 20000 : 1000000;
	c->mixed_secs = secs > 0 ? secs : c->quick ? 2 : 10;
	c->min_secs = c->quick ? 0.2 : 1.0;
	c->batches = c->quick ? 5 : 15;
	c->phase_limit = c->quick ? 180 : 1800;
	return 0;
}

/* path of a program beside this one (dirname of /proc/self/exe, else of argv[0]) */
static void beside_me(const char *argv0, const char *name, char *out, size_t len)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n > 0)
		self[n] = 0;
	else
		snprintf(self, sizeof(self), "%s", argv0);
	snprintf(out, len, "%s/%s", dirname(self), name);
}

static uint64_t mem_for(uint64_t bytes)
{
	uint64_t ram = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t m = bytes + (512ull << 20);

	m = m < (1ull << 30) ? 1ull << 30 : m;
	if (ram && m > ram / 2)
		m = ram / 2;
	return m;
}

static int setup(const char *argv0)
{
	char tmpl[PATH_MAX];
	long type;

	if (R.c.ucmfs)
		snprintf(R.ucmfs, sizeof(R.ucmfs), "%s", R.c.ucmfs);
	else
		beside_me(argv0, "ucmfs", R.ucmfs, sizeof(R.ucmfs));
	if (R.c.nullfs)
		snprintf(R.nullfs, sizeof(R.nullfs), "%s", R.c.nullfs);
	else
		beside_me(argv0, "nullfs", R.nullfs, sizeof(R.nullfs));
	if (!R.c.mnt && access(R.ucmfs, X_OK))
		return usage_error("cannot run the daemon %s (use --ucmfs PATH)", R.ucmfs);
	if (access(R.nullfs, X_OK))
		return usage_error("cannot run %s (use --nullfs PATH)", R.nullfs);
	if (access("/dev/fuse", R_OK | W_OK))
		return usage_error("/dev/fuse is not usable%s", "");
	if (R.c.mnt && fs_type(R.c.mnt) != FUSE_MAGIC_)
		return usage_error("--mnt %s is not a FUSE mount", R.c.mnt);
	type = fs_type(R.c.dir);
	if (!type)
		return usage_error("--dir %s does not exist", R.c.dir);
	if (type == TMPFS_MAGIC_)
		return usage_error("--dir %s is tmpfs: the disk figures would be memory figures; "
				   "use a directory on a disk", R.c.dir);
	snprintf(tmpl, sizeof(tmpl), "%s/ucm-bench.XXXXXX", R.c.dir);
	if (!mkdtemp(tmpl)) {
		fprintf(stderr, "ucm-bench: mkdtemp %s: %s\n", tmpl, strerror(errno));
		return 1;
	}
	snprintf(R.tmp, sizeof(R.tmp), "%s", tmpl);
#define SUB(field, name)                                                                       \
	do {                                                                                   \
		snprintf(R.field, sizeof(R.field), "%s/%s", R.tmp, name);                      \
	} while (0)
	SUB(store, "store");
	SUB(meta_store, "store-meta");
	SUB(mnt, "mnt");
	SUB(nmnt, "nullmnt");
	SUB(plain, "plain");
	SUB(log, "ucmfs.log");
	SUB(nlog, "nullfs.log");
#undef SUB
	if (mkdir(R.mnt, 0755) || mkdir(R.nmnt, 0755) || mkdir(R.plain, 0755)) {
		fprintf(stderr, "ucm-bench: mkdir in %s: %s\n", R.tmp, strerror(errno));
		return 1;
	}
	R.ucm_mnt = R.c.mnt ? R.c.mnt : R.mnt;
	R.can_drop = drop_caches() == 0;
	return 0;
}

static void print_header(FILE *f, char *meta, size_t len)
{
	struct utsname u;
	char sizes[128] = "", blocks[256] = "", b[16], date[64];
	time_t t = time(NULL);
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	uname(&u);
	strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
	for (unsigned i = 0; i < R.c.nsizes; i++) {
		size_t l = strlen(sizes), k = strlen(blocks);

		snprintf(sizes + l, sizeof(sizes) - l, "%s%s", i ? "," : "",
			 size_label(R.c.sizes[i], b, sizeof(b)));
		snprintf(blocks + k, sizeof(blocks) - k, "%s%llu x %s", i ? ", " : "",
			 (unsigned long long)blocks_for(R.c.sizes[i]), b);
	}
	fprintf(f, "ucm-bench: %s, Linux %s, %ld CPUs, %s\n", R.c.quick ? "quick" : "full",
		u.release, cpus, date);
	fprintf(f, "blocks: %s; mixed: %u threads, %g s; metadata: %llu blocks of 4K; raw disk "
		   "queue depth %u\n",
		blocks, R.c.threads, R.c.mixed_secs, (unsigned long long)R.c.meta, R.c.depth);
	fprintf(f, "ucmfs: %s; store and plain dir under %s%s\n\n",
		R.c.mnt ? R.c.mnt : R.ucmfs, R.tmp,
		R.can_drop ? "" : "; not root: page cache dropped file by file only");
	snprintf(meta, len,
		 "\"version\": 1, \"quick\": %s, \"sizes\": \"%s\", \"blocks\": %llu, "
		 "\"threads\": %u, \"meta\": %llu, \"mixed_secs\": %g, \"depth\": %u, "
		 "\"kernel\": \"%s\", \"cpus\": %ld, \"date\": \"%s\", \"dropped_caches\": %s",
		 R.c.quick ? "true" : "false", sizes,
		 (unsigned long long)blocks_for(R.c.sizes[0]), R.c.threads,
		 (unsigned long long)R.c.meta, R.c.mixed_secs, R.c.depth, u.release, cpus, date,
		 R.can_drop ? "true" : "false");
}

int main(int argc, char **argv)
{
	char meta[1024];
	double t0 = now_s();
	int rc;

	rc = parse_args(argc, argv, &R.c);
	if (rc)
		return rc == 1 ? 0 : rc;
	figs_init();
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
	signal(SIGALRM, on_signal);
	signal(SIGPIPE, SIG_IGN);
	rc = setup(argv[0]);
	if (rc) {
		cleanup();
		return rc;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	print_header(stdout, meta, sizeof(meta));

	R.mem_size = mem_for(blocks_for(R.c.sizes[0]) * R.c.sizes[0]);
	for (unsigned i = 0; i < R.c.nsizes; i++) {
		uint64_t bytes = blocks_for(R.c.sizes[i]) * R.c.sizes[i];

		if (mem_for(bytes) > R.mem_size)
			R.mem_size = mem_for(bytes);
	}
	if (R.c.writes_only) {
		for (unsigned i = 0; i < R.c.nsizes; i++)
			run_writes(R.c.sizes[i]);
		goto done;
	}
	for (unsigned i = 0; i < R.c.nsizes && !R.c.loads_only; i++) {
		/* a fresh store per size, so that each phase starts from an empty daemon */
		if (!R.c.mnt && ucm_stop() == 0)
			rm_rf(R.store);
		run_size(R.c.sizes[i], i == 0);
	}
	ucm_stop();
	run_prefetch();
	prefetch_rows();
	if (R.c.loads_only)
		goto done;
	run_routing();
	if (mem_for(R.c.meta * META_BLOCK * 2) > R.mem_size)
		R.mem_size = mem_for(R.c.meta * META_BLOCK * 2);
	run_meta();
	run_hitrate();
	run_mount();
	mixed_rows();
	floor_rows();
done:
	alarm(0);
	if (isatty(2))
		fprintf(stderr, "\r\033[K");

	rows_print(stdout);
	if (rows_missing())
		printf("\n%u rows without a value or a ratio: see the notes\n", rows_missing());
	printf("\nran in %.0f s\n", now_s() - t0);
	if (R.c.json && rows_write_json(R.c.json, meta)) {
		fprintf(stderr, "ucm-bench: %s\n", bench_last_error());
		R.failures++;
	}
	cleanup();
	return R.failures ? 1 : 0;
}
