/* restart.c - memcached's -e for the plain role (see restart.h).
 *
 * FILE is a header line and one record per item, most recently used
 * first: nkey (1 byte), marks and fetched (1), client flags (4), value
 * length (4), cas (8), absolute expiry time (8, 0 = never), the key and
 * the value, in this host's byte order (the file is for the host that
 * wrote it, as memcached's mapped memory is).  FILE.meta is a few text
 * lines: the format, the item count, FILE's size and CRC-32C, the cas
 * counter and a pending flush_all (its absolute time and the cas bounds
 * it applies to).  A load checks all of it, every cas within the counter
 * included, on the file it then links from, before it links anything. */
#include "config.h"

#include "restart.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crc32c.h"
#include "dirsync.h"
#include "hash.h"

#define FILE_HEADER "cocytus-kv restartable cache 1\n"
#define META_FORMAT "cocytus-kv restart meta 1"
#define RECORD_HEAD 26              /* nkey, marks, flags, nbytes, cas, exptime */
#define KEPT_BITS (ITEM_MARK_BITS | ITEM_FETCHED)
/* What malloc may add to an item's size (its usable size is counted). */
#define ALLOC_SLACK 4096

struct record {
    uint8_t nkey;
    uint8_t bits;
    uint32_t flags;
    uint32_t nbytes;
    uint64_t cas;
    int64_t exptime;
};

struct meta {
    uint64_t items;
    uint64_t size;
    uint32_t crc;
    uint64_t cas_counter;
    int64_t flush_at;       /* absolute time of the flush_all in force, 0: none */
    uint64_t live_cut;
    uint64_t oldest_cas;
};

static void meta_path(char *out, size_t n, const char *path, const char *suffix)
{
    snprintf(out, n, "%s.meta%s", path, suffix);
}

/* ---- saving ---- */

struct writer {
    FILE *f;
    uint32_t crc;
    uint64_t size;
    bool failed;
};

static void put(struct writer *w, const void *p, size_t n)
{
    if (w->failed || n == 0)
        return;
    if (fwrite(p, 1, n, w->f) != n) {
        w->failed = true;
        return;
    }
    w->crc = crc32c(w->crc, p, n);
    w->size += n;
}

static void put_record(struct writer *w, const struct item_store *s, const struct item *it)
{
    unsigned char h[RECORD_HEAD];
    struct record r = {
        .nkey = it->nkey, .bits = it->iflags & KEPT_BITS, .flags = it->flags,
        .nbytes = it->nbytes, .cas = it->cas,
        .exptime = it->exptime == 0 ? 0 : (int64_t)s->clock->epoch + (int64_t)it->exptime,
    };
    h[0] = r.nkey;
    h[1] = r.bits;
    memcpy(h + 2, &r.flags, 4);
    memcpy(h + 6, &r.nbytes, 4);
    memcpy(h + 10, &r.cas, 8);
    memcpy(h + 18, &r.exptime, 8);
    put(w, h, sizeof(h));
    put(w, item_key(it), it->nkey);
    put(w, item_value((struct item *)it), it->nbytes);
}

static int finish_file(FILE *f, bool failed)
{
    if (fflush(f) != 0)
        failed = true;
    if (!failed && fsync(fileno(f)) != 0)
        failed = true;
    if (fclose(f) != 0)
        failed = true;
    return failed ? -1 : 0;
}

