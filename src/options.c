#include "src/options.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/log.h"
#include "src/units.h"

#define MIN_BLOCK_SIZE 1ULL
#define MAX_BLOCK_LIMIT (64ULL << 30) /* largest max_block/block_size accepted */
#define MAX_READAHEAD (64ULL << 20)

/* log_level= words, indexed by LOG_LVL_* */
static const char *const log_levels[] = { "err", "warn", "info", "debug" };

static const char usage[] =
	"usage: ucmfs [-f] [-d] [-o OPT[,OPT...]] STORE MOUNTPOINT\n"
	"  STORE       directory of the disk tier (dir1:dir2 stripes; 'none' = memory only)\n"
	"  -f          stay in the foreground\n"
	"  -d          debug output (implies -f)\n"
	"  -o mem_size=SIZE, mem_prefault=SIZE|N%, disk_size=SIZE, block_size=SIZE,\n"
	"     max_block=SIZE, policy=clock|lru|fifo, pipeline=cache:compress:posix,\n"
	"     compress=none|zstd[:LEVEL], shuffle=auto|none|2|4, io=aio|psync, io_depth=N,\n"
	"     io_timeout=DUR, ttl=DUR, durable, sync_compress=defer|inline, shared[=DUR],\n"
	"     layout=native|ucm, readahead=SIZE, passthrough=auto|on|off,\n"
	"     log_level=err|warn|info|debug, topology=FILE, and the\n"
	"     standard FUSE mount options (allow_other, fsname=, ...)\n"
	"See ucmfs(8).\n";

void options_defaults(struct ucm_options *o)
{
	memset(o, 0, sizeof(*o));
	o->mem_size = 1ULL << 30;
	o->mem_prefault_pct = 100;
	o->max_block = 256ULL << 20;
	o->policy = POLICY_CLOCK;
	o->codec = CODEC_AUTO;
	o->zstd_level = 1;
	o->io = IO_AIO;
	o->io_timeout_ms = 30000;
	o->readahead = 1ULL << 20;
	o->ttl_ms = TTL_NONE;
	o->shared_ms = -1;
	o->layout = LAYOUT_NATIVE;
	o->log_level = LOG_LVL_INFO;
}

void options_free(struct ucm_options *o)
{
	for (int i = 0; i < o->nstores; i++)
		free(o->stores[i]);
	free(o->mountpoint);
	free(o->topology);
	o->nstores = 0;
	o->mountpoint = NULL;
	o->topology = NULL;
}

static int bad(char *msg, size_t len, const char *fmt, const char *what, const char *why)
{
	snprintf(msg, len, fmt, what, why);
	return -EINVAL;
}

static int opt_size(const char *key, const char *val, uint64_t *out, char *msg, size_t len)
{
	int rc;

	if (!val)
		return bad(msg, len, "option '%s' needs a value%s", key, " (SIZE: 64M, 1G, ...)");
	rc = parse_size(val, out);
	if (rc == -ERANGE)
		return bad(msg, len, "option '%s': %s is too large", key, val);
	if (rc < 0)
		return bad(msg, len, "option '%s': '%s' is not a SIZE (digits with K, M, G or T)",
			   key, val);
	return 0;
}

/* One of a fixed set of words; returns its index or -EINVAL with a message. */
static int opt_word(const char *key, const char *val, const char *const *words, int n,
		    char *msg, size_t len)
{
	char list[128] = "";

	for (int i = 0; val && i < n; i++)
		if (!strcmp(val, words[i]))
			return i;
	for (int i = 0; i < n; i++) {
		strncat(list, words[i], sizeof(list) - strlen(list) - 1);
		if (i + 1 < n)
			strncat(list, "|", sizeof(list) - strlen(list) - 1);
	}
	snprintf(msg, len, "option '%s': '%s' is not one of %s", key, val ? val : "", list);
	return -EINVAL;
}

