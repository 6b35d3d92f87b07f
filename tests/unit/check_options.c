/* The command line (src/options.h, DESIGN.md section 2). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "src/log.h"
#include "src/options.h"
#include "src/units.h"
#include "tests/unit/unit.h"

static struct ucm_options opts;
static char msg[2048];

static void teardown(void)
{
	options_free(&opts);
}

/* Parse "ucmfs" followed by the NULL-terminated arguments. */
static int parse(const char *first, ...)
{
	char *argv[64];
	int argc = 0;
	va_list ap;

	argv[argc++] = (char *)"ucmfs";
	va_start(ap, first);
	for (const char *a = first; a; a = va_arg(ap, const char *)) {
		ck_assert_int_lt(argc, 63);
		argv[argc++] = (char *)a;
	}
	va_end(ap);
	argv[argc] = NULL;
	options_free(&opts);
	memset(msg, 0, sizeof(msg));
	return options_parse(&opts, argc, argv, msg, sizeof(msg));
}

/* Parse "-o OPTS /store /mnt"; expect success. */
static void ok_opts(const char *o)
{
	int rc = parse("-o", o, "/store", "/mnt", NULL);

	ck_assert_msg(rc == 0, "-o %s: rc %d: %s", o, rc, msg);
}

/* Parse "-o OPTS STORE /mnt"; expect -EINVAL with a one-line message that names `names`. */
static void bad_args(const char *store, const char *o, const char *names)
{
	int rc = parse("-o", o, store, "/mnt", NULL);

	ck_assert_msg(rc == -EINVAL, "-o %s %s: rc %d, want -EINVAL", o, store, rc);
	ck_assert_msg(msg[0] != '\0', "-o %s: no message", o);
	ck_assert_msg(!strchr(msg, '\n'), "-o %s: message is not one line: \"%s\"", o, msg);
	ck_assert_msg(strstr(msg, names) != NULL, "-o %s: message \"%s\" does not name '%s'", o,
		      msg, names);
}

static void bad_opts(const char *o, const char *names)
{
	bad_args("/store", o, names);
}

START_TEST(test_options_defaults)
{
	struct ucm_options d;

	options_defaults(&d);
	ck_assert_uint_eq(d.mem_size, 1ULL << 30);
	ck_assert_uint_eq(d.disk_size, 0);
	ck_assert_uint_eq(d.block_size, 0);
	ck_assert_uint_eq(d.max_block, 256ULL << 20);
	ck_assert_int_eq(d.policy, POLICY_CLOCK);
	ck_assert_int_eq(d.codec, CODEC_AUTO);
	ck_assert_int_eq(d.shuffle, 0);
	ck_assert_int_eq(d.io, IO_AIO);
	ck_assert_uint_eq(d.io_depth, 0);
	ck_assert(d.ttl_ms == TTL_NONE);
	ck_assert(!d.durable);
	ck_assert_int_eq(d.layout, LAYOUT_NATIVE);
	ck_assert(!d.foreground && !d.debug);
	ck_assert_str_eq(d.fuse_opts, "");
	ck_assert_int_eq(d.nstores, 0);

	/* the same defaults after a parse with no options, and the default pipeline */
	ck_assert_int_eq(parse("/var/lib/ucm", "/mnt/ucm", NULL), 0);
	ck_assert_uint_eq(opts.mem_size, 1ULL << 30);
	ck_assert_uint_eq(opts.disk_size, 0);
	ck_assert_uint_eq(opts.block_size, 0);
	ck_assert_uint_eq(opts.max_block, 256ULL << 20);
	ck_assert_int_eq(opts.policy, POLICY_CLOCK);
	ck_assert_str_eq(opts.pipeline, "cache:compress:posix");
	ck_assert_int_eq(opts.io, IO_AIO);
	ck_assert(opts.ttl_ms == TTL_NONE);
	ck_assert(!opts.durable);
	ck_assert_int_eq(opts.layout, LAYOUT_NATIVE);
	ck_assert_int_eq(opts.nstores, 1);
	ck_assert_str_eq(opts.stores[0], "/var/lib/ucm");
	ck_assert_str_eq(opts.mountpoint, "/mnt/ucm");
	ck_assert_str_eq(opts.fuse_opts, "");
}
END_TEST

