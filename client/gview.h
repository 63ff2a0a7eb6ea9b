/* gview.h - cocytus-cli's view of one coding group: open connections to
 * its K data and M parity processes, wait until the group is quiescent
 * (every parity process has applied each data process's stable xid), and
 * fetch the same byte range of every region. */
#ifndef CLIENT_GVIEW_H
#define CLIENT_GVIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "admin.h"
#include "procs.h"

#define GVIEW_MAX_BLOCKS 32     /* K + M supported by the tool */

struct gview {
    int group;
    int k, m;
    uint64_t region_size;
    /* Block b: 0..k-1 data process b, k..k+m-1 parity process b-k. */
    const struct proc_info *proc[GVIEW_MAX_BLOCKS];
    struct admin_conn *conn[GVIEW_MAX_BLOCKS];
    uint64_t stable[GVIEW_MAX_BLOCKS];   /* data processes: stable xid seen by wait_quiet */
};

/* Connects to every process of the group and reads k, m and the region
 * size from `cocytus info`.  0, or -1 with a message in err. */
int gview_open(struct gview *v, const struct proc_list *l, int group, int timeout_ms,
               char *err, size_t errlen);
void gview_close(struct gview *v);

/* "data 1 (127.0.0.1:21002)" / "parity 0 (...)" for messages. */
const char *gview_name(const struct gview *v, int block, char *buf, size_t cap);

/* Waits up to max_ms until every data process has no record in flight
 * (xid == stable_xid) and every parity process's applied xid for each data
 * process equals that process's stable xid; remembers the stable xids.
 * 0 when quiescent, 1 when still busy at the deadline (why in err), 2 when
 * a parity process is ahead of a data process (inconsistent), -1 on a
 * connection or protocol error. */
int gview_wait_quiet(struct gview *v, int max_ms, char *err, size_t errlen);
/* After a check: 0 when no data process's xid moved since wait_quiet,
 * 1 when one did (writes arrived during the check), -1 on error. */
int gview_check_unchanged(struct gview *v, char *err, size_t errlen);

/* Byte ranges to check: the union of every data process's used pieces,
 * or the whole region when full.  Normalized (sorted, merged). */
int gview_ranges(struct gview *v, bool full, struct admin_ranges *out, char *err,
                 size_t errlen);

/* Fetch [off, off+len) of every region into blocks[0..k+m). */
int gview_fetch(struct gview *v, uint64_t off, uint64_t len, uint8_t *const *blocks,
                char *err, size_t errlen);

#endif
