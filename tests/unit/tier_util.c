/* Helpers for the tier suites; see tier_util.h. */
#include "tests/unit/tier_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/clock.h"
#include "src/metrics.h"
#include "src/units.h"
#include "tests/unit/unit.h"
#include "tiers/cache.h"
#include "tiers/compress.h"
#include "tiers/pipeline.h"
#include "tiers/plugin.h"
#include "tiers/posix.h"
#include "tiers/stripe.h"

#define PIECE (256u << 10)

struct block_meta tu_meta(uint64_t size, int64_t deadline)
{
	struct block_meta m = { .size = size, .mtime = wall_ns(), .deadline = deadline };

	return m;
}

ssize_t tu_write(struct tier_handle *h, const struct blockid *id, uint64_t seed, uint64_t off,
		 uint64_t len)
{
	size_t bufsz = len < PIECE ? (size_t)len : PIECE;
	char *buf = malloc(bufsz ? bufsz : 1);
	uint64_t done = 0;

	ck_assert_ptr_nonnull(buf);
	while (done < len) {
		size_t n = len - done < bufsz ? (size_t)(len - done) : bufsz;
		ssize_t w;

		ut_fill(id, seed, buf, n, off + done);
		w = h->tier->ops->write(h, buf, n, off + done);
		if (w < 0) {
			free(buf);
			return w;
		}
		ck_assert_msg((size_t)w == n, "short write %zd of %zu", w, n);
		done += n;
	}
	free(buf);
	return (ssize_t)len;
}

int tu_put_chunked(struct tier *t, const struct blockid *id, uint64_t seed, uint64_t size,
		   size_t chunk, unsigned rflags, unsigned cflags, int64_t deadline)
{
	struct tier_handle *h;
	struct block_meta m;
	int rc = t->ops->reserve(t, id, rflags, size, &h);

	if (rc)
		return rc;
	if (!chunk)
		chunk = size ? size : 1;
	for (uint64_t off = 0; off < size; off += chunk) {
		uint64_t len = size - off < chunk ? size - off : chunk;
		ssize_t n = tu_write(h, id, seed, off, len);

		if (n < 0) {
			t->ops->abort(h);
			return (int)n;
		}
	}
	m = tu_meta(size, deadline);
	rc = t->ops->commit(h, &m, cflags, NULL);
	if (rc == -EEXIST && (cflags & TIER_COMMIT_LOADED))
		t->ops->abort(h); /* a refused load stays with its caller */
	return rc;
}

int tu_put(struct tier *t, const struct blockid *id, uint64_t seed, uint64_t size,
	   unsigned rflags, unsigned cflags, int64_t deadline)
{
	return tu_put_chunked(t, id, seed, size, PIECE, rflags, cflags, deadline);
}

void tu_check_read(struct tier_handle *h, const struct blockid *id, uint64_t seed,
		   uint64_t size, uint64_t off, uint64_t len)
{
	uint64_t want = off >= size ? 0 : (len < size - off ? len : size - off);
	char *buf = malloc(len ? len : 1);
	ssize_t n;
	long long bad;

	ck_assert_ptr_nonnull(buf);
	n = tier_read(h, buf, len, off);
	ck_assert_msg(n == (ssize_t)want, "%s: read(off %llu, len %llu) = %zd, want %llu",
		      ut_hex(id), (unsigned long long)off, (unsigned long long)len, n,
		      (unsigned long long)want);
	bad = ut_diff(id, seed, buf, (size_t)want, off);
	ck_assert_msg(bad < 0, "%s: read(off %llu, len %llu): wrong byte at offset %llu",
		      ut_hex(id), (unsigned long long)off, (unsigned long long)len,
		      (unsigned long long)off + (unsigned long long)bad);
	free(buf);
}

void tu_expect(struct tier *t, const struct blockid *id, uint64_t seed, uint64_t size)
{
	struct tier_handle *h;
	struct block_attr a;
	int rc = t->ops->open(t, id, 0, &h);

	ck_assert_msg(rc == 0, "%s: open = %d", ut_hex(id), rc);
	ck_assert_int_eq(h->tier->ops->stat(h, &a), 0);
	ck_assert_msg(a.size == size, "%s: size %llu, want %llu", ut_hex(id),
		      (unsigned long long)a.size, (unsigned long long)size);
	tu_check_read(h, id, seed, size, 0, size + 1);
	tier_close(h);
}

