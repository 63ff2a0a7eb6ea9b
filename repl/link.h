/* link.h - authenticated, framed TCP links between the processes of a group.
 *
 * A connector (data process, primary) dials an acceptor (parity process,
 * backup).  The acceptor opens with CHALLENGE (a random nonce); the
 * connector answers HELLO with its identity and a keyed hash of the nonce
 * and identity under the cluster secret; the acceptor checks cluster name,
 * group and proof, asks its owner whether it takes this peer, and answers
 * WELCOME (with the last xid it holds from that peer) or REJECT.  After
 * that both sides exchange frames (frame.h).  A connector whose link drops
 * redials with a short back-off until link_close().  Everything runs on the
 * caller's libevent loop; no threads. */
#ifndef REPL_LINK_H
#define REPL_LINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct event;
struct event_base;
struct link;
struct link_listener;

#define LINK_NAME_MAX 64

enum link_role {
    LINK_ROLE_DATA = 1,
    LINK_ROLE_PARITY = 2,
    LINK_ROLE_PRIMARY = 3,
    LINK_ROLE_BACKUP = 4,
    LINK_ROLE_PLAIN = 5,        /* a plain process of a cluster (control link) */
    LINK_ROLE_COORDINATOR = 6   /* reserved: the coordinator never dials */
};

/* link_listen's group for a listener that takes peers of every group (the
 * coordinator's control links); the accept callback sees the peer's group. */
#define LINK_GROUP_ANY UINT32_MAX

struct link_identity {
    char cluster[LINK_NAME_MAX];
    uint32_t group;
    uint8_t role;       /* enum link_role */
    uint32_t index;     /* index of the process within its role in the group */
};

struct link_callbacks {
    /* Handshake complete.  On the connector, peer_xid is the WELCOME's xid. */
    void (*on_up)(struct link *l, uint64_t peer_xid, void *ctx);
    /* A frame arrived (type >= FT_RECORD).  payload is valid during the call. */
    void (*on_frame)(struct link *l, uint16_t type, const uint8_t *payload,
                     uint32_t len, void *ctx);
    /* The link went down (why: text for the log).  A connector redials.
     * Only called for a link that was up (on_up was called).  An accepted
     * link is freed right after on_down returns: forget the pointer there
     * (calling link_close on it inside on_down is allowed, not needed). */
    void (*on_down)(struct link *l, const char *why, void *ctx);
    /* Optional: everything queued so far has been handed to the kernel
     * (what semi-synchronous replication waits for). */
    void (*on_drained)(struct link *l, void *ctx);
    /* Optional: the frames of one read batch were all delivered (the
     * socket had no more bytes for now).  A receiver answers the whole
     * batch here with one frame (a cumulative ACK) instead of one per
     * frame; it leaves with the rest of this loop iteration's output. */
    void (*on_read_end)(struct link *l, void *ctx);
    /* Optional: a PONG moved the lease start forward (link_lease_stamp_ms):
     * reads waiting for a lease may go on. */
    void (*on_lease)(struct link *l, void *ctx);
};

/* Callback rules.  Callbacks run on the event loop thread, never from inside
 * a link_* call.  Inside any callback you may link_send on any link and
 * link_close any link, including the one being called back (its memory is
 * freed once the callback returns; no further callbacks on it).  Frames are
 * delivered in order; on_frame's payload is only valid during the call.
 * On the connector, link_peer() has the cluster and group but role and
 * index 0 (WELCOME does not carry the acceptor's identity).
 * Links send with MSG_NOSIGNAL: no SIGPIPE from a dead peer. */

/* Called by a listener for each peer whose HELLO verified.  Return true to
 * take it: fill *cb and *ctx, and *welcome_xid (last xid held from that
 * peer); on_up follows at once with that xid.  Return false to reject
 * (reason goes into the REJECT frame; l is freed soon after: do not keep
 * it).  An accepted link belongs to the owner (link_close it, or drop it
 * in on_down); freeing the listener does not affect accepted links.  Do not
 * free the listener from inside accept. */
typedef bool (*link_accept_fn)(void *owner, const struct link_identity *peer,
                               struct link *l, struct link_callbacks *cb, void **ctx,
                               uint64_t *welcome_xid, const char **reason);

struct link *link_connect(struct event_base *base, const char *host, int port,
                          const struct link_identity *me, const char *secret,
                          const struct link_callbacks *cb, void *ctx);

struct link_listener *link_listen(struct event_base *base, const char *host, int port,
                                  const char *cluster, uint32_t group, const char *secret,
                                  link_accept_fn accept, void *owner);
int link_listener_port(const struct link_listener *ll);
void link_listener_free(struct link_listener *ll);

/* Queue a frame; the payload may be given in pieces.  Returns 0, or -1 when
 * the link is not up (the frame is dropped: the sender resends after
 * reconnecting).  type must be FT_RECORD..FT_LAST and the payload at most
 * FRAME_MAX_PAYLOAD bytes (else -1).  The payload is copied once into the
 * link's output buffer; frames queued during one loop iteration leave
 * in one send(). */
int link_send(struct link *l, uint16_t type, const void *payload, uint32_t len);
int link_sendv(struct link *l, uint16_t type, const struct iovec *iov, int iovcnt);
/* link_send for a payload whose CRC-32C the caller computed already
 * (crc32c(0, payload, len)): a sender putting the same record on M links
 * computes it once. */
int link_send_crc(struct link *l, uint16_t type, const void *payload, uint32_t len,
                  uint32_t crc);
