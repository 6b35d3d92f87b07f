/*
 * ucmctl stat and top: read MNT/.ucm/stats (Prometheus text exposition) and MNT/.ucm/config,
 * and show them for a person. `stat` prints totals; `top` prints rates over each interval.
 *
 * A tier row is one label set of ucmfs_tier_blocks: {tier="mem"}, {tier="disk",store="..."}
 * (one per directory of a striped STORE). Metrics a daemon does not export show as "-".
 */
#include "tools/ucmctl.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_ROWS 64

struct sample {
	char *name;
	char *labels; /* inside the braces, "" if none */
	double v;
};

struct stats {
	struct sample *s;
	size_t n, cap;
	char *text;   /* the file; names and labels point into it */
	char *config; /* MNT/.ucm/config */
	double t;     /* when read, monotonic seconds */
};

static void stats_free(struct stats *st)
{
	free(st->s);
	free(st->text);
	free(st->config);
	memset(st, 0, sizeof(*st));
}

/* The whole of a small file (control files report no useful size: read until EOF). */
static char *slurp(const char *path)
{
	size_t len = 0, cap = 65536;
	char *buf = malloc(cap);
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || !buf) {
		int e = errno;

		free(buf);
		if (fd >= 0)
			close(fd);
		errno = fd < 0 ? e : ENOMEM;
		return NULL;
	}
	for (;;) {
		ssize_t n;

		if (cap - len < 4096) {
			char *b = realloc(buf, cap * 2);

			if (!b) {
				free(buf);
				close(fd);
				errno = ENOMEM;
				return NULL;
			}
			buf = b;
			cap *= 2;
		}
		n = read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;

			free(buf);
			close(fd);
			errno = e;
			return NULL;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	buf[len] = '\0';
	return buf;
}

/* Parse the exposition text in place. 0 or -EPROTO on a line that is not a sample. */
static int parse(struct stats *st)
{
	char *line = st->text, *next;

	for (; line && *line; line = next) {
		char *sp, *brace, *end;
		struct sample s;

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		if (*line == '#' || *line == '\0')
			continue;
		sp = strrchr(line, ' ');
		if (!sp)
			return -EPROTO;
		*sp = '\0';
		s.v = strtod(sp + 1, &end);
		if (end == sp + 1)
			return -EPROTO;
		s.name = line;
		s.labels = "";
		brace = strchr(line, '{');
		if (brace) {
			char *close = strrchr(brace, '}');

			if (!close)
				return -EPROTO;
			*brace = '\0';
			*close = '\0';
			s.labels = brace + 1;
		}
		if (st->n == st->cap) {
			size_t cap = st->cap ? st->cap * 2 : 256;
			struct sample *v = realloc(st->s, cap * sizeof(*v));

			if (!v)
				return -ENOMEM;
			st->s = v;
			st->cap = cap;
		}
		st->s[st->n++] = s;
	}
	return 0;
}

static int stats_read(const char *mnt, struct stats *st)
{
	char path[4096];

	memset(st, 0, sizeof(*st));
	snprintf(path, sizeof(path), "%s/.ucm/stats", mnt);
	st->t = now_s();
	st->text = slurp(path);
	if (!st->text) {
		ucmctl_err("%s: %s%s", path, strerror(errno),
			   errno == ENOENT ? " (is it a ucmfs mount?)" : "");
		return 1;
	}
	if (parse(st)) {
		ucmctl_err("%s: not in the Prometheus text format", path);
		stats_free(st);
		return 1;
	}
	snprintf(path, sizeof(path), "%s/.ucm/config", mnt);
	st->config = slurp(path);
	return 0;
}

/* Does a label set contain every label of want ("" matches all)? Labels are k="v" pairs
 * separated by commas; a value may itself hold a comma, so a label ends at `",` or the end. */
static bool labels_match(const char *have, const char *want)
{
	for (const char *w = want; *w;) {
		const char *end = strstr(w, "\",");
		size_t len = end ? (size_t)(end - w) + 1 : strlen(w);
		const char *h;
		char one[512];

		snprintf(one, sizeof(one), "%.*s", (int)len, w);
		for (h = have; (h = strstr(h, one)) != NULL; h++)
			if ((h == have || h[-1] == ',') && (h[len] == ',' || !h[len]))
				break;
		if (!h)
			return false;
		w += len;
		if (*w == ',')
			w++;
	}
	return true;
}