int tu_try_read(struct tier *t, const struct blockid *id, uint64_t seed, uint64_t size)
{
	struct tier_handle *h;
	struct block_attr a;
	char *buf;
	ssize_t n;
	int rc = t->ops->open(t, id, 0, &h);

	if (rc)
		return rc;
	h->tier->ops->stat(h, &a);
	if (a.size != size) {
		tier_close(h);
		return -EILSEQ;
	}
	buf = malloc(size + 1);
	ck_assert_ptr_nonnull(buf);
	n = tier_read(h, buf, size + 1, 0);
	if (n < 0)
		rc = (int)n;
	else if ((uint64_t)n != size || ut_diff(id, seed, buf, size, 0) >= 0)
		rc = -EILSEQ;
	free(buf);
	tier_close(h);
	return rc;
}

int tu_lookup(struct tier *t, const struct blockid *id, struct block_attr *attr)
{
	struct block_attr a;
	int rc = t->ops->lookup(t, id, attr ? attr : &a);

	ck_assert_msg(rc == 0 || rc == -ENOENT, "lookup %s = %d", ut_hex(id), rc);
	return rc;
}

struct collect {
	struct blockid *v;
	size_t n, cap;
};

static int collect_id(const struct blockid *id, void *arg)
{
	struct collect *c = arg;

	if (c->n == c->cap) {
		c->cap = c->cap ? 2 * c->cap : 16;
		c->v = realloc(c->v, c->cap * sizeof(*c->v));
		ck_assert_ptr_nonnull(c->v);
	}
	c->v[c->n++] = *id;
	return 0;
}

struct blockid *tu_list(struct tier *t, unsigned shard, size_t *n)
{
	struct collect c = { 0 };

	ck_assert_int_eq(t->ops->list_shard(t, shard, collect_id, &c), 0);
	*n = c.n;
	if (!c.v)
		c.v = malloc(sizeof(*c.v));
	return c.v;
}

void tu_settle(struct tier *t)
{
	if (t->ops->drain)
		t->ops->drain(t);
}

struct tier *tu_cache_policy(uint64_t capacity, unsigned dirty_wait_ms, enum ucm_policy policy)
{
	struct cache_config cc = { .capacity = capacity, .policy = policy,
				   .dirty_wait_ms = dirty_wait_ms };
	struct tier *t = NULL;

	ck_assert_int_eq(cache_create(&cc, &t), 0);
	return t;
}

struct tier *tu_cache(uint64_t capacity, unsigned dirty_wait_ms)
{
	return tu_cache_policy(capacity, dirty_wait_ms, POLICY_LRU);
}

struct tier *tu_posix(const char *dir, enum ucm_layout layout)
{
	return tu_posix_io(dir, layout, false);
}

struct tier *tu_posix_io(const char *dir, enum ucm_layout layout, bool aio)
{
	struct posix_config pc = { .root = dir, .layout = layout, .lock_wait_s = 0,
				   .aio = aio, .io_depth = 4, .io_timeout_ns = 30000000000LL };
	struct tier *t = NULL;
	int rc = posix_create(&pc, &t);

	ck_assert_msg(rc == 0, "posix_create(%s) = %d", dir, rc);
	return t;
}

int tu_plugin_create(const char *lib, const struct tier_param *param, size_t n, char *dir,
		     size_t dirlen, struct tier **out, char *err, size_t errlen)
{
	struct tier_param *all = calloc(n + 1, sizeof(*all));
	struct tier_setup setup = { .name = "store", .param = all, .nparam = n,
				    .max_block = 256ULL << 20, .err = err, .errlen = errlen };
	struct tier_ref ref;
	int rc;

	if (!all) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	dir[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		all[i] = param[i];
		if (!strcmp(param[i].key, "path"))
			dir = NULL;
	}
	if (dir) {
		ut_mkdtemp(dir, dirlen);
		all[setup.nparam++] = (struct tier_param){ "path", dir };
	}
	rc = tier_ref_get(lib, &ref, err, errlen);
	if (rc == 0 && ref.plugin->kind != TIER_KIND_STORE) {
		snprintf(err, errlen, "tier library %s describes %s, which is not a store", lib,
			 ref.plugin->name);
		tier_ref_put(&ref);
		rc = -EINVAL;
	}
	if (rc == 0)
		rc = tier_ref_create(&ref, &setup, out);
	free(all);
	return rc;
}