bool link_is_up(const struct link *l);
/* A monotonic clock in ms that counts a suspend (CLOCK_BOOTTIME), for
 * timing links (how long one has been down) and leases. */
uint64_t link_now_ms(void);
/* While up, send a PING (stamped, delivered to on_frame) every ms (0: never,
 * the default), so that a peer that hears nothing for several periods
 * knows this end is gone or cut off even when no data flows: a crashed
 * host or a partition closes no socket.  Both ends of a replication link
 * set it. */
#define LINK_PING_MS 250
/* A peer that sends keepalives and was not heard for this long missed
 * several: gone, or cut off. */
#define LINK_SILENT_MS (4 * LINK_PING_MS)
void link_set_keepalive(struct link *l, unsigned ms);
/* How long (ms, at now_ms = link_now_ms()) an up link has received
 * nothing; 0 when it is not up, or before the peer's first PING (a peer
 * built without keepalives is silent whenever it is idle). */
uint64_t link_silent_ms(const struct link *l, uint64_t now_ms);
/* Leases.  A stamped PING (both ends send them with keepalives) carries
 * the sender's link_now_ms(); the peer answers it at once with a PONG
 * carrying the same clock.  So the peer was alive and took this link's
 * frames at some moment after our clock read link_lease_stamp_ms(l): the
 * largest clock answered, kept while down if the peer closed the
 * connection cleanly, 0 once our end dropped one or a reset ended it (or
 * before any answer).  A data
 * process serves reads only within a lease from each parity process;
 * a parity process that fences it first waits until every lease it may
 * have given ran out: link_peer_stamp_ms(l) (when the peer's latest clock
 * arrived here, 0 before one on this connection) plus the lease, unless
 * link_peer_closed(l) (the connection ended by the peer's close or
 * reset, which ends its lease with it: in on_down, or on an up link whose
 * end is the next thing to read). */
#define LINK_READ_LEASE_MS 700
/* What the granting end waits: the lease and a margin for clock rates.
 * Both are under LINK_SILENT_MS, so that fencing a process that went
 * silent (hung, cut off) waits for nothing: its lease ran out by the time
 * its silence is noticed.  Only a process fenced while it still talked
 * to us costs the wait. */
#define LINK_LEASE_GRANT_MS (LINK_READ_LEASE_MS + 50)
uint64_t link_lease_stamp_ms(const struct link *l);
/* Arm timer ev to fire at deadline_ms on the link_now_ms() clock (at once
 * if that is past): the waits for a lease to run out. */
void link_timer_at(struct event *ev, uint64_t deadline_ms);
uint64_t link_peer_stamp_ms(const struct link *l);
bool link_peer_closed(const struct link *l);
/* When bytes (handshake included) last arrived on l, on any of its
 * connections (link_now_ms()); 0 if none ever did.  Still valid in
 * on_down: a link that timed out was silent long before.  A connector
 * whose peer answers its redials (a CHALLENGE, then perhaps a REJECT)
 * hears from an alive process. */
uint64_t link_last_heard_ms(const struct link *l);
/* Bytes queued but not yet handed to the kernel. */
size_t link_output_pending(const struct link *l);
const struct link_identity *link_peer(const struct link *l);
const char *link_peer_name(const struct link *l);   /* "host:port" for logs */
/* The last failure seen on this link ("" if none), e.g. "rejected by the
 * peer: bad proof (wrong secret?)"; for status output and tests. */
const char *link_last_error(const struct link *l);
/* Close and free (no more callbacks). */
void link_close(struct link *l);

/* Output goes in the loop's batched writes (repl/sendq.h) instead of
 * one send() per flush; NULL (the default) sends at once.  A listener
 * passes its sendq to the links it accepts. */
struct sendq;
void link_set_sendq(struct link *l, struct sendq *q);
void link_listener_set_sendq(struct link_listener *ll, struct sendq *q);

/* TLS on the link's TCP connections (linktls.h; a Unix socket to a peer
 * on this host goes without): set before the loop first runs after
 * link_connect or link_listen, with a context that outlives the link.
 * Both ends must agree: a TLS end and a plain one never come up. */
struct linktls_ctx;
void link_set_tls(struct link *l, struct linktls_ctx *ctx);
void link_listener_set_tls(struct link_listener *ll, struct linktls_ctx *ctx);
/* The current connection runs TLS. */
bool link_is_tls(const struct link *l);

/* The HELLO payload (docs/wire-format.md section 3): the identity bytes
 * (u8 clen, clen bytes of cluster name, u32 group, u8 role, u32 index)
 * followed by the 8-byte proof.  Pure functions, used by the handshake and
 * exposed for the tests and the frame fuzzer (test/fuzz/fuzz_frame.c). */
#define LINK_HELLO_IDENT_MAX (1 + (LINK_NAME_MAX - 1) + 4 + 1 + 4)
#define LINK_HELLO_PROOF_SIZE 8
/* Writes me's identity bytes to out (room for LINK_HELLO_IDENT_MAX);
 * returns their length.  A cluster name is cut at LINK_NAME_MAX - 1 bytes. */
size_t link_hello_encode_identity(const struct link_identity *me, uint8_t *out);
/* Parses a whole HELLO payload into *id (the proof is not checked here).
 * False, *id untouched, unless its length is exactly 18 + clen with clen
 * 1..LINK_NAME_MAX-1 and the name holds no NUL byte. */
bool link_hello_decode(const uint8_t *p, size_t len, struct link_identity *id);

#endif
