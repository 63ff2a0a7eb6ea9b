/* arith.h - memcached's incr/decr arithmetic, shared by every engine: a
 * stored value counts as a number when memcached's strtoull reading takes
 * it (optional white space and '+', decimal digits that fit in 64 bits,
 * anything after them only after white space; see mcnum.h); incr wraps
 * modulo 2^64 and decr stops at 0.  memcached rewrites the item in place
 * when the new number is not longer than the stored value and nobody else
 * holds the item, padding it with spaces to the old length; otherwise the
 * new item holds the number alone. */
#ifndef MC_ARITH_H
#define MC_ARITH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"

#define ARITH_DIGITS_MAX 20

/* Values memcached calls non-numeric before it even compares a request's
 * cas: empty ones, and ones its slab allocator stores in chunks (an item
 * of more than 512 KB, its header counted as in engine_too_large()).
 * Other values are judged after the cas (arith_parse_u64). */
static inline bool arith_rejected_early(size_t nkey, size_t nbytes, uint32_t flags,
                                        bool cas_enabled)
{
    return nbytes == 0 || engine_needs_chunks(cas_enabled, nkey, nbytes, flags);
}

/* Parse a stored value s[0..n) as incr/decr do; false if it is not a number. */
bool arith_parse_u64(const char *s, size_t n, uint64_t *out);
/* The result of INCR or DECR by delta. */
uint64_t arith_apply(eng_op op, uint64_t value, uint64_t delta);
/* Write v in decimal into buf (ARITH_DIGITS_MAX bytes, no terminator);
 * returns the length. */
size_t arith_format_u64(char *buf, uint64_t v);
/* Length of the stored result: oldlen when the item is rewritten in place
 * (in_place_ok: nobody holds it) and v's digits fit, else the digits. */
size_t arith_result_len(uint64_t v, size_t oldlen, bool in_place_ok);
/* Writes v's digits and pads with spaces up to len bytes (len at least
 * the number of digits). */
void arith_write(char *dst, uint64_t v, size_t len);

#endif