/* Sum of the samples of name whose labels contain `labels`; NAN if there are none. */
static double get(const struct stats *st, const char *name, const char *labels)
{
	double sum = 0;
	bool any = false;

	for (size_t i = 0; st && i < st->n; i++) {
		if (strcmp(st->s[i].name, name) || !labels_match(st->s[i].labels, labels))
			continue;
		sum += st->s[i].v;
		any = true;
	}
	return any ? sum : NAN;
}

/* The q-quantile of a histogram's observations (of those since `before`, if not NULL), in
 * seconds; -1 if there are none. */
static double hist_quantile(const struct stats *now, const struct stats *before,
			    const char *name, double q)
{
	char bname[128];
	double le[32], cnt[32], total;
	size_t nb = 0;

	snprintf(bname, sizeof(bname), "%s_bucket", name);
	for (size_t i = 0; i < now->n && nb < 32; i++) {
		const char *l;

		if (strcmp(now->s[i].name, bname) || !(l = strstr(now->s[i].labels, "le=\"")))
			continue;
		le[nb] = strncmp(l + 4, "+Inf", 4) ? strtod(l + 4, NULL) : INFINITY;
		cnt[nb] = now->s[i].v;
		if (before) {
			double b = get(before, bname, now->s[i].labels);

			if (!isnan(b))
				cnt[nb] -= b;
		}
		nb++;
	}
	if (nb == 0)
		return -1;
	total = cnt[nb - 1];
	if (total <= 0)
		return -1;
	/* the rank's bucket, interpolated linearly inside it (as PromQL histogram_quantile) */
	for (size_t i = 0; i < nb; i++) {
		double lo = i ? le[i - 1] : 0, below = i ? cnt[i - 1] : 0;

		if (cnt[i] < q * total)
			continue;
		if (isinf(le[i]))
			return i ? le[i - 1] : -1;
		if (cnt[i] <= below)
			return le[i];
		return lo + (le[i] - lo) * (q * total - below) / (cnt[i] - below);
	}
	return -1;
}

static const char *config(const struct stats *st, const char *key, char *buf, size_t len)
{
	size_t kl = strlen(key);

	for (const char *l = st->config; l && *l;) {
		const char *nl = strchr(l, '\n');
		size_t ll = nl ? (size_t)(nl - l) : strlen(l);

		if (ll > kl && !strncmp(l, key, kl) && l[kl] == '=') {
			snprintf(buf, len, "%.*s", (int)(ll - kl - 1), l + kl + 1);
			return buf;
		}
		l = nl ? nl + 1 : l + ll;
	}
	snprintf(buf, len, "?");
	return buf;
}

struct row {
	char labels[512]; /* selector for this tier's samples */
	char name[16];    /* mem, disk */
	char store[256];  /* "" for mem */
};

/* The tier rows, in the order the daemon lists them. */
static size_t tier_rows(const struct stats *st, struct row *rows)
{
	size_t n = 0;

	for (size_t i = 0; i < st->n && n < MAX_ROWS; i++) {
		const char *t, *s;
		struct row *r = &rows[n];

		if (strcmp(st->s[i].name, "ucmfs_tier_blocks"))
			continue;
		snprintf(r->labels, sizeof(r->labels), "%s", st->s[i].labels);
		t = strstr(r->labels, "tier=\"");
		snprintf(r->name, sizeof(r->name), "%s", t ? t + 6 : "?");
		if (strchr(r->name, '"'))
			*strchr(r->name, '"') = '\0';
		r->store[0] = '\0';
		s = strstr(r->labels, "store=\"");
		if (s) {
			snprintf(r->store, sizeof(r->store), "%s", s + 7);
			if (strrchr(r->store, '"'))
				*strrchr(r->store, '"') = '\0';
		}
		n++;
	}
	return n;
}

static const char *num(double v, char *buf, size_t len)
{
	if (isnan(v))
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.0f", v);
	return buf;
}

static const char *bytes_or_dash(double v, char *buf, size_t len)
{
	if (isnan(v))
		return snprintf(buf, len, "-"), buf;
	return fmt_bytes(v, buf, len);
}

static const char *pct(double part, double whole, char *buf, size_t len)
{
	if (isnan(part) || isnan(whole) || whole <= 0)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.1f%%", 100 * part / whole);
	return buf;
}

