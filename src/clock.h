/* Clocks in nanoseconds. Deadlines run on the monotonic clock; stat times on the wall clock. */
#ifndef UCM_CLOCK_H
#define UCM_CLOCK_H

#include <stdint.h>

int64_t mono_ns(void);
int64_t wall_ns(void);

/* Convert a monotonic deadline to wall-clock time and back (for on-disk TTLs). */
int64_t mono_to_wall(int64_t mono);
int64_t wall_to_mono(int64_t wall);

#endif