static int opt_pipeline(struct ucm_options *o, const char *val, char *msg, size_t len)
{
	static const char *const valid[] = { "cache", "cache:posix", "cache:compress:posix",
					     "posix", "compress:posix" };

	for (size_t i = 0; val && i < sizeof(valid) / sizeof(valid[0]); i++) {
		if (!strcmp(val, valid[i])) {
			snprintf(o->pipeline, sizeof(o->pipeline), "%s", val);
			return 0;
		}
	}
	snprintf(msg, len,
		 "option 'pipeline': '%s' is not a tier chain (cache, cache:posix, "
		 "cache:compress:posix, posix, compress:posix)", val ? val : "");
	return -EINVAL;
}

static int opt_compress(struct ucm_options *o, const char *val, char *msg, size_t len)
{
	int64_t level;
	uint64_t u;

	if (val && !strcmp(val, "none")) {
		o->codec = CODEC_NONE;
		return 0;
	}
	if (val && !strcmp(val, "zstd")) {
		o->codec = CODEC_ZSTD;
		o->zstd_level = 1;
		return 0;
	}
	if (val && !strncmp(val, "zstd:", 5)) {
		const char *l = val + 5;
		int neg = (*l == '-');

		if (parse_u64(l + neg, &u) == 0 && u <= 22) {
			level = neg ? -(int64_t)u : (int64_t)u;
			if (level != 0 && level >= -7) {
				o->codec = CODEC_ZSTD;
				o->zstd_level = (int)level;
				return 0;
			}
		}
		return bad(msg, len, "option '%s': level '%s' must be -7..-1 or 1..22", "compress",
			   l);
	}
	return bad(msg, len, "option '%s': '%s' is not none, zstd or zstd:LEVEL", "compress",
		   val ? val : "");
}