START_TEST(test_options_sizes)
{
	ok_opts("mem_size=8G,disk_size=1T,block_size=4M,max_block=1G");
	ck_assert_uint_eq(opts.mem_size, 8ULL << 30);
	ck_assert_uint_eq(opts.disk_size, 1ULL << 40);
	ck_assert_uint_eq(opts.block_size, 4ULL << 20);
	ck_assert_uint_eq(opts.max_block, 1ULL << 30);
	ok_opts("mem_size=1M");
	ck_assert_uint_eq(opts.mem_size, 1ULL << 20);
	ok_opts("mem_size=512m");
	ck_assert_uint_eq(opts.mem_size, 512ULL << 20);
	ok_opts("disk_size=0");
	ck_assert_uint_eq(opts.disk_size, 0);
	ok_opts("block_size=1");
	ck_assert_uint_eq(opts.block_size, 1);
	ok_opts("max_block=64G");
	ck_assert_uint_eq(opts.max_block, 64ULL << 30);
	/* a block_size above max_block raises max_block */
	ok_opts("block_size=512M");
	ck_assert_uint_eq(opts.block_size, 512ULL << 20);
	ck_assert_uint_ge(opts.max_block, 512ULL << 20);
	/* the last value given wins */
	ok_opts("mem_size=2G,mem_size=3G");
	ck_assert_uint_eq(opts.mem_size, 3ULL << 30);
}
END_TEST

START_TEST(test_options_bad_sizes)
{
	bad_opts("mem_size=abc", "mem_size");
	bad_opts("mem_size", "mem_size");
	bad_opts("mem_size=", "mem_size");
	bad_opts("mem_size=-1G", "mem_size");
	bad_opts("mem_size=1.5G", "mem_size");
	bad_opts("mem_size=8Q", "mem_size");
	bad_opts("mem_size=99999999999999999999T", "mem_size");
	bad_opts("mem_size=512K", "mem_size"); /* below the 1M minimum */
	bad_opts("disk_size=1X", "disk_size");
	bad_opts("disk_size", "disk_size");
	bad_opts("disk_size=20000000T", "disk_size");
	bad_opts("block_size=0", "block_size");
	bad_opts("block_size=65G", "block_size");
	bad_opts("block_size=x", "block_size");
	bad_opts("block_size", "block_size");
	bad_opts("max_block=0", "max_block");
	bad_opts("max_block=1P", "max_block");
	bad_opts("max_block", "max_block");
}
END_TEST

START_TEST(test_options_words)
{
	ok_opts("policy=lru");
	ck_assert_int_eq(opts.policy, POLICY_LRU);
	ok_opts("policy=fifo");
	ck_assert_int_eq(opts.policy, POLICY_FIFO);
	ok_opts("policy=clock");
	ck_assert_int_eq(opts.policy, POLICY_CLOCK);
	ok_opts("io=psync");
	ck_assert_int_eq(opts.io, IO_PSYNC);
	ok_opts("io=aio");
	ck_assert_int_eq(opts.io, IO_AIO);
	ok_opts("layout=ucm");
	ck_assert_int_eq(opts.layout, LAYOUT_UCM);
	ok_opts("layout=native");
	ck_assert_int_eq(opts.layout, LAYOUT_NATIVE);
	ok_opts("shuffle=auto");
	ck_assert_int_eq(opts.shuffle, 0);
	ok_opts("shuffle=none");
	ck_assert_int_eq(opts.shuffle, 1);
	ok_opts("shuffle=2");
	ck_assert_int_eq(opts.shuffle, 2);
	ok_opts("shuffle=4");
	ck_assert_int_eq(opts.shuffle, 4);
	ok_opts("durable");
	ck_assert(opts.durable);
	/* an fsync behind other dumps: the block raw now, compressed later (default) */
	ck_assert(!opts.sync_inline);
	ok_opts("sync_compress=inline");
	ck_assert(opts.sync_inline);
	ok_opts("sync_compress=defer");
	ck_assert(!opts.sync_inline);
}
END_TEST

