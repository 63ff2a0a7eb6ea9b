/* coord_zk.c - the coordinator's state and leadership in ZooKeeper.
 *
 * Layout under the connect string's chroot, for cluster <name>:
 *   /cocytus/<name>/election/c-<seq>   ephemeral sequential, one per
 *                                      coordinator process waiting or leading
 *   /cocytus/<name>/state              the coordinator state (coord_state.c
 *                                      format plus coord_progress.c lines)
 * Election is ZooKeeper's recipe: the lowest sequence number leads; every
 * other process watches only its predecessor and looks again when that one
 * goes.  The state is written with zoo_set's version check against the
 * version we last read or wrote: a second writer (a leader that lost its
 * session and did not notice yet) fails there and steps down, so the epoch
 * can neither go back nor fork.
 *
 * The multi-threaded client runs its watcher on its own thread; here the
 * watcher only writes one byte to a pipe, and the coordinator's thread
 * does all the work with the synchronous calls. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "coord_zk.h"
#include "coord_zklog.h"

#ifdef HAVE_ZOOKEEPER

/* The synchronous calls exist in the multi-threaded client only. */
#define THREADED 1
#include <zookeeper/zookeeper.h>

#define ZK_PATH_MAX 512
#define CONNECT_WAIT_MS 15000
#define STATE_MAX (1u << 20)        /* ZooKeeper's default znode limit */

struct coord_zk {
    zhandle_t *zh;
    int wake[2];                    /* watcher -> coordinator thread */
    char base[ZK_PATH_MAX / 2];     /* /cocytus/<name> */
    char election[ZK_PATH_MAX];
    char state[ZK_PATH_MAX];
    char me[ZK_PATH_MAX];           /* our election znode, "" before joining */
    int version;                    /* of the state znode; -1: it does not exist */
    uint64_t down_since_ms;         /* not connected since (0: connected) */
    struct zklog *log;              /* the client's log, rate-limited (NULL: stderr) */
};

static uint64_t zk_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Runs on the client's thread: only wake the coordinator's. */
static void on_watch(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    struct coord_zk *z = ctx;
    char b = 1;
    (void)zh;
    (void)type;
    (void)state;
    (void)path;
    if (write(z->wake[1], &b, 1) < 0) {
        /* The pipe is full: a wake-up is pending already. */
    }
}

static void drain_wakeups(struct coord_zk *z)
{
    char buf[64];
    while (read(z->wake[0], buf, sizeof(buf)) > 0) {
    }
}

/* Wait up to ms for a watch to fire. */
static void wait_wakeup(struct coord_zk *z, int ms)
{
    struct pollfd pfd = { .fd = z->wake[0], .events = POLLIN };
    if (poll(&pfd, 1, ms) > 0)
        drain_wakeups(z);
}

