/*
 * Fuzzes the command line parser (src/options.c): options_parse() on an argv made of the
 * input, options_apply() on single options, options_format() into buffers of every size.
 *
 * Input: the first byte picks the size of the message buffer; the rest is split at NUL bytes
 * into the arguments after argv[0] (at most 16), so "-o\0mem_size=8G,durable\0s\0m" is
 * `ucmfs -o mem_size=8G,durable s m`.
 *
 * Properties:
 * - the result is 0, 1 (help, version) or -EINVAL with a message; the message is always
 *   NUL-terminated inside its buffer, however small, and nothing is written past it;
 * - an error names what is wrong in one line (no newline unless the input had one); a
 *   rejected ucmfs option names the option (DESIGN.md section 2);
 * - a success says nothing and leaves a configuration that holds together: sizes and
 *   numbers in their ranges, a valid tier chain that fits the STORE, layout=ucm without
 *   compression, max_block >= block_size;
 * - the effective configuration round-trips: the text of options_format() turned back into
 *   a command line parses to a configuration with the same text, stores, mount point and
 *   FUSE options;
 * - options_format() into a buffer of any size writes a NUL-terminated prefix of the full
 *   text and returns its length.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "src/options.h"
#include "src/units.h"
#include "tests/fuzz/fuzz.h"

#define MAX_ARGS 16
#define TEXT_MAX 65536

static bool valid_pipeline(const char *p)
{
	static const char *const valid[] = { "cache", "cache:posix", "cache:compress:posix",
					     "posix", "compress:posix" };

	for (size_t i = 0; i < sizeof(valid) / sizeof(valid[0]); i++)
		if (!strcmp(p, valid[i]))
			return true;
	return false;
}

static void check_consistent(const struct ucm_options *o)
{
	CHECK(o->mem_size >= (1ull << 20));
	CHECK(o->max_block >= 1 && o->max_block <= (64ull << 30));
	CHECK(o->block_size <= (64ull << 30));
	CHECK(o->max_block >= o->block_size);
	CHECK(o->policy == POLICY_CLOCK || o->policy == POLICY_LRU || o->policy == POLICY_FIFO);
	CHECK(o->nstores >= 0 && o->nstores <= UCM_MAX_STORES);
	if (o->topology) { /* the file says which tiers; it is read when the daemon starts */
		CHECK(o->topology[0] && !strcmp(o->pipeline, "topology"));
	} else {
		CHECK(valid_pipeline(o->pipeline));
		if (o->nstores == 0)
			CHECK(!strcmp(o->pipeline, "cache"));
		else
			CHECK(strstr(o->pipeline, "posix") != NULL);
	}
	for (int i = 0; i < o->nstores; i++)
		CHECK(o->stores[i] && o->stores[i][0] && !strchr(o->stores[i], ':'));
	CHECK(o->mountpoint != NULL);
	CHECK(o->codec == CODEC_AUTO || o->codec == CODEC_NONE || o->codec == CODEC_ZSTD);
	CHECK(o->zstd_level >= -7 && o->zstd_level <= 22 && o->zstd_level != 0);
	CHECK(o->shuffle == 0 || o->shuffle == 1 || o->shuffle == 2 || o->shuffle == 4);
	CHECK(o->io == IO_AIO || o->io == IO_PSYNC);
	CHECK(o->io_depth <= 1024);
	/* a deadline now + ttl must not wrap on any clock (at most 2^62 ns) */
	CHECK(o->ttl_ms == TTL_NONE || (o->ttl_ms > 0 && o->ttl_ms <= INT64_MAX / 2 / 1000000));
	CHECK(o->layout == LAYOUT_NATIVE || o->layout == LAYOUT_UCM);
	CHECK(o->passthrough == PT_AUTO || o->passthrough == PT_ON || o->passthrough == PT_OFF);
	CHECK(o->mem_prefault <= o->mem_size && o->mem_prefault_pct <= 100);
	if (o->layout == LAYOUT_UCM)
		CHECK(!strstr(o->pipeline, "compress") && o->codec != CODEC_ZSTD);
	CHECK(memchr(o->fuse_opts, '\0', sizeof(o->fuse_opts)) != NULL);
	if (o->debug)
		CHECK(o->foreground);
}

/* options_format() into every buffer size up to the full length + 1. */
static void check_format_sizes(const struct ucm_options *o, const char *full, size_t n)
{
	for (size_t len = 1; len <= n + 1; len += len < 64 ? 1 : 61) {
		char *buf = (char *)fz_guarded(len);
		size_t got = options_format(o, buf, len);

		CHECK(fz_guard_ok((uint8_t *)buf, len));
		CHECK(got < len && got <= n);
		CHECK(strlen(buf) == got);
		CHECK(!memcmp(buf, full, got));
		free(buf);
	}
}

/* The lines of options_format() after store=, mountpoint= and topology= (whose values are
 * paths that may hold newlines): one per option. */
#define OPTION_LINES 20

/*
 * Turn the effective configuration back into a command line and parse it: the same text.
 * Values that are not option values (an unset block_size, the measured io_depth 0,
 * durable=0, shared=off) are given the way a user would give them.
 */