/* shared: a private STORE by default; a bare "shared" checks what it knows every second */
START_TEST(test_options_shared)
{
	char buf[4096];

	ok_opts("mem_size=1G");
	ck_assert_int_lt(opts.shared_ms, 0);
	options_format(&opts, buf, sizeof(buf));
	ck_assert_ptr_nonnull(strstr(buf, "\nshared=off\n"));
	ok_opts("shared");
	ck_assert_int_eq(opts.shared_ms, 1000);
	ok_opts("shared=250ms");
	ck_assert_int_eq(opts.shared_ms, 250);
	options_format(&opts, buf, sizeof(buf));
	ck_assert_ptr_nonnull(strstr(buf, "\nshared=250ms\n"));
	ok_opts("shared=0");
	ck_assert_int_eq(opts.shared_ms, 0);
	bad_opts("shared=soon", "shared");
	bad_opts("shared=none", "shared");
	bad_opts("shared=2h", "shared");
	bad_opts("shared=-1s", "shared");
	bad_args("none", "shared", "shared");
}
END_TEST

START_TEST(test_options_bad_words)
{
	bad_opts("policy=random", "policy");
	bad_opts("policy=", "policy");
	bad_opts("policy", "policy");
	bad_opts("policy=LRU", "policy");
	bad_opts("io=uring", "io");
	bad_opts("io", "io");
	bad_opts("layout=ext4", "layout");
	bad_opts("layout", "layout");
	bad_opts("shuffle=3", "shuffle");
	bad_opts("shuffle=8", "shuffle");
	bad_opts("shuffle", "shuffle");
	bad_opts("durable=1", "durable");
	bad_opts("durable=yes", "durable");
	bad_opts("sync_compress=later", "sync_compress");
	bad_opts("sync_compress", "sync_compress");
}
END_TEST

START_TEST(test_options_pipeline)
{
	static const char *const chains[] = { "cache:posix", "cache:compress:posix", "posix",
					      "compress:posix" };
	char o[64];

	for (size_t i = 0; i < sizeof(chains) / sizeof(chains[0]); i++) {
		snprintf(o, sizeof(o), "pipeline=%s", chains[i]);
		ok_opts(o);
		ck_assert_str_eq(opts.pipeline, chains[i]);
	}
	ck_assert_int_eq(parse("-o", "pipeline=cache", "none", "/mnt", NULL), 0);
	ck_assert_str_eq(opts.pipeline, "cache");
}
END_TEST

START_TEST(test_options_bad_pipeline)
{
	bad_opts("pipeline=posix:cache", "pipeline");
	bad_opts("pipeline=", "pipeline");
	bad_opts("pipeline", "pipeline");
	bad_opts("pipeline=cache:cache", "pipeline");
	bad_opts("pipeline=compress", "pipeline");
	bad_opts("pipeline=cache:compress", "pipeline");
	/* a STORE directory with no disk tier in the chain */
	bad_opts("pipeline=cache", "pipeline");
}
END_TEST

