/*
 * Topologies: the tiers the daemon serves, as a tree.
 *
 * Three kinds of node. A *store* is one tier by name (tiers/plugin.c: built in, or a library
 * by path) with its options. A *pipe* is stages top to bottom, made into a pipeline: an
 * optional memory tier on top, stages in between, a store at the bottom. A *peer* splits
 * blocks between branches (each a store or a pipe, never a peer) by a route (tiers/peer.c).
 *
 * `pipeline=` is the shorthand for one pipe: "cache:compress:posix" is the pipe of those three
 * built-in tiers, with the mount's options. A topology file (JSON) gives the tree:
 *
 *	{"peer": {"route": "ttl", "bounds": ["10s"], "branches": [
 *		{"pipe": ["cache"]},
 *		{"pipe": [{"tier": "cache", "mem_size": "4G"}, "compress",
 *			  {"tier": "posix", "path": "/var/lib/ucmfs"}]}]}}
 *
 * A stage is a tier name, or an object with "tier" and that tier's options (the mount's
 * options are the defaults of a built-in tier's). A store that keeps how its blocks are
 * stored (the layout operation: posix) is always read through the compress stage, which
 * stores raw unless the pipe names it: blocks written compressed stay readable whatever the
 * pipe says, as they always were with pipeline=.
 *
 * JSON because Debian's libjansson parses it with the line and column of an error, and
 * because engines and their deployment tools already write it.
 */
#include "tiers/topology.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/log.h"
#include "src/units.h"
#include "tiers/peer.h"
#include "tiers/pipeline.h"
#include "tiers/plugin.h"

#define MAX_STAGES 8
#define TREE_MAX 4096
#define ERR_MAX 512
#define MAX_DIRS 64
#define AIO_WORKERS 8 /* io=aio: workers, of which two dump at once (ucmfs(8), io_depth) */

struct build {
	const struct ucm_options *o;
	char *dirs[MAX_DIRS];   /* directories of the posix stages so far (each has one user) */
	char dirs_where[MAX_DIRS][128];
	int ndirs;
	bool raw_store;         /* the store of the pipe being built keeps raw bytes (layout=ucm) */
	const char *file;       /* NULL for the pipeline= shorthand */
	char *tree;             /* the assembled tree on one line, for /.ucm/config */
	size_t tlen;
	char err[ERR_MAX];
};

/* One stage, before it is created. */
struct stage {
	char where[128];        /* its place in the file, "/peer/branches/1/pipe/2" */
	const char *name;       /* its tier */
	struct tier_param param[32];
	size_t nparam;
	char text[32][64];      /* numbers and booleans of param, as text */
	struct tier_ref ref;
};

static void tree_put(struct build *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Append to the one-line description of the tree (cut at TREE_MAX). */
static void tree_put(struct build *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!b->tree || b->tlen + 1 >= TREE_MAX)
		return;
	va_start(ap, fmt);
	n = vsnprintf(b->tree + b->tlen, TREE_MAX - b->tlen, fmt, ap);
	va_end(ap);
	b->tlen += (size_t)n < TREE_MAX - b->tlen ? (size_t)n : TREE_MAX - b->tlen - 1;
}