/* --- stat ------------------------------------------------------------------------------ */

static void print_stat(const char *mnt, const struct stats *st)
{
	struct row rows[MAX_ROWS];
	size_t nr = tier_rows(st, rows);
	char a[64], b[64], c[64], d[64], e[64], f[64], g[64];
	int disks = 0;
	double raw, stored;

	for (size_t i = 0; i < nr; i++)
		disks += rows[i].store[0] != '\0';
	printf("ucmfs on %s: store %s, pipeline %s, compress %s, mem_size %s\n", mnt,
	       config(st, "store", a, sizeof(a)), config(st, "pipeline", b, sizeof(b)),
	       config(st, "compress", c, sizeof(c)), config(st, "mem_size", d, sizeof(d)));
	printf("\n%-5s %9s %11s %11s %6s %10s %10s %7s %10s %8s%s\n", "TIER", "BLOCKS", "BYTES",
	       "CAPACITY", "USE", "HITS", "MISSES", "HIT%", "EVICTIONS", "EXPIRED",
	       disks > 1 ? "  STORE" : "");
	for (size_t i = 0; i < nr; i++) {
		const char *l = rows[i].labels;
		double hits = get(st, "ucmfs_tier_hits_total", l);
		double miss = get(st, "ucmfs_tier_misses_total", l);
		double used = get(st, "ucmfs_tier_bytes", l);
		char h[32], m[32], ev[32], ex[32], bl[32];

		printf("%-5s %9s %11s %11s %6s %10s %10s %7s %10s %8s%s%s\n", rows[i].name,
		       num(get(st, "ucmfs_tier_blocks", l), bl, sizeof(bl)),
		       bytes_or_dash(used, a, sizeof(a)),
		       bytes_or_dash(get(st, "ucmfs_tier_capacity_bytes", l), b, sizeof(b)),
		       pct(used, get(st, "ucmfs_tier_capacity_bytes", l), c, sizeof(c)),
		       num(hits, h, sizeof(h)), num(miss, m, sizeof(m)),
		       pct(hits, hits + miss, d, sizeof(d)),
		       num(get(st, "ucmfs_tier_evictions_total", l), ev, sizeof(ev)),
		       num(get(st, "ucmfs_tier_expirations_total", l), ex, sizeof(ex)),
		       disks > 1 && rows[i].store[0] ? "  " : "", disks > 1 ? rows[i].store : "");
	}
	printf("\n");
	raw = get(st, "ucmfs_compress_raw_bytes_total", "");
	stored = get(st, "ucmfs_compress_stored_bytes_total", "");
	if (!isnan(raw) && raw > 0)
		printf("%-13s %.2fx  (%s written to disk as %s)\n", "compression",
		       get(st, "ucmfs_compression_ratio", ""), fmt_bytes(raw, a, sizeof(a)),
		       fmt_bytes(stored, b, sizeof(b)));
	else if (!isnan(raw))
		printf("%-13s -  (nothing written to disk yet)\n", "compression");
	else
		printf("%-13s none in this pipeline\n", "compression");
	printf("%-13s dump %s, dirty blocks %s, pins %s, reservations %s\n", "queues",
	       num(get(st, "ucmfs_disk_queue_depth", "queue=\"dump\""), a, sizeof(a)),
	       num(get(st, "ucmfs_mem_dirty_blocks", ""), b, sizeof(b)),
	       num(get(st, "ucmfs_pins", ""), c, sizeof(c)),
	       num(get(st, "ucmfs_reservations", ""), d, sizeof(d)));
	printf("%-13s %s ok, %s incomplete, %s failed\n", "commits",
	       num(get(st, "ucmfs_commits_total", "result=\"ok\""), a, sizeof(a)),
	       num(get(st, "ucmfs_commits_total", "result=\"incomplete\""), b, sizeof(b)),
	       num(get(st, "ucmfs_commits_total", "result=\"failed\""), c, sizeof(c)));
	if (disks)
		printf("%-13s loads %s (%s failed, p50 %s, p99 %s), dumps %s (%s failed, p99 %s)\n",
	       "disk io", num(get(st, "ucmfs_loads_total", ""), a, sizeof(a)),
	       num(get(st, "ucmfs_load_errors_total", ""), b, sizeof(b)),
	       fmt_seconds(hist_quantile(st, NULL, "ucmfs_load_seconds", 0.5), c, sizeof(c)),
	       fmt_seconds(hist_quantile(st, NULL, "ucmfs_load_seconds", 0.99), d, sizeof(d)),
	       num(get(st, "ucmfs_dumps_total", ""), e, sizeof(e)),
	       num(get(st, "ucmfs_dump_errors_total", ""), f, sizeof(f)),
	       fmt_seconds(hist_quantile(st, NULL, "ucmfs_dump_seconds", 0.99), g, sizeof(g)));
	printf("%-13s read %s in %s opens (%s passed through), written %s, %s queries (p99 %s)\n",
	       "traffic", bytes_or_dash(get(st, "ucmfs_read_bytes_total", ""), a, sizeof(a)),
	       num(get(st, "ucmfs_opens_total", ""), b, sizeof(b)),
	       num(get(st, "ucmfs_passthrough_opens_total", ""), f, sizeof(f)),
	       bytes_or_dash(get(st, "ucmfs_write_bytes_total", ""), c, sizeof(c)),
	       num(get(st, "ucmfs_queries_total", ""), d, sizeof(d)),
	       fmt_seconds(hist_quantile(st, NULL, "ucmfs_query_seconds", 0.99), e, sizeof(e)));
	if (disks)
		printf("%-13s %s checksum failures, %s quarantined, %s spills, %s streamed opens\n",
		       "integrity", num(get(st, "ucmfs_checksum_failures_total", ""), a, sizeof(a)),
		       num(get(st, "ucmfs_quarantined_total", ""), b, sizeof(b)),
		       num(get(st, "ucmfs_spills_total", ""), c, sizeof(c)),
		       num(get(st, "ucmfs_streamed_opens_total", ""), d, sizeof(d)));
}