/* topology= replaces pipeline=: the file is read when the tiers are built, not here */
START_TEST(test_options_topology)
{
	char text[8192];

	ok_opts("topology=/etc/ucmfs/tiers.json,mem_size=64M");
	ck_assert_str_eq(opts.topology, "/etc/ucmfs/tiers.json");
	ck_assert_str_eq(opts.pipeline, "topology");
	options_format(&opts, text, sizeof(text));
	ck_assert_ptr_nonnull(strstr(text, "\ntopology=/etc/ucmfs/tiers.json\n"));
	/* the last one given wins, as for every option */
	ok_opts("topology=/a.json,topology=/b.json");
	ck_assert_str_eq(opts.topology, "/b.json");
	/* STORE none is fine: a topology may have no disk */
	ck_assert_int_eq(parse("-o", "topology=/t.json", "none", "/mnt", NULL), 0);
	ok_opts("mem_size=64M");
	ck_assert_ptr_null(opts.topology);
	options_format(&opts, text, sizeof(text));
	ck_assert_ptr_nonnull(strstr(text, "\ntopology=none\n"));
}
END_TEST

START_TEST(test_options_bad_topology)
{
	bad_opts("topology=", "topology");
	bad_opts("topology", "topology");
	bad_opts("topology=/t.json,pipeline=cache:posix", "topology");
	bad_opts("pipeline=posix,topology=/t.json", "pipeline");
	/* both are the defaults of the file's stages, which may override either: the file
	 * decides whether a compress stage gets both (tests/mount/topology.py) */
	ok_opts("topology=/t.json,layout=ucm,compress=zstd");
}
END_TEST

START_TEST(test_options_compress)
{
	ok_opts("compress=none");
	ck_assert_int_eq(opts.codec, CODEC_NONE);
	ok_opts("compress=zstd");
	ck_assert_int_eq(opts.codec, CODEC_ZSTD);
	ok_opts("compress=zstd:3");
	ck_assert_int_eq(opts.codec, CODEC_ZSTD);
	ck_assert_int_eq(opts.zstd_level, 3);
	ok_opts("compress=zstd:22");
	ck_assert_int_eq(opts.zstd_level, 22);
	ok_opts("compress=zstd:1");
	ck_assert_int_eq(opts.zstd_level, 1);
	ok_opts("compress=zstd:-5");
	ck_assert_int_eq(opts.zstd_level, -5);
}
END_TEST

START_TEST(test_options_bad_compress)
{
	bad_opts("compress=lz4", "compress");
	bad_opts("compress=", "compress");
	bad_opts("compress", "compress");
	bad_opts("compress=zstd:", "compress");
	bad_opts("compress=zstd:0", "compress");
	bad_opts("compress=zstd:23", "compress");
	bad_opts("compress=zstd:-8", "compress");
	bad_opts("compress=zstd:x", "compress");
	bad_opts("compress=zstd:3x", "compress");
	bad_opts("compress=zstd3", "compress");
}
END_TEST

START_TEST(test_options_io_depth)
{
	ok_opts("io_depth=1");
	ck_assert_uint_eq(opts.io_depth, 1);
	ok_opts("io_depth=1024");
	ck_assert_uint_eq(opts.io_depth, 1024);
	ok_opts("io_depth=32");
	ck_assert_uint_eq(opts.io_depth, 32);
	bad_opts("io_depth=0", "io_depth");
	bad_opts("io_depth=1025", "io_depth");
	bad_opts("io_depth=-1", "io_depth");
	bad_opts("io_depth=x", "io_depth");
	bad_opts("io_depth=4K", "io_depth");
	bad_opts("io_depth", "io_depth");
	bad_opts("io_depth=99999999999999999999999", "io_depth");
}
END_TEST

START_TEST(test_options_io_timeout)
{
	ok_opts("mem_size=1G");
	ck_assert_int_eq(opts.io_timeout_ms, 30000); /* the default */
	ok_opts("io_timeout=500ms");
	ck_assert_int_eq(opts.io_timeout_ms, 500);
	ok_opts("io_timeout=2m");
	ck_assert_int_eq(opts.io_timeout_ms, 120000);
	ok_opts("io_timeout=none");
	ck_assert_int_eq(opts.io_timeout_ms, 0);
	ok_opts("io_timeout=0");
	ck_assert_int_eq(opts.io_timeout_ms, 0);
	bad_opts("io_timeout", "io_timeout");
	bad_opts("io_timeout=soon", "io_timeout");
	bad_opts("io_timeout=-5s", "io_timeout");
	bad_opts("io_timeout=99999999999999999999d", "io_timeout");
}
END_TEST

