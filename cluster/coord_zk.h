/* coord_zk.h - the coordinator's ZooKeeper backend: a session, leader
 * election among the coordinator processes, and the state znode written
 * only with a version check.  Built only with HAVE_ZOOKEEPER; without it
 * every call fails with a message saying so. */
#ifndef CLUSTER_COORD_ZK_H
#define CLUSTER_COORD_ZK_H

#include <stdbool.h>
#include <stddef.h>

#define COORD_ZK_SESSION_MS 2000    /* asked for; the server may raise it */

struct coord_zk;

/* Connect to connect ("host:port,...[/chroot]") for the cluster named name
 * and wait (bounded) until the session is up.  NULL with a message in err. */
struct coord_zk *coord_zk_open(const char *connect, const char *name, char *err, size_t errlen);
void coord_zk_close(struct coord_zk *z);

/* Join the election with an ephemeral sequential znode holding me (our
 * address, for the log of others) and wait until it is the lowest: watch
 * only the predecessor (ZooKeeper's recipe).  0 once leader, -1 with a
 * message in err (the session ended). */
int coord_zk_lead(struct coord_zk *z, const char *me, char *err, size_t errlen);

/* The state znode's content: 0 (*buf malloc'd, NUL-terminated), 1 no state
 * yet, -1 with a message in err. */
int coord_zk_load(struct coord_zk *z, char **buf, size_t *len, char *err, size_t errlen);

/* Replace the state, only if nobody wrote it since we read or wrote it.
 * 0, -1 with a message in err (not written, we may still lead), -2 with a
 * message: someone else wrote it or our session is gone: we are no longer
 * the leader. */
int coord_zk_save(struct coord_zk *z, const char *buf, size_t len, char *err, size_t errlen);

/* Still fit to lead?  False (with the reason) once the session expired or
 * has been disconnected for longer than its timeout (another coordinator
 * may be leader by now). */
bool coord_zk_leading(struct coord_zk *z, char *why, size_t len);

#endif
