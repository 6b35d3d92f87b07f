/* Sizes and durations as users write them on the command line and in xattrs. */
#ifndef UCM_UNITS_H
#define UCM_UNITS_H

#include <stddef.h>
#include <stdint.h>

/*
 * Parse a SIZE: decimal digits with an optional suffix K, M, G or T (powers of 1024; lowercase
 * accepted, an optional trailing 'B' or 'iB' too: 4K, 4k, 4KiB, 4KB). Returns 0, or -EINVAL for an
 * empty string, a sign, a fraction, an unknown suffix or trailing garbage, -ERANGE on overflow.
 */
int parse_size(const char *s, uint64_t *out);

/* TTL_NONE: "no deadline" wherever a TTL or duration is held. */
#define TTL_NONE INT64_MIN

/*
 * Parse a DURATION into milliseconds: digits with a unit ms, s, m, h or d ("500ms", "30s",
 * "10m", "2h"); plain digits are milliseconds; "none" gives TTL_NONE. Returns 0, -EINVAL or
 * -ERANGE like parse_size().
 */
int parse_duration_ms(const char *s, int64_t *out);

/* Parse plain unsigned decimal digits (no sign, no suffix). 0, -EINVAL or -ERANGE. */
int parse_u64(const char *s, uint64_t *out);

/* Format a byte count the way parse_size() reads it back exactly ("1G", "1536K", "4097"). */
void format_size(uint64_t bytes, char *buf, size_t len);

#endif