START_TEST(test_options_readahead)
{
	char buf[8192];

	ok_opts("mem_size=1G");
	ck_assert_uint_eq(opts.readahead, 1 << 20); /* the default */
	options_format(&opts, buf, sizeof(buf));
	ck_assert_ptr_nonnull(strstr(buf, "readahead=1M\n"));
	ok_opts("readahead=4M");
	ck_assert_uint_eq(opts.readahead, 4 << 20);
	ok_opts("readahead=0");
	ck_assert_uint_eq(opts.readahead, 0); /* the kernel's own default */
	ok_opts("readahead=64M");
	bad_opts("readahead=65M", "readahead");
	bad_opts("readahead", "readahead");
	bad_opts("readahead=fast", "readahead");
	bad_opts("readahead=-1M", "readahead");
}
END_TEST

START_TEST(test_options_ttl)
{
	ok_opts("ttl=500ms");
	ck_assert_int_eq(opts.ttl_ms, 500);
	ok_opts("ttl=30s");
	ck_assert_int_eq(opts.ttl_ms, 30000);
	ok_opts("ttl=10m");
	ck_assert_int_eq(opts.ttl_ms, 600000);
	ok_opts("ttl=2h");
	ck_assert_int_eq(opts.ttl_ms, 7200000);
	ok_opts("ttl=60000");
	ck_assert_int_eq(opts.ttl_ms, 60000);
	ok_opts("ttl=none");
	ck_assert(opts.ttl_ms == TTL_NONE);
	bad_opts("ttl=abc", "ttl");
	bad_opts("ttl=5x", "ttl");
	bad_opts("ttl=-5s", "ttl");
	bad_opts("ttl=1.5s", "ttl");
	bad_opts("ttl=", "ttl");
	bad_opts("ttl", "ttl");
	bad_opts("ttl=99999999999999999999d", "ttl");
	bad_opts("log_level=loud", "log_level");
	bad_opts("log_level", "log_level");
}
END_TEST

START_TEST(test_options_unknown_option)
{
	bad_opts("frobnicate", "frobnicate");
	bad_opts("frobnicate=1", "frobnicate");
	bad_opts("mem_size=1G,frobnicate", "frobnicate");
	bad_opts("memsize=1G", "memsize");
	bad_opts("Mem_size=1G", "Mem_size");
	/* an unknown FUSE-looking key with a value it does not take */
	bad_opts("allow_otherx", "allow_otherx");
	bad_opts("fsname=", "fsname");
}
END_TEST

START_TEST(test_options_fuse_passthrough)
{
	ok_opts("allow_other,fsname=x");
	ck_assert_str_eq(opts.fuse_opts, "allow_other,fsname=x");
	ok_opts("mem_size=2G,allow_other,subtype=ucm,mem_size=3G,auto_unmount");
	ck_assert_str_eq(opts.fuse_opts, "allow_other,subtype=ucm,auto_unmount");
	ck_assert_uint_eq(opts.mem_size, 3ULL << 30);
	ok_opts("ro,noatime,nosuid,nodev,max_read=1048576");
	ck_assert_str_eq(opts.fuse_opts, "ro,noatime,nosuid,nodev,max_read=1048576");
	/* options spread over several -o accumulate */
	ck_assert_int_eq(parse("-o", "allow_other", "-o", "fsname=ucm", "/s", "/m", NULL), 0);
	ck_assert_str_eq(opts.fuse_opts, "allow_other,fsname=ucm");
}
END_TEST

