/*
 * client-example MNT: what an engine does with ucmfs for one request (the README's C
 * example, compiled). The request's blocks are named by ids; the leading ones that are
 * cached are loaded, the rest are computed and stored. Run twice: the second run loads all.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ucmfs.h"

#define NBLOCKS 8
#define BLOCK_BYTES (1u << 20)

int main(int argc, char **argv)
{
	static char kv[NBLOCKS][BLOCK_BYTES]; /* the engine's KV buffers */
	ucmfs_id ids[NBLOCKS];
	struct ucmfs_lookup_result r;
	struct ucmfs *u;
	int rc;

	if (argc != 2) {
		fprintf(stderr, "usage: client-example MNT\n");
		return 2;
	}
	for (int i = 0; i < NBLOCKS; i++) /* a real engine hashes the block's tokens */
		for (int k = 0; k < UCMFS_ID_LEN; k++)
			ids[i][k] = (uint8_t)(0xe0 + i + k);

	rc = ucmfs_open(argv[1], &u);
	if (rc) {
		fprintf(stderr, "ucmfs_open: %s\n", strerror(-rc));
		return 1;
	}
	rc = ucmfs_lookup(u, ids, NBLOCKS, &r, NULL); /* one round trip */
	for (size_t i = 0; rc == 0 && i < r.prefix; i++) /* load what is cached... */
		if (ucmfs_get(u, ids[i], kv[i], BLOCK_BYTES, 0, 0) != BLOCK_BYTES)
			rc = -1;
	for (size_t i = r.prefix; rc == 0 && i < NBLOCKS; i++) { /* ...store what was computed */
		memset(kv[i], (int)i, BLOCK_BYTES);
		if (ucmfs_put(u, ids[i], kv[i], BLOCK_BYTES, NULL) < 0)
			rc = -1;
	}
	ucmfs_close(u);
	printf("%zu of %d blocks loaded, %zu stored\n", r.prefix, NBLOCKS, NBLOCKS - r.prefix);
	return rc ? 1 : 0;
}
