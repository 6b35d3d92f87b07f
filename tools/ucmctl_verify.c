/*
 * ucmctl verify STORE[:STORE...]: check every block file of an unmounted store, without the
 * daemon, and report the damaged ones. Nothing in the store is changed.
 *
 * layout=native (STORE/data/<hex[0:3]>/<hex>): the 4 KiB header is decoded and validated by
 * tiers/posix_header.c (magic, version, header checksum, fields, chunk table), its id must be
 * the file's name, the file must hold the whole payload, every chunk must match its XXH3-64,
 * the whole payload its XXH3-64, and a compressed chunk must decode to its raw length.
 * layout=ucm (STORE/<hex[0:3]>/<hex>, raw bytes): a regular, readable file is all there is to
 * check. The layout is found from the tree (a data/ directory means native) unless given.
 *
 * A store in use by a daemon (its STORE/.lock.<host> is flocked) is refused unless --force:
 * the daemon moves, evicts and replaces files under a checker's feet.
 */
#include "tools/ucmctl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include "src/blockid.h"
#include "src/hash.h"
#include "tiers/io.h"
#include "tiers/posix_header.h"
#include "tiers/tier.h"

#define READ_CHUNK (1u << 20)

enum layout { L_AUTO, L_NATIVE, L_UCM };

struct verify {
	bool quiet, verbose, force;
	enum layout want;
	/* totals over every directory */
	uint64_t files, bytes;            /* found by the first pass */
	uint64_t done_files, done_bytes;  /* checked so far */
	uint64_t ok, damaged, expired, vanished, temps, others;
	struct progress bar;
	/* scratch */
	char *buf, *raw;
	size_t buf_len, raw_len;
	ZSTD_DCtx *dctx;
};

static bool is_shard(const char *name)
{
	if (strlen(name) != 3)
		return false;
	for (int i = 0; i < 3; i++)
		if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
			return false;
	return true;
}

static void *grow(char **p, size_t *len, size_t want)
{
	if (*len < want) {
		char *n = realloc(*p, want);

		if (!n)
			return NULL;
		*p = n;
		*len = want;
	}
	return *p;
}

/* --- the store lock -------------------------------------------------------------------- */

/* 0 if no daemon holds a lock of dir, 1 if one does (said so), -errno if dir is unreadable. */
static int check_lock(const char *dir, bool force)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int busy = 0;

	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		char path[PATH_MAX], pid[32] = "";
		int fd;
		ssize_t n;

		if (strncmp(de->d_name, ".lock.", 6))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0)
			continue;
		if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
			flock(fd, LOCK_UN); /* free: no daemon of that host uses the store */
			close(fd);
			continue;
		}
		n = pread(fd, pid, sizeof(pid) - 1, 0);
		pid[n > 0 ? n : 0] = '\0';
		if (strchr(pid, '\n'))
			*strchr(pid, '\n') = '\0';
		close(fd);
		if (errno != EWOULDBLOCK)
			continue;
		ucmctl_err("%s is in use by ucmfs (pid %s on host %s holds %s)%s", dir,
			   pid[0] ? pid : "?", de->d_name + 6, de->d_name,
			   force ? "; verifying anyway (--force): blocks may change meanwhile"
				 : ": unmount it first, or use --force");
		busy = 1;
	}
	closedir(d);
	return busy;
}

/* --- walking --------------------------------------------------------------------------- */

typedef void (*file_fn)(struct verify *v, const char *dir, const char *shard, const char *name,
			enum layout l);

/* Call fn for every entry of every shard directory under top. 0 or -errno. */
static int walk(struct verify *v, const char *top, enum layout l, file_fn fn)
{
	DIR *d = opendir(top);
	struct dirent *de;

	if (!d)
		return -errno;
	while ((de = readdir(d)) && !ucmctl_stop) {
		char dir[PATH_MAX];
		struct dirent *fe;
		DIR *s;

		if (!is_shard(de->d_name))
			continue;
		snprintf(dir, sizeof(dir), "%s/%s", top, de->d_name);
		s = opendir(dir);
		if (!s) {
			ucmctl_err("%s: %s", dir, strerror(errno));
			v->others++;
			continue;
		}
		while ((fe = readdir(s)) && !ucmctl_stop)
			if (strcmp(fe->d_name, ".") && strcmp(fe->d_name, ".."))
				fn(v, dir, de->d_name, fe->d_name, l);
		closedir(s);
	}
	closedir(d);
	return 0;
}

