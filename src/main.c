/* ucmfs: a FUSE filesystem for the KV-cache blocks of LLM inference engines. See ucmfs(8). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/fs.h"
#include "src/buf.h"
#include "src/log.h"
#include "src/options.h"
#include "tiers/topology.h"

int main(int argc, char **argv)
{
	struct ucm_options o;
	struct tier *pipe;
	char *tree = NULL;
	char msg[2048];
	int rc;

	rc = options_parse(&o, argc, argv, msg, sizeof(msg));
	if (rc == 1) {
		fputs(msg, stdout);
		return 0;
	}
	if (rc) {
		fprintf(stderr, "ucmfs: %s\n", rc == -ENOMEM ? "out of memory" : msg);
		options_free(&o);
		return 2;
	}
	log_set_level(o.log_level);
	if (!o.foreground)
		log_use_syslog(LOG_LVL_WARN);
	/* passthrough needs the memory tier's blocks in files, before the first is made */
	if (o.passthrough != PT_OFF && buf_use_files(msg, sizeof(msg))) {
		if (o.passthrough == PT_ON) {
			fprintf(stderr, "ucmfs: passthrough=on: block memory cannot be files of "
					"%s\n", msg);
			options_free(&o);
			return 1;
		}
		log_info("passthrough off: block memory cannot be files of %s", msg);
		o.passthrough = PT_OFF;
	}
	rc = topology_build(&o, &pipe, &tree);
	if (rc) {
		options_free(&o);
		return 1;
	}
	rc = fs_run(&o, pipe, tree);
	free(tree);
	options_free(&o);
	return rc;
}
