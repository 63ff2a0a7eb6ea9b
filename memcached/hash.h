/* hash.h - hashing of key bytes for the item hash table.
 *
 * One function: a 64-bit non-cryptographic hash (MurmurHash64A, Austin
 * Appleby's 64-bit MurmurHash2 variant) that reads the key eight bytes at a
 * time and mixes the result so that the low bits, which pick the bucket, are
 * well distributed. */
#ifndef MC_HASH_H
#define MC_HASH_H

#include <stddef.h>
#include <stdint.h>

uint64_t hash_key(const void *key, size_t len);

#endif
