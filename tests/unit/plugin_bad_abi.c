/* A tier library built for another tier ABI: the loader must refuse it (tests/unit/
 * check_plugin.c, tier_check_errors.sh). */
#include <tier.h>

static const struct tier_plugin plugin = {
	.abi = UCMFS_TIER_ABI + 1,
	.name = "bad_abi",
	.kind = TIER_KIND_STORE,
};

const struct tier_plugin *ucmfs_tier_plugin(void)
{
	return &plugin;
}
