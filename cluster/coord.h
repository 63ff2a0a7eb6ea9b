/* coord.h - the coordinator of a cluster and the servers' side of it.
 *
 * The coordinator is a cocytus-server with --role coordinator.  It holds
 * membership (which process is alive, from control links and heartbeats)
 * and the authoritative slot map with its epoch; it persists the map in a
 * state file before anyone sees it, pushes newer maps to every process and
 * orchestrates slot moves one at a time.  Every other server process of a
 * cluster whose file names a coordinator dials it (coord_client), says
 * hello, sends a heartbeat every 250 ms, installs newer maps and runs the
 * moves it is told to start.
 *
 * Control messages are one line of text each in an FT_CONTROL frame
 * (docs/wire-format.md, "Control link"):
 *   server -> coordinator:  hello <pid> <epoch> <incarnation>
 *                           hb <pid> <epoch> <rss>
 *                           migrated <slot> <epoch> ok
 *                           migrated <slot> <epoch> failed <why>
 *                           lost <role> <index> <down_ms>
 *   coordinator -> server:  map <slotmap_encode() body>
 *                           migrate <slot> <host>:<port> <epoch>
 *                           retire
 *
 * Files: coord_msg.c (the message parser), coord_state.c (the state file),
 * coord.c (the coordinator engine), coord_client.c (the server side). */
#ifndef MC_COORD_H
#define MC_COORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "slotmap.h"

struct server;
struct settings;
struct cluster;
struct engine;

#define COORD_ROLE "coordinator"        /* --role value */
#define COORD_HEARTBEAT_MS 250          /* a server's heartbeat period */
#define COORD_DEAD_AFTER_MS 1500        /* no heartbeat for this long: dead */
#define COORD_SILENCE_HOLD_MS 30000    /* silence waited out at most, when a death would lose data */
#define COORD_WHY_MAX 200               /* longest reason text in a message */

/* ---- control messages (coord_msg.c) ---- */

enum ctl_kind {
    CTL_HELLO,      /* hello <pid> <epoch> [<incarnation>] */
    CTL_HB,         /* hb <pid> <epoch> <rss> [<recovery progress words>] */
    CTL_MIGRATED,   /* migrated <slot> <epoch> ok | failed <why> */
    CTL_MAP,        /* map <body> */
    CTL_MIGRATE,    /* migrate <slot> <host>:<port> <epoch> */
    CTL_LOST,       /* lost <role> <index> <down_ms> [up]: the link to a
                     * peer of the sender's group (a cluster role and
                     * index) is down, or up but silent ("up"), and nothing
                     * came from the peer for down_ms; sent after each
                     * heartbeat while it lasts (engine_ops.lost_peers) */
    CTL_RETIRE      /* retire: coordinator -> a process it declared dead
                     * when another took its place; it exits */
};

struct ctl_msg {
    enum ctl_kind kind;
    long pid;                       /* hello, hb */
    uint64_t incarnation;           /* hello: random per process start, 0 if not sent */
    uint64_t epoch;                 /* hello, hb, migrated, migrate */
    uint64_t rss;                   /* hb */
    unsigned slot;                  /* migrated, migrate */
    bool ok;                        /* migrated */
    char why[COORD_WHY_MAX];        /* migrated failed: the reason */
    char host[SLOTMAP_HOST_MAX];    /* migrate: destination */
    int port;
    enum cluster_role role;         /* lost */
    int index;                      /* lost */
    uint64_t down_ms;               /* lost */
    bool link_up;                   /* lost: up, only silent */
    const char *body;               /* map: points into the parsed payload;
                                     * hb: the words after <rss> (or NULL) */
    size_t body_len;
};

/* Parse one control message (the payload of an FT_CONTROL frame, not
 * NUL-terminated).  0, or -1 with a message in err. */
int ctl_parse(const char *payload, size_t len, struct ctl_msg *m, char *err, size_t errlen);

/* The link role (repl/link.h) a process of cluster role r announces on its
 * control link: data, parity, primary, backup, or plain. */
uint8_t coord_link_role(enum cluster_role r);

/* ---- the state file (coord_state.c) ---- */

/* Write the map to path atomically: path.tmp, fsync, rename, fsync of the
 * directory.  0, or -1 with a message in err (the old file is untouched). */
int coord_state_save(const char *path, const struct slotmap *m, char *err, size_t errlen);
/* The same for bytes already encoded (a map and the work in progress after
 * it, coord_progress.c). */
int coord_state_write(const char *path, const char *all, size_t nall, char *err, size_t errlen);

/* Read the map saved at path into *m and check that its endpoints are the
 * cluster's serving processes, in order (group, role and index are then
 * filled in from the cluster).  With rest, what follows the map (the work
 * in progress) is returned malloc'd in *rest (NULL if nothing); without,
 * the file must hold the map only.  0 loaded, 1 no file (a first start),
 * -1 with a message in err (a corrupt file, or one of another layout). */
int coord_state_load(const char *path, const struct cluster *c, struct slotmap *m,
                     char **rest, size_t *nrest, char *err, size_t errlen);

/* The state file's bytes for map m (malloc'd, NUL-terminated, *len
 * without the NUL); NULL when out of memory. */
char *coord_state_encode(const struct slotmap *m, size_t *len);
/* Decode such bytes (name for messages).  With used NULL they must be
 * exactly one state; otherwise more may follow and *used is set to the
 * state's length.  0, or -1 with a message in err. */
int coord_state_decode(const char *name, const char *text, size_t len, const struct cluster *c,
                       struct slotmap *m, size_t *used, char *err, size_t errlen);

/* A deep copy of *src into *dst.  0, or -1 when out of memory. */
int coord_map_copy(struct slotmap *dst, const struct slotmap *src);

/* ---- the coordinator process (coord.c) ---- */

/* For --role coordinator: take port and address from the cluster file's
 * coordinator line unless the command line gave them.  0, or -1 with a
 * message printed. */
int coord_settings(const struct cluster *c, struct settings *st);

/* The coordinator engine of server s (which already holds the initial
 * map): loads or creates the state file, installs its map on s and listens
 * for control links.  NULL with a message printed on failure. */
struct engine *coord_engine_new(struct server *s);

/* ---- the server side (coord_client.c) ---- */

struct coord_client;

/* Dial the coordinator of s's cluster (s->cluster->has_coordinator) and
 * keep the control link up.  NULL when out of memory (logged; the server
 * runs on without a coordinator). */
struct coord_client *coord_client_start(struct server *s);
void coord_client_stop(struct coord_client *cc);
/* Send one control message (text, no terminator).  0, or -1 when the link
 * is down (the message is dropped: recovery messages are answered again
 * when the coordinator asks again). */
int coord_client_send(struct coord_client *cc, const char *text);
/* Is this control message one for the engine (recovery: prepare,
 * truncate, takeover, group; PBR: "pbr ...")? */
bool coord_is_engine_message(const char *payload, size_t len);
/* Is it a server's answer to one (prepared, truncated, serving)? */
bool coord_is_recovery_answer(const char *payload, size_t len);
/* Is it a PBR process's answer to a "pbr ..." word ("pbrok ...")? */
bool coord_is_pbr_answer(const char *payload, size_t len);

#endif
