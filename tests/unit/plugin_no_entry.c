/* A shared library that is no tier library: it lacks the entry point ucmfs_tier_plugin()
 * (tests/unit/check_plugin.c, tier_check_errors.sh). */
int ucmfs_tier_plugin_v2(void);

int ucmfs_tier_plugin_v2(void)
{
	return 1;
}