static int need_mount(int argc, char **argv, const char *what, const char **mnt)
{
	if (optind != argc - 1) {
		ucmctl_err("usage: ucmctl %s MNT%s", what,
			   !strcmp(what, "top") ? " [-d SECONDS] [-n COUNT]" : "");
		return EXIT_USAGE;
	}
	*mnt = argv[optind];
	return 0;
}

int cmd_stat(int argc, char **argv)
{
	static const struct option lo[] = { { "help", no_argument, NULL, 'h' }, { 0 } };
	struct stats st;
	const char *mnt;
	int c, rc;

	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		if (c == 'h') {
			puts("usage: ucmctl stat MNT");
			return 0;
		}
		return EXIT_USAGE;
	}
	if ((rc = need_mount(argc, argv, "stat", &mnt)))
		return rc;
	if ((rc = stats_read(mnt, &st)))
		return rc;
	print_stat(mnt, &st);
	stats_free(&st);
	return 0;
}

/* --- top ------------------------------------------------------------------------------- */

static double rate(const struct stats *now, const struct stats *before, const char *name,
		   const char *labels)
{
	double a = get(now, name, labels), b = get(before, name, labels), dt = now->t - before->t;

	if (isnan(a) || isnan(b) || dt <= 0)
		return NAN;
	return a >= b ? (a - b) / dt : 0; /* a daemon restart resets counters */
}

static const char *rate_str(double v, char *buf, size_t len)
{
	if (isnan(v))
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.1f", v);
	return buf;
}

static const char *bps_str(double v, char *buf, size_t len)
{
	if (isnan(v))
		return snprintf(buf, len, "-"), buf;
	return fmt_rate(v, buf, len);
}