int options_apply(struct ucm_options *o, const char *opt, char *msg, size_t len)
{
	static const char *const policies[] = { "clock", "lru", "fifo" };
	static const char *const ios[] = { "aio", "psync" };
	static const char *const layouts[] = { "native", "ucm" };
	static const char *const passthroughs[] = { "auto", "on", "off" };
	static const char *const sync_compress[] = { "defer", "inline" };
	static const char *const shuffles[] = { "auto", "none", "2", "4" };
	char key[64];
	const char *eq = strchr(opt, '='), *val = eq ? eq + 1 : NULL;
	size_t klen = eq ? (size_t)(eq - opt) : strlen(opt);
	int rc;

	if (klen >= sizeof(key))
		return -ENOENT;
	memcpy(key, opt, klen);
	key[klen] = '\0';

	if (!strcmp(key, "mem_size")) {
		rc = opt_size(key, val, &o->mem_size, msg, len);
		if (rc == 0 && o->mem_size < (1ULL << 20))
			return bad(msg, len, "option '%s': %s is below the minimum of 1M", key, val);
		return rc;
	}
	if (!strcmp(key, "mem_prefault")) {
		uint64_t pct;
		size_t n = val ? strlen(val) : 0;

		if (n > 1 && val[n - 1] == '%') {
			char num[24];

			if (n - 1 >= sizeof(num))
				return bad(msg, len, "option '%s': '%s' is not a percentage", key, val);
			memcpy(num, val, n - 1);
			num[n - 1] = '\0';
			if (parse_u64(num, &pct) || pct > 100)
				return bad(msg, len, "option '%s': '%s' is not a percentage from 0%% "
					   "to 100%%", key, val);
			o->mem_prefault_pct = (int)pct;
			return 0;
		}
		if (val && !strcmp(val, "none")) {
			o->mem_prefault_pct = 0;
			return 0;
		}
		rc = opt_size(key, val, &o->mem_prefault, msg, len);
		if (rc == 0)
			o->mem_prefault_pct = -1;
		return rc;
	}
	if (!strcmp(key, "disk_size"))
		return opt_size(key, val, &o->disk_size, msg, len);
	if (!strcmp(key, "block_size") || !strcmp(key, "max_block")) {
		uint64_t v;

		rc = opt_size(key, val, &v, msg, len);
		if (rc)
			return rc;
		if (v < MIN_BLOCK_SIZE || v > MAX_BLOCK_LIMIT)
			return bad(msg, len, "option '%s': %s is out of range (1 byte .. 64G)", key,
				   val);
		*(key[0] == 'b' ? &o->block_size : &o->max_block) = v;
		return 0;
	}
	if (!strcmp(key, "policy")) {
		rc = opt_word(key, val, policies, 3, msg, len);
		return rc < 0 ? rc : (o->policy = (enum ucm_policy)rc, 0);
	}
	if (!strcmp(key, "pipeline"))
		return opt_pipeline(o, val, msg, len);
	if (!strcmp(key, "topology")) {
		if (!val || !*val)
			return bad(msg, len, "option '%s': '%s' is not a file name", key, "");
		free(o->topology);
		o->topology = strdup(val);
		return o->topology ? 0 : -ENOMEM;
	}
	if (!strcmp(key, "compress"))
		return opt_compress(o, val, msg, len);
	if (!strcmp(key, "shuffle")) {
		rc = opt_word(key, val, shuffles, 4, msg, len);
		if (rc < 0)
			return rc;
		o->shuffle = rc < 2 ? rc : (rc == 2 ? 2 : 4);
		return 0;
	}
	if (!strcmp(key, "io")) {
		rc = opt_word(key, val, ios, 2, msg, len);
		return rc < 0 ? rc : (o->io = (enum ucm_io)rc, 0);
	}
	if (!strcmp(key, "io_depth")) {
		uint64_t v;

		if (!val || parse_u64(val, &v) || v < 1 || v > 1024)
			return bad(msg, len, "option '%s': '%s' is not a number from 1 to 1024", key,
				   val ? val : "");
		o->io_depth = (unsigned)v;
		return 0;
	}
	if (!strcmp(key, "io_timeout")) {
		int64_t ms;

		if (!val || parse_duration_ms(val, &ms))
			return bad(msg, len,
				   "option '%s': '%s' is not a duration (500ms, 30s, 2m, none)", key,
				   val ? val : "");
		o->io_timeout_ms = ms == TTL_NONE ? 0 : ms;
		return 0;
	}
	if (!strcmp(key, "readahead")) {
		rc = opt_size(key, val, &o->readahead, msg, len);
		if (rc == 0 && o->readahead > MAX_READAHEAD)
			return bad(msg, len, "option '%s': %s is above the maximum of 64M", key, val);
		return rc;
	}
	if (!strcmp(key, "ttl")) {
		int64_t ms;

		if (!val || parse_duration_ms(val, &ms) || ms == 0)
			return bad(msg, len,
				   "option '%s': '%s' is not a duration (500ms, 30s, 10m, 2h, none)",
				   key, val ? val : "");
		o->ttl_ms = ms;
		return 0;
	}
	if (!strcmp(key, "durable")) {
		if (val)
			return bad(msg, len, "option '%s' takes no value (got '%s')", key, val);
		o->durable = true;
		return 0;
	}
	if (!strcmp(key, "sync_compress")) {
		rc = opt_word(key, val, sync_compress, 2, msg, len);
		return rc < 0 ? rc : (o->sync_inline = rc == 1, 0);
	}
	if (!strcmp(key, "shared")) {
		int64_t ms = SHARED_CHECK_MS;

		if (val && (parse_duration_ms(val, &ms) || ms == TTL_NONE || ms > 3600000))
			return bad(msg, len,
				   "option '%s': '%s' is not a duration from 0 to 1h (0, 500ms, 2s)",
				   key, val);
		o->shared_ms = ms;
		return 0;
	}
	if (!strcmp(key, "layout")) {
		rc = opt_word(key, val, layouts, 2, msg, len);
		return rc < 0 ? rc : (o->layout = (enum ucm_layout)rc, 0);
	}
	if (!strcmp(key, "passthrough")) {
		rc = opt_word(key, val, passthroughs, 3, msg, len);
		return rc < 0 ? rc : (o->passthrough = (enum ucm_passthrough)rc, 0);
	}
	if (!strcmp(key, "log_level")) {
		rc = opt_word(key, val, log_levels, 4, msg, len);
		return rc < 0 ? rc : (o->log_level = rc, 0);
	}
	return -ENOENT;
}

