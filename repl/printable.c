/* printable.c - peer bytes for log lines (printable.h says why). */
#include "printable.h"

char *printable_copy(char *out, size_t outlen, const void *p, size_t len)
{
    const unsigned char *in = p;
    size_t n = len < outlen - 1 ? len : outlen - 1;
    for (size_t i = 0; i < n; i++)
        out[i] = (in[i] >= 0x20 && in[i] < 0x7f) ? (char)in[i] : '?';
    out[n] = '\0';
    return out;
}