static void print_top(const char *mnt, const struct stats *now, const struct stats *before,
		      bool tty, double interval)
{
	struct row rows[MAX_ROWS];
	size_t nr = tier_rows(now, rows);
	char a[64], b[64], c[64], d[64], e[64], f[64], g[64], k[64], ts[32];
	time_t t = time(NULL);
	int disks = 0;

	for (size_t i = 0; i < nr; i++)
		disks += rows[i].store[0] != '\0';
	strftime(ts, sizeof(ts), "%H:%M:%S", localtime(&t));
	if (tty)
		fputs("\033[H\033[2J", stdout);
	printf("%s  ucmfs %s  every %gs%s\n", ts, mnt, interval, tty ? "  (Ctrl-C quits)" : "");
	printf("%-5s %9s %9s %7s %11s %11s %8s %9s %10s%s\n", "TIER", "HITS/s", "MISSES/s", "HIT%",
	       "IN", "OUT", "EVICT/s", "BLOCKS", "BYTES", disks > 1 ? "  STORE" : "");
	for (size_t i = 0; i < nr; i++) {
		const char *l = rows[i].labels;
		double h = rate(now, before, "ucmfs_tier_hits_total", l);
		double m = rate(now, before, "ucmfs_tier_misses_total", l);

		printf("%-5s %9s %9s %7s %11s %11s %8s %9s %10s%s%s\n", rows[i].name,
		       rate_str(h, a, sizeof(a)), rate_str(m, b, sizeof(b)),
		       pct(h, h + m, c, sizeof(c)),
		       bps_str(rate(now, before, "ucmfs_tier_bytes_in_total", l), d, sizeof(d)),
		       bps_str(rate(now, before, "ucmfs_tier_bytes_out_total", l), e, sizeof(e)),
		       rate_str(rate(now, before, "ucmfs_tier_evictions_total", l), f, sizeof(f)),
		       num(get(now, "ucmfs_tier_blocks", l), g, sizeof(g)),
		       bytes_or_dash(get(now, "ucmfs_tier_bytes", l), k, sizeof(k)),
		       disks > 1 && rows[i].store[0] ? "  " : "", disks > 1 ? rows[i].store : "");
	}
	printf("read %s  write %s  opens/s %s  queries/s %s  load p99 %s  dump p99 %s  "
	       "dump queue %s\n",
	       bps_str(rate(now, before, "ucmfs_read_bytes_total", ""), a, sizeof(a)),
	       bps_str(rate(now, before, "ucmfs_write_bytes_total", ""), b, sizeof(b)),
	       rate_str(rate(now, before, "ucmfs_opens_total", ""), c, sizeof(c)),
	       rate_str(rate(now, before, "ucmfs_queries_total", ""), d, sizeof(d)),
	       fmt_seconds(hist_quantile(now, before, "ucmfs_load_seconds", 0.99), e, sizeof(e)),
	       fmt_seconds(hist_quantile(now, before, "ucmfs_dump_seconds", 0.99), f, sizeof(f)),
	       num(get(now, "ucmfs_disk_queue_depth", ""), g, sizeof(g)));
	if (!tty)
		putchar('\n');
	fflush(stdout);
}

/* Sleep s seconds unless a signal stops us. */
static void nap(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };

	while (!ucmctl_stop && nanosleep(&ts, &ts) && errno == EINTR)
		;
}

int cmd_top(int argc, char **argv)
{
	static const struct option lo[] = { { "delay", required_argument, NULL, 'd' },
					    { "count", required_argument, NULL, 'n' },
					    { "help", no_argument, NULL, 'h' },
					    { 0 } };
	struct stats before, now;
	double delay = 1;
	long count = -1;
	const char *mnt;
	char *end;
	bool tty = isatty(STDOUT_FILENO);
	int c, rc;

	while ((c = getopt_long(argc, argv, "d:n:h", lo, NULL)) != -1) {
		switch (c) {
		case 'd':
			delay = strtod(optarg, &end);
			if (*end || !(delay >= 0.01) || delay > 86400) {
				ucmctl_err("-d: not a number of seconds (0.01 or more): '%s'", optarg);
				return EXIT_USAGE;
			}
			break;
		case 'n':
			count = strtol(optarg, &end, 10);
			if (*end || count < 1) {
				ucmctl_err("-n: not a count (1 or more): '%s'", optarg);
				return EXIT_USAGE;
			}
			break;
		case 'h':
			puts("usage: ucmctl top MNT [-d SECONDS] [-n COUNT]");
			return 0;
		default:
			return EXIT_USAGE;
		}
	}
	if ((rc = need_mount(argc, argv, "top", &mnt)))
		return rc;
	ucmctl_catch_signals();
	if ((rc = stats_read(mnt, &before)))
		return rc;
	for (long i = 0; count < 0 || i < count; i++) {
		nap(delay);
		if (ucmctl_stop)
			break;
		if ((rc = stats_read(mnt, &now)))
			break;
		print_top(mnt, &now, &before, tty, delay);
		stats_free(&before);
		before = now;
	}
	stats_free(&before);
	return rc;
}