START_TEST(test_options_fstab_words_ignored)
{
	ok_opts("defaults,auto,noauto,user,nouser,users,_netdev,nofail,owner,group");
	ck_assert_str_eq(opts.fuse_opts, "");
	ok_opts("x-systemd.automount,x-systemd.requires=/x,comment=hello,mem_size=2G");
	ck_assert_str_eq(opts.fuse_opts, "");
	ck_assert_uint_eq(opts.mem_size, 2ULL << 30);
}
END_TEST

START_TEST(test_options_dash_o_forms)
{
	ck_assert_int_eq(parse("-o", "mem_size=2G,policy=lru", "/s", "/m", NULL), 0);
	ck_assert_uint_eq(opts.mem_size, 2ULL << 30);
	ck_assert_int_eq(opts.policy, POLICY_LRU);
	ck_assert_int_eq(parse("-omem_size=4G,io=psync", "/s", "/m", NULL), 0);
	ck_assert_uint_eq(opts.mem_size, 4ULL << 30);
	ck_assert_int_eq(opts.io, IO_PSYNC);
	/* options may come after the positional arguments */
	ck_assert_int_eq(parse("/s", "/m", "-o", "durable", NULL), 0);
	ck_assert(opts.durable);
	ck_assert_str_eq(opts.stores[0], "/s");
	ck_assert_str_eq(opts.mountpoint, "/m");
	ck_assert_int_eq(parse("-f", "/s", "/m", NULL), 0);
	ck_assert(opts.foreground && !opts.debug);
	ck_assert_int_eq(parse("-d", "/s", "/m", NULL), 0);
	ck_assert(opts.foreground && opts.debug);
	ck_assert_int_eq(opts.log_level, LOG_LVL_DEBUG);
	/* log_level= after -d wins; the default is info */
	ck_assert_int_eq(parse("-d", "-o", "log_level=warn", "/s", "/m", NULL), 0);
	ck_assert_int_eq(opts.log_level, LOG_LVL_WARN);
	ck_assert_int_eq(parse("/s", "/m", NULL), 0);
	ck_assert_int_eq(opts.log_level, LOG_LVL_INFO);
	ck_assert_int_eq(parse("-o", "log_level=err", "/s", "/m", NULL), 0);
	ck_assert_int_eq(opts.log_level, LOG_LVL_ERR);
	/* an empty item in a list is harmless */
	ck_assert_int_eq(parse("-o", "mem_size=2G,,durable", "/s", "/m", NULL), 0);
	ck_assert(opts.durable);
}
END_TEST

static void bad_argv(int want_rc, const char *names, const char *a1, const char *a2,
		     const char *a3, const char *a4)
{
	int rc = parse(a1, a2, a3, a4, NULL);

	ck_assert_msg(rc == want_rc, "rc %d, want %d (%s)", rc, want_rc, msg);
	ck_assert_msg(!strchr(msg, '\n'), "message is not one line: \"%s\"", msg);
	ck_assert_msg(strstr(msg, names), "message \"%s\" does not name '%s'", msg, names);
}

START_TEST(test_options_bad_command_lines)
{
	bad_argv(-EINVAL, "STORE", NULL, NULL, NULL, NULL);
	bad_argv(-EINVAL, "MOUNTPOINT", "/s", NULL, NULL, NULL);
	bad_argv(-EINVAL, "STORE", "-o", "mem_size=2G", NULL, NULL);
	bad_argv(-EINVAL, "/extra", "/s", "/m", "/extra", NULL);
	bad_argv(-EINVAL, "-x", "-x", "/s", "/m", NULL);
	bad_argv(-EINVAL, "--frob", "/s", "/m", "--frob", NULL);
	bad_argv(-EINVAL, "-o", "/s", "/m", "-o", NULL);
	bad_argv(-EINVAL, "-o", "-o", "", "/s", "/m");
}
END_TEST