/* Create a persistent znode unless it exists. */
static int ensure_node(struct coord_zk *z, const char *path, char *err, size_t errlen)
{
    int rc = zoo_create(z->zh, path, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
    if (rc == ZOK || rc == ZNODEEXISTS)
        return 0;
    snprintf(err, errlen, "cannot create %s in ZooKeeper: %s%s", path, zerror(rc),
             rc == ZNONODE ? " (does the chroot of the connect string exist?)" : "");
    return -1;
}

struct coord_zk *coord_zk_open(const char *connect, const char *name, char *err, size_t errlen)
{
    struct coord_zk *z = calloc(1, sizeof(*z));
    if (!z) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    z->version = -1;
    z->wake[0] = z->wake[1] = -1;
    snprintf(z->base, sizeof(z->base), "/cocytus/%.*s", (int)sizeof(z->base) - 10, name);
    snprintf(z->election, sizeof(z->election), "%s/election", z->base);
    snprintf(z->state, sizeof(z->state), "%s/state", z->base);
    if (pipe(z->wake) < 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        coord_zk_close(z);
        return NULL;
    }
    for (int i = 0; i < 2; i++) {
        int fl = fcntl(z->wake[i], F_GETFL);
        fcntl(z->wake[i], F_SETFL, fl | O_NONBLOCK);
    }
    zoo_set_debug_level(ZOO_LOG_LEVEL_WARN);
    z->log = zklog_open(stderr);
    if (z->log)
        zoo_set_log_stream(zklog_stream(z->log));
    z->zh = zookeeper_init(connect, on_watch, COORD_ZK_SESSION_MS, NULL, z, 0);
    if (!z->zh) {
        snprintf(err, errlen, "cannot start a ZooKeeper session with %s: %s", connect,
                 strerror(errno));
        coord_zk_close(z);
        return NULL;
    }
    uint64_t deadline = zk_now_ms() + CONNECT_WAIT_MS;
    while (zoo_state(z->zh) != ZOO_CONNECTED_STATE && zk_now_ms() < deadline)
        wait_wakeup(z, 200);
    if (zoo_state(z->zh) != ZOO_CONNECTED_STATE) {
        snprintf(err, errlen, "ZooKeeper %s did not answer within %d ms", connect,
                 CONNECT_WAIT_MS);
        coord_zk_close(z);
        return NULL;
    }
    if (ensure_node(z, "/cocytus", err, errlen) < 0 || ensure_node(z, z->base, err, errlen) < 0 ||
        ensure_node(z, z->election, err, errlen) < 0) {
        coord_zk_close(z);
        return NULL;
    }
    fprintf(stderr, "coordinator: ZooKeeper session with %s (timeout %d ms)\n", connect,
            zoo_recv_timeout(z->zh));
    return z;
}

void coord_zk_close(struct coord_zk *z)
{
    if (!z)
        return;
    if (z->zh)
        zookeeper_close(z->zh);   /* ends the session: our election znode goes */
    if (z->log) {
        /* the client's threads are gone: nobody logs to it any more */
        zoo_set_log_stream(NULL);
        zklog_close(z->log);
    }
    if (z->wake[0] >= 0)
        close(z->wake[0]);
    if (z->wake[1] >= 0)
        close(z->wake[1]);
    free(z);
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Our place in the election: 0 we lead, 1 someone is before us (its name
 * in pred), -1 error. */
static int election_place(struct coord_zk *z, char *pred, size_t plen, char *err, size_t errlen)
{
    struct String_vector kids = { 0, NULL };
    int rc = zoo_get_children(z->zh, z->election, 0, &kids);
    if (rc != ZOK) {
        snprintf(err, errlen, "cannot list %s: %s", z->election, zerror(rc));
        return -1;
    }
    qsort(kids.data, (size_t)kids.count, sizeof(char *), compare_names);
    const char *mine = strrchr(z->me, '/') + 1;
    int place = -1;
    for (int i = 0; i < kids.count; i++)
        if (strcmp(kids.data[i], mine) == 0)
            place = i;
    int result;
    if (place < 0) {
        snprintf(err, errlen, "our election znode %s is gone (session expired?)", z->me);
        result = -1;
    } else if (place == 0) {
        result = 0;
    } else {
        snprintf(pred, plen, "%s/%s", z->election, kids.data[place - 1]);
        result = 1;
    }
    deallocate_String_vector(&kids);
    return result;
}

int coord_zk_lead(struct coord_zk *z, const char *me, char *err, size_t errlen)
{
    char prefix[ZK_PATH_MAX + 4], pred[ZK_PATH_MAX * 2];
    snprintf(prefix, sizeof(prefix), "%s/c-", z->election);
    int rc = zoo_create(z->zh, prefix, me, (int)strlen(me), &ZOO_OPEN_ACL_UNSAFE,
                        ZOO_EPHEMERAL_SEQUENTIAL, z->me, (int)sizeof(z->me));
    if (rc != ZOK) {
        snprintf(err, errlen, "cannot join the election under %s: %s", z->election, zerror(rc));
        return -1;
    }
    fprintf(stderr, "coordinator: joined the election as %s\n", z->me);
    char last_pred[sizeof(pred)] = "";
    for (;;) {
        if (zoo_state(z->zh) == ZOO_EXPIRED_SESSION_STATE) {
            snprintf(err, errlen, "the ZooKeeper session expired while waiting to lead");
            return -1;
        }
        int place = election_place(z, pred, sizeof(pred), err, errlen);
        if (place < 0)
            return -1;
        if (place == 0)
            break;
        struct Stat st;
        rc = zoo_wexists(z->zh, pred, on_watch, z, &st);
        if (rc == ZNONODE)
            continue;           /* it went in between: look again */
        if (rc != ZOK) {
            snprintf(err, errlen, "cannot watch %s: %s", pred, zerror(rc));
            return -1;
        }
        if (strcmp(pred, last_pred) != 0) {
            char who[256] = "";
            int wl = (int)sizeof(who) - 1;
            if (zoo_get(z->zh, pred, 0, who, &wl, NULL) == ZOK && wl >= 0)
                who[wl] = '\0';
            fprintf(stderr, "coordinator: waiting; %s (%s) is before us\n", pred, who);
            snprintf(last_pred, sizeof(last_pred), "%s", pred);
        }
        /* The watch wakes us; looking again every second also covers a
         * wake-up lost to a full pipe. */
        wait_wakeup(z, 1000);
    }
    fprintf(stderr, "coordinator: elected leader (%s)\n", z->me);
    return 0;
}

int coord_zk_load(struct coord_zk *z, char **buf, size_t *len, char *err, size_t errlen)
{
    char *data = malloc(STATE_MAX + 1);
    if (!data) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int n = STATE_MAX;
    struct Stat st;
    int rc = zoo_get(z->zh, z->state, 0, data, &n, &st);
    if (rc == ZNONODE) {
        free(data);
        z->version = -1;
        return 1;
    }
    if (rc != ZOK || n < 0) {
        snprintf(err, errlen, "cannot read %s: %s", z->state, rc != ZOK ? zerror(rc) : "empty");
        free(data);
        return -1;
    }
    data[n] = '\0';
    z->version = st.version;
    *buf = data;
    *len = (size_t)n;
    return 0;
}

int coord_zk_save(struct coord_zk *z, const char *buf, size_t len, char *err, size_t errlen)
{
    if (len > STATE_MAX) {
        snprintf(err, errlen, "state of %zu bytes is beyond ZooKeeper's %u", len, STATE_MAX);
        return -1;
    }
    int rc;
    if (z->version < 0) {
        rc = zoo_create(z->zh, z->state, buf, (int)len, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
        if (rc == ZOK) {
            z->version = 0;
            return 0;
        }
    } else {
        struct Stat st;
        rc = zoo_set2(z->zh, z->state, buf, (int)len, z->version, &st);
        if (rc == ZOK) {
            z->version = st.version;
            return 0;
        }
    }
    if (rc == ZBADVERSION || rc == ZNODEEXISTS || rc == ZSESSIONEXPIRED) {
        snprintf(err, errlen, "%s: %s (another coordinator wrote the state: we no longer lead)",
                 z->state, zerror(rc));
        return -2;
    }
    snprintf(err, errlen, "cannot write %s: %s", z->state, zerror(rc));
    return -1;
}

bool coord_zk_leading(struct coord_zk *z, char *why, size_t len)
{
    int st = zoo_state(z->zh);
    if (st == ZOO_EXPIRED_SESSION_STATE) {
        snprintf(why, len, "the ZooKeeper session expired");
        return false;
    }
    if (st == ZOO_CONNECTED_STATE) {
        z->down_since_ms = 0;
        return true;
    }
    uint64_t now = zk_now_ms();
    if (z->down_since_ms == 0)
        z->down_since_ms = now;
    /* Past the session timeout ZooKeeper has given our election znode
     * away: someone else may lead. */
    if (now - z->down_since_ms >= (uint64_t)zoo_recv_timeout(z->zh)) {
        snprintf(why, len, "cut off from ZooKeeper for %llu ms (session timeout %d ms)",
                 (unsigned long long)(now - z->down_since_ms), zoo_recv_timeout(z->zh));
        return false;
    }
    return true;
}

#else /* !HAVE_ZOOKEEPER */

static const char no_zk[] = "this cocytus-server was built without ZooKeeper "
                            "(apt-get install libzookeeper-mt-dev, then configure again)";

struct coord_zk *coord_zk_open(const char *connect, const char *name, char *err, size_t errlen)
{
    (void)connect;
    (void)name;
    snprintf(err, errlen, "%s", no_zk);
    return NULL;
}

void coord_zk_close(struct coord_zk *z)
{
    (void)z;
}

int coord_zk_lead(struct coord_zk *z, const char *me, char *err, size_t errlen)
{
    (void)z;
    (void)me;
    snprintf(err, errlen, "%s", no_zk);
    return -1;
}

int coord_zk_load(struct coord_zk *z, char **buf, size_t *len, char *err, size_t errlen)
{
    (void)z;
    (void)buf;
    (void)len;
    snprintf(err, errlen, "%s", no_zk);
    return -1;
}

int coord_zk_save(struct coord_zk *z, const char *buf, size_t len, char *err, size_t errlen)
{
    (void)z;
    (void)buf;
    (void)len;
    snprintf(err, errlen, "%s", no_zk);
    return -1;
}

bool coord_zk_leading(struct coord_zk *z, char *why, size_t len)
{
    (void)z;
    snprintf(why, len, "%s", no_zk);
    return false;
}

#endif