/* The kind of a file name in shard directory `shard`: 0 block, 1 temp file, 2 other. */
static int kind_of(const char *shard, const char *name, struct blockid *id)
{
	if (strstr(name, ".tmp"))
		return 1;
	if (blockid_parse_name(name, id) == 0 && !strncmp(name, shard, 3))
		return 0;
	return 2;
}

static void count_one(struct verify *v, const char *dir, const char *shard, const char *name,
		      enum layout l)
{
	struct blockid id;
	struct stat st;
	char path[PATH_MAX];

	(void)l;
	if (kind_of(shard, name, &id))
		return;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (lstat(path, &st) == 0 && S_ISREG(st.st_mode)) {
		v->files++;
		v->bytes += (uint64_t)st.st_size;
	}
}

/* --- checking one block ---------------------------------------------------------------- */

/* Read stored bytes [off, off + len) of a native block into the whole-payload checksum:
 * "" or what is wrong. */
static const char *check_span(struct verify *v, int fd, uint64_t off, uint64_t len,
			      struct hash_state *whole)
{
	while (len) {
		size_t n = len < READ_CHUNK ? (size_t)len : READ_CHUNK;
		ssize_t r = io_pread_full(fd, v->buf, n, off);

		if (r != (ssize_t)n)
			return r < 0 ? "read error" : "file shorter than its payload";
		hash_update(whole, v->buf, n);
		v->done_bytes += n;
		off += n;
		len -= n;
	}
	return "";
}

static const char *check_native(struct verify *v, int fd, const struct stat *st,
				const struct blockid *id, char *why, size_t whylen)
{
	struct disk_header *h = malloc(sizeof(*h));
	uint8_t raw[DISK_HEADER_SIZE];
	struct hash_state *whole = hash_new();
	const char *bad = "";
	uint64_t off = DISK_HEADER_SIZE;
	ssize_t r;

	if (!h || !whole) {
		bad = "out of memory";
		goto out;
	}
	r = io_pread_full(fd, raw, sizeof(raw), 0);
	if (r != (ssize_t)sizeof(raw)) {
		bad = r < 0 ? "read error in the header" : "shorter than its 4 KiB header";
		goto out;
	}
	v->done_bytes += sizeof(raw);
	if (memcmp(raw, "UCMFSBLK", 8)) {
		bad = "not a ucmfs block file (bad magic)";
		goto out;
	}
	if (disk_header_decode(raw, h)) {
		bad = "damaged header (checksum, version or fields)";
		goto out;
	}
	if (!blockid_eq(&h->id, id)) {
		char hex[BLOCKID_HEX_LEN + 1];

		blockid_format(&h->id, hex);
		snprintf(why, whylen, "its header names another block (%s)", hex);
		bad = why;
		goto out;
	}
	if ((uint64_t)st->st_size < DISK_HEADER_SIZE + h->stored_size) {
		snprintf(why, whylen, "truncated: %llu of %llu payload bytes",
			 (unsigned long long)(st->st_size - DISK_HEADER_SIZE),
			 (unsigned long long)h->stored_size);
		bad = why;
		goto out;
	}
	if (!h->nchunks) {
		bad = check_span(v, fd, off, h->stored_size, whole);
		/* a compressed payload in one piece decodes to the raw size */
		if (!*bad && h->codec != CODEC_RAW && h->stored_size != h->raw_size) {
			if (!grow(&v->raw, &v->raw_len, h->raw_size ? h->raw_size : 1) ||
			    !grow(&v->buf, &v->buf_len, h->stored_size ? h->stored_size : 1)) {
				bad = "out of memory";
			} else if (io_pread_full(fd, v->buf, h->stored_size, off) !=
					   (ssize_t)h->stored_size ||
				   ZSTD_decompressDCtx(v->dctx, v->raw, h->raw_size, v->buf,
						       h->stored_size) != h->raw_size) {
				bad = "payload does not decompress to its size";
			}
		}
	}
	for (uint32_t i = 0; i < h->nchunks && !*bad; i++) {
		uint64_t rs = (uint64_t)i * h->chunk_size;
		uint64_t rlen = h->raw_size - rs < h->chunk_size ? h->raw_size - rs : h->chunk_size;
		uint32_t len = h->chunk[i].len;

		/* each chunk whole: its checksum, then (if it is compressed) its decoding */
		if (!grow(&v->buf, &v->buf_len, len ? len : 1) || !grow(&v->raw, &v->raw_len, rlen)) {
			bad = "out of memory";
			break;
		}
		r = io_pread_full(fd, v->buf, len, off);
		if (r != (ssize_t)len) {
			bad = r < 0 ? "read error" : "file shorter than its payload";
			break;
		}
		v->done_bytes += len;
		hash_update(whole, v->buf, len);
		if (hash64(v->buf, len) != h->chunk[i].csum) {
			snprintf(why, whylen, "chunk %u of %u: checksum mismatch", i, h->nchunks);
			bad = why;
		} else if (len > rlen) {
			snprintf(why, whylen, "chunk %u of %u: stored longer than raw", i, h->nchunks);
			bad = why;
		} else if (len < rlen) {
			size_t z = ZSTD_decompressDCtx(v->dctx, v->raw, rlen, v->buf, len);

			if (ZSTD_isError(z) || z != rlen) {
				snprintf(why, whylen, "chunk %u of %u does not decompress (%s)", i,
					 h->nchunks, ZSTD_isError(z) ? ZSTD_getErrorName(z) : "short");
				bad = why;
			}
		}
		off += len;
	}
	if (!*bad && hash_digest(whole) != h->csum)
		bad = "payload checksum mismatch";
	if (!*bad && h->deadline && h->deadline <= (int64_t)time(NULL) * 1000000000)
		v->expired++; /* whole, but past its TTL: the daemon deletes it at start */
out:
	free(whole);
	free(h);
	return bad;
}

