/*
 * Byte-plane shuffle: split n bytes of w-byte values into w planes (all first bytes, then all
 * second bytes, ...). For fp16/bf16 KV data (w = 2) the sign/exponent plane is very regular and
 * the mantissa plane nearly random, so each compresses better on its own. Bytes past the last
 * whole value are copied unchanged at the end.
 */
#ifndef UCM_SHUFFLE_H
#define UCM_SHUFFLE_H

#include <stddef.h>

/* out = planes of in; width is 2 or 4; in and out must not overlap. */
void shuffle_bytes(void *out, const void *in, size_t n, unsigned width);
/* The inverse of shuffle_bytes(). */
void unshuffle_bytes(void *out, const void *in, size_t n, unsigned width);

#endif
