/* arith.h - memcached's incr/decr arithmetic, shared by every engine: a
 * stored value counts as a number only if it is 1..20 decimal digits that
 * fit in 64 bits; incr wraps modulo 2^64 and decr stops at 0. */
#ifndef MC_ARITH_H
#define MC_ARITH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"

#define ARITH_DIGITS_MAX 20

/* Parse s[0..n) as an unsigned decimal; false if it is not one. */
bool arith_parse_u64(const char *s, size_t n, uint64_t *out);
/* The result of INCR or DECR by delta. */
uint64_t arith_apply(eng_op op, uint64_t value, uint64_t delta);
/* Write v in decimal into buf (ARITH_DIGITS_MAX bytes, no terminator);
 * returns the length. */
size_t arith_format_u64(char *buf, uint64_t v);

#endif
