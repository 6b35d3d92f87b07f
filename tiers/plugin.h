/*
 * Tiers by name: the built-in ones (a table) and shared libraries loaded with dlopen, both
 * described by a struct tier_plugin (tiers/tier.h). See tiers/plugin.c.
 */
#ifndef UCM_PLUGIN_H
#define UCM_PLUGIN_H

#include <stddef.h>

#include "tiers/tier.h"

/* The built-in tiers, each defined beside its code. */
extern const struct tier_plugin tier_cache_plugin;
extern const struct tier_plugin tier_compress_plugin;
extern const struct tier_plugin tier_posix_plugin;

/* A name that is loaded from a file: it contains '/' or ends in ".so". */
int tier_name_is_path(const char *name);

/* A tier by name, found but not yet created. */
struct tier_ref {
	const struct tier_plugin *plugin;
	void *lib;               /* dlopen handle; NULL for a built-in tier */
};

/*
 * Find the tier `name` names: a built-in one, or a library by path. 0 with *ref; else -errno
 * with a one-line reason in err: -ENOENT (an unknown name: the reason lists the known ones;
 * or no such file), -ENOEXEC (not a loadable library, or no ucmfs_tier_plugin entry point),
 * -EPROTO (built for another UCMFS_TIER_ABI). Give ref back with tier_ref_put() unless it is
 * passed to tier_ref_create().
 */
int tier_ref_get(const char *name, struct tier_ref *ref, char *err, size_t errlen);
void tier_ref_put(struct tier_ref *ref);

/*
 * Create the tier with s; consumes ref (a loaded library stays loaded until the tier's
 * destroy has returned) and s->below (destroyed on failure). 0 with *out; else -errno with a
 * one-line reason in s->err: -EINVAL for a tier that lacks an operation its kind needs, or
 * the tier's own error.
 */
int tier_ref_create(struct tier_ref *ref, const struct tier_setup *s, struct tier **out);

/* "cache, compress, posix": the built-in names, for messages and the man page. */
const char *tier_builtin_names(void);

#endif
