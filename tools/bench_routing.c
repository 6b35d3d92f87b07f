/*
 * ucm-bench routing phase (bench_phases.h): what a peer that routes by TTL spares the disk.
 *
 * A mix of blocks of KV-like data (64 of 4 MiB, 16 of 1 MiB with --quick), every other one
 * given user.ucm.ttl 5s on the open file before its bytes (as the client libraries do), the
 * others no TTL, is written and then made durable (open O_RDONLY, fsync, close
 * each, as an engine that must find its blocks after a crash does) through two fresh daemons,
 * each on a fresh store:
 *
 *   one chain  the default pipe, cache > compress > posix: every block reaches the disk
 *   routed     -o topology=FILE, a peer by TTL: blocks below 10 s to a pipe of memory alone,
 *              the others to the default pipe; the fsync of a memory-only block returns at
 *              once, since nothing behind it can keep it
 *
 * Rows: the disk bytes written (ucmfs_tier_bytes_in_total of every disk tier, as stored after
 * compression, read after the fsyncs) and the time to write and make durable, each against
 * the one chain. Both runs read every block back and compare it with what was written.
 *
 * A 5 s block may expire before it is synced or read back on a slow machine: a miss of a block
 * past its deadline is counted in the note, a miss before it is a failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "tools/bench_phases.h"

#define RT_TTL "5s"
#define RT_TTL_S 5.0
#define RT_BOUND "10s"

/* The mix: blocks 1, 3, 5, ... live RT_TTL. */
static bool is_short(uint64_t i)
{
	return i & 1;
}

/* One block of the mix, as its run saw it. */
struct rt_blk {
	double due;             /* the earliest moment it may expire; INFINITY: no TTL */
	bool gone;              /* missed past its deadline (counted once) */
};

struct rt_run {
	const char *name;       /* "chain", "peer": the store's and the log's suffix */
	const char *topo;       /* topology file, or NULL for the default chain */
	struct fig secs, disk;
	unsigned expired;       /* 5 s blocks gone before their fsync or read-back */
};

static void block_path(const struct wl *w, uint64_t i, char *out, size_t len)
{
	char name[33];

	block_name(name, w->salt, i);
	snprintf(out, len, "%s/%s", w->dir, name);
}

/* Mount a fresh daemon on store: the user's options first, the phase's last so they win. */
static int rt_start(const char *store, const char *topo, const char *log)
{
	char opts[1400 + PATH_MAX], mem[32];
	char *argv[] = { R.ucmfs, "-f", "-o", opts, (char *)store, R.mnt, NULL };

	snprintf(opts, sizeof(opts), "%s%smem_size=%s%s%s", R.c.opts ? R.c.opts : "",
		 R.c.opts ? "," : "", size_label(R.mem_size, mem, sizeof(mem)),
		 topo ? ",topology=" : "", topo ? topo : "");
	return daemon_start(&R.ucm, argv, R.mnt, log);
}

/*
 * The peer of the routed run, into path: memory alone below RT_BOUND, mem0 bytes of it; the
 * default pipe for the rest, its posix stage on the STORE argument (the default path, which
 * needs no quoting in JSON). 0 or -errno.
 */
static int rt_topology(const char *path, uint64_t mem0)
{
	char mem[32];
	FILE *f = fopen(path, "w");
	int rc = 0;

	if (!f)
		return bench_fail(errno, "create %s", path);
	fprintf(f,
		"{\"peer\": {\"route\": \"ttl\", \"bounds\": [\"%s\"], \"branches\": [\n"
		"  {\"pipe\": [{\"tier\": \"cache\", \"mem_size\": \"%s\"}]},\n"
		"  {\"pipe\": [\"cache\", \"compress\", \"posix\"]}]}}\n",
		RT_BOUND, size_label(mem0, mem, sizeof(mem)));
	if (ferror(f))
		rc = bench_fail(EIO, "write %s", path);
	if (fclose(f) && rc == 0)
		rc = bench_fail(errno, "close %s", path);
	return rc;
}

/*
 * Write block i: open, user.ucm.ttl on the open file if it is a short one, the bytes, close
 * (the commit). b: its deadline (the TTL counts from the commit, which follows the moment
 * taken here), not gone.
 */