/* A failure at a place in the file (or of the shorthand): the one line that is logged. */
static int fail(struct build *b, const char *where, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int fail(struct build *b, const char *where, int rc, const char *fmt, ...)
{
	char why[ERR_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	if (b->file)
		snprintf(b->err, sizeof(b->err), "topology %s: %s: %s", b->file, where, why);
	else
		snprintf(b->err, sizeof(b->err), "%s", why);
	return rc;
}

/* --- stages ---------------------------------------------------------------------------- */

static int stage_from_json(struct build *b, json_t *j, const char *where, struct stage *st)
{
	const char *key;
	json_t *v;

	snprintf(st->where, sizeof(st->where), "%s", where);
	st->nparam = 0;
	if (json_is_string(j)) {
		st->name = json_string_value(j);
		return 0;
	}
	if (!json_is_object(j))
		return fail(b, where, -EINVAL, "a stage is a tier name or an object with \"tier\"");
	v = json_object_get(j, "tier");
	if (!json_is_string(v))
		return fail(b, where, -EINVAL, "field \"tier\" (a tier name or a library path) is "
			    "missing or not a string");
	st->name = json_string_value(v);
	json_object_foreach(j, key, v) {
		const char *val;
		char *t = st->text[st->nparam];

		if (!strcmp(key, "tier"))
			continue;
		if (st->nparam == sizeof(st->param) / sizeof(st->param[0]))
			return fail(b, where, -EINVAL, "more than %zu options", st->nparam);
		if (json_is_string(v))
			val = json_string_value(v);
		else if (json_is_integer(v))
			val = (snprintf(t, 64, "%lld", (long long)json_integer_value(v)), t);
		else if (json_is_true(v) || json_is_false(v))
			val = json_is_true(v) ? "true" : "false";
		else
			return fail(b, where, -EINVAL, "field \"%s\": a string, an integer or a "
				    "boolean", key);
		st->param[st->nparam].key = key;
		st->param[st->nparam].value = val;
		st->nparam++;
	}
	return 0;
}

/* Every option of a stage is one its tier takes (if it lists them). */
static int check_keys(struct build *b, const struct stage *st)
{
	const char *const *keys = st->ref.plugin->keys;

	for (size_t i = 0; keys && i < st->nparam; i++) {
		bool known = false;

		for (size_t k = 0; keys[k]; k++)
			known |= !strcmp(keys[k], st->param[i].key);
		if (!known)
			return fail(b, st->where, -EINVAL, "tier %s has no option \"%s\"", st->name,
				    st->param[i].key);
	}
	return 0;
}

/* The mount's options with a built-in stage's own applied (its stores are its own copies). */
static int stage_options(struct build *b, const struct stage *st, struct ucm_options *so)
{
	char opt[256], msg[256];
	int rc;

	*so = *b->o;
	so->nstores = 0;
	for (int i = 0; i < b->o->nstores; i++) {
		so->stores[i] = strdup(b->o->stores[i]);
		if (!so->stores[i])
			return -ENOMEM;
		so->nstores++;
	}
	for (size_t i = 0; i < st->nparam; i++) {
		const struct tier_param *p = &st->param[i];

		if (!strcmp(p->key, "path"))
			rc = options_store(so, p->value, msg, sizeof(msg));
		else if (snprintf(opt, sizeof(opt), "%s=%s", p->key, p->value) >= (int)sizeof(opt))
			rc = (snprintf(msg, sizeof(msg), "value of \"%s\" too long", p->key), -EINVAL);
		else
			rc = options_apply(so, opt, msg, sizeof(msg));
		if (rc)
			return fail(b, st->where, rc == -ENOENT ? -EINVAL : rc, "%s", msg);
	}
	options_derive(so);
	return 0;
}

/* A directory is the STORE of one posix stage: two would wait for each other's store lock. */
static int claim_dirs(struct build *b, const struct stage *st, const struct ucm_options *so)
{
	for (int i = 0; i < so->nstores; i++) {
		char *real = realpath(so->stores[i], NULL);
		const char *dir = real ? real : so->stores[i];

		for (int k = 0; k < b->ndirs; k++) {
			if (!strcmp(b->dirs[k], dir)) {
				fail(b, st->where, -EINVAL, "directory %s is already the STORE of %s",
				     dir, b->dirs_where[k][0] ? b->dirs_where[k] : "another stage");
				free(real);
				return -EINVAL;
			}
		}
		if (b->ndirs == MAX_DIRS) {
			free(real);
			return fail(b, st->where, -EINVAL, "more than %d STORE directories",
				    MAX_DIRS);
		}
		b->dirs[b->ndirs] = real ? real : strdup(dir);
		snprintf(b->dirs_where[b->ndirs], sizeof(b->dirs_where[0]), "%s", st->where);
		if (!b->dirs[b->ndirs])
			return -ENOMEM;
		b->ndirs++;
	}
	return 0;
}

static void stage_options_free(struct ucm_options *so)
{
	while (so->nstores > 0)
		free(so->stores[--so->nstores]);
}

static void stage_describe(struct build *b, const struct stage *st, bool first)
{
	tree_put(b, "%s%s", first ? "" : " > ", st->name);
	for (size_t i = 0; i < st->nparam; i++)
		tree_put(b, " %s=%s", st->param[i].key, st->param[i].value);
}

/* Create one stage over below (NULL for a store or the memory tier); consumes st->ref and
 * below. */
static int stage_create(struct build *b, struct stage *st, struct tier *below, struct tier **out)
{
	struct ucm_options so = { 0 };
	struct tier_setup s = {
		.name = st->where,
		.param = st->param,
		.nparam = st->nparam,
		.below = below,
		.max_block = b->o->block_size ? b->o->block_size : b->o->max_block,
		.durable = b->o->durable,
	};
	char err[ERR_MAX];
	int rc = check_keys(b, st);

	if (rc == 0 && !st->ref.lib) {
		rc = stage_options(b, st, &so);
		s.options = &so;
		if (rc == 0 && st->ref.plugin == &tier_posix_plugin) {
			rc = claim_dirs(b, st, &so);
			b->raw_store = so.layout == LAYOUT_UCM;
		}
		if (rc == 0 && st->ref.plugin == &tier_compress_plugin) {
			if (b->raw_store && so.codec == CODEC_ZSTD)
				rc = fail(b, st->where, -EINVAL, "the store below has layout=ucm, "
					  "which keeps raw bytes: compress=zstd is not possible");
			/* the store below decides, not the mount's layout=: over a raw store the
			 * encoder stores raw */
			so.layout = b->raw_store ? LAYOUT_UCM : LAYOUT_NATIVE;
		}
	}
	if (rc) {
		stage_options_free(&so);
		tier_ref_put(&st->ref);
		tier_destroy(below);
		return rc;
	}
	s.err = err;
	s.errlen = sizeof(err);
	rc = tier_ref_create(&st->ref, &s, out);
	stage_options_free(&so);
	if (rc && err[0])
		return fail(b, st->where, rc, "%s", err);
	return rc; /* a built-in tier without a reason here has logged it (posix) */
}

/* --- pipes ----------------------------------------------------------------------------- */

/* Make n stages (top to bottom) into a pipeline. Consumes every stage's ref. */
static int pipe_create(struct build *b, struct stage *st, int n, struct tier **out)
{
	const struct ucm_options *o = b->o;
	struct pipeline_config pc = {
		.block_size = o->block_size,
		.max_block = o->max_block,
		.default_ttl_ms = o->ttl_ms,
		.durable = o->durable,
		.shared = o->shared_ms >= 0,
		.hurry = !o->sync_inline,
		/* psync: each worker has one disk IO in flight; aio: io_depth bounds the IOs
		 * of the engine, two dumps at once keep the 2 vCPUs measured here busy, and
		 * AIO_WORKERS workers in all keep many loads in flight (readers of cold blocks) */
		.dump_threads = o->io == IO_PSYNC && o->io_depth ? o->io_depth : 2,
		.load_threads = o->io == IO_PSYNC && o->io_depth ? o->io_depth : AIO_WORKERS,
	};
	struct stage decoder = { .name = "compress" };
	int top = 0, rc = 0, i;
	bool named_compress = false;

	for (i = 0; i < n && rc == 0; i++) {
		enum tier_kind k = st[i].ref.plugin->kind;

		if (k == TIER_KIND_MEMORY && i > 0)
			rc = fail(b, st[i].where, -EINVAL, "the memory tier %s can only be the "
				  "first stage of a pipe", st[i].name);
		else if (k == TIER_KIND_STORE && i != n - 1)
			rc = fail(b, st[i].where, -EINVAL, "the store %s can only be the last stage "
				  "of a pipe", st[i].name);
		else if (k == TIER_KIND_STAGE && i == n - 1)
			rc = fail(b, st[i].where, -EINVAL, "%s passes blocks to a tier below it: "
				  "a store must follow it", st[i].name);
		named_compress |= st[i].ref.plugin == &tier_compress_plugin;
	}
	if (rc) {
		for (i = 0; i < n; i++)
			tier_ref_put(&st[i].ref);
		return rc;
	}
	if (st[0].ref.plugin->kind == TIER_KIND_MEMORY)
		top = 1;
	b->raw_store = false;
	tree_put(b, "pipe(");
	for (i = 0; i < n; i++)
		stage_describe(b, &st[i], i == 0);
	tree_put(b, ")");
	/* bottom up: the store, then each stage over what is below it */
	for (i = n - 1; i >= top && rc == 0; i--) {
		rc = stage_create(b, &st[i], pc.below, &pc.below);
		if (rc == 0 && i == n - 1 && pc.below->ops->layout && !named_compress) {
			/* read through the decoder, which stores raw */
			snprintf(decoder.where, sizeof(decoder.where), "%s", st[i].where);
			decoder.ref.plugin = &tier_compress_plugin;
			decoder.nparam = 1;
			decoder.param[0] = (struct tier_param){ "compress", "none" };
			rc = stage_create(b, &decoder, pc.below, &pc.below);
		}
		if (rc)
			pc.below = NULL;
	}
	if (rc) {
		while (i-- > 0)
			tier_ref_put(&st[i].ref);
		return rc;
	}
	if (top) {
		rc = stage_create(b, &st[0], NULL, &pc.cache);
		if (rc) {
			tier_destroy(pc.below);
			return rc;
		}
	}
	rc = pipeline_create(&pc, out);
	if (rc)
		return fail(b, st[0].where, rc, "cannot make a pipeline: %s", strerror(-rc));
	return 0;
}

static int stages_get(struct build *b, struct stage *st, int n)
{
	char err[ERR_MAX];

	for (int i = 0; i < n; i++) {
		int rc = tier_ref_get(st[i].name, &st[i].ref, err, sizeof(err));

		if (rc) {
			fail(b, st[i].where, rc, "%s", err);
			while (i-- > 0)
				tier_ref_put(&st[i].ref);
			return rc;
		}
	}
	return 0;
}

/* The pipeline= shorthand: its words are the stages, the mount's options theirs. */
static int shorthand(struct build *b, struct tier **out)
{
	struct stage *st = calloc(MAX_STAGES, sizeof(*st));
	const char *w = b->o->pipeline;
	int n = 0, rc;

	if (!st)
		return -ENOMEM;
	while (*w && n < MAX_STAGES) {
		size_t len = strcspn(w, ":");

		snprintf(st[n].where, sizeof(st[n].where), "pipeline=%s", b->o->pipeline);
		snprintf(st[n].text[0], sizeof(st[n].text[0]), "%.*s", (int)len, w);
		st[n].name = st[n].text[0];
		n++;
		w += len + (w[len] == ':');
	}
	rc = stages_get(b, st, n);
	if (rc == 0)
		rc = pipe_create(b, st, n, out);
	free(st);
	return rc;
}

/* --- the file -------------------------------------------------------------------------- */

static int node_create(struct build *b, json_t *j, const char *where, bool branch,
		       struct tier **out);

/* A pipe of the stages in arr; alone: the one stage of a store node, named by where itself. */
static int pipe_from_json(struct build *b, json_t *arr, const char *where, bool alone,
			  struct tier **out)
{
	struct stage *st;
	char w[128];
	size_t n = json_array_size(arr);
	int rc = 0;

	if (!json_is_array(arr) || n == 0)
		return fail(b, where, -EINVAL, "a pipe is a list of one or more stages");
	if (n > MAX_STAGES)
		return fail(b, where, -EINVAL, "a pipe has at most %d stages", MAX_STAGES);
	st = calloc(n, sizeof(*st));
	if (!st)
		return -ENOMEM;
	for (size_t i = 0; i < n && rc == 0; i++) {
		if (alone)
			snprintf(w, sizeof(w), "%s", where);
		else
			snprintf(w, sizeof(w), "%s/%zu", where, i);
		rc = stage_from_json(b, json_array_get(arr, i), w, &st[i]);
	}
	if (rc == 0)
		rc = stages_get(b, st, (int)n);
	if (rc == 0)
		rc = pipe_create(b, st, (int)n, out);
	free(st);
	return rc;
}

static int bound_parse(struct build *b, enum peer_route route, json_t *v, const char *where,
		       uint64_t *out)
{
	char text[64];
	const char *s = text;
	int64_t ms;

	if (json_is_integer(v) && json_integer_value(v) >= 0)
		snprintf(text, sizeof(text), "%lld", (long long)json_integer_value(v));
	else if (json_is_string(v))
		s = json_string_value(v);
	else
		return fail(b, where, -EINVAL, "a bound is a %s", route == ROUTE_TTL ?
			    "duration (\"10s\")" : "size (\"4M\")");
	if (route == ROUTE_SIZE) {
		if (parse_size(s, out))
			return fail(b, where, -EINVAL, "'%s' is not a size (4M, 512K)", s);
		return 0;
	}
	if (parse_duration_ms(s, &ms) || ms == TTL_NONE || ms <= 0)
		return fail(b, where, -EINVAL, "'%s' is not a duration (500ms, 10s, 5m)", s);
	*out = (uint64_t)ms;
	return 0;
}

static int peer_from_json(struct build *b, json_t *j, const char *where, struct tier **out)
{
	static const char *const routes[] = { [ROUTE_TTL] = "ttl", [ROUTE_SIZE] = "size" };
	struct peer_config pc = { .default_ttl_ms = b->o->ttl_ms };
	json_t *route = json_object_get(j, "route"), *bounds = json_object_get(j, "bounds");
	json_t *branches = json_object_get(j, "branches"), *v;
	char w[160];
	const char *key;
	size_t n;
	int rc = 0;

	if (!json_is_object(j))
		return fail(b, where, -EINVAL, "a peer is an object with \"route\", \"bounds\" and "
			    "\"branches\"");
	json_object_foreach(j, key, v)
		if (strcmp(key, "route") && strcmp(key, "bounds") && strcmp(key, "branches"))
			return fail(b, where, -EINVAL, "a peer has no field \"%s\" (route, bounds, "
				    "branches)", key);
	if (!json_is_string(route))
		return fail(b, where, -EINVAL, "field \"route\" (ttl or size) is missing");
	if (!strcmp(json_string_value(route), "ttl"))
		pc.route = ROUTE_TTL;
	else if (!strcmp(json_string_value(route), "size"))
		pc.route = ROUTE_SIZE;
	else
		return fail(b, where, -EINVAL, "field \"route\": '%s' is not a route (ttl, size)",
			    json_string_value(route));
	n = json_array_size(branches);
	if (!json_is_array(branches) || n < 2 || n > PEER_MAX)
		return fail(b, where, -EINVAL, "field \"branches\" is a list of 2 to %d stores or "
			    "pipes", PEER_MAX);
	if (!json_is_array(bounds) || json_array_size(bounds) != n - 1)
		return fail(b, where, -EINVAL, "field \"bounds\" is a list of %zu %s, one fewer "
			    "than the branches", n - 1, pc.route == ROUTE_TTL ? "durations" : "sizes");
	tree_put(b, "peer(route=%s bounds=", routes[pc.route]);
	for (size_t i = 0; i + 1 < n; i++) {
		snprintf(w, sizeof(w), "%s/peer/bounds/%zu", where, i);
		rc = bound_parse(b, pc.route, json_array_get(bounds, i), w, &pc.bound[i]);
		if (rc)
			return rc;
		if (i && pc.bound[i] <= pc.bound[i - 1])
			return fail(b, w, -EINVAL, "bounds must grow from one to the next");
		tree_put(b, "%s%llu%s", i ? "," : "", (unsigned long long)pc.bound[i],
			 pc.route == ROUTE_TTL ? "ms" : "");
	}
	for (size_t i = 0; i < n && rc == 0; i++) {
		snprintf(w, sizeof(w), "%s/peer/branches/%zu", where, i);
		tree_put(b, "; %zu: ", i);
		rc = node_create(b, json_array_get(branches, i), w, true, &pc.branch[pc.n]);
		if (rc == 0)
			pc.n++;
	}
	if (rc) {
		while (pc.n > 0)
			tier_destroy(pc.branch[--pc.n]);
		return rc;
	}
	tree_put(b, ")");
	rc = peer_create(&pc, out);
	if (rc)
		return fail(b, where, rc, "cannot make the peer: %s", strerror(-rc));
	return 0;
}

static int node_create(struct build *b, json_t *j, const char *where, bool branch,
		       struct tier **out)
{
	const char *kind = "";
	char w[160];
	json_t *v = NULL;

	if (!json_is_object(j) || json_object_size(j) != 1)
		return fail(b, where, -EINVAL, "a node is an object with one field: \"store\", "
			    "\"pipe\" or \"peer\"");
	json_object_foreach(j, kind, v)
		break;
	snprintf(w, sizeof(w), "%s/%s", where, kind);
	if (!strcmp(kind, "pipe"))
		return pipe_from_json(b, v, w, false, out);
	if (!strcmp(kind, "store")) {
		/* a store alone is a pipe of one stage (a pipeline without memory) */
		json_t *one = json_pack("[O]", v);
		int rc;

		if (!one)
			return -ENOMEM;
		rc = pipe_from_json(b, one, w, true, out);
		json_decref(one);
		return rc;
	}
	if (!strcmp(kind, "peer")) {
		if (branch)
			return fail(b, w, -EINVAL, "a branch of a peer is a store or a pipe, not "
				    "another peer");
		return peer_from_json(b, v, where, out);
	}
	return fail(b, where, -EINVAL, "unknown node \"%s\" (store, pipe, peer)", kind);
}

static int from_file(struct build *b, struct tier **out)
{
	json_error_t e;
	json_t *root = json_load_file(b->file, JSON_REJECT_DUPLICATES, &e);
	int rc;

	if (!root) {
		if (e.line < 0)
			return fail(b, "", -ENOENT, "%s", e.text);
		return fail(b, "", -EINVAL, "line %d, column %d: %s", e.line, e.column, e.text);
	}
	rc = node_create(b, root, "", false, out);
	json_decref(root);
	return rc;
}

int topology_build(const struct ucm_options *o, struct tier **out, char **tree)
{
	struct build b = { .o = o, .file = o->topology };
	int rc;

	if (tree) {
		b.tree = calloc(1, TREE_MAX);
		if (!b.tree)
			return -ENOMEM;
	}
	rc = b.file ? from_file(&b, out) : shorthand(&b, out);
	while (b.ndirs > 0)
		free(b.dirs[--b.ndirs]);
	if (rc) {
		if (b.err[0])
			log_err("%s", b.err);
		free(b.tree);
		return rc;
	}
	if (tree)
		*tree = b.tree;
	return 0;
}
