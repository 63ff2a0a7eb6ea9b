/* gview.h - cocytus-cli's view of one coding group: open connections to
 * the processes that hold its K data and M parity blocks, wait until the
 * group is quiescent (every parity process has applied each data
 * process's stable xid), and fetch the same byte range of every region.
 *
 * With a coordinator the group may be degraded (docs/recovery.md): its
 * `cocytus groups` line says who serves each data block (the data process
 * itself, or a parity process that took it over: the recovery process)
 * and which parity processes are dead.  A data block served by a recovery
 * process r is read through r (`cocytus dpinfo`, `cocytus meta i`,
 * `cocytus used i`, and r's region once fully rebuilt); only parity
 * processes still in parity state are parity blocks; dead processes and
 * data blocks nobody serves are absent.  Without a layout every block is
 * its own process, as before online recovery. */
#ifndef CLIENT_GVIEW_H
#define CLIENT_GVIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "admin.h"
#include "groups.h"
#include "procs.h"
#include "recovery.h"

#define GVIEW_MAX_BLOCKS 32     /* K + M supported by the tool */

/* ---- the coordinator's view of the coding groups (lines: groups.h) ---- */

struct gview_groups {
    int n;
    struct gview_group *v;
};

/* Send `cocytus groups` on c and parse every line up to END.  0; 1 when
 * the coordinator does not know the command (an older one); -1 with the
 * reason in c->err. */
int gview_read_groups(struct admin_conn *c, struct gview_groups *out);
void gview_groups_free(struct gview_groups *gs);
/* The line of group g, or NULL. */
const struct gview_group *gview_groups_find(const struct gview_groups *gs, int g);

/* ---- one group's blocks ---- */

enum gview_kind {
    GVIEW_DATA,       /* data block b, its own data process */
    GVIEW_SERVED,     /* data block b, served by a recovery process */
    GVIEW_PARITY,     /* parity block b-k, a parity process in parity state */
    GVIEW_RECOVERY,   /* parity process b-k serves a data block: no parity block */
    GVIEW_ABSENT      /* a dead parity process, or a data block nobody serves */
};

struct gview {
    int group;
    int k, m;
    uint64_t region_size;
    bool has_layout;                     /* the coordinator's layout applies */
    struct gview_group layout;           /* when has_layout */
    /* Block b: 0..k-1 data block b, k..k+m-1 parity process b-k.  proc is
     * the process the connection goes to (for GVIEW_SERVED the recovery
     * process); NULL and no connection for GVIEW_ABSENT. */
    enum gview_kind kind[GVIEW_MAX_BLOCKS];
    const struct proc_info *proc[GVIEW_MAX_BLOCKS];
    struct admin_conn *conn[GVIEW_MAX_BLOCKS];
    int server[GVIEW_MAX_BLOCKS];        /* GVIEW_SERVED: the parity index that serves it */
    uint64_t stable[GVIEW_MAX_BLOCKS];   /* data blocks: stable xid seen by wait_quiet */
    const char *secret;                  /* the cluster secret (the proc list's) */
    struct tls_dialer *tls;              /* client_tls (the proc list's), or NULL */
};

/* Connects to the processes of the group and reads k, m and the region
 * size from `cocytus info`.  layout: the coordinator's line for the group,
 * or NULL (every block is its own process).  0, or -1 with a message in
 * err. */
int gview_open(struct gview *v, const struct proc_list *l, int group,
               const struct gview_group *layout, int timeout_ms, char *err, size_t errlen);
void gview_close(struct gview *v);

/* Whether block b's bytes can be fetched (a served data block or a parity
 * block). */
bool gview_present(const struct gview *v, int block);
/* Parity blocks present. */
int gview_nparity(const struct gview *v);
/* Whether parity process j (block k+j) keeps a backup of data block i's
 * table and applies its records: alive, and not the one serving i. */
bool gview_backs_up(const struct gview *v, int j, int i);
/* Data blocks served by recovery processes, dead parity processes:
 * "data 1 served by parity 0, parity 1 dead" ("" when none). */
const char *gview_layout_text(const struct gview *v, char *buf, size_t cap);

/* Whether every process the view connects to still accepts a connection
 * (after a failed check: did one die?). */
bool gview_all_answer(const struct gview *v, int timeout_ms);

/* "data 1 (127.0.0.1:21002)" / "parity 0 (...)" / "data 1 (served by
 * parity 0, 127.0.0.1:...)" for messages. */
const char *gview_name(const struct gview *v, int block, char *buf, size_t cap);

/* Waits up to max_ms until every recovery process has rebuilt all its
 * units (recovery_units_done == recovery_units_total).  0 when done (or
 * none), 1 when not at the deadline ("dp f still being rebuilt: x/y
 * units" in err), 2 when a recovery process serves another data process
 * than the layout says, -1 on a connection or protocol error. */
int gview_wait_rebuilt(struct gview *v, int max_ms, char *err, size_t errlen);

/* Waits up to max_ms until every data block's server has no record in
 * flight (xid == stable_xid, and for a recovery process also
 * committed_xid) and every parity process that backs up a data block has
 * applied that block's stable xid; remembers the stable xids.  0 when
 * quiescent, 1 when still busy at the deadline (why in err), 2 when a
 * parity process is ahead of a data block (inconsistent), -1 on a
 * connection or protocol error. */
int gview_wait_quiet(struct gview *v, int max_ms, char *err, size_t errlen);
/* After a check: 0 when no data block's xid moved since wait_quiet,
 * 1 when one did (writes arrived during the check), -1 on error. */
int gview_check_unchanged(struct gview *v, char *err, size_t errlen);

/* `cocytus meta` of data block i's server (the recovery process answers
 * `cocytus meta i` for it).  0, or -1 with err. */
int gview_data_meta(struct gview *v, int i, struct admin_stats *out, char *err, size_t errlen);

/* Byte ranges to check: the union of every data block's used pieces,
 * or the whole region when full.  Normalized (sorted, merged). */
int gview_ranges(struct gview *v, bool full, struct admin_ranges *out, char *err,
                 size_t errlen);

/* Fetch [off, off+len) of every present block into blocks[b] (absent
 * blocks are left alone). */
int gview_fetch(struct gview *v, uint64_t off, uint64_t len, uint8_t *const *blocks,
                char *err, size_t errlen);

#endif
