/*
 * nullfs: the cheapest FUSE filesystem that can serve ucmfs's workloads, the FUSE floor of
 * ucm-bench. Any name in its root is a regular file of `size` bytes of zeros; reads are
 * answered from one preallocated zeroed buffer (no allocation, no copy but the one into the
 * kernel), writes are accepted and discarded, creates and unlinks succeed, and readdir lists
 * `entries` synthetic 32-hex names. Nothing is cached by the kernel: entry and attribute
 * timeouts 0 as in ucmfs, so a stat is a round trip, and keep_cache off, so a buffered first
 * read reaches the server.
 *
 *   nullfs [-f] [-o size=SIZE,entries=N,threads=N,readahead=SIZE,FUSE options] MOUNTPOINT
 *
 * Requests are at most 1 MiB (max_write, max_readahead; reads follow max_pages = 256). The
 * mount's read-ahead window is readahead (default 1M, as ucmfs's), so buffered reads arrive
 * in requests of the same size as ucmfs gets.
 * The session loop is multithreaded. Stateless, so every handler is thread-safe.
 */
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "src/bdi.h"
#include "src/units.h"

#define MAX_REQUEST (1u << 20)
#define ZERO_BYTES MAX_REQUEST
#define READDIR_BUF (64u << 10)
#define NAME_LEN 32

struct nullfs {
	uint64_t size;     /* every file's size */
	uint64_t entries;  /* names listed by readdir */
	uint64_t readahead; /* the mount's read-ahead window, 0 = the kernel's default */
	uid_t uid;
	gid_t gid;
	const char *zeros; /* ZERO_BYTES of zeros, touched, never written again */
};

static struct nullfs nf;

struct nf_opts {
	char *size;
	char *entries;
	char *readahead;
	unsigned threads;
};

static const struct fuse_opt nf_optspec[] = {
	{ "size=%s", offsetof(struct nf_opts, size), 0 },
	{ "entries=%s", offsetof(struct nf_opts, entries), 0 },
	{ "threads=%u", offsetof(struct nf_opts, threads), 0 },
	{ "readahead=%s", offsetof(struct nf_opts, readahead), 0 },
	FUSE_OPT_END
};

/* FNV-1a of a name: its inode number (never 0 or FUSE_ROOT_ID). */
static fuse_ino_t ino_of(const char *name)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (; *name; name++)
		h = (h ^ (unsigned char)*name) * 0x100000001b3ull;
	return h > FUSE_ROOT_ID ? h : h + 2;
}

static void fill_stat(fuse_ino_t ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_uid = nf.uid;
	st->st_gid = nf.gid;
	st->st_blksize = MAX_REQUEST;
	if (ino == FUSE_ROOT_ID) {
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
	} else {
		st->st_mode = S_IFREG | 0644;
		st->st_nlink = 1;
		st->st_size = (off_t)nf.size;
		st->st_blocks = (blkcnt_t)(nf.size / 512);
	}
}

static void fill_entry(const char *name, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = ino_of(name);
	e->generation = 1;
	fill_stat(e->ino, &e->attr);
	/* timeouts 0: every stat is a round trip, as in ucmfs */
}

static void nf_init(void *userdata, struct fuse_conn_info *conn)
{
	(void)userdata;
	fuse_unset_feature_flag(conn, FUSE_CAP_AUTO_INVAL_DATA);
	fuse_unset_feature_flag(conn, FUSE_CAP_READDIRPLUS);
	fuse_set_feature_flag(conn, FUSE_CAP_ATOMIC_O_TRUNC);
	conn->max_write = MAX_REQUEST;
	conn->max_readahead = nf.readahead > MAX_REQUEST ? (unsigned)nf.readahead : MAX_REQUEST;
	conn->time_gran = 1;
}

static void nf_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;

	if (parent != FUSE_ROOT_ID) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	fill_entry(name, &e);
	fuse_reply_entry(req, &e);
}

static void nf_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;

	fill_stat(ino, &st);
	fuse_reply_attr(req, &st, 0);
}

static void nf_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	struct stat st;

	fill_stat(ino, &st); /* sizes, times and modes are accepted and forgotten */
	fuse_reply_attr(req, &st, 0);
}

static void nf_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (ino == FUSE_ROOT_ID) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	fi->keep_cache = 0;
	fuse_reply_open(req, fi);
}

static void nf_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	struct fuse_entry_param e;

	fill_entry(name, &e);
	fi->keep_cache = 0;
	fuse_reply_create(req, &e, fi);
}

static void nf_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct iovec iov[8];
	size_t n = 0;

	if ((uint64_t)off >= nf.size)
		size = 0;
	else if (size > nf.size - (uint64_t)off)
		size = (size_t)(nf.size - (uint64_t)off);
	if (size <= ZERO_BYTES) {
		fuse_reply_buf(req, nf.zeros, size);
		return;
	}
	/* larger than any request the kernel sends today: still no allocation */
	while (size && n < sizeof(iov) / sizeof(iov[0])) {
		iov[n].iov_base = (void *)nf.zeros;
		iov[n].iov_len = size < ZERO_BYTES ? size : ZERO_BYTES;
		size -= iov[n++].iov_len;
	}
	fuse_reply_iov(req, iov, (int)n);
}

static void nf_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	fuse_reply_write(req, size);
}

static void nf_ok(fuse_req_t req)
{
	fuse_reply_err(req, 0);
}

static void nf_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	nf_ok(req);
}

