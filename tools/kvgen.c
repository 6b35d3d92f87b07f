/*
 * kvgen: reproducible KV-like bf16 data (see kvgen.h).
 *
 * Bit-exact reproducibility: every random draw is an integer (splitmix64), each value is
 * computed as (integer + integer offset) * per-channel factor, one float add then one float
 * multiply, so no compiler may fuse them into an FMA, and the bf16 rounding is done on the
 * bits. No libm.
 *
 * Built with -DKVGEN_MAIN it is also a command: `kvgen SIZE [SEED]` writes SIZE bytes to
 * stdout (to fill a block from the shell: `kvgen 16M 7 > /mnt/ucm/<id>`).
 */
#include "tools/kvgen.h"

#include <string.h>

/* Outlier channels: 1 in OUTLIER_EVERY on average, OUTLIER_MIN..+OUTLIER_SPAN times larger. */
#define OUTLIER_EVERY 64
#define OUTLIER_MIN 10
#define OUTLIER_SPAN 20
/* Per-channel scale: 2^e * (1 + m/128), e uniform in [SCALE_EXP_LO, SCALE_EXP_LO + 6]:
 * 2^-7 .. 2^0, a bit over two orders of magnitude. */
#define SCALE_EXP_LO (-7)
#define SCALE_EXP_SPAN 7

static inline uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline float float_of_bits(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/* Round a float to bf16, nearest even (no NaN can occur here). */
static inline uint16_t bf16_of(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

struct channel {
	float factor; /* scale of one unit of the integer variate */
	float offset; /* in units of the integer variate */
};

/*
 * Irwin-Hall sum of four 16-bit uniforms, centred: a normal-like integer variate with a
 * standard deviation of about 37,800 (65,536 / sqrt(3)).
 */
#define VARIATE_SIGMA 37837.0f

static inline int32_t variate(uint64_t r)
{
	return (int32_t)(r & 0xffff) + (int32_t)((r >> 16) & 0xffff) +
	       (int32_t)((r >> 32) & 0xffff) + (int32_t)(r >> 48) - 2 * 65535;
}

static void plane_channels(struct channel *ch, uint64_t seed, uint64_t plane)
{
	uint64_t s = seed ^ (plane * 0xd1b54a32d192ed03ull);

	splitmix64(&s);
	for (unsigned c = 0; c < KVGEN_CHANNELS; c++) {
		uint64_t r = splitmix64(&s);
		int e = SCALE_EXP_LO + (int)((r & 0xff) % SCALE_EXP_SPAN);
		uint32_t mant = (uint32_t)((r >> 8) & 0x7f) << 16;
		float scale = float_of_bits((uint32_t)(127 + e) << 23 | mant);
		float offset = 0.0f;

		if (((r >> 16) & 0xffff) % OUTLIER_EVERY == 0) {
			scale *= (float)(OUTLIER_MIN + (int)((r >> 32) % OUTLIER_SPAN));
			/* a constant offset of 1..4 sigma, either sign */
			offset = (float)(1 + (int)((r >> 40) % 4)) * VARIATE_SIGMA;
			if (r >> 63)
				offset = -offset;
		}
		ch[c].factor = scale * (1.0f / VARIATE_SIGMA);
		ch[c].offset = offset;
	}
}

void kvgen_fill(void *buf, size_t bytes, uint64_t seed)
{
	struct channel ch[KVGEN_CHANNELS];
	uint8_t *out = buf;
	size_t nvals = bytes / 2;
	uint64_t plane = 0;

	for (size_t v = 0; v < nvals; plane++) {
		uint64_t s = seed * 0x9e3779b97f4a7c15ull + plane;
		size_t end = v + KVGEN_CHANNELS * KVGEN_TOKENS;

		if (end > nvals)
			end = nvals;
		plane_channels(ch, seed, plane);
		splitmix64(&s);
		for (unsigned c = 0; v < end; v++) {
			float x = (float)variate(splitmix64(&s)) + ch[c].offset;
			uint16_t h = bf16_of(x * ch[c].factor);

			out[2 * v] = (uint8_t)h;
			out[2 * v + 1] = (uint8_t)(h >> 8);
			if (++c == KVGEN_CHANNELS)
				c = 0;
		}
	}
	if (bytes & 1) {
		uint64_t s = seed ^ bytes;

		out[bytes - 1] = (uint8_t)splitmix64(&s);
	}
}

#ifdef KVGEN_MAIN
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "src/units.h"

int main(int argc, char **argv)
{
	uint64_t size, seed = 0, done = 0;
	const size_t chunk = (size_t)KVGEN_PLANE_BYTES * 64;
	char *buf;

	if (argc < 2 || argc > 3 || parse_size(argv[1], &size) ||
	    (argc == 3 && parse_u64(argv[2], &seed))) {
		fprintf(stderr, "usage: kvgen SIZE [SEED]   (writes SIZE bytes of KV-like bf16 to "
				"stdout)\n");
		return 2;
	}
	/* generate in one pass so that the output equals kvgen_fill(size, seed) */
	buf = malloc(size ? size : 1);
	if (!buf) {
		fprintf(stderr, "kvgen: out of memory\n");
		return 1;
	}
	kvgen_fill(buf, size, seed);
	while (done < size) {
		size_t n = size - done < chunk ? (size_t)(size - done) : chunk;
		ssize_t w = write(1, buf + done, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			perror("kvgen: write");
			return 1;
		}
		done += (uint64_t)w;
	}
	free(buf);
	return 0;
}
#endif
