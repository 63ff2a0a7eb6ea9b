/* coord_state.c - the coordinator's state file: the epoch and the slot map,
 * so that a restarted coordinator never hands out an epoch it already used.
 *
 * Format (text, so an operator can read it):
 *   cocytus-coordinator-state 1\n
 *   epoch <e>\n
 *   bytes <n>\n
 *   crc32c <8 hex digits>\n
 *   <n bytes: the slotmap_encode() body, whose first line is the epoch again>
 *   [the coordinator's work in progress, coord_progress.c: text lines]
 * The byte count catches a truncated file, the CRC-32C of the body any
 * changed byte (a valid-looking range edited by hand included), the
 * repeated epoch a header from another file, and the decoder
 * (slotmap_decode) the rest.  A new
 * state is written to <path>.tmp, fsync'd and renamed over the old one, and
 * the directory is fsync'd, so a crash leaves either the old or the new
 * file, never a mix. */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "cluster.h"
#include "coord.h"
#include "crc32c.h"
#include "dirsync.h"

#define STATE_MAGIC "cocytus-coordinator-state 1"
#define STATE_MAX_BYTES (16u << 20)
#define STATE_PATH_MAX (CLUSTER_PATH_MAX + 8)

int coord_map_copy(struct slotmap *dst, const struct slotmap *src)
{
    memset(dst, 0, sizeof(*dst));
    dst->endpoints = calloc((size_t)src->nendpoints + 1, sizeof(*dst->endpoints));
    if (!dst->endpoints)
        return -1;
    memcpy(dst->endpoints, src->endpoints, (size_t)src->nendpoints * sizeof(*dst->endpoints));
    dst->nendpoints = src->nendpoints;
    dst->epoch = src->epoch;
    memcpy(dst->slot, src->slot, sizeof(dst->slot));
    return 0;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

char *coord_state_encode(const struct slotmap *m, size_t *len)
{
    size_t nbody;
    char head[128];
    char *body = slotmap_encode(m, &nbody);
    if (!body)
        return NULL;
    int hl = snprintf(head, sizeof(head), STATE_MAGIC "\nepoch %llu\nbytes %zu\ncrc32c %08x\n",
                      (unsigned long long)m->epoch, nbody, (unsigned)crc32c(0, body, nbody));
    char *out = malloc((size_t)hl + nbody + 1);
    if (out) {
        memcpy(out, head, (size_t)hl);
        memcpy(out + hl, body, nbody);
        out[(size_t)hl + nbody] = '\0';
        *len = (size_t)hl + nbody;
    }
    free(body);
    return out;
}

int coord_state_save(const char *path, const struct slotmap *m, char *err, size_t errlen)
{
    size_t nall;
    char *all = coord_state_encode(m, &nall);
    if (!all) {
        snprintf(err, errlen, "out of memory encoding the map");
        return -1;
    }
    int rc = coord_state_write(path, all, nall, err, errlen);
    free(all);
    return rc;
}

int coord_state_write(const char *path, const char *all, size_t nall, char *err, size_t errlen)
{
    char tmp[STATE_PATH_MAX];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp)) {
        snprintf(err, errlen, "state path %s is too long", path);
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
        return -1;
    }
    bool written = write_all(fd, all, nall) == 0 && fsync(fd) == 0;
    int saved = errno;
    if (close(fd) < 0 && written) {
        written = false;
        saved = errno;
    }
    if (!written) {
        snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(saved));
        unlink(tmp);
        return -1;
    }
    if (rename(tmp, path) < 0) {
        snprintf(err, errlen, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    if (dirsync_parent_sync(path) < 0) {
        snprintf(err, errlen, "cannot sync the directory of %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* The whole file into a malloc'd buffer.  1 when it does not exist. */
static int read_file(const char *path, char **out, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT)
            return 1;
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    size_t cap = 64 * 1024, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0 || n > STATE_MAX_BYTES)
            break;
        if (n == cap) {
            char *nb = realloc(buf, cap * 2 + 1);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    bool bad = ferror(f) != 0;
    fclose(f);
    if (!buf || bad || n > STATE_MAX_BYTES) {
        snprintf(err, errlen, "cannot read %s: %s", path,
                 !buf ? "out of memory" : bad ? "read error" : "file too large");
        free(buf);
        return -1;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}

/* One header line "<name> <u64>\n" at *p; advances *p. */
static bool header_number(const char **p, const char *end, const char *name, uint64_t *out)
{
    size_t nl = strlen(name);
    const char *q = *p;
    if ((size_t)(end - q) < nl + 2 || memcmp(q, name, nl) != 0 || q[nl] != ' ')
        return false;
    q += nl + 1;
    uint64_t v = 0;
    const char *digits = q;
    while (q < end && *q >= '0' && *q <= '9') {
        if (v > (UINT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (uint64_t)(*q - '0');
        q++;
    }
    if (q == digits || q >= end || *q != '\n')
        return false;
    *p = q + 1;
    *out = v;
    return true;
}

/* The line "crc32c <8 hex digits>\n" at *p; advances *p. */
static bool header_crc(const char **p, const char *end, uint32_t *out)
{
    const char *q = *p;
    const size_t nl = strlen("crc32c ");
    if ((size_t)(end - q) < nl + 9 || memcmp(q, "crc32c ", nl) != 0 || q[nl + 8] != '\n')
        return false;
    uint32_t v = 0;
    for (size_t i = nl; i < nl + 8; i++) {
        char ch = q[i];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (d < 0)
            return false;
        v = v << 4 | (uint32_t)d;
    }
    *p = q + nl + 9;
    *out = v;
    return true;
}

/* A parity process of the endpoint's group: it took over a dead data
 * process (coord_recovery.c), so the map names its client port. */
static bool is_takeover(const struct cluster *c, const struct slotmap_endpoint *e,
                        const struct slotmap_endpoint *w)
{
    /* PBR: a backup of the group was promoted (coord_pbr.c). */
    if (c->scheme == SCHEME_PBR && w->role == ROLE_PRIMARY) {
        for (int b = 0; b < c->n - 1; b++) {
            const struct cluster_proc *p = cluster_find(c, w->group, ROLE_BACKUP, b);
            if (p && p->port == e->port && strcmp(p->host, e->host) == 0)
                return true;
        }
        return false;
    }
    if (c->scheme != SCHEME_RS || w->role != ROLE_DATA)
        return false;
    for (int j = 0; j < c->n - c->k; j++) {
        const struct cluster_proc *p = cluster_find(c, w->group, ROLE_PARITY, j);
        if (p && p->port == e->port && strcmp(p->host, e->host) == 0)
            return true;
    }
    return false;
}

/* The saved endpoints must be the cluster's serving processes in order
 * (or a parity process of the group that took one over); their group,
 * role and index are copied from the cluster's map. */
static int check_endpoints(const char *path, const struct cluster *c, struct slotmap *m,
                           char *err, size_t errlen)
{
    struct slotmap want;
    char berr[256];
    if (slotmap_build(&want, c, 1, berr, sizeof(berr)) < 0) {
        snprintf(err, errlen, "slot map of the cluster file: %s", berr);
        return -1;
    }
    int rc = 0;
    if (want.nendpoints != m->nendpoints) {
        snprintf(err, errlen, "%s holds %d endpoints, the cluster file has %d serving processes "
                 "(a state file of another cluster? move it away to start from epoch 1)",
                 path, m->nendpoints, want.nendpoints);
        rc = -1;
    }
    for (int i = 0; rc == 0 && i < m->nendpoints; i++) {
        struct slotmap_endpoint *e = &m->endpoints[i];
        const struct slotmap_endpoint *w = &want.endpoints[i];
        if ((e->port != w->port || strcmp(e->host, w->host) != 0) && !is_takeover(c, e, w)) {
            snprintf(err, errlen, "%s: endpoint %d is %s:%d, the cluster file says %s:%d "
                     "(a state file of another cluster? move it away to start from epoch 1)",
                     path, i, e->host, e->port, w->host, w->port);
            rc = -1;
            break;
        }
        e->group = w->group;
        e->role = w->role;
        e->index = w->index;
    }
    slotmap_free(&want);
    return rc;
}

int coord_state_decode(const char *path, const char *text, size_t len, const struct cluster *c,
                       struct slotmap *m, size_t *used, char *err, size_t errlen)
{
    const char *p = text, *end = text + len;
    size_t ml = strlen(STATE_MAGIC);
    uint64_t epoch, nbody;
    uint32_t crc;
    char derr[256];
    int rc = -1;
    if (len < ml + 1 || memcmp(p, STATE_MAGIC, ml) != 0 || p[ml] != '\n') {
        snprintf(err, errlen, "%s is not a coordinator state file (first line is not '%s')",
                 path, STATE_MAGIC);
    } else if ((p += ml + 1, !header_number(&p, end, "epoch", &epoch)) ||
               !header_number(&p, end, "bytes", &nbody) || !header_crc(&p, end, &crc)) {
        snprintf(err, errlen, "%s is corrupt: bad 'epoch', 'bytes' or 'crc32c' line", path);
    } else if (used ? nbody > (uint64_t)(end - p) : nbody != (uint64_t)(end - p)) {
        snprintf(err, errlen, "%s is corrupt: %llu bytes of map announced, %zu present", path,
                 (unsigned long long)nbody, (size_t)(end - p));
    } else if (crc32c(0, p, (size_t)nbody) != crc) {
        snprintf(err, errlen, "%s is corrupt: the map's CRC-32C is %08x, the header says %08x",
                 path, (unsigned)crc32c(0, p, (size_t)nbody), (unsigned)crc);
    } else if (slotmap_decode(m, p, (size_t)nbody, derr, sizeof(derr)) < 0) {
        snprintf(err, errlen, "%s is corrupt: %s", path, derr);
    } else if (m->epoch != epoch) {
        snprintf(err, errlen, "%s is corrupt: epoch %llu in the header, %llu in the map", path,
                 (unsigned long long)epoch, (unsigned long long)m->epoch);
        slotmap_free(m);
    } else if (epoch == 0) {
        snprintf(err, errlen, "%s is corrupt: epoch 0", path);
        slotmap_free(m);
    } else if (check_endpoints(path, c, m, err, errlen) < 0) {
        slotmap_free(m);
    } else {
        rc = 0;
        if (used)
            *used = (size_t)(p - text) + (size_t)nbody;
    }
    return rc;
}

int coord_state_load(const char *path, const struct cluster *c, struct slotmap *m,
                     char **rest, size_t *nrest, char *err, size_t errlen)
{
    char *text = NULL;
    size_t len = 0, used = 0;
    if (rest) {
        *rest = NULL;
        *nrest = 0;
    }
    int rc = read_file(path, &text, &len, err, errlen);
    if (rc != 0)
        return rc;
    rc = coord_state_decode(path, text, len, c, m, rest ? &used : NULL, err, errlen);
    if (rc == 0 && rest && used < len) {
        *rest = malloc(len - used + 1);
        if (*rest == NULL) {
            snprintf(err, errlen, "out of memory reading %s", path);
            slotmap_free(m);
            rc = -1;
        } else {
            memcpy(*rest, text + used, len - used);
            (*rest)[len - used] = '\0';
            *nrest = len - used;
        }
    }
    free(text);
    return rc;
}