static void nf_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	nf_ok(req);
}

static void nf_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	nf_ok(req);
}

static void nf_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	nf_ok(req);
}

static void nf_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
			 struct fuse_file_info *fi)
{
	nf_ok(req);
}

static void nf_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (ino != FUSE_ROOT_ID) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	fuse_reply_open(req, fi);
}

/* Offsets: 1 is after ".", 2 after "..", 2 + i after the i-th synthetic name. */
static void nf_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	static __thread char buf[READDIR_BUF];
	char name[NAME_LEN + 1];
	struct stat st = { 0 };
	size_t used = 0, len;

	if (size > sizeof(buf))
		size = sizeof(buf);
	for (uint64_t o = (uint64_t)off; o < nf.entries + 2; o++) {
		if (o < 2) {
			st.st_ino = FUSE_ROOT_ID;
			st.st_mode = S_IFDIR;
			strcpy(name, o ? ".." : ".");
		} else {
			snprintf(name, sizeof(name), "%016x%016llx", 0u,
				 (unsigned long long)(o - 2));
			st.st_ino = ino_of(name);
			st.st_mode = S_IFREG;
		}
		len = fuse_add_direntry(req, buf + used, size - used, name, &st, (off_t)o + 1);
		if (len > size - used)
			break;
		used += len;
	}
	fuse_reply_buf(req, buf, used);
}

static void nf_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	nf_ok(req);
}

static const struct fuse_lowlevel_ops nf_ops = {
	.init = nf_init,
	.lookup = nf_lookup,
	.getattr = nf_getattr,
	.setattr = nf_setattr,
	.open = nf_open,
	.create = nf_create,
	.read = nf_read,
	.write = nf_write,
	.flush = nf_flush,
	.release = nf_release,
	.fsync = nf_fsync,
	.unlink = nf_unlink,
	.fallocate = nf_fallocate,
	.opendir = nf_opendir,
	.readdir = nf_readdir,
	.releasedir = nf_releasedir,
};

static int usage(const char *prog)
{
	printf("usage: %s [-f] [-o size=SIZE,entries=N,threads=N,readahead=SIZE,FUSE options] "
	       "MOUNTPOINT\n"
	       "A FUSE floor: every name is a file of SIZE zeros (default 16G), writes are\n"
	       "discarded, readdir lists N names (default 0); threads: max session threads;\n"
	       "readahead: the mount's read-ahead window (default 1M, 0 = the kernel's).\n",
	       prog);
	fuse_cmdline_help();
	fuse_lowlevel_help();
	return 0;
}

int main(int argc, char **argv)
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct nf_opts o = { .threads = 16 };
	struct fuse_cmdline_opts cl;
	struct fuse_loop_config *lc = NULL;
	struct fuse_session *se;
	char *zeros, *mnt = NULL, why[256];
	int rc = 1;

	nf.size = 16ull << 30;
	nf.readahead = MAX_REQUEST;
	nf.uid = getuid();
	nf.gid = getgid();
	if (fuse_opt_parse(&args, &o, nf_optspec, NULL) || fuse_parse_cmdline(&args, &cl))
		return 2;
	if (cl.show_help) {
		usage(argv[0]);
		rc = 0;
		goto out_args;
	}
	if (!cl.mountpoint || (o.size && parse_size(o.size, &nf.size)) ||
	    (o.entries && parse_u64(o.entries, &nf.entries)) || !o.threads ||
	    (o.readahead && parse_size(o.readahead, &nf.readahead))) {
		fprintf(stderr, "nullfs: bad arguments (see --help)\n");
		rc = 2;
		goto out_args;
	}
	/* touched once, so that every read copies from real pages, not the shared zero page */
	if (posix_memalign((void **)&zeros, 4096, ZERO_BYTES))
		goto out_args;
	memset(zeros, 0, ZERO_BYTES);
	nf.zeros = zeros;

	se = fuse_session_new(&args, &nf_ops, sizeof(nf_ops), NULL);
	if (!se)
		goto out_zeros;
	if (fuse_set_signal_handlers(se))
		goto out_session;
	mnt = realpath(cl.mountpoint, NULL); /* before the mount: resolving it after asks us */
	if (fuse_session_mount(se, cl.mountpoint))
		goto out_signals;
	if (nf.readahead && mnt && bdi_set_readahead(mnt, nf.readahead, why, sizeof(why)))
		fprintf(stderr, "nullfs: read-ahead stays at the kernel's default: %s\n", why);
	if (fuse_daemonize(cl.foreground))
		goto out_unmount;
	lc = fuse_loop_cfg_create();
	if (!lc)
		goto out_unmount;
	fuse_loop_cfg_set_max_threads(lc, o.threads);
	fuse_loop_cfg_set_idle_threads(lc, 4);
	rc = fuse_session_loop_mt(se, lc);
	/* unmounted, or ended by a signal (the session reports which) */
	rc = rc == 0 || rc == SIGTERM || rc == SIGINT || rc == SIGHUP ? 0 : 1;
	fuse_loop_cfg_destroy(lc);
out_unmount:
	fuse_session_unmount(se);
out_signals:
	fuse_remove_signal_handlers(se);
out_session:
	fuse_session_destroy(se);
out_zeros:
	free(zeros);
	free(mnt);
out_args:
	free(cl.mountpoint);
	free(o.size);
	free(o.entries);
	fuse_opt_free_args(&args);
	return rc;
}