static void check_round_trip(const struct ucm_options *o, const char *text)
{
	char *list = calloc(1, TEXT_MAX + sizeof(o->fuse_opts) + 32 +
				(o->topology ? strlen(o->topology) : 0));
	char *copy = strdup(text);
	char *store = calloc(1, (size_t)UCM_MAX_STORES * 4096 + 8);
	char *argv[8], msg[256], *line, *lines[OPTION_LINES];
	struct ucm_options *o2 = malloc(sizeof(*o2));
	char *text2 = malloc(TEXT_MAX);
	int argc = 0, rc, k = OPTION_LINES;
	size_t n;

	CHECK(list && copy && store && o2 && text2);
	/* the last OPTION_LINES lines, from the end */
	n = strlen(copy);
	CHECK(n && copy[n - 1] == '\n');
	copy[--n] = '\0';
	while (k > 0) {
		line = strrchr(copy, '\n');
		CHECK(line);
		lines[--k] = line + 1;
		*line = '\0';
	}
	CHECK(!strncmp(lines[0], "mem_size=", 9));
	for (k = 0; k < OPTION_LINES; k++) {
		line = lines[k];
		CHECK(strchr(line, '='));
		if (!strcmp(line, "block_size=unset") || !strcmp(line, "io_depth=0") ||
		    !strcmp(line, "durable=0") || !strcmp(line, "shared=off") ||
		    !strcmp(line, "pipeline=topology"))
			continue;
		if (list[0])
			strcat(list, ",");
		strcat(list, !strcmp(line, "durable=1") ? "durable" : line);
	}
	if (o->topology) {
		strcat(list, ",topology=");
		strcat(list, o->topology);
	}
	if (o->fuse_opts[0]) {
		strcat(list, ",");
		strcat(list, o->fuse_opts);
	}
	if (!o->nstores)
		strcpy(store, "none");
	for (int i = 0; i < o->nstores; i++) {
		if (i)
			strcat(store, ":");
		strcat(store, o->stores[i]);
	}
	argv[argc++] = "ucmfs";
	if (o->foreground)
		argv[argc++] = o->debug ? "-d" : "-f";
	argv[argc++] = "-o";
	argv[argc++] = list;
	argv[argc++] = store;
	argv[argc++] = o->mountpoint;
	argv[argc] = NULL;
	rc = options_parse(o2, argc, argv, msg, sizeof(msg));
	if (rc != 0)
		fprintf(stderr, "round trip: '%s' -> %d (%s)\n", list, rc, msg);
	CHECK(rc == 0);
	options_format(o2, text2, TEXT_MAX);
	CHECK(!strcmp(text, text2));
	CHECK(o2->nstores == o->nstores);
	for (int i = 0; i < o->nstores; i++)
		CHECK(!strcmp(o->stores[i], o2->stores[i]));
	CHECK(!strcmp(o->mountpoint, o2->mountpoint));
	CHECK(!o->topology == !o2->topology);
	CHECK(!o->topology || !strcmp(o->topology, o2->topology));
	CHECK(!strcmp(o->fuse_opts, o2->fuse_opts));
	CHECK(o->foreground == o2->foreground && o->debug == o2->debug);
	options_free(o2);
	free(o2);
	free(text2);
	free(list);
	free(copy);
	free(store);
}

/* One option alone, as options_apply() sees it. */
static void check_apply(const char *opt)
{
	struct ucm_options o;
	char msg[256], key[80];
	size_t klen = strcspn(opt, "=");
	int rc;

	options_defaults(&o);
	msg[0] = '\0';
	rc = options_apply(&o, opt, msg, sizeof(msg));
	CHECK(rc == 0 || rc == -ENOENT || rc == -EINVAL);
	if (rc == -EINVAL && klen < 64) {
		snprintf(key, sizeof(key), "'%.*s'", (int)klen, opt);
		CHECK(strstr(msg, key) != NULL);
	}
	if (rc == 0)
		CHECK(msg[0] == '\0');
	options_free(&o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const size_t msglens[] = { 256, 1, 2, 8, 16, 40, 64, 128 };
	struct fin f = { data, size };
	size_t msglen = msglens[fin_u8(&f) % 8];
	char *args, *argv[MAX_ARGS + 2], *msg, *text;
	struct ucm_options o;
	int argc = 0, rc;
	bool newline;

	if (size > 16384)
		return 0;
	args = malloc(f.n + 1);
	CHECK(args);
	memcpy(args, f.p, f.n);
	args[f.n] = '\0';
	newline = memchr(args, '\n', f.n) != NULL;
	argv[argc++] = "ucmfs";
	for (char *p = args; p < args + f.n && argc <= MAX_ARGS; p += strlen(p) + 1)
		argv[argc++] = p;
	argv[argc] = NULL;

	msg = (char *)fz_guarded(msglen);
	rc = options_parse(&o, argc, argv, msg, msglen);
	CHECK(fz_guard_ok((uint8_t *)msg, msglen));
	CHECK(memchr(msg, '\0', msglen) != NULL);
	CHECK(rc == 0 || rc == 1 || rc == -EINVAL);
	if (rc == -EINVAL) {
		CHECK(msglen == 1 || msg[0] != '\0');
		CHECK(newline || !strchr(msg, '\n'));
	}
	if (rc == 1)
		CHECK(msglen == 1 || msg[0] != '\0');
	if (rc == 0) {
		size_t n;

		CHECK(msg[0] == '\0');
		check_consistent(&o);
		text = malloc(TEXT_MAX);
		CHECK(text);
		n = options_format(&o, text, TEXT_MAX);
		CHECK(n < TEXT_MAX - 1 && strlen(text) == n);
		check_format_sizes(&o, text, n);
		check_round_trip(&o, text);
		free(text);
	}
	options_free(&o);
	free(msg);

	/* every comma-separated piece of every argument, as one option */
	for (int i = 1; i < argc; i++) {
		char *save = NULL, *copy = strdup(argv[i]);

		CHECK(copy);
		for (char *opt = strtok_r(copy, ",", &save); opt; opt = strtok_r(NULL, ",", &save))
			check_apply(opt);
		free(copy);
	}
	free(args);
	return 0;
}