START_TEST(test_options_help_and_version)
{
	ck_assert_int_eq(parse("-h", NULL), 1);
	ck_assert(strstr(msg, "usage"));
	ck_assert_int_eq(parse("--help", NULL), 1);
	ck_assert_int_eq(parse("-V", NULL), 1);
	ck_assert(strstr(msg, "ucmfs"));
	ck_assert_int_eq(parse("--version", NULL), 1);
	/* help wins over anything else on the line, even bad options */
	ck_assert_int_eq(parse("/s", "/m", "-h", NULL), 1);
	ck_assert_int_eq(parse("-V", "/s", NULL), 1);
}
END_TEST

START_TEST(test_options_store_none)
{
	ck_assert_int_eq(parse("none", "/m", NULL), 0);
	ck_assert_int_eq(opts.nstores, 0);
	ck_assert_str_eq(opts.pipeline, "cache");
	ck_assert_str_eq(opts.mountpoint, "/m");
}
END_TEST

START_TEST(test_options_store_striping)
{
	ck_assert_int_eq(parse("/d1:/d2:/d3", "/m", NULL), 0);
	ck_assert_int_eq(opts.nstores, 3);
	ck_assert_str_eq(opts.stores[0], "/d1");
	ck_assert_str_eq(opts.stores[1], "/d2");
	ck_assert_str_eq(opts.stores[2], "/d3");
	ck_assert_int_eq(parse("a:b", "/m", NULL), 0);
	ck_assert_int_eq(opts.nstores, 2);
	ck_assert_str_eq(opts.stores[0], "a");
	ck_assert_str_eq(opts.stores[1], "b");
}
END_TEST

START_TEST(test_options_store_errors)
{
	char many[256] = "";

	bad_argv(-EINVAL, "a::b", "a::b", "/m", NULL, NULL);
	bad_argv(-EINVAL, ":a", ":a", "/m", NULL, NULL);
	bad_argv(-EINVAL, "STORE", "", "/m", NULL, NULL);
	for (int i = 0; i < UCM_MAX_STORES + 1; i++)
		snprintf(many + strlen(many), sizeof(many) - strlen(many), "%s/d%d", i ? ":" : "",
			 i);
	bad_argv(-EINVAL, "STORE", many, "/m", NULL, NULL);
}
END_TEST

START_TEST(test_options_pipeline_needs_store)
{
	bad_args("none", "pipeline=cache:posix", "pipeline");
	bad_args("none", "pipeline=posix", "pipeline");
	bad_args("none", "pipeline=cache:compress:posix", "pipeline");
	bad_args("none", "pipeline=compress:posix", "pipeline");
}
END_TEST

START_TEST(test_options_layout_ucm)
{
	/* layout=ucm stores raw bytes: the default chain loses its compress stage */
	ck_assert_int_eq(parse("-o", "layout=ucm", "/s", "/m", NULL), 0);
	ck_assert_int_eq(opts.layout, LAYOUT_UCM);
	ck_assert_ptr_null(strstr(opts.pipeline, "compress"));
	ck_assert_ptr_nonnull(strstr(opts.pipeline, "posix"));
	ck_assert_int_eq(parse("-o", "layout=ucm,pipeline=cache:posix", "/s", "/m", NULL), 0);
	ck_assert_str_eq(opts.pipeline, "cache:posix");
	ck_assert_int_eq(parse("-o", "layout=ucm,pipeline=posix", "/s", "/m", NULL), 0);
	ck_assert_str_eq(opts.pipeline, "posix");
	ck_assert_int_eq(parse("-o", "layout=ucm,compress=none", "/s", "/m", NULL), 0);
	bad_opts("layout=ucm,pipeline=compress:posix", "compress");
	bad_opts("layout=ucm,compress=zstd", "compress");
	bad_opts("compress=zstd:3,layout=ucm", "compress");
}
END_TEST