struct tier *tu_plugin_store(const char *lib, const struct tier_param *param, size_t n,
			     char *dir, size_t dirlen)
{
	struct tier *t = NULL;
	char err[512];
	int rc = tu_plugin_create(lib, param, n, dir, dirlen, &t, err, sizeof(err));

	ck_assert_msg(rc == 0, "%s", err);
	rc = tier_start(t);
	ck_assert_msg(rc == 0, "%s: start = %d", lib, rc);
	return t;
}

void tu_stack_open(struct tu_stack *s, const struct tu_stack_config *cfg)
{
	struct pipeline_config pc = {
		.block_size = cfg->block_size,
		.max_block = cfg->max_block ? cfg->max_block : 256ULL << 20,
		.default_ttl_ms = cfg->default_ttl_ms ? cfg->default_ttl_ms : TTL_NONE,
		.durable = cfg->durable,
		.dump_threads = 2,
		.load_threads = 4, /* two of them only load raw blocks, as with io=aio */
		.hurry = cfg->hurry,
	};
	unsigned wait = cfg->dirty_wait_ms ? cfg->dirty_wait_ms : (cfg->posix ? 5000 : 0);

	memset(s, 0, sizeof(*s));
	if (cfg->cache_capacity)
		s->cache = pc.cache = tu_cache(cfg->cache_capacity, cfg->posix ? wait : 0);
	if (cfg->posix) {
		struct tier *dirs[STRIPE_MAX];
		int n = cfg->nstores > 1 ? cfg->nstores : 1;
		char base[PATH_MAX], store[PATH_MAX];

		ut_mkdtemp(base, sizeof(base));
		for (int i = 0; i < n; i++) {
			snprintf(store, sizeof(store), "%s/store%d", base, i);
			if (i == 0)
				snprintf(s->dir, sizeof(s->dir), "%s", store);
			dirs[i] = tu_posix(store, cfg->layout);
		}
		if (n == 1)
			s->disk = dirs[0];
		else
			ck_assert_int_eq(stripe_create(dirs, n, &s->disk), 0);
		s->below = s->disk;
		if (cfg->compress) {
			struct compress_config zc = { .zstd = true, .level = 1,
						      .chunk_size = cfg->chunk_size };

			ck_assert_int_eq(compress_create(&zc, s->disk, &s->below), 0);
		}
		pc.below = s->below;
	}
	ck_assert_int_eq(pipeline_create(&pc, &s->t), 0);
	if (!cfg->no_start)
		ck_assert_int_eq(pipeline_start(s->t), 0);
}

void tu_stack_close(struct tu_stack *s)
{
	tier_destroy(s->t);
	s->t = s->cache = s->below = s->disk = NULL;
}

void tu_block_path(const char *store, enum ucm_layout layout, const struct blockid *id,
		   char *out, size_t len)
{
	char hex[BLOCKID_HEX_LEN + 1];

	blockid_format(id, hex);
	snprintf(out, len, "%s%s/%.3s/%s", store, layout == LAYOUT_NATIVE ? "/data" : "", hex,
		 hex);
}

void tu_hostname(char *out, size_t len)
{
	if (gethostname(out, len - 1) || !out[0])
		snprintf(out, len, "localhost");
	out[len - 1] = '\0';
	for (char *c = out; *c; c++)
		if (*c == '.' || *c == '/')
			*c = '_';
}

double tu_metric(struct tier *t, const char *name)
{
	struct metrics *m;
	char *text, *at;
	size_t len, n = strlen(name);
	double v = 0;

	ck_assert_int_eq(metrics_create(&m), 0);
	t->ops->metrics(t, m);
	ck_assert_int_eq(metrics_render(m, &text, &len), 0);
	for (at = text; (at = strstr(at, name)); at++) {
		char *val = at + n; /* "name value" or "name{labels} value" */

		if (at != text && at[-1] != '\n')
			continue;
		if (*val == '{')
			val = strstr(val, "} ") ? strstr(val, "} ") + 1 : NULL;
		if (val && *val == ' ')
			v = strtod(val + 1, NULL);
	}
	free(text);
	metrics_free(m);
	return v;
}
