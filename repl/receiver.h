/* receiver.h - the receiving end of replication, shared by a parity process
 * (records from the data processes of its coding group) and a backup
 * (records from its primary).
 *
 * Two layers.  struct repl_source is one sender's stream as the receiver
 * sees it, without sockets: a record is checked (well formed, the next xid,
 * a stable xid below its own) and buffered when it arrives, and buffered
 * records are applied in order only up to a stable xid, the piggybacked
 * commit of docs/coding-group.md.  What applying one record means is the
 * caller's (repl_apply_fn): a parity process replays ops and XORs a delta,
 * a backup stores a value.  Whatever disagrees marks the source diverged
 * with a reason, and from then on nothing of it is accepted: a replica is
 * never corrupted to keep going.
 *
 * struct repl_receiver puts sources on links: it accepts a sender by role
 * and index, acknowledges every record (one cumulative ACK per read batch), applies on piggybacked and STABLE
 * xids through its owner's hook, and drops and refuses diverged senders. */
#ifndef REPL_RECEIVER_H
#define REPL_RECEIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "link.h"
#include "reclog.h"
#include "record.h"

struct event_base;

#define REPL_WHY_MAX 256

/* ---- one sender's stream ---- */

struct repl_source {
    struct reclog buffer;        /* received, not yet applied */
    uint64_t received_xid;       /* newest record buffered or applied */
    uint64_t applied_xid;        /* every record up to this one is applied */
    uint64_t stable_xid;         /* newest stable xid the sender declared */
    bool diverged;
    /* Emptied to be rebuilt: records and STABLE frames are dropped, not
     * taken for a gap, until the stream starts again (repl_source_reset):
     * what the old stream still sends before its sender drops us. */
    bool awaiting_start;
    bool start_drop_logged;      /* said so once since awaiting_start was set */
    char why[REPL_WHY_MAX];      /* what diverged, for logs and REJECTs */
    struct rec_op *ops;          /* decode scratch for receive */
    uint32_t ops_cap;
};

enum repl_rx {
    REPL_RX_BUFFERED = 0,        /* new record, buffered */
    REPL_RX_DUPLICATE = 1,       /* xid already held: ignore, ack again */
    REPL_RX_REFUSED = -1,        /* diverged (now or before): see why */
    REPL_RX_FAILED = -2          /* out of memory: not buffered, not acked;
                                  * drop the link and let the sender resend */
};

void repl_source_init(struct repl_source *s);
void repl_source_destroy(struct repl_source *s);
/* Forget everything buffered and start over as holding every record up to
 * xid (a rebuild: the state up to xid arrives another way). */
void repl_source_reset(struct repl_source *s, uint64_t xid);
/* Forget everything and drop the stream's frames until the next
 * repl_source_reset (the receiver was emptied; the new stream starts with
 * a message that resets it). */
void repl_source_await_start(struct repl_source *s);

/* One encoded record.  On BUFFERED, *stable gets its piggybacked stable
 * xid; otherwise 0. */
enum repl_rx repl_source_receive(struct repl_source *s, const uint8_t *rec, size_t len,
                                 uint64_t *stable);

/* Applies one record, which is always the next one (applied_xid + 1).
 * Returns 0, or nonzero to stop: the source is then diverged, with the
 * reason the function gave through repl_source_mark_diverged or a generic
 * one.  r and its pointers are valid during the call only. */
typedef int (*repl_apply_fn)(void *ctx, const struct record *r);

/* Record stable as the sender's stable xid and apply buffered records up to
 * it, oldest first.  0, or -1 when the source is (now) diverged; a stable
 * xid beyond what was received diverges it. */
int repl_source_apply(struct repl_source *s, uint64_t stable, repl_apply_fn fn, void *ctx);

/* Drop buffered records above xid (they never became stable: recovery).
 * -1, changing nothing, if xid < applied_xid. */
int repl_source_truncate_after(struct repl_source *s, uint64_t xid);

/* Mark s diverged with the reason "xid X: <message>"; returns -1. */
__attribute__((format(printf, 3, 4)))
int repl_source_mark_diverged(struct repl_source *s, uint64_t xid, const char *fmt, ...);

/* ---- sources on links ---- */

struct repl_receiver;

struct repl_receiver_hooks {
    /* Apply source index's buffered records up to stable, normally with
     * repl_source_apply and the role's repl_apply_fn.  0, or -1 when the
     * source diverged. */
    int (*apply)(void *owner, int index, uint64_t stable);
    /* One log line, without a newline; the owner adds its own prefix. */
    void (*log)(void *owner, const char *line);
    /* Optional: a REQUEST or REPLY frame on source index's link (recovery
     * traffic), in order with that source's records. */
    void (*message)(void *owner, int index, uint16_t type, const uint8_t *payload,
                    uint32_t len);
    /* Optional: which source a verified peer is.  Returns the source index,
     * or -1 with *reason set to refuse it.  Without it a peer must have the
     * configured sender role, and its index is the source index. */
    int (*resolve)(void *owner, const struct link_identity *id, const char **reason);
};