static int rt_write_block(const struct wl *w, uint64_t i, struct rt_blk *b)
{
	const char *src = pool_block(w->pool, i);
	char path[PATH_MAX];
	uint64_t off = 0;
	int fd, rc = 0;

	block_path(w, i, path, sizeof(path));
	fd = open(path, O_CREAT | O_WRONLY, 0644);
	if (fd < 0)
		return bench_fail(errno, "open(O_CREAT) %s", path);
	if (is_short(i) && fsetxattr(fd, "user.ucm.ttl", RT_TTL, strlen(RT_TTL), 0))
		rc = bench_fail(errno, "fsetxattr user.ucm.ttl %s", path);
	while (off < w->bsize && rc == 0) {
		ssize_t n = pwrite(fd, src + off, w->bsize - off, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			rc = bench_fail(n < 0 ? errno : EIO, "pwrite %s at %llu", path,
					(unsigned long long)off);
		else
			off += (uint64_t)n;
	}
	b->due = is_short(i) ? now_s() + RT_TTL_S : INFINITY;
	b->gone = false;
	/* on ucmfs the close commits (and the peer routes): its error is the commit's */
	if (close(fd) && rc == 0)
		rc = bench_fail(errno, "close %s", path);
	return rc;
}

/* Open a block for reading: 0, 1 if it is gone past its deadline (counted once), -errno. */
static int rt_open(const char *path, struct rt_blk *b, unsigned *expired, int *fd)
{
	if (b->gone)
		return 1;
	*fd = open(path, O_RDONLY);
	if (*fd >= 0)
		return 0;
	if (errno == ENOENT && now_s() >= b->due) {
		b->gone = true;
		(*expired)++;
		return 1;
	}
	return bench_fail(errno, "open %s", path);
}

/* open(O_RDONLY), fsync, close every block, as wl_sync does. 0 or -errno. */
static int rt_sync(const struct wl *w, struct rt_blk *blk, unsigned *expired)
{
	char path[PATH_MAX];
	int fd, rc = 0;

	for (uint64_t i = 0; i < w->n && rc == 0; i++) {
		block_path(w, i, path, sizeof(path));
		rc = rt_open(path, &blk[i], expired, &fd);
		if (rc) {
			rc = rc > 0 ? 0 : rc;
			continue;
		}
		if (fsync(fd))
			rc = bench_fail(errno, "fsync %s", path);
		close(fd);
	}
	return rc;
}

/* Read block i back whole and compare it with the pool. 0, -EILSEQ or -errno. */
static int rt_check_block(const struct wl *w, uint64_t i, struct rt_blk *b, char *buf,
			  unsigned *expired)
{
	const char *want = pool_block(w->pool, i);
	char path[PATH_MAX];
	uint64_t off = 0;
	int fd, rc;

	block_path(w, i, path, sizeof(path));
	rc = rt_open(path, b, expired, &fd);
	if (rc)
		return rc > 0 ? 0 : rc;
	while (off < w->bsize && rc == 0) {
		ssize_t n = pread(fd, buf + off, w->bsize - off, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			rc = bench_fail(errno, "pread %s at %llu", path, (unsigned long long)off);
		else if (n == 0)
			rc = bench_fail(0, "%s: %llu bytes instead of %llu", path,
					(unsigned long long)off, (unsigned long long)w->bsize);
		else
			off += (uint64_t)n;
	}
	close(fd);
	if (rc == 0 && memcmp(buf, want, w->bsize)) {
		for (off = 0; buf[off] == want[off]; off++)
			;
		bench_fail(0, "DATA MISMATCH: %s differs from what was written at byte %llu",
			   path, (unsigned long long)off);
		rc = -EILSEQ;
	}
	return rc;
}

/* Every block read back and compared, the short ones first: they expire first. */
static int rt_verify(const struct wl *w, struct rt_blk *blk, unsigned *expired)
{
	char *buf = bench_alloc(w->bsize);
	int rc = 0;

	if (!buf)
		return bench_fail(ENOMEM, "verify buffer");
	for (int pass = 0; pass < 2; pass++)
		for (uint64_t i = 0; i < w->n && rc == 0; i++)
			if (is_short(i) == (pass == 0))
				rc = rt_check_block(w, i, &blk[i], buf, expired);
	free(buf);
	return rc;
}

/* Sum of ucmfs_tier_bytes_in_total over the disk tiers (every branch, every store). */
static int rt_disk_bytes(double *bytes)
{
	static const char name[] = "ucmfs_tier_bytes_in_total{";
	char path[PATH_MAX + 16], *line = NULL, *end;
	unsigned found = 0;
	size_t cap = 0;
	FILE *f;

	*bytes = 0;
	snprintf(path, sizeof(path), "%s/.ucm/stats", R.mnt);
	f = fopen(path, "r");
	if (!f)
		return bench_fail(errno, "open %s", path);
	while (getline(&line, &cap, f) > 0) {
		if (strncmp(line, name, sizeof(name) - 1))
			continue;
		end = strstr(line, "} ");
		if (!end || !memmem(line, (size_t)(end - line), "tier=\"disk\"", 11))
			continue;
		*bytes += strtod(end + 2, NULL);
		found++;
	}
	free(line);
	fclose(f);
	if (!found)
		return bench_fail(0, "%s has no ucmfs_tier_bytes_in_total of a disk tier", path);
	return 0;
}

/* One run: a fresh daemon on a fresh store, the mix written and made durable, its figures. */
static void rt_run(struct rt_run *r, const struct wl *w, struct rt_blk *blk)
{
	char store[PATH_MAX + 32], log[PATH_MAX + 32], what[64];
	double t0, secs = 0, bytes = 0;
	int rc, st;

	snprintf(what, sizeof(what), "routing: %s", r->topo ? "peer by TTL" : "one chain");
	phase_start(what);
	snprintf(store, sizeof(store), "%s/store-routing-%s", R.tmp, r->name);
	snprintf(log, sizeof(log), "%s/ucmfs-routing-%s.log", R.tmp, r->name);
	rc = rt_start(store, r->topo, log);
	if (rc) {
		fig_set(&r->secs, rc, 0);
		fig_set(&r->disk, rc, 0);
		goto out;
	}
	t0 = now_s();
	for (uint64_t i = 0; i < w->n && rc == 0; i++)
		rc = rt_write_block(w, i, &blk[i]);
	if (rc == 0)
		rc = rt_sync(w, blk, &r->expired);
	secs = now_s() - t0;
	if (rc == 0)
		rc = rt_disk_bytes(&bytes);
	/* a block that does not read back fails both figures of its run */
	if (rc == 0)
		rc = rt_verify(w, blk, &r->expired);
	st = daemon_stop(&R.ucm);
	rc = rc ? rc : st;
	fig_set(&r->secs, rc, secs);
	fig_set(&r->disk, rc, bytes / 1e6);
out:
	if (!R.c.keep)
		rm_rf(store);
}

/* What a run was, on both its figures: the mix, the tiers, any block that expired early. */
static void rt_note(struct rt_run *r, const struct wl *w, uint64_t mem0)
{
	char note[256], tiers[128], gone[64] = "", sz[16], m[16];

	if (r->topo)
		snprintf(tiers, sizeof(tiers), "peer: TTL under %s to memory alone (mem_size %s), "
			 "the rest to cache:compress:posix", RT_BOUND,
			 size_label(mem0, m, sizeof(m)));
	else
		snprintf(tiers, sizeof(tiers), "one chain: cache:compress:posix");
	if (r->expired)
		snprintf(gone, sizeof(gone), "; %u expired before their fsync or read-back",
			 r->expired);
	snprintf(note, sizeof(note),
		 "%llu blocks of %s, every other one with user.ucm.ttl %s; %s%s",
		 (unsigned long long)w->n, size_label(w->bsize, sz, sizeof(sz)), RT_TTL, tiers,
		 gone);
	fig_note(&r->secs, note);
	fig_note(&r->disk, note);
}

void run_routing(void)
{
	uint64_t bsize = R.c.quick ? MiB : 4 * MiB, n = R.c.quick ? 16 : 64;
	/* room for every short block twice over: a memory-only branch that evicts loses one */
	uint64_t mem0 = 2 * (n / 2) * bsize + 64 * MiB;
	struct rt_run chain = { "chain", NULL, FIG_NONE, FIG_NONE, 0 };
	struct rt_run peer = { "peer", NULL, FIG_NONE, FIG_NONE, 0 };
	const char *why = NULL;
	char topo[PATH_MAX + 32];
	struct pool pool = { 0 };
	struct rt_blk *blk = NULL;
	struct wl w;
	int rc;

	if (R.c.mnt)
		why = "--mnt: the phase needs fresh daemons, one with topology=";
	else if (R.c.opts && (strstr(R.c.opts, "pipeline=") || strstr(R.c.opts, "topology=")))
		why = "--opts sets the tiers (pipeline= or topology=): the phase compares its own";
	if (why) {
		fig_skip(&peer.secs, why);
		fig_skip(&peer.disk, why);
		goto rows;
	}
	phase_start("routing: data");
	rc = pool_make(&pool, bsize, POOL_MAX_BLOCKS, R.c.seed + 4242);
	blk = calloc(n, sizeof(*blk));
	if (rc == 0 && !blk)
		rc = bench_fail(ENOMEM, "deadlines of %llu blocks", (unsigned long long)n);
	snprintf(topo, sizeof(topo), "%s/routing.json", R.tmp);
	if (rc == 0)
		rc = rt_topology(topo, mem0);
	if (rc) {
		fig_set(&peer.secs, rc, 0);
		fig_set(&peer.disk, rc, 0);
		goto out;
	}
	peer.topo = topo;
	w = (struct wl){ .dir = R.mnt, .pool = &pool, .salt = R.c.seed * 7919 + 4242, .n = n,
			 .bsize = bsize };
	rt_run(&chain, &w, blk);
	rt_run(&peer, &w, blk);
	rt_note(&chain, &w, mem0);
	rt_note(&peer, &w, mem0);
out:
	free(blk);
	if (pool.buf)
		pool_free(&pool);
rows:
	emit("routing.disk_bytes", bsize, "disk bytes written, half the blocks live 5 s",
	     &peer.disk, "MB", ROW_COST, "one chain", &chain.disk);
	emit("routing.write_durable", bsize, "write + fsync, half the blocks live 5 s",
	     &peer.secs, "s", ROW_COST, "one chain", &chain.secs);
}
