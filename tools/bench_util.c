/*
 * ucm-bench: clock, result rows, child daemons and mounts, files, data pool (bench_util.h).
 *
 * Rows and daemons are global to the process: the bench is a single-threaded driver (only
 * wl_mixed() runs threads, and they touch neither). The daemon registry is what the signal
 * handler uses to unmount and kill whatever is still running.
 */
#include "tools/bench_util.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "src/units.h"
#include "tools/kvgen.h"

/* --- clock and errors ------------------------------------------------------------------ */

double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static __thread char last_error[512];

int bench_fail(int err, const char *fmt, ...)
{
	char what[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	if (err)
		snprintf(last_error, sizeof(last_error), "%s: %s", what, strerror(err));
	else
		snprintf(last_error, sizeof(last_error), "%s", what);
	return err ? -err : -EIO;
}

const char *bench_last_error(void)
{
	return last_error[0] ? last_error : "unknown error";
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

double median(double *v, size_t n)
{
	if (!n)
		return NAN;
	qsort(v, n, sizeof(*v), cmp_double);
	return n & 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double percentile_sorted(const double *v, size_t n, double p)
{
	size_t rank;

	if (!n)
		return NAN;
	rank = (size_t)ceil(p / 100.0 * (double)n);
	return v[rank ? rank - 1 : 0];
}

const char *size_label(uint64_t bytes, char *buf, size_t len)
{
	format_size(bytes, buf, len);
	return buf;
}

/* --- result rows ----------------------------------------------------------------------- */

struct row {
	char id[40];
	uint64_t block;
	char figure[80];
	double value;
	char unit[24];
	char floor_name[64];
	double floor;
	double ratio;
	char note[256];
};

static struct row *rows;
static unsigned nrows, cap_rows;

void row_add(const char *id, uint64_t block, const char *figure, double value, const char *unit,
	     enum row_kind kind, const char *floor_name, double floor, const char *note)
{
	struct row *r;

	if (nrows == cap_rows) {
		unsigned cap = cap_rows ? 2 * cap_rows : 64;
		struct row *n = realloc(rows, cap * sizeof(*rows));

		if (!n)
			return;
		rows = n;
		cap_rows = cap;
	}
	r = &rows[nrows++];
	memset(r, 0, sizeof(*r));
	snprintf(r->id, sizeof(r->id), "%s", id);
	r->block = block;
	snprintf(r->figure, sizeof(r->figure), "%s", figure);
	r->value = value;
	snprintf(r->unit, sizeof(r->unit), "%s", unit);
	snprintf(r->floor_name, sizeof(r->floor_name), "%s", floor_name);
	r->floor = floor;
	if (isnan(value) || isnan(floor) || value <= 0 || floor <= 0)
		r->ratio = NAN;
	else
		r->ratio = kind == ROW_RATE ? value / floor : floor / value;
	if (note)
		snprintf(r->note, sizeof(r->note), "%s", note);
	else if (isnan(value))
		snprintf(r->note, sizeof(r->note), "FAILED: %s", bench_last_error());
	else if (isnan(floor))
		snprintf(r->note, sizeof(r->note), "floor not measured: %s", bench_last_error());
}

unsigned rows_missing(void)
{
	unsigned n = 0;

	for (unsigned i = 0; i < nrows; i++)
		n += isnan(rows[i].value) || isnan(rows[i].ratio);
	return n;
}

/* Numbers with three significant digits, never in exponent form when >= 0.001. */
static const char *fmt_num(double v, char *buf, size_t len)
{
	double a = fabs(v);

	if (isnan(v))
		snprintf(buf, len, "n/a");
	else if (a >= 1000)
		snprintf(buf, len, "%.0f", v);
	else if (a >= 100)
		snprintf(buf, len, "%.1f", v);
	else if (a >= 10)
		snprintf(buf, len, "%.2f", v);
	else if (a >= 0.001 || a == 0)
		snprintf(buf, len, "%.3g", v);
	else
		snprintf(buf, len, "%.2e", v);
	return buf;
}

static const char legend[] =
	"ratio: value / floor for rates (GB/s, blocks/s, entries/s), floor / value for costs\n"
	"(microseconds, milliseconds, MiB), so 1.00 is 'at the floor' and less is worse; a ratio\n"
	"above 1 beats the floor (compression on disk, or a floor that is a different pattern).\n"
	"Floors come from this run on the same data and filesystem: memcpy; nullfs (build/nullfs,\n"
	"a FUSE server that answers reads with zeros and discards writes: the most any FUSE\n"
	"filesystem can do); the raw disk (O_DIRECT through libaio); zstd -1 on the same blocks;\n"
	"and, for 'vs plain dir' rows, the same workload on a plain directory of the same disk.\n"
	"GB/s = 10^9 bytes/s; sizes K, M, G = 2^10, 2^20, 2^30 bytes. See docs/BENCHMARKS.md.\n";

void rows_print(FILE *f)
{
	char v[32], fl[32], ra[32], mark[16];
	unsigned nnotes = 0;

	fprintf(f, "%-46s %10s %-10s %-38s %10s %7s\n", "figure", "value", "unit", "floor", "",
		"ratio");
	for (unsigned i = 0; i < nrows; i++) {
		struct row *r = &rows[i];

		mark[0] = 0;
		if (r->note[0])
			snprintf(mark, sizeof(mark), " [%u]", ++nnotes);
		fprintf(f, "%-46s %10s %-10s %-38s %10s %7s%s\n", r->figure,
			fmt_num(r->value, v, sizeof(v)), r->unit, r->floor_name,
			fmt_num(r->floor, fl, sizeof(fl)), fmt_num(r->ratio, ra, sizeof(ra)),
			mark);
	}
	fprintf(f, "\n%s", legend);
	if (nnotes)
		fprintf(f, "\nnotes:\n");
	nnotes = 0;
	for (unsigned i = 0; i < nrows; i++)
		if (rows[i].note[0])
			fprintf(f, "[%u] %s: %s\n", ++nnotes, rows[i].figure, rows[i].note);
}

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static void json_num(FILE *f, double v)
{
	if (isnan(v) || isinf(v))
		fputs("null", f);
	else
		fprintf(f, "%.6g", v);
}

int rows_write_json(const char *path, const char *meta_json)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return bench_fail(errno, "open %s", path);
	fprintf(f, "{\n  \"meta\": {%s},\n  \"rows\": [\n", meta_json);
	for (unsigned i = 0; i < nrows; i++) {
		struct row *r = &rows[i];

		fputs("    {\"id\": ", f);
		json_str(f, r->id);
		fprintf(f, ", \"block\": %llu, \"figure\": ", (unsigned long long)r->block);
		json_str(f, r->figure);
		fputs(", \"value\": ", f);
		json_num(f, r->value);
		fputs(", \"unit\": ", f);
		json_str(f, r->unit);
		fputs(", \"floor\": ", f);
		json_str(f, r->floor_name);
		fputs(", \"floor_value\": ", f);
		json_num(f, r->floor);
		fputs(", \"ratio\": ", f);
		json_num(f, r->ratio);
		fputs(", \"note\": ", f);
		json_str(f, r->note);
		fprintf(f, "}%s\n", i + 1 < nrows ? "," : "");
	}
	fputs("  ]\n}\n", f);
	if (fclose(f))
		return bench_fail(errno, "write %s", path);
	return 0;
}

/* --- processes and mounts -------------------------------------------------------------- */

#define MAX_DAEMONS 8
#define EXIT_WAIT_S 600.0

double mount_wait_s = 20.0;
static struct daemon *running[MAX_DAEMONS];

static void registry_set(struct daemon *d, bool on)
{
	for (int i = 0; i < MAX_DAEMONS; i++) {
		if (on && !running[i]) {
			running[i] = d;
			return;
		}
		if (!on && running[i] == d) {
			running[i] = NULL;
			return;
		}
	}
}

static pid_t spawn(char *const argv[], const char *log)
{
	pid_t pid = fork();
	int fd;

	if (pid != 0)
		return pid;
	fd = open(log ? log : "/dev/null", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd >= 0) {
		dup2(fd, 1);
		dup2(fd, 2);
	}
	fd = open("/dev/null", O_RDONLY);
	if (fd >= 0)
		dup2(fd, 0);
	execv(argv[0], argv);
	dprintf(2, "cannot run %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

static const char *fusermount(void)
{
	static const char *const cand[] = { "/usr/bin/fusermount3", "/bin/fusermount3",
					    "/usr/local/bin/fusermount3" };

	for (size_t i = 0; i < sizeof(cand) / sizeof(cand[0]); i++)
		if (access(cand[i], X_OK) == 0)
			return cand[i];
	return "fusermount3";
}

/* fusermount3 -u[z] mnt; its exit status, or -errno. */
static int unmount(const char *mnt, bool lazy)
{
	char *argv[] = { (char *)fusermount(), lazy ? "-uzq" : "-uq", (char *)mnt, NULL };
	int st;
	pid_t pid;

	if (argv[0][0] != '/') {
		pid = fork();
		if (pid == 0) {
			int fd = open("/dev/null", O_WRONLY);

			dup2(fd, 1);
			dup2(fd, 2);
			execvp(argv[0], argv);
			_exit(127);
		}
	} else {
		pid = spawn(argv, NULL);
	}
	if (pid < 0)
		return -errno;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* A FUSE filesystem mounted at mnt: its own device, not its parent's (which may be a FUSE
 * filesystem too: --store on GlusterFS). */
static bool is_fuse_mount(const char *mnt)
{
	char parent[PATH_MAX];
	struct stat a, b;

	snprintf(parent, sizeof(parent), "%s/..", mnt);
	return fs_type(mnt) == FUSE_MAGIC_ && stat(mnt, &a) == 0 && stat(parent, &b) == 0 &&
	       a.st_dev != b.st_dev;
}

int daemon_start(struct daemon *d, char *const argv[], const char *mnt, const char *log)
{
	double t0 = now_s();
	int st;

	snprintf(d->mnt, sizeof(d->mnt), "%s", mnt);
	snprintf(d->log, sizeof(d->log), "%s", log);
	if (is_fuse_mount(mnt))
		return bench_fail(EBUSY, "%s is already a FUSE mount", mnt);
	d->pid = spawn(argv, log);
	if (d->pid < 0) {
		d->pid = 0;
		return bench_fail(errno, "fork");
	}
	registry_set(d, true);
	while (!is_fuse_mount(mnt)) {
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			registry_set(d, false);
			d->pid = 0;
			daemon_log_tail(d, 10);
			return bench_fail(0, "%s exited with status %d before mounting %s", argv[0],
					  WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st),
					  mnt);
		}
		if (now_s() - t0 > mount_wait_s) {
			kill(d->pid, SIGKILL);
			waitpid(d->pid, &st, 0);
			registry_set(d, false);
			d->pid = 0;
			unmount(mnt, true);
			return bench_fail(ETIMEDOUT, "%s did not mount %s", argv[0], mnt);
		}
		usleep(2000);
	}
	return 0;
}

int daemon_stop(struct daemon *d)
{
	double t0 = now_s();
	int st = 0, rc;
	pid_t w;

	if (!d->pid)
		return 0;
	/* a descriptor closed just now may still hold the mount busy for a moment */
	for (int i = 0; (rc = unmount(d->mnt, false)) != 0 && i < 50; i++)
		usleep(100000);
	if (rc) {
		unmount(d->mnt, true);
		bench_fail(EBUSY, "fusermount3 -u %s failed (lazy unmount done)", d->mnt);
	}
	while ((w = waitpid(d->pid, &st, WNOHANG)) == 0 && now_s() - t0 < EXIT_WAIT_S)
		usleep(5000);
	if (w != d->pid) {
		kill(d->pid, SIGKILL);
		waitpid(d->pid, &st, 0);
		rc = bench_fail(ETIMEDOUT, "daemon on %s did not exit %.0f s after unmount",
				d->mnt, EXIT_WAIT_S);
	} else if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		daemon_log_tail(d, 10);
		rc = bench_fail(0, "daemon on %s exited with %s %d", d->mnt,
				WIFEXITED(st) ? "status" : "signal",
				WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
	}
	registry_set(d, false);
	d->pid = 0;
	return rc ? (rc < 0 ? rc : -EBUSY) : 0;
}

void daemons_kill_all(void)
{
	for (int i = 0; i < MAX_DAEMONS; i++) {
		struct daemon *d = running[i];

		if (!d)
			continue;
		unmount(d->mnt, true);
		kill(d->pid, SIGTERM);
		for (int j = 0; j < 200 && waitpid(d->pid, NULL, WNOHANG) == 0; j++)
			usleep(10000);
		kill(d->pid, SIGKILL);
		waitpid(d->pid, NULL, WNOHANG);
		running[i] = NULL;
	}
}

void daemon_log_tail(const struct daemon *d, int lines)
{
	char buf[8192];
	ssize_t n;
	int fd = open(d->log, O_RDONLY);
	off_t end;
	char *p;

	if (fd < 0)
		return;
	end = lseek(fd, 0, SEEK_END);
	n = pread(fd, buf, sizeof(buf) - 1, end > (off_t)sizeof(buf) - 1 ?
						    end - (off_t)sizeof(buf) + 1 : 0);
	close(fd);
	if (n <= 0)
		return;
	buf[n] = 0;
	p = buf + n;
	while (p > buf && lines >= 0)
		if (*--p == '\n')
			lines--;
	fprintf(stderr, "--- %s (last lines) ---\n%s%s", d->log, p == buf ? "" : "",
		p == buf ? p : p + 1);
}

long long proc_peak_rss(pid_t pid)
{
	char path[64], line[256];
	long long kb = -ENOENT;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmHWM: %lld kB", &kb) == 1)
			break;
	fclose(f);
	return kb < 0 ? kb : kb * 1024;
}

/* --- files ----------------------------------------------------------------------------- */

int drop_caches(void)
{
	int fd, rc = 0;

	sync();
	fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
	if (fd < 0)
		return -errno;
	if (write(fd, "3\n", 2) != 2)
		rc = -errno;
	close(fd);
	return rc;
}

static int drop_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	int fd;

	(void)ftw;
	if (flag != FTW_F || !S_ISREG(st->st_mode))
		return 0;
	fd = open(path, O_RDONLY | O_NOFOLLOW);
	if (fd >= 0) {
		fdatasync(fd); /* only clean pages can be dropped */
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
	return 0;
}

int drop_tree_cache(const char *dir)
{
	return nftw(dir, drop_one, 32, FTW_PHYS | FTW_MOUNT) ? -errno : 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

int rm_rf(const char *path)
{
	/* FTW_MOUNT: a mount point left behind is not descended into */
	return nftw(path, rm_one, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) ? -errno : 0;
}

long fs_type(const char *path)
{
	struct statfs sf;

	return statfs(path, &sf) ? 0 : (long)sf.f_type;
}

void *bench_alloc(size_t bytes)
{
	void *p;

	if (posix_memalign(&p, 4096, bytes ? bytes : 1))
		return NULL;
	memset(p, 0, bytes);
	return p;
}

/* --- data and names -------------------------------------------------------------------- */

int pool_make(struct pool *p, uint64_t bsize, unsigned n, uint64_t seed)
{
	p->bsize = bsize;
	p->n = 0;
	p->buf = calloc(n, sizeof(*p->buf));
	if (!p->buf)
		return bench_fail(ENOMEM, "data pool");
	for (unsigned i = 0; i < n; i++) {
		p->buf[i] = bench_alloc(bsize);
		if (!p->buf[i]) {
			pool_free(p);
			return bench_fail(ENOMEM, "data pool of %u x %llu bytes", n,
					  (unsigned long long)bsize);
		}
		p->n++;
		kvgen_fill(p->buf[i], bsize, seed * 1000003 + i);
	}
	return 0;
}

void pool_free(struct pool *p)
{
	for (unsigned i = 0; i < p->n; i++)
		free(p->buf[i]);
	free(p->buf);
	p->buf = NULL;
	p->n = 0;
}

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void block_name(char out[33], uint64_t salt, uint64_t i)
{
	uint64_t a = mix64(salt * 0x9e3779b97f4a7c15ull + i);
	uint64_t b = mix64(a ^ (salt + 0x632be59bd9b4e019ull));

	snprintf(out, 33, "%016llx%016llx", (unsigned long long)a, (unsigned long long)b);
}

int stats_values(const char *mnt, const char *const *names, double *v, unsigned n)
{
	char path[PATH_MAX + 16], *line = NULL;
	size_t cap = 0;
	unsigned found = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/.ucm/stats", mnt);
	f = fopen(path, "r");
	if (!f)
		return bench_fail(errno, "open %s", path);
	while (getline(&line, &cap, f) > 0) {
		for (unsigned i = 0; i < n; i++) {
			size_t l = strlen(names[i]);

			if (!strncmp(line, names[i], l) && line[l] == ' ') {
				v[i] = strtod(line + l + 1, NULL);
				found |= 1u << i;
			}
		}
	}
	free(line);
	fclose(f);
	for (unsigned i = 0; i < n; i++)
		if (!(found & (1u << i)))
			return bench_fail(0, "%s has no %s", path, names[i]);
	return 0;
}
