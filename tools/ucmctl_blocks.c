/*
 * ucmctl ls, lookup and prefetch: blocks of a mount, through the C client
 * (tools/client/ucmfs.h).
 */
#include "tools/ucmctl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --- ls -------------------------------------------------------------------------------- */

struct ls_state {
	bool bytes, header;
	uint64_t n, size, stored;
};

static void ls_header(struct ls_state *s)
{
	if (s->header)
		printf("%-32s %10s %10s %-13s %-8s %9s %4s\n", "ID", "SIZE", "STORED", "CODEC",
		       "TIER", "TTL", "PINS");
}

static void ls_line(struct ls_state *s, const char *hex, const struct ucmfs_info *in)
{
	char a[32], b[32], t[32];

	if (s->bytes) {
		snprintf(a, sizeof(a), "%llu", (unsigned long long)in->size);
		snprintf(b, sizeof(b), "%llu", (unsigned long long)in->stored);
		if (in->ttl_ms == UCMFS_TTL_NONE)
			snprintf(t, sizeof(t), "none");
		else
			snprintf(t, sizeof(t), "%lld", (long long)in->ttl_ms);
	} else {
		fmt_bytes((double)in->size, a, sizeof(a));
		fmt_bytes((double)in->stored, b, sizeof(b));
		fmt_ttl(in->ttl_ms == UCMFS_TTL_NONE ? -1 : in->ttl_ms, t, sizeof(t));
	}
	printf("%-32s %10s %10s %-13s %-8s %9s %4u\n", hex, a, b, in->codec, in->tier, t,
	       in->pins);
	s->n++;
	s->size += in->size;
	s->stored += in->stored;
}

