/* arith.c - incr/decr arithmetic shared by the engines (see arith.h). */
#include "arith.h"

bool arith_parse_u64(const char *s, size_t n, uint64_t *out)
{
    if (n == 0 || n > ARITH_DIGITS_MAX)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
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
