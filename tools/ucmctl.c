/*
 * ucmctl: look at and steer a ucmfs mount, and check a store (man/ucmctl.1).
 *
 *   ucmctl stat MNT          summary: per tier blocks, bytes, hit ratio, evictions; compression,
 *                            queues, commits, latencies
 *   ucmctl top MNT           rates every second: hits/s, misses/s, bytes/s per tier, p99 load
 *   ucmctl ls MNT [ID...]    blocks with size, stored size, codec, tier, TTL left, pins
 *   ucmctl lookup MNT ID...  prefix length, hit mask and last index (one query)
 *   ucmctl prefetch MNT ID.. promote disk-only blocks into memory and wait
 *   ucmctl verify STORE      check every block file of an unmounted store
 */
#include "tools/ucmctl.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

volatile sig_atomic_t ucmctl_stop;

static void on_signal(int sig)
{
	(void)sig;
	ucmctl_stop = 1;
}

void ucmctl_catch_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal; /* no SA_RESTART: a sleep returns at once */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

void ucmctl_err(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fputs("ucmctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* --- numbers for people ---------------------------------------------------------------- */

static const char *scaled(double v, double base, const char *const *units, int nunits,
			  char *buf, size_t len)
{
	int i = 0;

	while (i < nunits - 1 && v >= base * 0.9995) {
		v /= base;
		i++;
	}
	if (i == 0)
		snprintf(buf, len, "%.0f %s", v, units[0]);
	else
		snprintf(buf, len, "%.*f %s", v < 9.995 ? 2 : v < 99.95 ? 1 : 0, v, units[i]);
	return buf;
}

const char *fmt_bytes(double bytes, char *buf, size_t len)
{
	static const char *const u[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };

	return scaled(bytes < 0 ? 0 : bytes, 1024, u, 6, buf, len);
}

const char *fmt_rate(double bps, char *buf, size_t len)
{
	static const char *const u[] = { "B/s", "kB/s", "MB/s", "GB/s", "TB/s" };

	return scaled(bps < 0 ? 0 : bps, 1000, u, 5, buf, len);
}

const char *fmt_seconds(double s, char *buf, size_t len)
{
	if (s < 0)
		snprintf(buf, len, "-");
	else if (s < 1e-3)
		snprintf(buf, len, "%.0f us", s * 1e6);
	else if (s < 1)
		snprintf(buf, len, "%.3g ms", s * 1e3);
	else
		snprintf(buf, len, "%.3g s", s);
	return buf;
}

const char *fmt_ttl(int64_t ms, char *buf, size_t len)
{
	int64_t s = ms / 1000;

	if (ms < 0)
		snprintf(buf, len, "none");
	else if (ms < 1000)
		snprintf(buf, len, "%lldms", (long long)ms);
	else if (ms < 60000)
		snprintf(buf, len, "%.1fs", (double)ms / 1000);
	else if (s < 3600)
		snprintf(buf, len, "%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
	else if (s < 86400)
		snprintf(buf, len, "%lldh%02lldm", (long long)(s / 3600), (long long)(s / 60 % 60));
	else
		snprintf(buf, len, "%lldd%02lldh", (long long)(s / 86400),
			 (long long)(s / 3600 % 24));
	return buf;
}

/* --- progress bar ---------------------------------------------------------------------- */

void progress_init(struct progress *p, bool enabled)
{
	p->on = enabled && isatty(STDERR_FILENO);
	p->t0 = now_s();
	p->last = 0;
}

void progress_draw(struct progress *p, double done, double total, const char *text, bool force)
{
	struct winsize ws;
	int cols = 80, width, fill;
	double t = now_s(), frac = total > 0 ? done / total : 1;
	char bar[256];

	if (!p->on || (!force && t - p->last < 0.1))
		return;
	p->last = t;
	if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20)
		cols = ws.ws_col;
	width = cols - (int)strlen(text) - 10;
	if (width > 50)
		width = 50;
	if (width < 10)
		width = 10;
	if (frac > 1)
		frac = 1;
	fill = (int)(frac * width);
	for (int i = 0; i < width; i++)
		bar[i] = i < fill ? '#' : '.';
	bar[width] = '\0';
	fprintf(stderr, "\r[%s] %3d%% %.*s\033[K", bar, (int)(frac * 100),
		cols - width - 9 > 0 ? cols - width - 9 : 0, text);
	fflush(stderr);
}

void progress_end(struct progress *p)
{
	if (!p->on)
		return;
	fputs("\r\033[K", stderr);
	fflush(stderr);
}

/* --- ids and mounts -------------------------------------------------------------------- */

static int add_id(const char *w, size_t len, ucmfs_id **ids, size_t *n, size_t *cap)
{
	if (ucmfs_id_parse(w, len, (*ids)[*n])) {
		ucmctl_err("not a block id (32 lowercase hex characters): '%.*s'",
			   len > 64 ? 64 : (int)len, w);
		return -1;
	}
	if (++*n == *cap) {
		ucmfs_id *v = realloc(*ids, *cap * 2 * sizeof(**ids));

		if (!v)
			return -2;
		*ids = v;
		*cap *= 2;
	}
	return 0;
}

int read_ids(char **args, int nargs, ucmfs_id **out, size_t *count)
{
	size_t n = 0, cap = 64;
	ucmfs_id *ids = malloc(cap * sizeof(*ids));
	int bad = 0, rc = 0;

	if (!ids)
		return 1;
	if (nargs > 0) {
		for (int i = 0; i < nargs && rc > -2; i++)
			if ((rc = add_id(args[i], strlen(args[i]), &ids, &n, &cap)) == -1)
				bad++;
	} else {
		char w[80];
		size_t wl = 0;
		int c;

		do {
			c = getchar();
			if (c != EOF && !isspace(c)) {
				if (wl < sizeof(w))
					w[wl] = (char)c;
				wl++;
				continue;
			}
			if (wl && (rc = add_id(w, wl < sizeof(w) ? wl : sizeof(w), &ids, &n,
					       &cap)) == -1)
				bad++;
			wl = 0;
		} while (c != EOF && rc > -2);
	}
	if (rc == -2) {
		ucmctl_err("out of memory");
		free(ids);
		return 1;
	}
	if (bad) {
		free(ids);
		return EXIT_USAGE;
	}
	*out = ids;
	*count = n;
	return 0;
}

int open_mount(const char *mnt, struct ucmfs **u)
{
	int rc = ucmfs_open(mnt, u);

	if (rc == -ENOTDIR) {
		ucmctl_err("%s: not a ucmfs mount (no .ucm/query)", mnt);
		return 1;
	}
	if (rc) {
		ucmctl_err("%s: %s", mnt, strerror(-rc));
		return 1;
	}
	return 0;
}

/* --- main ------------------------------------------------------------------------------ */

static void usage(FILE *f)
{
	fputs("usage: ucmctl COMMAND [OPTIONS] ARGS\n"
	      "  stat MNT                      tiers, hit ratios, compression, queues, latencies\n"
	      "  top MNT [-d SEC] [-n COUNT]   live rates every SEC seconds (1), COUNT times\n"
	      "  ls MNT [-b] [-H] [ID...]      blocks: size, stored, codec, tier, TTL left, pins\n"
	      "  lookup MNT [ID...]            prefix length, hit mask, last index (ids on stdin\n"
	      "                                if none are given)\n"
	      "  prefetch MNT [-q] [-t SEC] [ID...]\n"
	      "                                load disk-only blocks into memory and wait\n"
	      "  verify [-q] [-v] [-f] STORE[:STORE...]\n"
	      "                                check every block file of an unmounted store\n"
	      "Exit status: 0 ok, 1 failure (damaged or missing blocks), 2 usage.\n"
	      "See ucmctl(1).\n",
	      f);
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(int, char **);
	} cmds[] = {
		{ "stat", cmd_stat },	      { "top", cmd_top },	    { "ls", cmd_ls },
		{ "lookup", cmd_lookup },     { "prefetch", cmd_prefetch }, { "verify", cmd_verify },
	};

	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) {
		puts("ucmctl 0.1.0");
		return 0;
	}
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (!strcmp(argv[1], cmds[i].name))
			return cmds[i].fn(argc - 1, argv + 1);
	ucmctl_err("unknown command '%s'", argv[1]);
	usage(stderr);
	return EXIT_USAGE;
}
