/*
 * Tiers by name.
 *
 * A stage of a topology names its tier. A name with a '/' or ending in ".so" is a shared
 * library: it is opened with dlopen (RTLD_LOCAL: two plugins may use the same symbol names),
 * its ucmfs_tier_plugin() entry point describes it, and its ABI version must be the daemon's.
 * Any other name is looked up in the table of built-in tiers, which describe themselves with
 * the same struct tier_plugin.
 *
 * A library must stay loaded while its tier exists, and no longer: the tier gets a copy of its
 * ops table whose destroy calls the library's and then unloads it. Handles reach their ops
 * through their tier, so they use the copy as well.
 */
#include "tiers/plugin.h"

#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/metrics.h"

static const struct tier_plugin *const builtin[] = {
	&tier_cache_plugin,
	&tier_compress_plugin,
	&tier_posix_plugin,
};
#define NBUILTIN (sizeof(builtin) / sizeof(builtin[0]))

const char *tier_builtin_names(void)
{
	return "cache, compress, posix";
}

int tier_name_is_path(const char *name)
{
	size_t n = strlen(name);

	return strchr(name, '/') || (n > 3 && !strcmp(name + n - 3, ".so"));
}

static int load(const char *path, struct tier_ref *ref, char *err, size_t len)
{
	tier_plugin_fn entry;
	const struct tier_plugin *p;
	void *lib;

	/* NAME.so without a '/' is searched for as dlopen(3) does (LD_LIBRARY_PATH, the
	 * system's library directories); a path must exist */
	if (strchr(path, '/') && access(path, F_OK)) {
		snprintf(err, len, "tier library %s: %s", path, strerror(errno));
		return -ENOENT;
	}
	lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		snprintf(err, len, "tier library %s cannot be loaded: %s", path, dlerror());
		return -ENOEXEC;
	}
	*(void **)&entry = dlsym(lib, UCMFS_TIER_ENTRY);
	if (!entry) {
		snprintf(err, len, "tier library %s has no entry point %s()", path,
			 UCMFS_TIER_ENTRY);
		dlclose(lib);
		return -ENOEXEC;
	}
	p = entry();
	if (!p || p->abi != UCMFS_TIER_ABI) {
		snprintf(err, len, "tier library %s is built for tier ABI %u, this daemon has %u",
			 path, p ? p->abi : 0, UCMFS_TIER_ABI);
		dlclose(lib);
		return -EPROTO;
	}
	if (!p->create || !p->name ||
	    (p->kind != TIER_KIND_STORE && p->kind != TIER_KIND_STAGE)) {
		snprintf(err, len, "tier library %s describes no store or stage it can create",
			 path);
		dlclose(lib);
		return -ENOEXEC;
	}
	ref->plugin = p;
	ref->lib = lib;
	return 0;
}

int tier_ref_get(const char *name, struct tier_ref *ref, char *err, size_t len)
{
	ref->plugin = NULL;
	ref->lib = NULL;
	if (tier_name_is_path(name))
		return load(name, ref, err, len);
	for (size_t i = 0; i < NBUILTIN; i++) {
		if (!strcmp(builtin[i]->name, name)) {
			ref->plugin = builtin[i];
			return 0;
		}
	}
	snprintf(err, len, "unknown tier '%s' (built in: %s; a library is named by a path or "
		 "NAME.so)", name, tier_builtin_names());
	return -ENOENT;
}

void tier_ref_put(struct tier_ref *ref)
{
	if (ref->lib)
		dlclose(ref->lib);
	ref->lib = NULL;
	ref->plugin = NULL;
}

/* The ops a store or a stage cannot do without (see tiers/tier.h). */
static const char *missing_op(const struct tier_ops *o)
{
#define NEED(op) if (!o->op) return #op
	NEED(destroy); NEED(lookup); NEED(present); NEED(open); NEED(read); NEED(stat);
	NEED(close); NEED(reserve); NEED(write); NEED(truncate); NEED(commit); NEED(abort);
	NEED(remove); NEED(touch); NEED(set_deadline); NEED(sync); NEED(list_shard); NEED(usage);
#undef NEED
	return NULL;
}

/* A loaded tier's ops: the library's, with a destroy that also unloads it (and metrics from
 * its usage if it has none of its own). */
struct loaded_ops {
	struct tier_ops ops;
	void (*destroy)(struct tier *t);
	void *lib;
	char label[160];        /* stage="<its place in the topology>" */
};

static struct loaded_ops *loaded_of(struct tier *t)
{
	return (struct loaded_ops *)((char *)t->ops - offsetof(struct loaded_ops, ops));
}

static void loaded_metrics(struct tier *t, struct metrics *m)
{
	struct loaded_ops *l = loaded_of(t);
	struct tier_usage u = { 0 };

	t->ops->usage(t, &u);
	metrics_gauge(m, "ucmfs_stage_blocks", "Blocks a stage loaded from a library holds.",
		      l->label, (double)u.blocks);
	metrics_gauge(m, "ucmfs_stage_bytes", "Bytes a stage loaded from a library holds.",
		      l->label, (double)u.used);
	metrics_gauge(m, "ucmfs_stage_capacity_bytes", "Capacity of a stage loaded from a library.",
		      l->label, (double)u.capacity);
}

static void loaded_destroy(struct tier *t)
{
	struct loaded_ops *l = loaded_of(t);

	l->destroy(t);
	dlclose(l->lib);
	free(l);
}

int tier_ref_create(struct tier_ref *ref, const struct tier_setup *s, struct tier **out)
{
	const struct tier_plugin *p = ref->plugin;
	struct loaded_ops *l = NULL;
	struct tier *t = NULL;
	const char *op;
	int rc;

	if (ref->lib) {
		l = calloc(1, sizeof(*l));
		if (!l) {
			tier_destroy(s->below);
			tier_ref_put(ref);
			return -ENOMEM;
		}
	}
	s->err[0] = '\0';
	rc = p->create(s, &t);
	if (rc == 0 && (!t || !t->ops)) {
		snprintf(s->err, s->errlen, "tier %s returned no tier", p->name);
		rc = -EINVAL;
	} else if (rc == 0 && p->kind != TIER_KIND_MEMORY && (op = missing_op(t->ops))) {
		snprintf(s->err, s->errlen, "tier %s has no %s operation", p->name, op);
		if (t->ops->destroy)
			tier_destroy(t);
		rc = -EINVAL;
	} else if (rc && !s->err[0] && ref->lib) {
		/* (a built-in tier that leaves it empty has logged its reason itself) */
		snprintf(s->err, s->errlen, "tier %s cannot start: %s", p->name, strerror(-rc));
	}
	if (rc) {
		free(l);
		tier_ref_put(ref);
		return rc;
	}
	if (l) {
		l->ops = *t->ops;
		l->destroy = t->ops->destroy;
		l->lib = ref->lib;
		l->ops.destroy = loaded_destroy;
		if (!l->ops.metrics) {
			/* the name goes into a label: no quote or backslash may break it */
			size_t n = (size_t)snprintf(l->label, sizeof(l->label), "stage=\"");

			for (const char *c = s->name; c && *c && n + 3 < sizeof(l->label); c++)
				if (*c != '"' && *c != '\\' && *c != '\n')
					l->label[n++] = *c;
			snprintf(l->label + n, sizeof(l->label) - n, "\"");
			l->ops.metrics = loaded_metrics;
		}
		t->ops = &l->ops;
	}
	ref->lib = NULL;
	*out = t;
	return 0;
}
