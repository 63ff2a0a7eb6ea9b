/* mcnum.h - numbers read the way memcached 1.6 reads them.
 *
 * memcached splits a request line on spaces, ends each token with a NUL
 * and reads numbers with strtoull()/strtol() (its safe_strto* helpers):
 * leading white space and a sign are accepted, the number may be followed
 * by white space or by the end of the token (also an early NUL inside
 * it), an out-of-range value is refused, and an unsigned number whose
 * 64-bit pattern is negative as a signed number is refused when the token
 * holds a '-' ("-1"), but accepted when the negation wraps around to a
 * small value ("-18446744073709551615" is 1).  These functions reproduce
 * that on a token given as pointer and length, without copying it.
 *
 * Header-only and dependency-free: the protocol parsers (proto_text.c,
 * proto_meta.c), the incr/decr rule (arith.c) and cocytus-proxy use it. */
#ifndef MC_MCNUM_H
#define MC_MCNUM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* isspace() in the C locale. */
static inline bool mcnum_isspace(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* strtoull(s, &end, 10) over s[0..n): the magnitude in *mag, the sign in
 * *neg, *overflow if the magnitude does not fit 64 bits.  Returns the
 * index of the first byte after the digits, or 0 when there is no digit
 * (end == s). */
static inline size_t mcnum_scan(const char *s, size_t n, uint64_t *mag, bool *neg,
                                bool *overflow)
{
    size_t i = 0;
    *mag = 0;
    *neg = false;
    *overflow = false;
    while (i < n && mcnum_isspace(s[i]))
        i++;
    if (i < n && (s[i] == '+' || s[i] == '-')) {
        *neg = s[i] == '-';
        i++;
    }
    size_t first = i;
    while (i < n && s[i] >= '0' && s[i] <= '9') {
        uint64_t d = (uint64_t)(s[i] - '0');
        if (*mag > (UINT64_MAX - d) / 10)
            *overflow = true;
        else
            *mag = *mag * 10 + d;
        i++;
    }
    return i == first ? 0 : i;
}

/* What follows the number: the end of the token, a NUL (the end of the
 * C string memcached sees) or white space. */
static inline bool mcnum_tail_ok(const char *s, size_t n, size_t end)
{
    return end > 0 && (end == n || s[end] == '\0' || mcnum_isspace(s[end]));
}

/* Does the token, read as a C string (up to a NUL), contain c? */
static inline bool mcnum_has(const char *s, size_t n, char c)
{
    for (size_t i = 0; i < n && s[i] != '\0'; i++)
        if (s[i] == c)
            return true;
    return false;
}

/* memcached's safe_strtoull (and safe_strtoul: long is 64 bits here). */
static inline bool mcnum_u64(const char *s, size_t n, uint64_t *out)
{
    uint64_t mag;
    bool neg, overflow;
    size_t end = mcnum_scan(s, n, &mag, &neg, &overflow);
    if (overflow || !mcnum_tail_ok(s, n, end))
        return false;
    uint64_t v = neg ? (uint64_t)0 - mag : mag;
    if ((int64_t)v < 0 && mcnum_has(s, n, '-'))
        return false;
    *out = v;
    return true;
}

/* memcached's safe_strtol on a 64-bit long: refused outside its range. */
static inline bool mcnum_i64(const char *s, size_t n, int64_t *out)
{
    uint64_t mag;
    bool neg, overflow;
    size_t end = mcnum_scan(s, n, &mag, &neg, &overflow);
    if (overflow || !mcnum_tail_ok(s, n, end))
        return false;
    if (neg ? mag > (uint64_t)INT64_MAX + 1 : mag > (uint64_t)INT64_MAX)
        return false;
    *out = neg ? (int64_t)(0 - mag) : (int64_t)mag;
    return true;
}

#endif
