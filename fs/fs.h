/* The FUSE filesystem: mount, serve until unmounted or signalled, then flush and return. */
#ifndef UCM_FS_H
#define UCM_FS_H

#include "src/options.h"
#include "tiers/tier.h"

/*
 * Mount o->mountpoint, daemonize unless o->foreground, start the pipeline's workers and serve
 * until unmount, SIGTERM or SIGINT; then write every committed block down and return.
 * Takes ownership of pipe; tree is its description for /.ucm/config (topology_build()).
 * Returns the process exit status (0 ok, 1 failure).
 */
int fs_run(const struct ucm_options *o, struct tier *pipe, const char *tree);

#endif