START_TEST(test_options_apply_direct)
{
	struct ucm_options o;
	char m[256];

	options_defaults(&o);
	ck_assert_int_eq(options_apply(&o, "mem_size=2G", m, sizeof(m)), 0);
	ck_assert_uint_eq(o.mem_size, 2ULL << 30);
	ck_assert_int_eq(options_apply(&o, "allow_other", m, sizeof(m)), -ENOENT);
	ck_assert_int_eq(options_apply(&o, "nosuchoption=3", m, sizeof(m)), -ENOENT);
	ck_assert_int_eq(options_apply(&o, "policy=bad", m, sizeof(m)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(m, "policy"));
}
END_TEST

START_TEST(test_options_format_reads_back)
{
	char buf[8192];
	size_t n;

	ck_assert_int_eq(parse("-o", "mem_size=1536M,ttl=30s,policy=lru,io=psync,layout=ucm",
			       "/s", "/m", NULL),
			 0);
	n = options_format(&opts, buf, sizeof(buf));
	ck_assert_uint_eq(n, strlen(buf));
	ck_assert_ptr_nonnull(strstr(buf, "store=/s\n"));
	ck_assert_ptr_nonnull(strstr(buf, "mountpoint=/m\n"));
	ck_assert_ptr_nonnull(strstr(buf, "mem_size=1536M\n"));
	ck_assert_ptr_nonnull(strstr(buf, "policy=lru\n"));
	ck_assert_ptr_nonnull(strstr(buf, "io=psync\n"));
	ck_assert_ptr_nonnull(strstr(buf, "layout=ucm\n"));
	ck_assert_ptr_nonnull(strstr(buf, "ttl=30000ms\n"));
	ck_assert_ptr_nonnull(strstr(buf, "block_size=unset\n"));
	ck_assert_ptr_nonnull(strstr(buf, "sync_compress=defer\n"));
	/* a short buffer is truncated, NUL-terminated */
	n = options_format(&opts, buf, 16);
	ck_assert_uint_eq(n, 15);
	ck_assert_uint_eq(strlen(buf), 15);
}
END_TEST

Suite *options_suite(void)
{
	Suite *s = suite_create("options");
	TCase *core = ut_tcase("core", UT_TIMEOUT), *errors = ut_tcase("errors", UT_TIMEOUT);

	tcase_add_checked_fixture(core, NULL, teardown);
	tcase_add_checked_fixture(errors, NULL, teardown);
	tcase_add_test(core, test_options_defaults);
	tcase_add_test(core, test_options_shared);
	tcase_add_test(core, test_options_sizes);
	tcase_add_test(core, test_options_words);
	tcase_add_test(core, test_options_pipeline);
	tcase_add_test(core, test_options_topology);
	tcase_add_test(core, test_options_compress);
	tcase_add_test(core, test_options_io_depth);
	tcase_add_test(core, test_options_io_timeout);
	tcase_add_test(core, test_options_readahead);
	tcase_add_test(core, test_options_ttl);
	tcase_add_test(core, test_options_fuse_passthrough);
	tcase_add_test(core, test_options_fstab_words_ignored);
	tcase_add_test(core, test_options_dash_o_forms);
	tcase_add_test(core, test_options_help_and_version);
	tcase_add_test(core, test_options_store_none);
	tcase_add_test(core, test_options_store_striping);
	tcase_add_test(core, test_options_layout_ucm);
	tcase_add_test(core, test_options_apply_direct);
	tcase_add_test(core, test_options_format_reads_back);
	tcase_add_test(errors, test_options_bad_sizes);
	tcase_add_test(errors, test_options_bad_words);
	tcase_add_test(errors, test_options_bad_pipeline);
	tcase_add_test(errors, test_options_bad_compress);
	tcase_add_test(errors, test_options_unknown_option);
	tcase_add_test(errors, test_options_bad_command_lines);
	tcase_add_test(errors, test_options_store_errors);
	tcase_add_test(errors, test_options_pipeline_needs_store);
	tcase_add_test(errors, test_options_bad_topology);
	suite_add_tcase(s, core);
	suite_add_tcase(s, errors);
	return s;
}