/* Options handed to libfuse (they configure the mount, not ucmfs). */
static bool fuse_option(const char *opt)
{
	static const char *const plain[] = {
		"allow_other", "allow_root", "auto_unmount", "default_permissions", "ro", "rw",
		"nosuid", "suid", "nodev", "dev", "noexec", "exec", "noatime", "atime",
		"relatime", "norelatime", "strictatime", "nostrictatime", "lazytime",
		"nolazytime", "async", "sync", "dirsync", "diratime", "nodiratime",
	};
	static const char *const keyed[] = { "fsname=", "subtype=", "max_read=", "context=",
					     "fscontext=", "defcontext=", "rootcontext=" };

	for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++)
		if (!strcmp(opt, plain[i]))
			return true;
	for (size_t i = 0; i < sizeof(keyed) / sizeof(keyed[0]); i++)
		if (!strncmp(opt, keyed[i], strlen(keyed[i])) && opt[strlen(keyed[i])])
			return true;
	return false;
}

/* fstab words that mount(8) understands and a filesystem must ignore. */
static bool fstab_only_option(const char *opt)
{
	static const char *const words[] = { "auto", "noauto", "user", "nouser", "users",
					     "_netdev", "nofail", "owner", "group", "defaults" };

	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (!strcmp(opt, words[i]))
			return true;
	return !strncmp(opt, "x-", 2) || !strncmp(opt, "comment=", 8);
}

static int apply_list(struct ucm_options *o, const char *list, char *msg, size_t len)
{
	char *copy = strdup(list), *save = NULL, *opt;
	int rc = 0;

	if (!copy)
		return -ENOMEM;
	for (opt = strtok_r(copy, ",", &save); opt && !rc; opt = strtok_r(NULL, ",", &save)) {
		rc = options_apply(o, opt, msg, len);
		if (rc != -ENOENT)
			continue;
		rc = 0;
		if (fstab_only_option(opt))
			continue;
		if (!fuse_option(opt)) {
			snprintf(msg, len, "unknown option '%s' (see ucmfs(8))", opt);
			rc = -EINVAL;
		} else if (strlen(o->fuse_opts) + strlen(opt) + 2 > sizeof(o->fuse_opts)) {
			snprintf(msg, len, "too many mount options at '%s'", opt);
			rc = -EINVAL;
		} else {
			if (o->fuse_opts[0])
				strcat(o->fuse_opts, ",");
			strcat(o->fuse_opts, opt);
		}
	}
	free(copy);
	return rc;
}

int options_store(struct ucm_options *o, const char *arg, char *msg, size_t len)
{
	const char *p = arg;

	while (o->nstores > 0)
		free(o->stores[--o->nstores]);
	if (!strcmp(arg, "none"))
		return 0;
	while (*p) {
		const char *end = strchrnul(p, ':');

		if (end == p || (*end == ':' && end[1] == '\0')) {
			snprintf(msg, len, "STORE '%s' has an empty directory between ':'", arg);
			return -EINVAL;
		}
		if (o->nstores == UCM_MAX_STORES) {
			snprintf(msg, len, "STORE '%s' has more than %d directories", arg,
				 UCM_MAX_STORES);
			return -EINVAL;
		}
		o->stores[o->nstores] = strndup(p, (size_t)(end - p));
		if (!o->stores[o->nstores])
			return -ENOMEM;
		o->nstores++;
		p = *end ? end + 1 : end;
	}
	if (o->nstores == 0) {
		snprintf(msg, len, "STORE is empty (give a directory, or 'none')");
		return -EINVAL;
	}
	return 0;
}

