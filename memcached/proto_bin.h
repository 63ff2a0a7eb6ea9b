/* proto_bin.h - memcached's binary protocol front end.
 *
 * The connection hands proto_bin_process() the bytes it has buffered; the
 * function handles exactly one request (a 24-byte header plus its body) per
 * call and queues its reply in a response slot.  Splitting and validating a
 * request is a pure function, bin_parse_request(), so it can be tested
 * without a connection. */
#ifndef MC_PROTO_BIN_H
#define MC_PROTO_BIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bin_wire.h"
#include "conn.h"

/* A request header, decoded to host byte order. */
struct bin_header {
    uint8_t magic;
    uint8_t opcode;
    uint16_t keylen;
    uint8_t extlen;
    uint8_t datatype;
    uint16_t vbucket;
    uint32_t bodylen;
    uint32_t opaque;
    uint64_t cas;
};

/* A request split into its parts.  The pointers point into the parsed
 * buffer; extras/key/value are NULL when their length is 0. */
struct bin_request {
    struct bin_header hdr;
    const char *extras;
    const char *key;
    size_t nkey;
    const char *value;
    size_t nvalue;
    size_t head;           /* header + extras + key: read before the opcode is judged */
    size_t total;          /* header + body: bytes the request occupies */
};

enum bin_parse_result {
    BIN_PARSE_OK,          /* complete and valid: every field of out is set */
    BIN_PARSE_NEED_MORE,   /* incomplete; out->total is set once the header is in */
    BIN_PARSE_BAD_MAGIC,   /* not a request: the connection must be closed */
    BIN_PARSE_TOO_LARGE,   /* body longer than max_body; only out->hdr/total set */
    BIN_PARSE_EINVAL,      /* complete but lengths wrong for the opcode; hdr/total set */
    BIN_PARSE_UNKNOWN      /* complete, opcode not supported; hdr/total set */
};

/* A simple framing (cocytus-proxy uses it): validate and split the
 * request at buf[0..len).  max_body is the largest body accepted (see
 * bin_max_body).  Never reads past buf + len. */
enum bin_parse_result bin_parse_request(const char *buf, size_t len, size_t max_body,
                                        struct bin_request *out);

/* Largest request body accepted for an item size limit: anything longer is
 * refused with E2BIG without being buffered. */
size_t bin_max_body(size_t item_size_max);

/* The server's framing, memcached 1.6's reading, in order: a whole header (then the magic), the key
 * and extras (an opcode it knows whose key and extras do not fit the body
 * is refused before that), then the opcode and lengths are judged, then a
 * store too large for the item size limit is refused before its value is
 * read; only then is the value read. */
enum bin_frame_result {
    BF_OK,          /* complete and valid: every field of out is set */
    BF_NEED_MORE,   /* incomplete; out->head/total are set once the header is in */
    BF_BAD_MAGIC,   /* a header that is not a request (or whose key and extras would not
                     * fit memcached's buffer): close, dropping unsent replies */
    BF_BAD_LENGTHS, /* known opcode, key + extras longer than the body: memcached
                     * answers "unknown command" and closes */
    BF_EINVAL,      /* lengths wrong for the opcode: answer, then close */
    BF_UNKNOWN,     /* opcode not supported (or a verbosity of the wrong shape):
                     * answer, consume out->head, then drop hdr.bodylen more bytes
                     * as memcached does */
    BF_TOO_LARGE    /* a store memcached refuses as too large: key, extras and
                     * nvalue are set; consume out->head, drop nvalue bytes */
};

/* Validate and split the request at buf[0..len) (item size limit and -C
 * decide "too large" as memcached does).  Never reads past buf + len. */
enum bin_frame_result bin_frame_request(const char *buf, size_t len, size_t item_size_max,
                                        bool cas_enabled, struct bin_request *out);

/* Opcode classes. */
bool bin_opcode_known(uint8_t opcode);
bool bin_opcode_is_quiet(uint8_t opcode);
/* A read must wait for this connection's in-flight writes (get*, gat*, stat). */
bool bin_opcode_is_read(uint8_t opcode);

/* The status sent for an engine outcome of a request with this opcode
 * (e.g. ENG_NOT_STORED is "key exists" for add, "not found" for replace). */
uint16_t bin_status_from_engine(eng_status status, uint8_t opcode);

/* The protocol entry point (proto_process_fn, see conn.h). */
enum conn_parse proto_bin_process(struct conn *c, const char *buf, size_t len,
                                  size_t *consumed);

#endif