int restart_save(struct item_store *s, const char *path, uint64_t *count,
                 char *err, size_t errlen)
{
    char meta[4096], tmp[4096];
    struct writer w = { .crc = 0 };
    uint64_t n = 0;

    meta_path(meta, sizeof(meta), path, "");
    meta_path(tmp, sizeof(tmp), path, ".tmp");
    /* An old meta must not describe the file about to be rewritten. */
    if (unlink(meta) != 0 && errno != ENOENT) {
        snprintf(err, errlen, "cannot remove %s: %s", meta, strerror(errno));
        return -1;
    }
    if ((w.f = fopen(path, "w")) == NULL) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    put(&w, FILE_HEADER, strlen(FILE_HEADER));
    for (struct item *it = s->lru_head; it != NULL && !w.failed; it = it->next) {
        if (item_is_dead(s, it))
            continue;
        put_record(&w, s, it);
        n++;
    }
    if (finish_file(w.f, w.failed) < 0) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno ? errno : EIO));
        return -1;
    }
    FILE *m = fopen(tmp, "w");
    if (m == NULL) {
        snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
        return -1;
    }
    int64_t flush_at = s->oldest_live == 0 ? 0
                                            : (int64_t)s->clock->epoch + (int64_t)s->oldest_live;
    fprintf(m, "%s\nitems %" PRIu64 "\nsize %" PRIu64 "\ncrc32c %08" PRIx32
            "\ncas_counter %" PRIu64 "\nflush_at %" PRId64 "\nlive_cut %" PRIu64
            "\noldest_cas %" PRIu64 "\n", META_FORMAT, n, w.size, w.crc, s->cas_counter,
            flush_at, s->live_cut, s->oldest_cas);
    if (finish_file(m, ferror(m) != 0) < 0 || rename(tmp, meta) != 0) {
        snprintf(err, errlen, "cannot write %s: %s", meta, strerror(errno ? errno : EIO));
        unlink(tmp);
        return -1;
    }
    /* The rename is the commit point: durable once the directory is. */
    *count = n;
    if (dirsync_parent_sync(meta) != 0) {
        snprintf(err, errlen, "cannot sync the directory of %s: %s", meta, strerror(errno));
        return 1;
    }
    return 0;
}

/* ---- loading ---- */

static bool read_meta(const char *path, struct meta *m, char *err, size_t errlen)
{
    char line[256];
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return false;
    }
    bool ok = fgets(line, sizeof(line), f) != NULL &&
              strncmp(line, META_FORMAT "\n", sizeof(META_FORMAT)) == 0 &&
              fscanf(f, "items %" SCNu64 "\nsize %" SCNu64 "\ncrc32c %" SCNx32
                     "\ncas_counter %" SCNu64 "\nflush_at %" SCNd64 "\nlive_cut %" SCNu64
                     "\noldest_cas %" SCNu64 "\n",
                     &m->items, &m->size, &m->crc, &m->cas_counter, &m->flush_at,
                     &m->live_cut, &m->oldest_cas) == 7;
    fclose(f);
    if (!ok)
        snprintf(err, errlen, "%s is not a save of this server's", path);
    return ok;
}

struct reader {
    FILE *f;
    uint32_t crc;
    uint64_t left;          /* bytes the meta says remain */
    uint64_t cas_max;       /* no record's cas may be above the saved counter */
};

static bool get(struct reader *r, void *p, size_t n)
{
    if (n > r->left || fread(p, 1, n, r->f) != n)
        return false;
    r->crc = crc32c(r->crc, p, n);
    r->left -= n;
    return true;
}

static bool get_record(struct reader *r, struct record *rec)
{
    unsigned char h[RECORD_HEAD];
    if (!get(r, h, sizeof(h)))
        return false;
    rec->nkey = h[0];
    rec->bits = h[1];
    memcpy(&rec->flags, h + 2, 4);
    memcpy(&rec->nbytes, h + 6, 4);
    memcpy(&rec->cas, h + 10, 8);
    memcpy(&rec->exptime, h + 18, 8);
    return rec->nkey >= 1 && rec->nkey <= ITEM_KEY_MAX && (rec->bits & ~KEPT_BITS) == 0 &&
           rec->cas >= 1 && rec->cas <= r->cas_max &&
           rec->nkey <= r->left && rec->nbytes <= r->left - rec->nkey;
}

/* Reads from the start of f (both passes read the one file opened). */
static bool start_reading(struct reader *r, FILE *f, const struct meta *m)
{
    char head[sizeof(FILE_HEADER) - 1];
    rewind(f);
    r->f = f;
    r->crc = 0;
    r->left = m->size;
    r->cas_max = m->cas_counter;
    return get(r, head, sizeof(head)) && memcmp(head, FILE_HEADER, sizeof(head)) == 0;
}

/* Pass one: every record well formed, the count, size and CRC as saved. */
static bool file_checks_out(FILE *f, const char *path, const struct meta *m, char *err,
                            size_t errlen)
{
    struct reader r;
    struct record rec;
    char buf[65536];
    uint64_t n = 0;
    bool ok = start_reading(&r, f, m);

    while (ok && r.left > 0) {
        if (!(ok = get_record(&r, &rec)))
            break;
        for (size_t left = (size_t)rec.nkey + rec.nbytes; ok && left > 0;) {
            size_t take = left < sizeof(buf) ? left : sizeof(buf);
            ok = get(&r, buf, take);
            left -= take;
        }
        n++;
    }
    ok = ok && n == m->items && r.crc == m->crc && fgetc(r.f) == EOF;
    if (!ok)
        snprintf(err, errlen, "%s does not match its meta (torn, changed or another server's)", path);
    return ok;
}