struct repl_receiver_config {
    struct event_base *base;
    uint8_t sender_role;           /* enum link_role every sender must have */
    int nsources;
    struct repl_source **sources;  /* nsources; sender i's stream: the array is
                                    * copied, the sources are not owned */
    const char *tag;               /* sender in logs: "dp" gives "dp 2: ..." */
    const char *noun;              /* sender in REJECTs: "data process" */
    const char *wrong_role;        /* REJECT reason for a sender of another role */
    const char *no_such;           /* REJECT reason for an index >= nsources */
    bool verbose;
    struct repl_receiver_hooks hooks;
    void *owner;                   /* passed to the hooks */
};

/* NULL when out of memory.  The config's strings and the sources must
 * outlive the receiver. */
struct repl_receiver *repl_receiver_new(const struct repl_receiver_config *cfg);
/* Closes every link. */
void repl_receiver_free(struct repl_receiver *rx);

/* A link_accept_fn: give it to link_listen with the receiver as owner.
 * Takes a sender of the configured role with an index below nsources whose
 * source has not diverged; a new link from a sender replaces its old one;
 * WELCOME carries the source's received xid. */
bool repl_receiver_accept(void *rx, const struct link_identity *id, struct link *l,
                          struct link_callbacks *cb, void **ctx, uint64_t *welcome_xid,
                          const char **reason);

struct repl_peer_stats {
    bool link_up;
    uint64_t records;              /* RECORD frames taken, duplicates included */
    uint64_t duplicates;
    uint64_t before_start;         /* RECORD and STABLE frames dropped awaiting a start */
    uint64_t acks;                 /* ACK frames sent (one per read batch) */
};

void repl_receiver_peer_stats(const struct repl_receiver *rx, int index,
                              struct repl_peer_stats *out);
void repl_receiver_stats_reset(struct repl_receiver *rx);

/* Refuse source index from now on (recovery: a data process declared dead
 * is fenced so that, were it only hung, nothing more of it is taken): its
 * link is closed and its HELLOs are rejected with reason.  unfence takes
 * it again (its new server, a recovery process, is resolved to it). */
void repl_receiver_fence(struct repl_receiver *rx, int index, const char *reason);
void repl_receiver_unfence(struct repl_receiver *rx, int index);
bool repl_receiver_fenced(const struct repl_receiver *rx, int index);

/* When a read lease that source index may hold from us ends
 * (link_now_ms(); 0: none): lease_ms after its latest clocked PING arrived,
 * on its link or on one we closed or that went silent (link.h).  A parity
 * process fencing a data process waits for it before it answers. */
uint64_t repl_receiver_lease_end(const struct repl_receiver *rx, int index, unsigned lease_ms);

/* The owner marked source index diverged outside a record (a rebuild
 * message it could not use): report it and close the link as for a
 * refused record; its HELLOs are rejected until the source is reset. */
void repl_receiver_diverged(struct repl_receiver *rx, int index);

/* Send a REQUEST/REPLY frame on source index's link.  0, or -1 when the
 * link is down. */
int repl_receiver_sendv(struct repl_receiver *rx, int index, uint16_t type,
                        const struct iovec *iov, int iovcnt);
bool repl_receiver_link_up(const struct repl_receiver *rx, int index);
/* The xid source index's current link was welcomed with (what we held
 * then), UINT64_MAX without a link.  A sender that restarted empty and
 * was welcomed above 0 learned it lost its state: it serves nothing. */
uint64_t repl_receiver_welcomed_xid(const struct repl_receiver *rx, int index);
/* How long source index's link, up, has carried nothing (link_silent_ms;
 * 0 without a link). */
uint64_t repl_receiver_silent_ms(const struct repl_receiver *rx, int index);
/* Source index's link is up but has carried nothing for two PING periods:
 * its sender is stopped or hung, and what its kernel had sent arrived and
 * was read long since, so a fence need not wait to read more (a parity
 * process's prepare, a full-sync backup's fence). */
bool repl_receiver_link_quiet(const struct repl_receiver *rx, int index);
/* engine_ops.lost_peers for a receiver: the processes whose link to a
 * source dropped by itself and has not been replaced (not: never linked,
 * fenced, or closed because the source diverged), or is up but, once a
 * PING was heard on it, has carried nothing for LINK_SILENT_MS or more;
 * named as their links named them, and how long nothing came from each
 * (a dropped link: since it last carried anything).  A sender's process that died
 * shows here first. */
int repl_receiver_lost_peers(const struct repl_receiver *rx, struct eng_lost_peer *out, int max);

#endif