void options_derive(struct ucm_options *o)
{
	if (o->block_size && o->block_size > o->max_block)
		o->max_block = o->block_size;
	if (o->mem_prefault_pct >= 0)
		o->mem_prefault = o->mem_size / 100 * (uint64_t)o->mem_prefault_pct;
	else if (o->mem_prefault > o->mem_size)
		o->mem_prefault = o->mem_size;
}

static int check_combination(struct ucm_options *o, char *msg, size_t len)
{
	if (o->shared_ms >= 0 && !o->nstores) {
		snprintf(msg, len, "shared: there is no STORE to share (STORE is 'none')");
		return -EINVAL;
	}
	if (o->topology) {
		if (o->pipeline[0]) {
			snprintf(msg, len, "options 'topology' and 'pipeline' both say which tiers "
				 "to use: give one");
			return -EINVAL;
		}
		/* the file says which tiers there are; the options are their defaults, and a
		 * stage may override either of layout=ucm and compress=zstd (topology.c refuses
		 * the compress stage that has both) */
		snprintf(o->pipeline, sizeof(o->pipeline), "topology");
		options_derive(o);
		return 0;
	}
	if (o->layout == LAYOUT_UCM && o->codec == CODEC_ZSTD) {
		snprintf(msg, len, "layout=ucm stores raw bytes: compress=zstd is not possible");
		return -EINVAL;
	}
	if (!o->pipeline[0])
		snprintf(o->pipeline, sizeof(o->pipeline), "%s",
			 o->nstores ? "cache:compress:posix" : "cache");
	if (!o->nstores && strcmp(o->pipeline, "cache")) {
		snprintf(msg, len, "option 'pipeline': '%s' needs a STORE directory, not 'none'",
			 o->pipeline);
		return -EINVAL;
	}
	if (o->nstores && !strstr(o->pipeline, "posix")) {
		snprintf(msg, len, "option 'pipeline': '%s' has no disk tier for STORE '%s'",
			 o->pipeline, o->stores[0]);
		return -EINVAL;
	}
	options_derive(o);
	if (o->layout == LAYOUT_UCM && strstr(o->pipeline, "compress")) {
		if (strcmp(o->pipeline, "cache:compress:posix")) {
			snprintf(msg, len, "layout=ucm stores raw bytes: drop 'compress' from "
				 "pipeline=%s", o->pipeline);
			return -EINVAL;
		}
		snprintf(o->pipeline, sizeof(o->pipeline), "cache:posix");
	}
	return 0;
}

int options_parse(struct ucm_options *o, int argc, char **argv, char *msg, size_t len)
{
	const char *pos[2];
	int npos = 0, rc;

	options_defaults(o);
	msg[0] = '\0';
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			snprintf(msg, len, "%s", usage);
			return 1;
		}
		if (!strcmp(a, "-V") || !strcmp(a, "--version")) {
			snprintf(msg, len, "ucmfs version 0.1.0\n");
			return 1;
		}
		if (!strcmp(a, "-f")) {
			o->foreground = true;
		} else if (!strcmp(a, "-d") || !strcmp(a, "--debug")) {
			o->foreground = o->debug = true;
			o->log_level = LOG_LVL_DEBUG;
		} else if (!strncmp(a, "-o", 2)) {
			const char *list = a[2] ? a + 2 : (i + 1 < argc ? argv[++i] : NULL);

			if (!list || !*list) {
				snprintf(msg, len, "option '-o' needs a list of options");
				return -EINVAL;
			}
			rc = apply_list(o, list, msg, len);
			if (rc)
				return rc;
		} else if (a[0] == '-' && a[1]) {
			snprintf(msg, len, "unknown flag '%s' (see ucmfs -h)", a);
			return -EINVAL;
		} else if (npos < 2) {
			pos[npos++] = a;
		} else {
			snprintf(msg, len, "unexpected argument '%s' after STORE and MOUNTPOINT", a);
			return -EINVAL;
		}
	}
	if (npos < 2) {
		snprintf(msg, len, "missing %s (usage: ucmfs [-f] [-d] [-o OPTS] STORE MOUNTPOINT)",
			 npos ? "MOUNTPOINT" : "STORE and MOUNTPOINT");
		return -EINVAL;
	}
	rc = options_store(o, pos[0], msg, len);
	if (rc)
		return rc;
	o->mountpoint = strdup(pos[1]);
	if (!o->mountpoint)
		return -ENOMEM;
	return check_combination(o, msg, len);
}

