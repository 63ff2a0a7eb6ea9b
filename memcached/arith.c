/* arith.c - incr/decr arithmetic shared by the engines (see arith.h). */
#include "arith.h"

#include <string.h>

#include "mcnum.h"

bool arith_parse_u64(const char *s, size_t n, uint64_t *out)
{
    return mcnum_u64(s, n, out);
}

uint64_t arith_apply(eng_op op, uint64_t value, uint64_t delta)
{
    if (op == ENG_OP_INCR)
        return value + delta;            /* wraps modulo 2^64 */
    return delta > value ? 0 : value - delta;
}

size_t arith_format_u64(char *buf, uint64_t v)
{
    char tmp[ARITH_DIGITS_MAX];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        buf[i] = tmp[n - 1 - i];
    return n;
}

size_t arith_result_len(uint64_t v, size_t oldlen, bool in_place_ok)
{
    char tmp[ARITH_DIGITS_MAX];
    size_t n = arith_format_u64(tmp, v);
    return in_place_ok && n <= oldlen ? oldlen : n;
}

void arith_write(char *dst, uint64_t v, size_t len)
{
    size_t n = arith_format_u64(dst, v);
    if (len > n)
        memset(dst + n, ' ', len - n);
}
