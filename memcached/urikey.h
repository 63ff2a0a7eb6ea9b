/* urikey.h - memcached's URI encoding of keys in its dump and log lines
 * (lru_crawler metadump, watch): unreserved bytes (letters, digits, - . _
 * ~) as they are, every other byte %XX in upper case, so that a line never
 * holds a space, a newline or a byte a terminal would act on. */
#ifndef MC_URIKEY_H
#define MC_URIKEY_H

#include <stddef.h>

/* Writes key encoded at out (3 * nkey bytes at most); returns the length. */
size_t uri_key_encode(char *out, const char *key, size_t nkey);

#endif