size_t options_format(const struct ucm_options *o, char *buf, size_t len)
{
	static const char *const policies[] = { "clock", "lru", "fifo" };
	static const char *const pts[] = { "auto", "on", "off" };
	char mem[32], disk[32], bs[32], mb[32], ra[32], store[4096] = "", ttl[32], codec[32];
	char shuf[8], pf[32], shared[32];
	size_t n;

	for (int i = 0; i < o->nstores; i++) {
		if (i)
			strncat(store, ":", sizeof(store) - strlen(store) - 1);
		strncat(store, o->stores[i], sizeof(store) - strlen(store) - 1);
	}
	format_size(o->mem_size, mem, sizeof(mem));
	format_size(o->disk_size, disk, sizeof(disk));
	format_size(o->block_size, bs, sizeof(bs));
	format_size(o->max_block, mb, sizeof(mb));
	format_size(o->readahead, ra, sizeof(ra));
	if (o->shared_ms < 0)
		snprintf(shared, sizeof(shared), "off");
	else
		snprintf(shared, sizeof(shared), "%lldms", (long long)o->shared_ms);
	if (o->ttl_ms == TTL_NONE)
		snprintf(ttl, sizeof(ttl), "none");
	else
		snprintf(ttl, sizeof(ttl), "%lldms", (long long)o->ttl_ms);
	if (o->codec == CODEC_NONE || (!strstr(o->pipeline, "compress") && !o->topology))
		snprintf(codec, sizeof(codec), "none");
	else
		snprintf(codec, sizeof(codec), "zstd:%d", o->zstd_level);
	if (o->mem_prefault_pct >= 0)
		snprintf(pf, sizeof(pf), "%d%%", o->mem_prefault_pct);
	else
		format_size(o->mem_prefault, pf, sizeof(pf));
	if (o->shuffle == 0)
		snprintf(shuf, sizeof(shuf), "auto");
	else if (o->shuffle == 1)
		snprintf(shuf, sizeof(shuf), "none");
	else
		snprintf(shuf, sizeof(shuf), "%d", o->shuffle);
	n = (size_t)snprintf(buf, len,
			     "store=%s\nmountpoint=%s\ntopology=%s\nmem_size=%s\nmem_prefault=%s\ndisk_size=%s\n"
			     "block_size=%s\n"
			     "max_block=%s\npolicy=%s\npipeline=%s\ncompress=%s\nshuffle=%s\n"
			     "io=%s\nio_depth=%u\nio_timeout=%lldms\nttl=%s\ndurable=%d\nsync_compress=%s\n"
			     "shared=%s\nlayout=%s\n"
			     "readahead=%s\npassthrough=%s\nlog_level=%s\n",
			     o->nstores ? store : "none", o->mountpoint ? o->mountpoint : "",
			     o->topology ? o->topology : "none", mem, pf,
			     disk, o->block_size ? bs : "unset", mb, policies[o->policy],
			     o->pipeline, codec, shuf, o->io == IO_AIO ? "aio" : "psync",
			     o->io_depth, (long long)o->io_timeout_ms, ttl, o->durable ? 1 : 0,
			     o->sync_inline ? "inline" : "defer", shared,
			     o->layout == LAYOUT_NATIVE ? "native" : "ucm", ra, pts[o->passthrough],
			     log_levels[o->log_level]);
	return n < len ? n : len - 1;
}
