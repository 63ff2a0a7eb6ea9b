/* siphash.h - SipHash-2-4 (Aumasson and Bernstein, 2012): a keyed 64-bit
 * hash, used as the proof in the link handshake (link.c): the connector
 * hashes the acceptor's nonce and its identity under a key derived from the
 * cluster secret. */
#ifndef REPL_SIPHASH_H
#define REPL_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

#define SIPHASH_KEY_SIZE 16

/* SipHash-2-4 of data[0..len) under the 128-bit key (k0 = key[0..8) and
 * k1 = key[8..16), both little-endian, as in the paper). */
uint64_t siphash24(const uint8_t key[SIPHASH_KEY_SIZE], const void *data, size_t len);

#endif
