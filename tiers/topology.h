/*
 * The tiers the daemon serves, assembled from its options: the chain `pipeline=` names, or
 * the tree of a topology file (`topology=FILE`). See tiers/topology.c.
 */
#ifndef UCM_TOPOLOGY_H
#define UCM_TOPOLOGY_H

#include "src/options.h"
#include "tiers/tier.h"

/*
 * Build the top tier. 0 with *out and, if tree is not NULL, *tree: the assembled tree on one
 * line, "pipe(cache > compress > posix)" (the caller frees it); or -errno with a one-line
 * reason logged (for a topology file: the file, the node and the field at fault).
 */
int topology_build(const struct ucm_options *o, struct tier **out, char **tree);

#endif
