/* Clocks in nanoseconds. Deadlines run on the monotonic clock; stat times on the wall clock. */
#ifndef UCM_CLOCK_H
#define UCM_CLOCK_H

#include <stdint.h>
#include <time.h>

int64_t mono_ns(void);
int64_t wall_ns(void);

/* A timespec (a clock reading, a file's st_mtim) in nanoseconds. */
static inline int64_t timespec_ns(const struct timespec *t)
{
	return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

/* Convert a monotonic deadline to wall-clock time and back (for on-disk TTLs). */
int64_t mono_to_wall(int64_t mono);
int64_t wall_to_mono(int64_t wall);

#endif
