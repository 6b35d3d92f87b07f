#include "src/clock.h"

#include <time.h>

static int64_t ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return timespec_ns(&ts);
}

int64_t mono_ns(void)
{
	return ns(CLOCK_MONOTONIC);
}

int64_t wall_ns(void)
{
	return ns(CLOCK_REALTIME);
}

int64_t mono_to_wall(int64_t mono)
{
	return mono - mono_ns() + wall_ns();
}

int64_t wall_to_mono(int64_t wall)
{
	return wall - wall_ns() + mono_ns();
}