static void check_one(struct verify *v, const char *dir, const char *shard, const char *name,
		      enum layout l)
{
	char path[PATH_MAX], why[160], text[160], a[32], b[32];
	const char *bad = "";
	struct blockid id;
	struct stat st;
	int kind = kind_of(shard, name, &id), fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (kind) {
		if (kind == 1)
			v->temps++;
		else
			v->others++;
		if (v->verbose || kind == 2) {
			progress_end(&v->bar);
			printf("%-8s %s\n", kind == 1 ? "temp" : "unknown", path);
		}
		return;
	}
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0 && errno == ENOENT) {
		v->vanished++;
		return;
	}
	if (fd < 0 || fstat(fd, &st)) {
		snprintf(why, sizeof(why), "cannot open: %s", strerror(errno));
		bad = why;
	} else if (!S_ISREG(st.st_mode)) {
		bad = "not a regular file";
	} else if (l == L_NATIVE) {
		posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
		bad = check_native(v, fd, &st, &id, why, sizeof(why));
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	} else {
		v->done_bytes += (uint64_t)st.st_size; /* raw bytes: nothing more to check */
	}
	if (fd >= 0)
		close(fd);
	v->done_files++;
	if (*bad) {
		v->damaged++;
		progress_end(&v->bar);
		printf("%-8s %s: %s\n", "damaged", path, bad);
		fflush(stdout);
	} else {
		v->ok++;
	}
	snprintf(text, sizeof(text), "%llu/%llu blocks  %s of %s  %llu damaged",
		 (unsigned long long)v->done_files, (unsigned long long)v->files,
		 fmt_bytes((double)v->done_bytes, a, sizeof(a)), fmt_bytes((double)v->bytes, b,
									   sizeof(b)),
		 (unsigned long long)v->damaged);
	progress_draw(&v->bar, (double)v->done_bytes, (double)(v->bytes ? v->bytes : 1), text,
		      false);
}

/* --- one directory of the store -------------------------------------------------------- */

struct dir_job {
	char path[PATH_MAX];
	char top[PATH_MAX]; /* where the shard directories are */
	enum layout layout;
};

