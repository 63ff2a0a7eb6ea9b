/* sender.h - the sending side of replication, shared by a coding group's
 * data process and a primary.
 *
 * A sender replicates one process's updates to its M peers (parity processes
 * or backups): it assigns xids, keeps every record until it is no longer
 * needed, sends it on M authenticated links, collects cumulative
 * acknowledgements, piggybacks the stable xid (acknowledged by every peer) on
 * the next record or sends it after a short idle time, and resends after a
 * reconnect.
 *
 * Two points per record:
 *   stable    - every peer acknowledged it (and all before it); peers apply
 *               records up to the stable xid they are told;
 *   committed - the record takes effect locally (the owner's commit callback,
 *               in xid order) and its client is answered.
 * The sync mode places the commit point: FULL at stable (the guarantee of
 * the coding group), SEMI once every link has handed the record to the
 * kernel, ASYNC at once when it is sent. */
#ifndef REPL_SENDER_H
#define REPL_SENDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster.h"
#include "engine.h"
#include "link.h"
#include "reclog.h"
#include "record.h"

#define SENDER_MAX_PEERS 32

enum sender_sync {
    SENDER_SYNC_FULL = 0,
    SENDER_SYNC_SEMI = 1,
    SENDER_SYNC_ASYNC = 2
};

struct sender;

struct sender_callbacks {
    /* A record takes effect locally; called in xid order. */
    void (*commit)(void *ctx, const struct record *r);
    /* After a batch of commits and their completions: retry waiting work. */
    void (*after_commit)(void *ctx);
    /* Writes can never commit any more (this process restarted without its
     * state): the owner answers what it still holds with an error. */
    void (*refused)(void *ctx);
    /* Optional: a REQUEST or REPLY frame from a peer (recovery traffic);
     * peer is the peer's index in the cluster (not its slot here). */
    void (*message)(void *ctx, int peer, uint16_t type, const uint8_t *payload, uint32_t len);
    /* Optional: the link to a rebuilding peer (sender_add_peer_at) came
     * up; it holds peer_xid.  The sender resends nothing to it: the owner
     * brings it up to date (PBR: a snapshot from the current xid). */
    void (*rebuilding_up)(void *ctx, int peer, uint64_t peer_xid);
    /* Optional: the link to a peer added by sender_add_peer() is up; called
     * before any record above the peer's start xid goes out on it, so the
     * owner can send what must precede them (a rebuild's metadata). */
    void (*joined)(void *ctx, enum cluster_role role, int index);
    /* Optional: the link to a peer added by sender_add_peer() dropped before
     * sender_peer_settled(); the peer is left out of the ack set already. */
    void (*join_failed)(void *ctx, enum cluster_role role, int index, const char *why);
    /* Optional: the link to a peer of the ack set is up and the peer holds
     * no record beyond ours, so this process did not restart without its
     * state (else refused is called). */
    void (*peer_up)(void *ctx, int index);
    /* Optional: sender_lease_held may have become true (a peer of the ack
     * set answered a PING, or a peer left the ack set).  Called from the
     * event loop on its own, never inside a sender or link call, so the
     * owner may wake waiting reads there and let them run. */
    void (*lease)(void *ctx);
};

struct sender_peer {
    struct sender *s;
    int index;                 /* the peer's index in the cluster file */
    enum cluster_role role;    /* its role (the sender's peer role, or another
                                * for a peer added by sender_add_peer) */
    bool joining;              /* added by sender_add_peer, not settled yet */
    bool dropped;              /* declared dead: no longer in the ack set */
    bool rebuilding;           /* PBR: sent records, not in the ack set (sender_add_peer_at) */
    struct link *link;
    uint64_t acked;            /* cumulative acknowledgement */
    uint64_t written;          /* SEMI: newest xid handed to the kernel */
    bool lost;                 /* its link dropped and is not back (the link redials;
                                * link_last_heard_ms: since when it is silent) */
};

struct sender_completion;

struct sender {
    struct event_base *base;
    struct sendq *sq;          /* its links' batched writes (sender_config.sq) */
    const struct sender_callbacks *cb;
    void *ctx;
    enum sender_sync sync;
    int npeers;
    struct sender_peer peers[SENDER_MAX_PEERS];
    char who[64];              /* "data g0/1" for logs */
    int verbose;

    uint64_t xid;              /* last assigned */
    uint64_t stable;           /* acknowledged by every peer */
    uint64_t committed;        /* taken effect locally */
    struct reclog log;         /* records not yet both stable and committed */
    bool refusing;             /* restarted without state: no more writes */

    struct sender_completion *comp_head, *comp_tail;
    struct event *stable_timer;
    struct event *alone_timer;     /* commits when no peer is left */
    struct event *lease_ev;        /* calls cb->lease outside the call that renewed it */
    bool stable_dirty;         /* peers have not heard the latest stable xid */

    uint8_t *enc;              /* encoding scratch */
    size_t enc_cap;
    struct rec_op *ops;        /* decoding scratch for commits */
    uint32_t ops_cap;
    uint64_t records_sent;
    uint64_t stable_frames;    /* lone STABLE frames (no record to carry it) */
    /* For sender_add_peer. */
    const struct cluster *cluster;
    int group;
    enum cluster_role peer_role;
    struct link_identity me;
};

struct sendq;

/* Who the sender is and whom it replicates to. */
struct sender_config {
    struct event_base *base;
    const struct cluster *cluster;
    int group;
    enum link_role my_role;      /* the identity its links present */
    int my_index;
    enum cluster_role peer_role;
    /* Peers cluster_find(cluster, group, peer_role, peers[j]) for j <
     * npeers; peers NULL means 0..npeers-1 (a recovery process names every
     * parity process of its group but itself). */
    const int *peers;
    int npeers;
    enum sender_sync sync;
    const struct sender_callbacks *cb;
    void *ctx;
    const char *who;             /* log prefix */
    int verbose;
    /* The loop's batched writes, which the peers' links (now and later)
     * write through (link_set_sendq); NULL: each link writes at once. */
    struct sendq *sq;
};