/* Pass two: link what is not expired.  An item that no longer fits (-I
 * made smaller) is left out.  Items come most recently used first, so
 * once the memory limit (-m made smaller) is near, the rest, older than
 * all that is linked, is left out: letting the allocator evict would take
 * the tail, the item linked just before, and keep the oldest. */
/* The flush_all that was in force, on this process's clock: its time
 * (one already past stays past) and the cas bounds it judges by, which
 * the restored items keep. */
static void restore_flush(struct item_store *s, const struct meta *m)
{
    if (m->flush_at == 0)
        return;
    int64_t rel = m->flush_at - (int64_t)s->clock->epoch;
    s->oldest_live = rel < 1 ? 1 : rel > (int64_t)UINT32_MAX ? UINT32_MAX : (rel_time_t)rel;
    s->live_cut = m->live_cut;
    s->oldest_cas = m->oldest_cas;
}

/* Pass two: link what is not expired or flushed.  An item that no
 * longer fits (-I made smaller) is left out, and so is a key seen before
 * (a save holds each key once; a file made otherwise loses nothing but
 * the copy).  Items come most recently used first, so once the memory
 * limit (-m made smaller) is near, the rest, older than all that is
 * linked, is left out: letting the allocator evict would take the tail,
 * the item linked just before, and keep the oldest. */
static uint64_t link_items(struct item_store *s, FILE *f, const struct meta *m)
{
    struct reader r;
    struct record rec;
    char key[ITEM_KEY_MAX];
    uint64_t linked = 0;
    time_t now = clock_wall(s->clock);

    if (m->cas_counter > s->cas_counter)
        s->cas_counter = m->cas_counter;
    restore_flush(s, m);
    if (!start_reading(&r, f, m))
        return 0;
    while (r.left > 0 && get_record(&r, &rec) && get(&r, key, rec.nkey)) {
        eng_status st;
        enum item_miss why;
        uint64_t hv = hash_key(key, rec.nkey);
        size_t need = sizeof(struct item) + (size_t)rec.nkey + rec.nbytes + 2 + ALLOC_SLACK;
        if (need > s->mem_limit || s->mem_used > s->mem_limit - need)
            break;
        bool live = (rec.exptime == 0 || rec.exptime > (int64_t)now) &&
                    item_lookup(s, key, rec.nkey, hv, &why) == NULL;
        rel_time_t exptime = rec.exptime == 0 ? 0 : clock_exptime(s->clock, rec.exptime);
        struct item *it = live ? item_alloc(s, key, rec.nkey, rec.flags, exptime, rec.nbytes, &st)
                               : NULL;
        if (it == NULL) {
            if (fseeko(r.f, (off_t)rec.nbytes, SEEK_CUR) != 0)
                break;
            r.left -= rec.nbytes;
            continue;
        }
        if (!get(&r, item_value(it), rec.nbytes)) {
            item_discard(s, it);
            break;
        }
        it->cas = rec.cas;
        if (item_flushed(s, it)) {
            item_discard(s, it);
            continue;
        }
        it->iflags |= rec.bits;
        item_link_restored(s, it, hv, rec.cas);
        linked++;
    }
    return linked;
}

enum restart_load_result restart_load(struct item_store *s, const char *path, uint64_t *count,
                                      char *err, size_t errlen)
{
    char meta[4096];
    struct meta m;
    struct stat st;

    *count = 0;
    meta_path(meta, sizeof(meta), path, "");
    if (access(meta, F_OK) != 0)
        return RESTART_NONE;
    if (!read_meta(meta, &m, err, errlen))
        return RESTART_REFUSED;
    FILE *f = fopen(path, "r");
    if (f == NULL || fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) ||
        (uint64_t)st.st_size != m.size) {
        snprintf(err, errlen, "%s is missing or not the size its meta says", path);
        if (f != NULL)
            fclose(f);
        return RESTART_REFUSED;
    }
    enum restart_load_result res = RESTART_REFUSED;
    if (file_checks_out(f, path, &m, err, errlen)) {
        *count = link_items(s, f, &m);
        res = RESTART_LOADED;
    }
    fclose(f);
    return res;
}

void restart_consume(const char *path)
{
    char meta[4096];
    meta_path(meta, sizeof(meta), path, "");
    unlink(meta);
}
