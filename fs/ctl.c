/*
 * The fixed part of the namespace: /, /.ucm and the control files under it.
 *
 *   /.ucm/config   the effective configuration, key=value per line (read-only)
 *   /.ucm/stats    metrics in the Prometheus text exposition format (read-only)
 *   /.ucm/query/   lookup queries (fs/query.c)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/fs_int.h"
#include "src/buf.h"

#define CONFIG_MAX 16384

struct ctl_node {
	fuse_ino_t nid;
	fuse_ino_t parent;
	const char *name;
	mode_t mode;
};

static const struct ctl_node nodes[] = {
	{ NID_ROOT, NID_ROOT, "/", S_IFDIR | 0755 },
	{ NID_UCM, NID_ROOT, ".ucm", S_IFDIR | 0755 },
	{ NID_CONFIG, NID_UCM, "config", S_IFREG | 0444 },
	{ NID_STATS, NID_UCM, "stats", S_IFREG | 0444 },
	{ NID_QUERY, NID_UCM, "query", S_IFDIR | 01777 },
};

static const struct ctl_node *node_of(fuse_ino_t nid)
{
	for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++)
		if (nodes[i].nid == nid)
			return &nodes[i];
	return NULL;
}

/* The contents of a control file, freshly made (caller frees). 0 or -errno. */
static int ctl_text(struct ucmfs *fs, fuse_ino_t nid, char **text, size_t *len)
{
	char *buf;

	switch (nid) {
	case NID_CONFIG:
		buf = malloc(CONFIG_MAX);
		if (!buf)
			return -ENOMEM;
		*len = options_format(fs->opts, buf, CONFIG_MAX);
		if (fs->tree)
			*len += (size_t)snprintf(buf + *len, CONFIG_MAX - *len, "tiers=%s\n",
						 fs->tree);
		if (*len >= CONFIG_MAX)
			*len = CONFIG_MAX - 1;
		*text = buf;
		return 0;
	case NID_STATS:
		return stats_text(fs, text, len);
	default:
		return -EISDIR;
	}
}

void ctl_root_attr(struct ucmfs *fs, struct stat *st)
{
	ctl_getattr(fs, NID_ROOT, st);
}

int ctl_getattr(struct ucmfs *fs, fuse_ino_t nid, struct stat *st)
{
	const struct ctl_node *n = node_of(nid);
	char *text;
	size_t len = 0;

	if (!n)
		return -ENOENT;
	memset(st, 0, sizeof(*st));
	st->st_ino = nid;
	st->st_mode = n->mode;
	st->st_nlink = S_ISDIR(n->mode) ? 2 : 1;
	if (nid == NID_ROOT)
		st->st_nlink = 3;
	if (nid == NID_UCM)
		st->st_nlink = 3;
	st->st_uid = fs->uid;
	st->st_gid = fs->gid;
	st->st_atim = st->st_mtim = st->st_ctim = fs->start;
	st->st_blksize = 4096;
	if (S_ISREG(n->mode) && ctl_text(fs, nid, &text, &len) == 0) {
		st->st_size = (off_t)len;
		free(text);
	}
	return 0;
}

double ctl_attr_timeout(const struct stat *st)
{
	/* a directory's attributes never change (mode, owner, the start time); a file's size
	 * does (/.ucm/stats, a query file, a block's st_blocks) */
	return S_ISDIR(st->st_mode) ? DIR_ATTR_TIMEOUT_S : 0;
}

int ctl_lookup(struct ucmfs *fs, fuse_ino_t parent, const char *name, struct fuse_entry_param *e)
{
	int rc;

	if (parent == NID_QUERY)
		return query_lookup(fs, name, e);
	for (size_t i = 1; i < sizeof(nodes) / sizeof(nodes[0]); i++) {
		if (nodes[i].parent != parent || strcmp(nodes[i].name, name))
			continue;
		memset(e, 0, sizeof(*e));
		e->ino = nodes[i].nid;
		e->generation = 1;
		e->entry_timeout = 1.0; /* fixed names never go away */
		rc = ctl_getattr(fs, nodes[i].nid, &e->attr);
		e->attr_timeout = ctl_attr_timeout(&e->attr);
		return rc;
	}
	return node_of(parent) && S_ISDIR(node_of(parent)->mode) ? -ENOENT : -ENOTDIR;
}

int ctl_open(struct ucmfs *fs, fuse_ino_t nid, struct fuse_file_info *fi, struct fh **out)
{
	const struct ctl_node *n = node_of(nid);
	struct fh *fh;
	int rc;

	if (!n)
		return -ENOENT;
	if (S_ISDIR(n->mode))
		return -EISDIR;
	if ((fi->flags & O_ACCMODE) != O_RDONLY)
		return -EACCES; /* read-only even for root */
	fh = fh_new(fs, FH_CTL, fi->flags);
	if (!fh)
		return -ENOMEM;
	rc = ctl_text(fs, nid, &fh->text, &fh->len);
	if (rc) {
		fh_free(fs, fh);
		return rc;
	}
	/* the size changes from one open to the next: never cache the contents */
	fi->direct_io = 1;
	*out = fh;
	return 0;
}

int stats_text(struct ucmfs *fs, char **text, size_t *len)
{
	struct metrics *m;
	int rc = metrics_create(&m);

	if (rc)
		return rc;
	char kind[48];

	metrics_counter(m, "ucmfs_read_bytes_total",
			"Bytes returned to readers through the daemon (passthrough reads are not "
			"seen).", "", counter_get(&fs->read_bytes));
	metrics_counter(m, "ucmfs_write_bytes_total", "Bytes accepted from writers.", "",
			counter_get(&fs->write_bytes));
	metrics_counter(m, "ucmfs_read_requests_total", "READ requests of the kernel for blocks.",
			"", counter_get(&fs->read_requests));
	metrics_counter(m, "ucmfs_write_requests_total", "WRITE requests of the kernel for blocks.",
			"", counter_get(&fs->write_requests));
	metrics_counter(m, "ucmfs_opens_total", "Block opens.", "", counter_get(&fs->opens));
	metrics_counter(m, "ucmfs_passthrough_opens_total",
			"Block opens the kernel reads without the daemon (FUSE passthrough).", "",
			counter_get(&fs->pt_opens));
	metrics_gauge(m, "ucmfs_passthrough_backing_files",
		      "Backing files registered with the kernel: nodes with passthrough readers.",
		      "", (double)atomic_load(&fs->backing_files));
	metrics_gauge(m, "ucmfs_passthrough_enabled",
		      "1 if opens of blocks in memory pass through to the kernel.", "",
		      atomic_load(&fs->pt) ? 1 : 0);
	snprintf(kind, sizeof(kind), "kind=\"%s\"", buf_kind_name(buf_kind()));
	metrics_gauge(m, "ucmfs_mem_buffers_info",
		      "What the memory tier's block buffers are: anon, tmpfs or tmpfs-huge.", kind,
		      1);
	metrics_counter(m, "ucmfs_queries_total", "Lookup queries answered.", "",
			counter_get(&fs->queries_total));
	metrics_histogram(m, "ucmfs_query_seconds", "Time to answer a lookup query.", "",
			  &fs->query_hist);
	if (fs->pipe->ops->metrics)
		fs->pipe->ops->metrics(fs->pipe, m);
	rc = metrics_render(m, text, len);
	metrics_free(m);
	return rc;
}
