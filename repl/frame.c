/* frame.c - the 16-byte frame header (frame.h): encode, decode, check.
 *
 * The header is magic, type, flags, payload length and the CRC-32C of the
 * payload, little-endian.  Decoding checks everything that can be checked
 * without the payload (magic, known type, length bound) so a receiver can
 * reject garbage before buffering anything; frame_payload_ok then checks the
 * CRC once the payload has arrived. */
#include "frame.h"

#include "crc32c.h"

static void store_u16le(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void store_u32le(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint16_t load_u16le(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t load_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void frame_header_encode_crc(uint8_t out[FRAME_HEADER_SIZE], uint16_t type, uint16_t flags,
                             uint32_t length, uint32_t crc)
{
    store_u32le(out, FRAME_MAGIC);
    store_u16le(out + 4, type);
    store_u16le(out + 6, flags);
    store_u32le(out + 8, length);
    store_u32le(out + 12, crc);
}

void frame_header_encode(uint8_t out[FRAME_HEADER_SIZE], uint16_t type, uint16_t flags,
                         const void *payload, uint32_t length)
{
    frame_header_encode_crc(out, type, flags, length, crc32c(0, payload, length));
}

static bool frame_type_known(uint16_t type)
{
    return type >= FT_CHALLENGE && type <= FT_LAST;
}

int frame_header_decode(const uint8_t in[FRAME_HEADER_SIZE], struct frame_header *h)
{
    h->magic = load_u32le(in);
    h->type = load_u16le(in + 4);
    h->flags = load_u16le(in + 6);
    h->length = load_u32le(in + 8);
    h->crc = load_u32le(in + 12);
    if (h->magic != FRAME_MAGIC)
        return -1;
    if (!frame_type_known(h->type))
        return -1;
    if (h->length > FRAME_MAX_PAYLOAD)
        return -1;
    return 0;
}

bool frame_payload_ok(const struct frame_header *h, const void *payload)
{
    return crc32c(0, payload, h->length) == h->crc;
}

const char *frame_type_name(uint16_t type)
{
    switch (type) {
    case FT_CHALLENGE: return "CHALLENGE";
    case FT_HELLO: return "HELLO";
    case FT_WELCOME: return "WELCOME";
    case FT_REJECT: return "REJECT";
    case FT_RECORD: return "RECORD";
    case FT_ACK: return "ACK";
    case FT_STABLE: return "STABLE";
    case FT_PING: return "PING";
    case FT_REQUEST: return "REQUEST";
    case FT_REPLY: return "REPLY";
    case FT_CONTROL: return "CONTROL";
    case FT_PONG: return "PONG";
    default: return "?";
    }
}
