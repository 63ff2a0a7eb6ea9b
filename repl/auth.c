/* auth.c - proving the cluster secret (auth.h): purpose-bound keys derived
 * from the secret with SipHash under fixed public keys, random nonces from
 * getrandom(), 64-bit SipHash proofs, and the text form of the admin
 * handshake ("cocytus auth" / "AUTH <nonce>" / "cocytus auth <proof>"). */
#include "auth.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

/* Fixed, public SipHash keys that turn the secret into a purpose's key.
 * The link pair is the one links always used (docs/wire-format.md). */
static const uint8_t link_kdf0[SIPHASH_KEY_SIZE] = "cocytus-kv-key-0";
static const uint8_t link_kdf1[SIPHASH_KEY_SIZE] = "cocytus-kv-key-1";
static const uint8_t admin_kdf0[SIPHASH_KEY_SIZE] = "cocytus-kv-adm-0";
static const uint8_t admin_kdf1[SIPHASH_KEY_SIZE] = "cocytus-kv-adm-1";

static void store_u64le(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

void auth_derive_key(const char *secret, enum auth_purpose purpose, uint8_t key[AUTH_KEY_SIZE])
{
    const char *s = secret ? secret : "";
    size_t n = strlen(s);
    bool link = purpose == AUTH_FOR_LINK;
    store_u64le(key, siphash24(link ? link_kdf0 : admin_kdf0, s, n));
    store_u64le(key + 8, siphash24(link ? link_kdf1 : admin_kdf1, s, n));
}

int auth_random(uint8_t *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom(buf + got, n - got, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        got += (size_t)r;
    }
    return 0;
}

bool auth_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    uint8_t diff = 0;
    for (size_t i = 0; i < n; i++)
        diff |= a[i] ^ b[i];
    return diff == 0;
}

void auth_proof(const uint8_t key[AUTH_KEY_SIZE], const void *msg, size_t len,
                uint8_t proof[AUTH_PROOF_SIZE])
{
    store_u64le(proof, siphash24(key, msg, len));
}

/* ---- hex ---- */

static void to_hex(const uint8_t *p, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Exactly 2n hex digits then the end of the string -> n bytes.  0 or -1. */
static int from_hex(const char *s, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int hi = hex_digit(s[2 * i]);
        int lo = hi < 0 ? -1 : hex_digit(s[2 * i + 1]);
        if (lo < 0)
            return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return s[2 * n] == '\0' ? 0 : -1;
}

/* ---- the admin handshake ---- */

int auth_admin_challenge(struct auth_admin *a, char hex[AUTH_NONCE_HEX + 1])
{
    a->challenged = false;
    if (auth_random(a->nonce, sizeof(a->nonce)) < 0)
        return -1;
    a->challenged = true;
    to_hex(a->nonce, sizeof(a->nonce), hex);
    return 0;
}

bool auth_admin_verify(struct auth_admin *a, const uint8_t key[AUTH_KEY_SIZE],
                       const char *proof_hex)
{
    uint8_t got[AUTH_PROOF_SIZE], want[AUTH_PROOF_SIZE];
    bool had = a->challenged;
    a->challenged = false;
    if (!had || from_hex(proof_hex, got, sizeof(got)) < 0)
        return false;
    auth_proof(key, a->nonce, sizeof(a->nonce), want);
    bool good = auth_equal(got, want, sizeof(want));
    if (good)
        a->ok = true;
    return good;
}

int auth_admin_answer(const uint8_t key[AUTH_KEY_SIZE], const char *nonce_hex,
                      char proof_hex[AUTH_PROOF_HEX + 1])
{
    uint8_t nonce[AUTH_NONCE_SIZE], proof[AUTH_PROOF_SIZE];
    if (from_hex(nonce_hex, nonce, sizeof(nonce)) < 0)
        return -1;
    auth_proof(key, nonce, sizeof(nonce), proof);
    to_hex(proof, sizeof(proof), proof_hex);
    return 0;
}

int auth_admin_reply_line(const char *secret, const char *reply, char *line, size_t cap)
{
    uint8_t key[AUTH_KEY_SIZE];
    char proof[AUTH_PROOF_HEX + 1];
    if (strncmp(reply, "AUTH ", 5) != 0)
        return -1;
    auth_derive_key(secret, AUTH_FOR_ADMIN, key);
    if (auth_admin_answer(key, reply + 5, proof) < 0)
        return -1;
    int n = snprintf(line, cap, "cocytus auth %s", proof);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}
