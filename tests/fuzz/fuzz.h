/*
 * Helpers shared by the libFuzzer targets of tests/fuzz: a property check that aborts (so
 * that libFuzzer records the input as a crash, with or without NDEBUG), and a reader that
 * takes bytes and numbers off the front of the input, giving zeros once it is used up.
 */
#ifndef UCM_FUZZ_H
#define UCM_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                                       \
	do {                                                                              \
		if (!(cond)) {                                                            \
			fprintf(stderr, "%s:%d: property does not hold: %s\n", __FILE__,  \
				__LINE__, #cond);                                         \
			abort();                                                          \
		}                                                                         \
	} while (0)

struct fin {
	const uint8_t *p;
	size_t n;
};

static inline uint8_t fin_u8(struct fin *f)
{
	if (!f->n)
		return 0;
	f->n--;
	return *f->p++;
}

/* Little-endian numbers (each byte read in turn: the order of evaluation matters). */
static inline uint16_t fin_u16(struct fin *f)
{
	uint16_t lo = fin_u8(f);

	return (uint16_t)(lo | fin_u8(f) << 8);
}

static inline uint32_t fin_u32(struct fin *f)
{
	uint32_t lo = fin_u16(f);

	return lo | (uint32_t)fin_u16(f) << 16;
}

static inline uint64_t fin_u64(struct fin *f)
{
	uint64_t lo = fin_u32(f);

	return lo | (uint64_t)fin_u32(f) << 32;
}

/* A number in [0, n) (n > 0). */
static inline uint32_t fin_below(struct fin *f, uint32_t n)
{
	return fin_u32(f) % n;
}

/* A deterministic generator for what the input does not spell out. */
static inline uint64_t fz_rand(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* A heap buffer of n bytes followed by FZ_GUARD guard bytes; fz_guard_ok() checks them. */
#define FZ_GUARD 64

static inline uint8_t *fz_guarded(size_t n)
{
	uint8_t *p = malloc(n + FZ_GUARD);

	if (!p)
		abort();
	for (size_t i = 0; i < FZ_GUARD; i++)
		p[n + i] = (uint8_t)(0xa5 ^ i);
	return p;
}

static inline bool fz_guard_ok(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < FZ_GUARD; i++)
		if (p[n + i] != (uint8_t)(0xa5 ^ i))
			return false;
	return true;
}

#endif
