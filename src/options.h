/*
 * The command line: ucmfs [-f] [-d] [-o OPT[,OPT...]] STORE MOUNTPOINT.
 * Parsing is pure (no FUSE, no side effects), so every error path is unit-tested.
 */
#ifndef UCM_OPTIONS_H
#define UCM_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ucm_policy { POLICY_CLOCK, POLICY_LRU, POLICY_FIFO };
enum ucm_io { IO_AIO, IO_PSYNC };
enum ucm_layout { LAYOUT_NATIVE, LAYOUT_UCM };
enum ucm_codec { CODEC_AUTO, CODEC_NONE, CODEC_ZSTD };
enum ucm_passthrough { PT_AUTO, PT_ON, PT_OFF };

#define UCM_MAX_STORES 16
#define UCM_MAX_TIERS 4
#define SHARED_CHECK_MS 1000 /* shared: how old a host's knowledge of a block may be */

struct ucm_options {
	/* STORE split at ':'; nstores == 0 means "none" (memory only). */
	char *stores[UCM_MAX_STORES];
	int nstores;
	char *mountpoint;

	uint64_t mem_size;   /* memory tier capacity, bytes */
	/* memory kept allocated and faulted in ahead of need: mem_prefault_pct % of mem_size,
	 * or mem_prefault bytes when mem_prefault_pct < 0 */
	int mem_prefault_pct;
	uint64_t mem_prefault;
	uint64_t disk_size;  /* disk tier capacity, physical bytes; 0 = keep 5% free */
	uint64_t block_size; /* 0 = unset */
	uint64_t max_block;
	enum ucm_policy policy;
	char pipeline[64];   /* "cache:compress:posix" */
	char *topology;      /* topology=FILE: the tiers as a tree (tiers/topology.c), or NULL */
	enum ucm_codec codec;
	int zstd_level;      /* meaningful when codec == CODEC_ZSTD */
	int shuffle;         /* 0 = auto, 1 = none, 2 or 4 */
	enum ucm_io io;
	unsigned io_depth;   /* 0 = measured default */
	int64_t io_timeout_ms; /* io=aio: a disk read not done by then fails EIO; 0 = no limit */
	uint64_t readahead;  /* the kernel's read-ahead window of the mount; 0 = its default */
	int64_t ttl_ms;      /* default TTL of new blocks; TTL_NONE = none */
	bool durable;
	bool sync_inline;    /* sync_compress=inline: an fsync waits for compression (no hurry) */
	/* shared: the STORE is shared with other hosts; how old a host's knowledge of a block
	 * may be before it asks the store again (ms); -1 = the STORE is private */
	int64_t shared_ms;
	enum ucm_layout layout;
	enum ucm_passthrough passthrough; /* kernel reads of blocks in memory without the daemon */

	int log_level;       /* LOG_LVL_* of src/log.h: the least urgent that is logged */
	bool foreground;
	bool debug;
	/* Standard FUSE/mount options to hand to libfuse, comma-separated ("" if none). */
	char fuse_opts[1024];
};

/* Fill in every default (DESIGN.md section 2). */
void options_defaults(struct ucm_options *o);

/*
 * Parse argv (argv[0] is the program name) into o, which options_parse() first fills with the
 * defaults. Returns 0; 1 if -h/--help or -V/--version was given (msg holds the text to print);
 * or -EINVAL with a one-line message naming the bad argument in msg.
 * On success, o owns copies of the strings (free with options_free()).
 */
int options_parse(struct ucm_options *o, int argc, char **argv, char *msg, size_t msglen);

/*
 * Apply one "key" or "key=value" ucmfs option. Returns 0, -ENOENT if key is not a ucmfs
 * option (it may be a FUSE one), or -EINVAL with the message in msg.
 */
int options_apply(struct ucm_options *o, const char *opt, char *msg, size_t msglen);

/*
 * Replace o's STORE with arg ("DIR[:DIR...]" or "none"). 0, -ENOMEM, or -EINVAL with the
 * message in msg.
 */
int options_store(struct ucm_options *o, const char *arg, char *msg, size_t msglen);

/* Recompute what follows from other options (mem_prefault from mem_size, ...) after
 * options_apply() changed them. */
void options_derive(struct ucm_options *o);

/* The effective configuration, one "key=value\n" per line, into buf. Returns the length. */
size_t options_format(const struct ucm_options *o, char *buf, size_t len);

void options_free(struct ucm_options *o);

#endif
