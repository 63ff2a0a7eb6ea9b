/* urikey.c - memcached's URI encoding of keys (urikey.h). */
#include <stdbool.h>

#include "urikey.h"

static bool unreserved(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '-' || ch == '.' || ch == '_' || ch == '~';
}

size_t uri_key_encode(char *out, const char *key, size_t nkey)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (size_t i = 0; i < nkey; i++) {
        unsigned char ch = (unsigned char)key[i];
        if (unreserved(ch)) {
            out[o++] = (char)ch;
        } else {
            out[o++] = '%';
            out[o++] = hex[ch >> 4];
            out[o++] = hex[ch & 15];
        }
    }
    return o;
}