static int plan(struct verify *v, const char *dir, struct dir_job *j)
{
	struct stat st;
	char data[PATH_MAX];

	snprintf(j->path, sizeof(j->path), "%s", dir);
	snprintf(data, sizeof(data), "%s/data", dir);
	if (stat(dir, &st)) {
		ucmctl_err("%s: %s", dir, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		ucmctl_err("%s: not a directory", dir);
		return -1;
	}
	j->layout = v->want;
	if (j->layout == L_AUTO)
		j->layout = stat(data, &st) == 0 && S_ISDIR(st.st_mode) ? L_NATIVE : L_UCM;
	snprintf(j->top, sizeof(j->top), "%s", j->layout == L_NATIVE ? data : dir);
	return 0;
}

int cmd_verify(int argc, char **argv)
{
	static const struct option lo[] = { { "quiet", no_argument, NULL, 'q' },
					    { "verbose", no_argument, NULL, 'v' },
					    { "force", no_argument, NULL, 'f' },
					    { "layout", required_argument, NULL, 'l' },
					    { "help", no_argument, NULL, 'h' },
					    { 0 } };
	struct verify v = { 0 };
	struct dir_job *jobs = NULL;
	size_t nj = 0;
	char *list, *save = NULL, a[32];
	double t0 = now_s();
	int c, rc = 0;

	while ((c = getopt_long(argc, argv, "qvfh", lo, NULL)) != -1) {
		switch (c) {
		case 'q':
			v.quiet = true;
			break;
		case 'v':
			v.verbose = true;
			break;
		case 'f':
			v.force = true;
			break;
		case 'l':
			if (!strcmp(optarg, "native"))
				v.want = L_NATIVE;
			else if (!strcmp(optarg, "ucm"))
				v.want = L_UCM;
			else {
				ucmctl_err("--layout: native or ucm, not '%s'", optarg);
				return EXIT_USAGE;
			}
			break;
		case 'h':
			puts("usage: ucmctl verify [-q] [-v] [-f] [--layout=native|ucm] "
			     "STORE[:STORE...]");
			return 0;
		default:
			return EXIT_USAGE;
		}
	}
	if (optind != argc - 1) {
		ucmctl_err("usage: ucmctl verify [-q] [-v] [-f] STORE[:STORE...]");
		return EXIT_USAGE;
	}
	list = strdup(argv[optind]);
	jobs = calloc(strlen(argv[optind]) + 1, sizeof(*jobs));
	v.dctx = ZSTD_createDCtx();
	if (!list || !jobs || !v.dctx || !grow(&v.buf, &v.buf_len, READ_CHUNK)) {
		ucmctl_err("out of memory");
		rc = 1;
		goto out;
	}
	for (char *d = strtok_r(list, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		int busy;

		if (plan(&v, d, &jobs[nj])) {
			rc = EXIT_USAGE;
			goto out;
		}
		busy = check_lock(d, v.force);
		if (busy < 0) {
			ucmctl_err("%s: %s", d, strerror(-busy));
			rc = EXIT_USAGE;
			goto out;
		}
		if (busy && !v.force) {
			rc = EXIT_USAGE;
			goto out;
		}
		nj++;
	}
	ucmctl_catch_signals();
	for (size_t i = 0; i < nj; i++)
		walk(&v, jobs[i].top, jobs[i].layout, count_one);
	progress_init(&v.bar, !v.quiet);
	for (size_t i = 0; i < nj && !ucmctl_stop; i++) {
		int r = walk(&v, jobs[i].top, jobs[i].layout, check_one);

		if (r && r != -ENOENT) {
			progress_end(&v.bar);
			ucmctl_err("%s: %s", jobs[i].top, strerror(-r));
			rc = EXIT_USAGE;
			goto out;
		}
	}
	if (!ucmctl_stop) {
		char text[160], b[32];

		snprintf(text, sizeof(text), "%llu/%llu blocks  %s  %llu damaged",
			 (unsigned long long)v.done_files, (unsigned long long)v.files,
			 fmt_bytes((double)v.done_bytes, b, sizeof(b)), (unsigned long long)v.damaged);
		progress_draw(&v.bar, 1, 1, text, true);
	}
	progress_end(&v.bar);
	for (size_t i = 0; i < nj; i++)
		printf("%s %s (layout=%s)%s", i ? "," : "verified", jobs[i].path,
		       jobs[i].layout == L_NATIVE ? "native" : "ucm", i + 1 == nj ? "\n" : "");
	printf("%llu blocks, %s in %.1f s: %llu ok, %llu damaged",
	       (unsigned long long)v.done_files, fmt_bytes((double)v.done_bytes, a, sizeof(a)),
	       now_s() - t0, (unsigned long long)v.ok, (unsigned long long)v.damaged);
	if (v.expired)
		printf(", %llu expired", (unsigned long long)v.expired);
	if (v.vanished)
		printf(", %llu vanished while checked", (unsigned long long)v.vanished);
	if (v.temps)
		printf(", %llu temp files", (unsigned long long)v.temps);
	if (v.others)
		printf(", %llu unknown files", (unsigned long long)v.others);
	putchar('\n');
	if (ucmctl_stop) {
		ucmctl_err("interrupted: not every block was checked");
		rc = 1;
	} else if (v.damaged) {
		rc = 1;
	}
out:
	ZSTD_freeDCtx(v.dctx);
	free(v.buf);
	free(v.raw);
	free(jobs);
	free(list);
	return rc;
}