/* Start the links to the configured peers.  0, or -1 with a message on
 * stderr. */
int sender_init(struct sender *s, const struct sender_config *cfg);
void sender_destroy(struct sender *s);

/* Continue a stream that another process began: the last xid assigned,
 * stable and committed are all xid (a recovery process takes over a dead
 * data process's stream at the stable xid the preparation found).  Only
 * before the first sender_send(). */
void sender_start_at(struct sender *s, uint64_t xid);

/* Continue a stream as a promoted backup does: the records of carry with
 * xid > from (received from the old primary, applied here already) are
 * kept for peers that hold less; the last assigned and committed xid is
 * carry's last (or from), the stable xid and every peer's ack from.  Only
 * before the first sender_send().  0, or -1 when out of memory. */
int sender_continue(struct sender *s, uint64_t from, const struct reclog *carry);

/* A peer at host:link_port, tagged index (of the sender's peer role; a
 * dropped peer of that index is revived).  A rebuilding peer (one that
 * lost its state, or a new one) is sent every new record but stays out of
 * the ack set until sender_peer_complete(), and when its link comes up
 * the owner's rebuilding_up callback runs instead of a resend.  Otherwise
 * it is a peer like those of sender_init, holding every record up to the
 * stable xid.  0, or -1 (no room, out of memory, or the index is already a
 * live peer). */
int sender_add_peer_at(struct sender *s, int index, const char *host, int link_port,
                       bool rebuilding);
/* The rebuilding peer holds everything now: it enters the ack set. */
void sender_peer_complete(struct sender *s, int index);
bool sender_peer_rebuilding(const struct sender *s, int index);

/* Peer `index` (cluster index) was declared dead: close its link and leave
 * it out of the ack set from now on (records become stable without it;
 * the group runs with reduced redundancy).  Records waiting only for it
 * commit now.  No-op for an unknown or already dropped peer. */
void sender_drop_peer(struct sender *s, int index);
bool sender_has_peer(const struct sender *s, int index);
/* Add (or re-add, if it was dropped) peer `index` of `role` in the ack set
 * as holding every record up to the last one assigned: it must be taken at
 * a quiet point (no record in flight) and be given the state up to there
 * another way (rebuild.h).  Its link starts now; cb->joined is called when
 * it is up, before later records are sent on it.  0, or -1 (unknown peer,
 * already a live peer, out of room). */
int sender_add_peer(struct sender *s, enum cluster_role role, int index);
/* The rebuild of an added peer is done: from now on a drop of its link is
 * an ordinary reconnect. */
void sender_peer_settled(struct sender *s, enum cluster_role role, int index);
/* Drop a peer of any role (sender_drop_peer is for the peer role). */
void sender_drop_peer_role(struct sender *s, enum cluster_role role, int index);
/* Send on the link of a peer of any role. */
int sender_sendv_to_role(struct sender *s, enum cluster_role role, int index, uint16_t type,
                         const struct iovec *iov, int iovcnt);
/* Reads may be served now: every peer of the sender's peer role in the
 * ack set answered a clock (link.h) within LINK_READ_LEASE_MS, or there is
 * no such peer (nobody could take our keys over). */
bool sender_lease_held(const struct sender *s);
/* Peers still in the ack set (rebuilding peers are not). */
int sender_live_peers(const struct sender *s);

/* Send a REQUEST/REPLY frame to peer `index` (cluster index) on its link,
 * in order with the records sent so far.  0, or -1 if that link is down or
 * the peer is unknown or dropped. */
int sender_sendv_to(struct sender *s, int index, uint16_t type, const struct iovec *iov,
                    int iovcnt);
bool sender_peer_up(const struct sender *s, int index);
/* engine_ops.lost_peers for a sender: the peers (not dropped) whose link
 * dropped and has not come back yet, and for how long they have been
 * silent: since they last sent anything before the drop, or since they
 * last answered a dial (one refusing us is alive, and answers every
 * redial); and those whose link is up but, once a PING was heard on it,
 * has carried nothing for LINK_SILENT_MS or more. */
int sender_lost_peers(const struct sender *s, struct eng_lost_peer *out, int max);
/* Bytes queued on peer index's link, not yet handed to the kernel. */
size_t sender_peer_queued(const struct sender *s, int index);
/* Answer every record still waiting to commit with ENG_FAILED and msg
 * (the owner gives up its role). */
void sender_fail_waiting(struct sender *s, const char *msg);

/* The xid the next sender_send() will assign. */
static inline uint64_t sender_next_xid(const struct sender *s)
{
    return s->xid + 1;
}

/* Send a record made of ops and a payload (data_off/data/len).  When it is
 * committed, done(cookie, res) is called with a copy of *res (done may be
 * NULL).  Returns the xid.  In ASYNC mode the record is committed before
 * this returns and done is NOT called: the caller answers at once. */
uint64_t sender_send(struct sender *s, uint32_t nops, const struct rec_op *ops,
                     uint64_t data_off, const uint8_t *data, uint32_t len,
                     eng_done_fn done, void *cookie, const struct eng_result *res);

/* Records sent and not yet committed. */
static inline bool sender_in_flight(const struct sender *s)
{
    return s->xid > s->committed;
}

/* Bytes of records the sender still holds. */
static inline size_t sender_backlog(const struct sender *s)
{
    return s->log.bytes;
}

/* Emit "STAT" lines about xids and peers through write(). */
void sender_info(const struct sender *s, eng_write_fn write, void *ctx);

#endif
