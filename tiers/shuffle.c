#include "tiers/shuffle.h"

#include <stdint.h>
#include <string.h>

void shuffle_bytes(void *out, const void *in, size_t n, unsigned width)
{
	const uint8_t *s = in;
	uint8_t *d = out;
	size_t m = n / width;

	if (width == 2) {
		uint8_t *lo = d, *hi = d + m;

		for (size_t i = 0; i < m; i++) {
			lo[i] = s[2 * i];
			hi[i] = s[2 * i + 1];
		}
	} else {
		for (size_t i = 0; i < m; i++)
			for (unsigned k = 0; k < width; k++)
				d[k * m + i] = s[width * i + k];
	}
	memcpy(d + m * width, s + m * width, n - m * width);
}

void unshuffle_bytes(void *out, const void *in, size_t n, unsigned width)
{
	const uint8_t *s = in;
	uint8_t *d = out;
	size_t m = n / width;

	if (width == 2) {
		const uint8_t *lo = s, *hi = s + m;

		for (size_t i = 0; i < m; i++) {
			d[2 * i] = lo[i];
			d[2 * i + 1] = hi[i];
		}
	} else {
		for (size_t i = 0; i < m; i++)
			for (unsigned k = 0; k < width; k++)
				d[width * i + k] = s[k * m + i];
	}
	memcpy(d + m * width, s + m * width, n - m * width);
}
