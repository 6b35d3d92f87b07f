#include "src/units.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Leading digits of s into *v; returns the number of digits or -ERANGE. */
static int digits(const char *s, uint64_t *v)
{
	int n = 0;

	*v = 0;
	for (; s[n] >= '0' && s[n] <= '9'; n++) {
		unsigned d = (unsigned)(s[n] - '0');

		if (*v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		*v = *v * 10 + d;
	}
	return n;
}

int parse_u64(const char *s, uint64_t *out)
{
	uint64_t v;
	int n = digits(s, &v);

	if (n < 0)
		return n;
	if (n == 0 || s[n] != '\0')
		return -EINVAL;
	*out = v;
	return 0;
}

int parse_size(const char *s, uint64_t *out)
{
	uint64_t v;
	int n = digits(s, &v), shift = 0;
	const char *u;

	if (n < 0)
		return n;
	if (n == 0)
		return -EINVAL;
	u = s + n;
	switch (*u) {
	case 'k': case 'K': shift = 10; break;
	case 'm': case 'M': shift = 20; break;
	case 'g': case 'G': shift = 30; break;
	case 't': case 'T': shift = 40; break;
	case '\0': break;
	default: return -EINVAL;
	}
	if (shift) {
		u++;
		if (strcmp(u, "") && strcmp(u, "B") && strcmp(u, "iB"))
			return -EINVAL;
		if (v > (UINT64_MAX >> shift))
			return -ERANGE;
	}
	*out = v << shift;
	return 0;
}

int parse_duration_ms(const char *s, int64_t *out)
{
	static const struct {
		const char *name;
		uint64_t ms;
	} units[] = { { "", 1 }, { "ms", 1 }, { "s", 1000 }, { "m", 60000 },
		      { "h", 3600000 }, { "d", 86400000 } };
	uint64_t v;
	int n;

	if (!strcmp(s, "none")) {
		*out = TTL_NONE;
		return 0;
	}
	n = digits(s, &v);
	if (n < 0)
		return n;
	if (n == 0)
		return -EINVAL;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(s + n, units[i].name))
			continue;
		/* keep now + ms * 1e6 representable on either clock (deadlines are ns of
		 * CLOCK_MONOTONIC, on disk of CLOCK_REALTIME): at most 2^62 ns, 146 years */
		if (v > (uint64_t)INT64_MAX / 2 / units[i].ms / 1000000)
			return -ERANGE;
		*out = (int64_t)(v * units[i].ms);
		return 0;
	}
	return -EINVAL;
}

void format_size(uint64_t bytes, char *buf, size_t len)
{
	static const char suffix[] = "KMGT";
	int i = -1;

	while (i < 3 && bytes && (bytes & 1023) == 0) {
		bytes >>= 10;
		i++;
	}
	if (i < 0)
		snprintf(buf, len, "%llu", (unsigned long long)bytes);
	else
		snprintf(buf, len, "%llu%c", (unsigned long long)bytes, suffix[i]);
}
