/* auth.h - proving the cluster secret: key derivation, nonces and proofs
 * shared by the replication links (link.c) and the admin handshake of the
 * text control commands ("cocytus auth", memcached/proto_text.c).
 *
 * The secret never travels.  A key is derived from it per purpose (links,
 * admin), so a proof made for one purpose is worthless for the other.  The
 * side that checks picks a fresh random nonce; the other side answers with
 * SipHash-2-4 of that nonce under the derived key.  A nonce is used for
 * one answer only, so a recorded answer cannot be replayed. */
#ifndef REPL_AUTH_H
#define REPL_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "siphash.h"

#define AUTH_KEY_SIZE SIPHASH_KEY_SIZE
#define AUTH_NONCE_SIZE 16
#define AUTH_NONCE_HEX (2 * AUTH_NONCE_SIZE)   /* hex digits of a nonce */
#define AUTH_PROOF_SIZE 8
#define AUTH_PROOF_HEX (2 * AUTH_PROOF_SIZE)   /* hex digits of a proof */

/* What a key is for; each purpose derives a different key. */
enum auth_purpose {
    AUTH_FOR_LINK,    /* the CHALLENGE/HELLO handshake of repl/link.c */
    AUTH_FOR_ADMIN    /* "cocytus auth" on a client port */
};

/* The 128-bit key of one purpose from the cluster secret (NULL: ""). */
void auth_derive_key(const char *secret, enum auth_purpose purpose, uint8_t key[AUTH_KEY_SIZE]);

/* n bytes from the kernel's random source.  0, or -1 (errno set). */
int auth_random(uint8_t *buf, size_t n);

/* Equality in time independent of where the bytes differ. */
bool auth_equal(const uint8_t *a, const uint8_t *b, size_t n);

/* The proof of msg[0..len) under key (8 bytes, little-endian SipHash). */
void auth_proof(const uint8_t key[AUTH_KEY_SIZE], const void *msg, size_t len,
                uint8_t proof[AUTH_PROOF_SIZE]);

/* ---- the admin handshake on a text port ----
 *
 *   client: cocytus auth              server: AUTH <32 hex digits: nonce>
 *   client: cocytus auth <16 hex>     server: OK  (the connection is admin)
 *                                     or CLIENT_ERROR authentication failed
 * The server's half keeps one struct auth_admin per connection. */
struct auth_admin {
    uint8_t nonce[AUTH_NONCE_SIZE];
    bool challenged;     /* a nonce was issued and not used yet */
    bool ok;             /* the peer proved the secret */
};

/* Issue a fresh nonce (replacing any unused one) as hex, NUL-terminated.
 * 0, or -1 when no random bytes could be had. */
int auth_admin_challenge(struct auth_admin *a, char hex[AUTH_NONCE_HEX + 1]);
/* Check the peer's hex proof against the issued nonce; the nonce is used
 * up either way.  true: the connection is admin from now on. */
bool auth_admin_verify(struct auth_admin *a, const uint8_t key[AUTH_KEY_SIZE],
                       const char *proof_hex);
/* The client's half: the hex proof for a nonce the server sent.  0, or -1
 * when nonce_hex is not AUTH_NONCE_HEX hex digits. */
int auth_admin_answer(const uint8_t key[AUTH_KEY_SIZE], const char *nonce_hex,
                      char proof_hex[AUTH_PROOF_HEX + 1]);
/* Both halves in one: the "cocytus auth <proof>" line (without CRLF) that
 * answers the reply line "AUTH <nonce>" under secret.  0, or -1 when the
 * reply is not such a line. */
int auth_admin_reply_line(const char *secret, const char *reply, char *line, size_t cap);

#endif