/* Every block of the mount, in directory order (a listing streams: no sorting). */
static int ls_all(struct ucmfs *u, struct ls_state *s)
{
	int fd = openat(ucmfs_dirfd(u), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;

	if (!d) {
		ucmctl_err("cannot list the mount: %s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return 1;
	}
	while ((de = readdir(d))) {
		struct ucmfs_info in;
		ucmfs_id id;

		if (ucmfs_id_parse(de->d_name, strlen(de->d_name), id))
			continue; /* ., .., .ucm */
		if (ucmfs_stat(u, id, &in))
			continue; /* removed or expired since the listing */
		ls_line(s, de->d_name, &in);
	}
	closedir(d);
	return 0;
}

int cmd_ls(int argc, char **argv)
{
	static const struct option lo[] = { { "bytes", no_argument, NULL, 'b' },
					    { "no-header", no_argument, NULL, 'H' },
					    { "help", no_argument, NULL, 'h' },
					    { 0 } };
	struct ls_state s = { .header = true };
	struct ucmfs *u;
	int c, rc = 0;

	while ((c = getopt_long(argc, argv, "bHh", lo, NULL)) != -1) {
		switch (c) {
		case 'b':
			s.bytes = true;
			break;
		case 'H':
			s.header = false;
			break;
		case 'h':
			puts("usage: ucmctl ls MNT [-b] [-H] [ID...]");
			return 0;
		default:
			return EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		ucmctl_err("usage: ucmctl ls MNT [-b] [-H] [ID...]");
		return EXIT_USAGE;
	}
	if (open_mount(argv[optind], &u))
		return 1;
	ls_header(&s);
	if (optind + 1 == argc) {
		rc = ls_all(u, &s);
	} else {
		ucmfs_id *ids;
		size_t n;

		rc = read_ids(argv + optind + 1, argc - optind - 1, &ids, &n);
		for (size_t i = 0; rc == 0 && i < n; i++) {
			struct ucmfs_info in;
			char hex[UCMFS_HEX_LEN + 1];
			int r;

			ucmfs_id_format(ids[i], hex);
			r = ucmfs_stat(u, ids[i], &in);
			if (r == 0) {
				ls_line(&s, hex, &in);
				continue;
			}
			fflush(stdout);
			ucmctl_err("%s: %s", hex, r == -ENOENT ? "no such block" : strerror(-r));
			rc = 1;
		}
		if (rc != EXIT_USAGE)
			free(ids);
	}
	if (s.header && rc != EXIT_USAGE) {
		char a[32], b[32];

		printf("%llu block%s, %s, %s stored\n", (unsigned long long)s.n, s.n == 1 ? "" : "s",
		       fmt_bytes((double)s.size, a, sizeof(a)), fmt_bytes((double)s.stored, b,
									  sizeof(b)));
	}
	ucmfs_close(u);
	return rc;
}

/* --- lookup ---------------------------------------------------------------------------- */

int cmd_lookup(int argc, char **argv)
{
	static const struct option lo[] = { { "help", no_argument, NULL, 'h' }, { 0 } };
	struct ucmfs_lookup_result r;
	struct ucmfs *u;
	ucmfs_id *ids;
	uint8_t *hits;
	size_t n;
	int c, rc;

	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		if (c == 'h') {
			puts("usage: ucmctl lookup MNT [ID...]   (ids on stdin if none are given)");
			return 0;
		}
		return EXIT_USAGE;
	}
	if (optind >= argc) {
		ucmctl_err("usage: ucmctl lookup MNT [ID...]");
		return EXIT_USAGE;
	}
	if (open_mount(argv[optind], &u))
		return 1;
	rc = read_ids(argv + optind + 1, argc - optind - 1, &ids, &n);
	if (rc) {
		ucmfs_close(u);
		return rc;
	}
	hits = malloc(n ? n : 1);
	rc = hits ? ucmfs_lookup(u, ids, n, &r, hits) : -ENOMEM;
	if (rc) {
		ucmctl_err("lookup: %s", strerror(-rc));
	} else {
		printf("ids     %zu\nhits    %zu\nprefix  %zu\nlast    %lld\nmask    ", n, r.hits,
		       r.prefix, (long long)r.last);
		for (size_t i = 0; i < n; i++)
			putchar(hits[i] ? '1' : '0');
		putchar('\n');
	}
	free(hits);
	free(ids);
	ucmfs_close(u);
	return rc ? 1 : 0;
}

/* --- prefetch -------------------------------------------------------------------------- */

enum { P_MISSING, P_MEM, P_DISK, P_LOADED };

static bool in_mem(const struct ucmfs_info *in)
{
	return !strncmp(in->tier, "mem", 3);
}

int cmd_prefetch(int argc, char **argv)
{
	static const struct option lo[] = { { "quiet", no_argument, NULL, 'q' },
					    { "timeout", required_argument, NULL, 't' },
					    { "help", no_argument, NULL, 'h' },
					    { 0 } };
	struct ucmfs_prefetch *pf = NULL;
	struct progress bar;
	struct ucmfs *u;
	ucmfs_id *ids;
	uint8_t *st;
	size_t n, counts[4] = { 0 }, cursor = 0, loaded = 0;
	double timeout = -1, t0, todo_bytes = 0, loaded_bytes = 0;
	bool quiet = false;
	char *end, a[32], b[32], text[128];
	int c, rc;

	while ((c = getopt_long(argc, argv, "qt:h", lo, NULL)) != -1) {
		switch (c) {
		case 'q':
			quiet = true;
			break;
		case 't':
			timeout = strtod(optarg, &end);
			if (*end || !(timeout >= 0)) {
				ucmctl_err("-t: not a number of seconds: '%s'", optarg);
				return EXIT_USAGE;
			}
			break;
		case 'h':
			puts("usage: ucmctl prefetch MNT [-q] [-t SECONDS] [ID...]");
			return 0;
		default:
			return EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		ucmctl_err("usage: ucmctl prefetch MNT [-q] [-t SECONDS] [ID...]");
		return EXIT_USAGE;
	}
	if (open_mount(argv[optind], &u))
		return 1;
	rc = read_ids(argv + optind + 1, argc - optind - 1, &ids, &n);
	if (rc) {
		ucmfs_close(u);
		return rc;
	}
	st = calloc(n ? n : 1, 1);
	if (!st) {
		ucmctl_err("out of memory");
		rc = 1;
		goto out;
	}
	t0 = now_s();
	/* where each block is now: only the disk-only ones have work to do */
	for (size_t i = 0; i < n; i++) {
		struct ucmfs_info in;

		if (ucmfs_stat(u, ids[i], &in))
			st[i] = P_MISSING;
		else if (in_mem(&in))
			st[i] = P_MEM;
		else
			st[i] = P_DISK, todo_bytes += (double)in.size;
		counts[st[i]]++;
	}
	ucmctl_catch_signals();
	rc = ucmfs_prefetch_start(u, ids, n, &pf);
	if (rc) {
		ucmctl_err("prefetch: %s", strerror(-rc));
		rc = 1;
		goto out;
	}
	progress_init(&bar, !quiet && counts[P_DISK]);
	for (;;) {
		int done = ucmfs_prefetch_poll(pf);

		if (done < 0) {
			ucmctl_err("prefetch: %s", strerror(-done));
			rc = 1;
			goto out;
		}
		/* progress: walk the disk-only ids in order, a few per poll */
		for (int k = 0; cursor < n && (k < 64 || done); cursor++) {
			struct ucmfs_info in;

			if (st[cursor] != P_DISK)
				continue;
			if (ucmfs_stat(u, ids[cursor], &in) == 0 && in_mem(&in)) {
				st[cursor] = P_LOADED;
				loaded++;
				loaded_bytes += (double)in.size;
				k++;
				continue;
			}
			if (!done)
				break;
		}
		snprintf(text, sizeof(text), "%zu/%zu blocks  %s of %s", loaded, counts[P_DISK],
			 fmt_bytes(loaded_bytes, a, sizeof(a)), fmt_bytes(todo_bytes, b, sizeof(b)));
		progress_draw(&bar, (double)loaded, (double)counts[P_DISK], text, done);
		if (done)
			break;
		if (ucmctl_stop || (timeout >= 0 && now_s() - t0 > timeout)) {
			progress_end(&bar);
			ucmctl_err("stopped waiting after %.1f s: %zu of %zu blocks loaded so far "
				   "(the daemon goes on)", now_s() - t0, loaded, counts[P_DISK]);
			rc = 1;
			goto out;
		}
		usleep(loaded < counts[P_DISK] ? 20000 : 5000);
	}
	progress_end(&bar);
	printf("prefetched %zu id%s in %.2f s: %zu loaded into memory (%s), %zu already in memory",
	       n, n == 1 ? "" : "s", now_s() - t0, loaded, fmt_bytes(loaded_bytes, a, sizeof(a)),
	       counts[P_MEM]);
	if (counts[P_MISSING])
		printf(", %zu not stored", counts[P_MISSING]);
	if (loaded < counts[P_DISK])
		printf(", %zu not in memory (no room, or gone)", counts[P_DISK] - loaded);
	putchar('\n');
	for (size_t i = 0; i < n; i++) {
		char hex[UCMFS_HEX_LEN + 1];

		if (st[i] != P_MISSING && st[i] != P_DISK)
			continue;
		ucmfs_id_format(ids[i], hex);
		fflush(stdout);
		ucmctl_err("%s: %s", hex, st[i] == P_MISSING ? "no such block" : "not in memory");
		rc = 1;
	}
out:
	ucmfs_prefetch_free(pf);
	free(st);
	free(ids);
	ucmfs_close(u);
	return rc;
}
