/* test_recovery.c - the plain data of online recovery (cocytus/recovery.h):
 * the group view's text form, the unit map, the recovery messages' byte
 * layout and its refusals, a parity process that skips the units that
 * hold a served data process's data (cocytus/parity.c), and the rebuild of
 * a parity process while its source keeps writing (cocytus/rebuild.c). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "pieceset.h"
#include "codec.h"
#include "meta.h"
#include "parity.h"
#include "rebuild.h"
#include "record.h"
#include "recovery.h"

/* ---- group view ---- */

START_TEST(test_view_round_trip)
{
    struct group_view v, w;
    group_view_init(&v, 3, 2);
    v.version = 42;
    v.dp_server[1] = 0;
    v.pp_state[0] = GV_PP_SERVING;
    v.pp_serves[0] = 1;
    v.pp_state[1] = GV_PP_DEAD;
    char buf[128];
    size_t n = group_view_format(&v, buf, sizeof(buf));
    ck_assert_str_eq(buf, "42 -,p0,- s1,x");
    ck_assert_uint_eq(n, strlen(buf));
    ck_assert_int_eq(group_view_parse(&w, 3, 2, buf, n), 0);
    ck_assert_uint_eq(w.version, 42);
    ck_assert_int_eq(w.dp_server[0], -1);
    ck_assert_int_eq(w.dp_server[1], 0);
    ck_assert_int_eq(w.pp_state[0], GV_PP_SERVING);
    ck_assert_int_eq(w.pp_serves[0], 1);
    ck_assert_int_eq(w.pp_state[1], GV_PP_DEAD);
    ck_assert_int_eq(group_view_leader(&w), 0);

    const char *lost = "7 x,-,p1 p,s2";
    ck_assert_int_eq(group_view_parse(&w, 3, 2, lost, strlen(lost)), 0);
    ck_assert_int_eq(w.dp_server[0], -2);
    ck_assert_int_eq(w.dp_server[2], 1);
    ck_assert_int_eq(group_view_leader(&w), 1);
}
END_TEST

START_TEST(test_view_refusals)
{
    static const char *bad[] = {
        "", "1", "1 -,-,-", "1 -,-,- p", "1 -,-,- p,p,p", "1 -,- p,p", "1 -,-,-,- p,p",
        "x -,-,- p,p", "1 -,q,- p,p", "1 -,p2,- p,p", "1 -,-,- p,s3", "1 -,-,- p,s",
        "1 -,-,- p,p ", "1  -,-,- p,p", "1 -,,- p,p", "1 -,-,- p,p extra", "-1 -,-,- p,p",
    };
    struct group_view v;
    group_view_init(&v, 3, 2);
    v.version = 99;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_msg(group_view_parse(&v, 3, 2, bad[i], strlen(bad[i])) < 0, "accepted '%s'",
                      bad[i]);
        ck_assert_uint_eq(v.version, 99);   /* unchanged */
    }
}
END_TEST

/* Found by test/fuzz/fuzz_frame (a CONTROL frame "group 0 12\0\1 -,p1,x,-
 * p,s1,x,b"): the version was read with strtoull() from a copy, so a NUL
 * ended it early and the bytes after it were ignored; and a version over
 * 2^64 - 1 became 2^64 - 1 (strtoull's ERANGE was not looked at), a view
 * no later version could replace.  Both are refused now. */
START_TEST(test_view_version_is_plain_decimal)
{
    static const char nul[] = "12\0\1 -,p1,x,- p,s1,x,b";
    struct group_view v;
    group_view_init(&v, 4, 4);
    v.version = 99;
    ck_assert_int_eq(group_view_parse(&v, 4, 4, nul, sizeof(nul) - 1), -1);
    ck_assert_int_eq(group_view_parse(&v, 4, 4, "12\0 -,p1,x,- p,s1,x,b", 22), -1);
    static const char *bad[] = {
        "18446744073709551616 -,-,- p,p", "99999999999999999999 -,-,- p,p",
        "123456789012345678901234 -,-,- p,p", "+1 -,-,- p,p", "1x -,-,- p,p", " 1 -,-,- p,p",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_msg(group_view_parse(&v, 3, 2, bad[i], strlen(bad[i])) < 0, "accepted '%s'",
                      bad[i]);
        ck_assert_uint_eq(v.version, 99);
    }
    const char *max = "18446744073709551615 -,-,- p,p";
    ck_assert_int_eq(group_view_parse(&v, 3, 2, max, strlen(max)), 0);
    ck_assert_uint_eq(v.version, UINT64_MAX);
    const char *zeros = "0007 -,-,- p,p";
    ck_assert_int_eq(group_view_parse(&v, 3, 2, zeros, strlen(zeros)), 0);
    ck_assert_uint_eq(v.version, 7);
}
END_TEST

/* ---- unit map ---- */

START_TEST(test_unit_map)
{
    struct unit_map u;
    ck_assert_int_eq(unit_map_init(&u, 10 * RECOV_UNIT + 100), 0);
    ck_assert_uint_eq(u.nunits, 11);
    ck_assert_uint_eq(unit_map_unit_len(&u, 10), 100);
    ck_assert(unit_map_covers(&u, 0, 0));
    ck_assert(!unit_map_covers(&u, 0, 1));
    unit_map_set(&u, 3);
    unit_map_set(&u, 3);
    ck_assert_uint_eq(u.done, 1);
    ck_assert(unit_map_covers(&u, 3 * RECOV_UNIT, RECOV_UNIT));
    ck_assert(!unit_map_covers(&u, 3 * RECOV_UNIT, RECOV_UNIT + 1));
    ck_assert_uint_eq(unit_map_next_missing(&u, 3), 4);
    for (size_t i = 0; i < 11; i++)
        unit_map_set(&u, i);
    ck_assert_uint_eq(unit_map_next_missing(&u, 0), 11);
    ck_assert(unit_map_covers(&u, 0, 10 * RECOV_UNIT + 100));
    unit_map_destroy(&u);
}
END_TEST

/* ---- messages ---- */

static size_t encode(const struct recov_msg *m, const uint8_t *bytes, uint64_t nbytes,
                     uint8_t *out)
{
    size_t n = recov_encode_header(m, out);
    memcpy(out + n, bytes, (size_t)nbytes);
    return n + (size_t)nbytes;
}

START_TEST(test_message_round_trip)
{
    struct recov_msg m, d;
    memset(&m, 0, sizeof(m));
    m.id = 0x0001000000000007ull;
    m.kind = RK_DATA;
    m.who = 2;
    m.t = 123456789;
    m.nlist = 2;
    m.list[0] = 0;
    m.list[1] = 1;
    m.nranges = 2;
    m.ranges[0] = (struct recov_range){ 0, RECOV_UNIT };
    m.ranges[1] = (struct recov_range){ 8 * RECOV_UNIT, 100 };
    uint8_t bytes[RECOV_UNIT + 100];
    for (size_t i = 0; i < sizeof(bytes); i++)
        bytes[i] = (uint8_t)(i * 7);
    static uint8_t buf[16384];
    size_t n = encode(&m, bytes, sizeof(bytes), buf);
    ck_assert_int_eq(recov_decode(buf, n, &d), 0);
    ck_assert_uint_eq(d.id, m.id);
    ck_assert_int_eq(d.kind, RK_DATA);
    ck_assert_uint_eq(d.who, 2);
    ck_assert_uint_eq(d.t, 123456789);
    ck_assert_int_eq(d.nlist, 2);
    ck_assert_int_eq(d.list[1], 1);
    ck_assert_int_eq(d.nranges, 2);
    ck_assert_uint_eq(d.ranges[1].off, 8 * RECOV_UNIT);
    ck_assert_uint_eq(d.ranges[1].len, 100);
    ck_assert_uint_eq(d.nbytes, sizeof(bytes));
    ck_assert_int_eq(memcmp(d.bytes, bytes, sizeof(bytes)), 0);

    /* Every truncation is refused, and so is a byte too many. */
    for (size_t cut = 0; cut < n; cut++)
        ck_assert_int_lt(recov_decode(buf, cut, &d), 0);
    buf[n] = 0;
    ck_assert_int_lt(recov_decode(buf, n + 1, &d), 0);

    /* A FETCH carries no bytes. */
    m.kind = RK_FETCH;
    n = recov_encode_header(&m, buf);
    ck_assert_int_eq(recov_decode(buf, n, &d), 0);
    ck_assert_uint_eq(d.nbytes, 0);
}
END_TEST

START_TEST(test_message_refusals)
{
    struct recov_msg m, d;
    uint8_t buf[4096];
    memset(&m, 0, sizeof(m));
    m.kind = RK_NEED;
    m.nranges = 1;
    m.ranges[0] = (struct recov_range){ 100, RECOV_UNIT };     /* not unit aligned */
    size_t n = recov_encode_header(&m, buf);
    ck_assert_int_lt(recov_decode(buf, n, &d), 0);
    m.ranges[0] = (struct recov_range){ RECOV_UNIT, 0 };        /* empty */
    n = recov_encode_header(&m, buf);
    ck_assert_int_lt(recov_decode(buf, n, &d), 0);
    m.ranges[0] = (struct recov_range){ RECOV_UNIT, 1 };
    n = recov_encode_header(&m, buf);
    ck_assert_int_eq(recov_decode(buf, n, &d), 0);
    buf[8] = 9;                                                 /* unknown kind */
    ck_assert_int_lt(recov_decode(buf, n, &d), 0);
    buf[8] = 0;
    ck_assert_int_lt(recov_decode(buf, n, &d), 0);
    /* A range count beyond the limit. */
    buf[8] = RK_NEED;
    size_t nr_at = 8 + 1 + 4 + 8 + 1;
    buf[nr_at] = RECOV_MAX_RANGES + 1;
    buf[nr_at + 1] = 0;
    ck_assert_int_lt(recov_decode(buf, n, &d), 0);
}
END_TEST

/* ---- a recovery process's parity: data units take no delta ---- */

static uint8_t *make_record(uint64_t xid, uint64_t off, const uint8_t *delta, uint32_t len,
                            size_t *size)
{
    struct record r = {
        .xid = xid, .stable_xid = xid - 1, .nops = 0, .ops = NULL,
        .data_off = off, .data_len = len, .data = delta,
    };
    *size = rec_encoded_size(&r);
    uint8_t *buf = malloc(*size);
    rec_encode(&r, buf);
    return buf;
}

START_TEST(test_parity_skips_data_units)
{
    struct parity p;
    char err[256];
    const uint64_t region = 8 * RECOV_UNIT;
    ck_assert_int_eq(parity_init(&p, 3, 5, 1, region, 4, err, sizeof(err)), 0);
    struct unit_map u;
    ck_assert_int_eq(unit_map_init(&u, region), 0);
    unit_map_set(&u, 1);
    unit_map_set(&u, 2);
    unit_map_set(&u, 4);
    /* Data units hold something recognizable. */
    memset(p.region + RECOV_UNIT, 0xAB, 2 * RECOV_UNIT);
    memset(p.region + 4 * RECOV_UNIT, 0xCD, RECOV_UNIT);
    p.data_units = &u;

    /* One delta from unit 0 (middle) to unit 5 (middle). */
    uint64_t off = RECOV_UNIT / 2, len = 5 * RECOV_UNIT;
    uint8_t *delta = malloc(len);
    for (uint64_t i = 0; i < len; i++)
        delta[i] = (uint8_t)(i * 13 + 1);
    size_t size, size2;
    uint8_t *rec = make_record(1, off, delta, (uint32_t)len, &size);
    uint64_t stable;
    ck_assert_int_eq(parity_receive(&p, 2, rec, size, &stable), REPL_RX_BUFFERED);
    uint8_t *rec2 = make_record(2, 0, NULL, 0, &size2);
    ck_assert_int_eq(parity_receive(&p, 2, rec2, size2, &stable), REPL_RX_BUFFERED);
    ck_assert_int_eq(parity_apply(&p, 2, 1), 0);

    uint8_t coef = codec_coef(p.codec, 1, 2);
    for (uint64_t x = 0; x < region; x++) {
        size_t unit = (size_t)(x / RECOV_UNIT);
        uint8_t want;
        if (unit == 1 || unit == 2)
            want = 0xAB;
        else if (unit == 4)
            want = 0xCD;
        else if (x >= off && x < off + len) {
            want = 0;
            codec_mul_xor(p.codec, coef, &want, &delta[x - off], 1);
        } else
            want = 0;
        ck_assert_msg(p.region[x] == want, "byte %llu (unit %zu): %02x, want %02x",
                      (unsigned long long)x, unit, p.region[x], want);
    }
    ck_assert_uint_eq(p.dps[2].touched_end, off + len);
    p.data_units = NULL;
    unit_map_destroy(&u);
    free(rec);
    free(rec2);
    free(delta);
    parity_destroy(&p);
}
END_TEST

/* ---- rebuild (rebuild.h) ---- */

static void count_run(void *ctx, uint64_t off, uint64_t len)
{
    uint64_t *r = ctx;
    r[0]++;
    r[1] += len;
    r[2] = off;
}

START_TEST(test_rebuild_unit_tags)
{
    struct rb_units u;
    ck_assert_int_eq(rb_units_init(&u, 4 * RECOV_UNIT), 0);
    /* x0 10; the source wrote only into the first two units. */
    rb_units_begin(&u, 10, 2 * RECOV_UNIT - 100);
    ck_assert_uint_eq(u.arrived, 2);
    uint64_t r[3] = { 0 };
    rb_units_filter(&u, 11, 0, 4 * RECOV_UNIT, count_run, r);
    ck_assert_uint_eq(r[0], 1);                     /* one run: units 2-3 */
    ck_assert_uint_eq(r[1], 2 * RECOV_UNIT);
    ck_assert_uint_eq(r[2], 2 * RECOV_UNIT);
    /* Unit 0 as of xid 15: records up to 15 are in its bytes. */
    memset(r, 0, sizeof(r));
    rb_units_arrive(&u, 15, 0, RECOV_UNIT, count_run, r);
    ck_assert_uint_eq(r[0], 1);
    memset(r, 0, sizeof(r));
    rb_units_arrive(&u, 16, 0, RECOV_UNIT, count_run, r);   /* twice: nothing new */
    ck_assert_uint_eq(r[0], 0);
    rb_units_filter(&u, 12, 100, RECOV_UNIT, count_run, r);
    ck_assert_uint_eq(r[0], 0);                     /* 12 <= 15, unit 1 not there */
    rb_units_filter(&u, 16, 100, RECOV_UNIT, count_run, r);
    ck_assert_uint_eq(r[1], RECOV_UNIT - 100);      /* unit 0's part only */
    ck_assert(!rb_units_complete(&u));
    rb_units_arrive(&u, 16, RECOV_UNIT, RECOV_UNIT, count_run, r);
    ck_assert(!rb_units_complete(&u));              /* END not seen */
    u.ended = true;
    ck_assert(!rb_units_complete(&u));              /* nor META_DONE */
    u.meta_done = true;
    ck_assert(rb_units_complete(&u));
    rb_units_destroy(&u);
}
END_TEST

struct meta_dest {
    struct meta_table *t;
    struct pieceset *ps;
    int rc, messages;
};

static int apply_meta_message(void *ctx, const uint8_t *p, size_t len)
{
    struct meta_dest *d = ctx;
    char err[128];
    if (rb_kind_of(p, len) == RB_META_DONE)
        return 0;   /* the end of the walk */
    d->messages++;
    if (rb_apply_meta(p, len, d->t, d->ps, err, sizeof(err)) != 0)
        d->rc = -1;
    return 0;
}

START_TEST(test_rebuild_messages)
{
    struct rb_msg m = { 0 };
    struct rb_begin b = { .source = 2, .x0 = 77, .end = 8192, .max_cas = 9, .attempt = 41 }, c;
    rb_msg_begin(&m, &b);
    ck_assert(rb_is_rebuild(m.buf, m.len));
    ck_assert_int_eq(rb_decode_begin(m.buf, m.len, &c), 0);
    ck_assert_uint_eq(c.source, 2);
    ck_assert_uint_eq(c.x0, 77);
    ck_assert_uint_eq(c.end, 8192);
    ck_assert_uint_eq(c.max_cas, 9);
    ck_assert_uint_eq(c.attempt, 41);
    ck_assert_int_lt(rb_decode_begin(m.buf, m.len - 1, &c), 0);
    /* Without the attempt (an older sender): attempt 0. */
    ck_assert_int_eq(rb_decode_begin(m.buf, m.len - 8, &c), 0);
    ck_assert_uint_eq(c.max_cas, 9);
    ck_assert_uint_eq(c.attempt, 0);
    /* Attempt 0 (a migration) is sent in that shorter form. */
    size_t numbered = m.len;
    rb_msg_free(&m);
    b.attempt = 0;
    rb_msg_begin(&m, &b);
    ck_assert_uint_eq(m.len, numbered - 8);
    ck_assert_int_eq(rb_decode_begin(m.buf, m.len, &c), 0);
    ck_assert_uint_eq(c.attempt, 0);
    ck_assert_uint_eq(c.max_cas, 9);

    /* The metadata of a table and allocator, into fresh ones. */
    struct meta_table t, t2;
    struct dalloc *a = dalloc_new(1 << 20);
    struct pieceset *ps = pieceset_new(1 << 20);
    ck_assert_int_eq(meta_init(&t, 4), 0);
    ck_assert_int_eq(meta_init(&t2, 4), 0);
    char key[32];
    for (int i = 0; i < 3000; i++) {
        uint64_t off;
        ck_assert_int_eq(dalloc_alloc(a, 100 + (uint64_t)i % 300, &off), 0);
        snprintf(key, sizeof(key), "key:%d", i);
        ck_assert_ptr_nonnull(meta_put(&t, key, strlen(key), off, 100 + (uint32_t)i % 300,
                                       (uint32_t)i, i % 2 ? 0 : 1900000000 + i,
                                       1000u + (uint64_t)i));
    }
    struct meta_dest d = { &t2, ps, 0, 0 };
    ck_assert_int_eq(rb_send_meta(&t, a, apply_meta_message, &d), 0);
    ck_assert_int_eq(d.rc, 0);
    ck_assert_int_gt(d.messages, 1);                /* more than one chunk */
    ck_assert_uint_eq(meta_digest(&t), meta_digest(&t2));
    struct dalloc *a2 = pieceset_build(ps);
    ck_assert_ptr_nonnull(a2);
    ck_assert_uint_eq(dalloc_digest(a), dalloc_digest(a2));
    /* The same pieces and entries again replace what is there (a META
     * message says what each piece and entry is now, rebuild.h). */
    d.rc = 0;
    ck_assert_int_eq(rb_send_meta(&t, a, apply_meta_message, &d), 0);
    ck_assert_int_eq(d.rc, 0);
    ck_assert_uint_eq(meta_digest(&t), meta_digest(&t2));
    ck_assert_uint_eq(pieceset_count(ps), dalloc_used_pieces(a));

    /* Units: whole units, inside the region. */
    uint8_t unit[2 * RECOV_UNIT];
    memset(unit, 0x5A, sizeof(unit));
    rb_msg_units(&m, 33, RECOV_UNIT, unit, sizeof(unit));
    uint64_t tt, off;
    const uint8_t *bytes;
    uint32_t n;
    ck_assert_int_eq(rb_decode_units(m.buf, m.len, 4 * RECOV_UNIT, &tt, &off, &bytes, &n), 0);
    ck_assert_uint_eq(tt, 33);
    ck_assert_uint_eq(off, RECOV_UNIT);
    ck_assert_uint_eq(n, sizeof(unit));
    ck_assert_int_lt(rb_decode_units(m.buf, m.len, 2 * RECOV_UNIT, &tt, &off, &bytes, &n), 0);
    rb_msg_units(&m, 33, 100, unit, sizeof(unit));
    ck_assert_int_lt(rb_decode_units(m.buf, m.len, 4 * RECOV_UNIT, &tt, &off, &bytes, &n), 0);
    meta_destroy(&t);
    meta_destroy(&t2);
    dalloc_destroy(a);
    dalloc_destroy(a2);
    pieceset_destroy(ps);
    rb_msg_free(&m);
}
END_TEST

/* A META message of one entry, off and nbytes as given. */
static size_t meta_entry_message(uint8_t *buf, const char *key, uint64_t off, uint32_t nbytes)
{
    struct rb_msg m = { 0 };
    struct meta_table t;
    ck_assert_int_eq(meta_init(&t, 4), 0);
    struct item *e = meta_put(&t, key, strlen(key), off, nbytes, 0, 0, 1);
    ck_assert_ptr_nonnull(e);
    rb_msg_meta_start(&m);
    rb_msg_meta_entry(&m, e);
    ck_assert(rb_msg_meta_finish(&m));
    memcpy(buf, m.buf, m.len);
    size_t len = m.len;
    rb_msg_free(&m);
    meta_destroy(&t);
    return len;
}

/* Found by test/fuzz/fuzz_frame: a META entry whose value lies beyond the
 * region was taken into the table (a PUT's replay refuses it), and a data
 * engine later reads region + off for nbytes without looking again. */
START_TEST(test_rebuild_meta_entry_outside_region)
{
    /* The fuzzer's input: two pieces and two entries, alpha's value of
     * 64 MiB + 100 bytes at offset 0 in a 1 MiB region. */
    static const uint8_t fuzz_input[] =
        "\x00\x00\x00\x00\x00\x00\x00\x00\x21\x04\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00"
        "\x00\x00\x70\x00\x00\x00\x00\x00\x00\x00\x01\x70\x00\x00\x00\x00\x00\x00\x00\x90"
        "\x13\x00\x00\x00\x00\x00\x00\x02\x04\x62\x65\x74\x61\x70\x00\x00\x00\x00\x00\x00"
        "\x00\x88\x13\x00\x00\x03\x00\x00\x00\x00\xf1\x53\x65\x00\x00\x00\x00\x02\x00\x00"
        "\x00\x00\x00\x00\x00\x02\x05\x61\x6c\x70\x68\x61\x00\x00\x00\x00\x00\x00\x00\x00"
        "\x64\x00\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00"
        "\x00\x00\x00\x00";
    struct meta_table t;
    struct pieceset *a = pieceset_new(1 << 20);
    ck_assert_int_eq(meta_init(&t, 4), 0);
    uint8_t buf[512];
    char err[192];
    ck_assert_int_eq(rb_apply_meta(fuzz_input, sizeof(fuzz_input) - 1, &t, a, err, sizeof(err)),
                     -1);
    ck_assert_ptr_nonnull(strstr(err, "outside the region"));
    meta_destroy(&t);
    ck_assert_int_eq(meta_init(&t, 4), 0);
    pieceset_reset(a);
    static const struct {
        uint64_t off;
        uint32_t nbytes;
    } outside[] = { { 1 << 20, 1 }, { (1 << 20) - 10, 11 }, { UINT64_MAX - 5, 10 },
                    { 0x7000000000000000ull, 0 }, { 0, UINT32_MAX } };
    for (size_t i = 0; i < sizeof(outside) / sizeof(outside[0]); i++) {
        size_t len = meta_entry_message(buf, "beta", outside[i].off, outside[i].nbytes);
        ck_assert_int_eq(rb_apply_meta(buf, len, &t, a, err, sizeof(err)), -1);
        ck_assert_ptr_nonnull(strstr(err, "outside the region"));
        ck_assert_uint_eq(t.count, 0);
    }
    /* Up to the region's last byte is fine. */
    size_t len = meta_entry_message(buf, "beta", (1 << 20) - 10, 10);
    ck_assert_int_eq(rb_apply_meta(buf, len, &t, a, err, sizeof(err)), 0);
    ck_assert_uint_eq(t.count, 1);
    meta_destroy(&t);
    pieceset_destroy(a);
}
END_TEST

/* Seen while writing fuzz_frame's META checks (the fuzzer had not hit
 * it): a META entry with a 251..255-byte key was refused as "out of
 * memory" (meta_put's refusal); it is refused for its key now. */
START_TEST(test_rebuild_meta_key_too_long)
{
    uint8_t buf[9 + 4 + 2 + 255 + 32];
    memset(buf, 0, sizeof(buf));
    buf[8] = RB_META;
    buf[9] = 1;                       /* count */
    buf[13] = 2;                      /* an entry */
    struct meta_table t;
    struct pieceset *a = pieceset_new(1 << 20);
    ck_assert_int_eq(meta_init(&t, 4), 0);
    char err[192];
    for (unsigned nkey = 250; nkey <= 255; nkey++) {
        buf[14] = (uint8_t)nkey;
        memset(buf + 15, 'k', nkey);
        size_t len = 15 + nkey + 32;
        memset(buf + 15 + nkey, 0, 32);
        buf[15 + nkey + 8] = 1;       /* nbytes 1 at offset 0 */
        int rc = rb_apply_meta(buf, len, &t, a, err, sizeof(err));
        if (nkey == 250) {
            ck_assert_msg(rc == 0, "%s", err);
            continue;
        }
        ck_assert_int_eq(rc, -1);
        ck_assert_msg(strstr(err, "-byte key") != NULL, "key of %u: %s", nkey, err);
    }
    ck_assert_uint_eq(t.count, 1);
    meta_destroy(&t);
    pieceset_destroy(a);
}
END_TEST

/* A parity process rebuilt while its source writes ends with the same
 * parity as one that received every record: units arrive tagged with the
 * source's committed xid, before and after the records that touch them. */
START_TEST(test_rebuild_matches_full_stream)
{
    const uint64_t region = 4 * RECOV_UNIT;
    struct parity full, rebuilt;
    char err[256];
    ck_assert_int_eq(parity_init(&full, 3, 5, 1, region, 4, err, sizeof(err)), 0);
    ck_assert_int_eq(parity_init(&rebuilt, 3, 5, 1, region, 4, err, sizeof(err)), 0);
    uint8_t truth[4 * RECOV_UNIT];                  /* the source's committed region */
    memset(truth, 0, sizeof(truth));
    struct rb_units u;
    ck_assert_int_eq(rb_units_init(&u, region), 0);
    uint8_t *delta = malloc(region);
    const uint64_t offs[8] = { 0, 5000, 100, 4000, 9000, 12000, 2000, 7000 };
    const uint32_t lens[8] = { 3000, 6000, 8000, 5000, 3000, 4000, 9000, 2000 };
    for (uint64_t x = 1; x <= 8; x++) {
        for (uint32_t i = 0; i < lens[x - 1]; i++)
            delta[i] = (uint8_t)(x * 31 + i * 7);
        size_t size;
        uint8_t *rec = make_record(x, offs[x - 1], delta, lens[x - 1], &size);
        uint64_t stable;
        ck_assert_int_eq(parity_receive(&full, 2, rec, size, &stable), REPL_RX_BUFFERED);
        ck_assert_int_eq(parity_apply(&full, 2, x), 0);
        if (x == 3) {
            struct rb_msg m = { 0 };
            struct rb_begin b = { .source = 2, .x0 = 3, .end = region, .max_cas = 0 };
            rb_msg_begin(&m, &b);
            ck_assert_int_eq(parity_rebuild_begin(&rebuilt, 2, &u, m.buf, m.len), 0);
            rb_msg_free(&m);
        } else if (x > 3) {
            ck_assert_int_eq(parity_receive(&rebuilt, 2, rec, size, &stable), REPL_RX_BUFFERED);
        }
        /* Unit x-4 travels around record x, in every order the link allows
         * (FIFO: bytes read before x commits arrive before x is applied):
         * units 0 and 2 are read before x commits (t = x-1); unit 1 after
         * (t = x) and arrives before x is applied; unit 3 after, and
         * arrives after x was applied (skipped: it is in the bytes). */
        int unit = x >= 4 && x <= 7 ? (int)(x - 4) : -1;
        struct rb_msg um = { 0 };
        if (unit == 0 || unit == 2) {
            rb_msg_units(&um, x - 1, (uint64_t)unit * RECOV_UNIT,
                         truth + (uint64_t)unit * RECOV_UNIT, RECOV_UNIT);
            ck_assert_int_eq(parity_rebuild_message(&rebuilt, 2, um.buf, um.len, err,
                                                    sizeof(err)), 0);
        }
        for (uint32_t i = 0; i < lens[x - 1]; i++)
            truth[offs[x - 1] + i] ^= delta[i];     /* x commits at the source */
        if (unit == 1 || unit == 3)
            rb_msg_units(&um, x, (uint64_t)unit * RECOV_UNIT,
                         truth + (uint64_t)unit * RECOV_UNIT, RECOV_UNIT);
        if (unit == 1)
            ck_assert_int_eq(parity_rebuild_message(&rebuilt, 2, um.buf, um.len, err,
                                                    sizeof(err)), 0);
        if (x > 3)
            ck_assert_int_eq(parity_apply(&rebuilt, 2, x), 0);
        if (unit == 3)
            ck_assert_int_eq(parity_rebuild_message(&rebuilt, 2, um.buf, um.len, err,
                                                    sizeof(err)), 0);
        rb_msg_free(&um);
        free(rec);
    }
    struct rb_msg end = { 0 };
    rb_msg_end(&end, 4);
    ck_assert_int_eq(parity_rebuild_message(&rebuilt, 2, end.buf, end.len, err, sizeof(err)), 0);
    ck_assert(!rb_units_complete(&u));              /* the metadata has not ended */
    rb_msg_meta_done(&end, 0, 0);
    ck_assert_int_eq(parity_rebuild_message(&rebuilt, 2, end.buf, end.len, err, sizeof(err)), 0);
    rb_msg_free(&end);
    ck_assert(rb_units_complete(&u));
    ck_assert_int_eq(memcmp(full.region, rebuilt.region, region), 0);
    rebuilt.dps[2].rb = NULL;
    rb_units_destroy(&u);
    free(delta);
    parity_destroy(&full);
    parity_destroy(&rebuilt);
}
END_TEST

/* ---- the metadata of a copy, walked while the source writes ----
 *
 * A model of a data process and of a replica joined at x0.  The source
 * writes (ALLOC/FREE/PUT/DEL, now and then FLUSH) as engine_data.c does:
 * its allocator changes when a record is sent, its table when the record
 * commits, and an entry with a record in flight is marked META_PENDING (a
 * new key has a placeholder) and left out of the walk; no entry is walked
 * while a FLUSH is in flight.  Records and META messages go down one FIFO
 * link; the replica takes them in order at random moments and applies
 * records at random stable points, as parity.c and replica.c do.  At the
 * end its table and pieces must be the source's, with no op refused.
 * Small messages and a small table give many interleavings per seed. */

#define RW_KEYS 300
#define RW_REGION (1u << 20)

struct rw_event {
    struct rw_event *next;
    uint64_t xid;              /* a record, or 0: a META message */
    struct rec_op ops[3];
    uint32_t nops;
    char keys[3][16];
    uint8_t *msg;
    size_t len;
};

struct rw_model {
    unsigned id;               /* the seed it started from, for messages */
    unsigned seed;
    /* source */
    struct meta_table st;
    struct dalloc *sa;
    uint64_t xid, committed, cas;
    struct rw_event *inflight[64]; /* sent, not committed (FIFO) */
    int ninflight;
    bool flush_inflight;
    struct rb_meta_walk walk;
    bool walk_done;
    /* link */
    struct rw_event *head, *tail;
    /* replica */
    struct meta_table rt;
    struct pieceset *rps;
    struct rb_units u;
    struct rw_event *received[1 << 14];
    uint64_t received_xid, applied_xid;
};

static unsigned rw_rand(struct rw_model *m)
{
    m->seed = m->seed * 1103515245u + 12345u;
    return (m->seed >> 8) & 0xffffff;
}

static void rw_push(struct rw_model *m, struct rw_event *e)
{
    if (m->tail)
        m->tail->next = e;
    else
        m->head = e;
    m->tail = e;
}

static int rw_send_meta(void *ctx, const uint8_t *p, size_t len)
{
    struct rw_model *m = ctx;
    struct rw_event *e = calloc(1, sizeof(*e));
    e->msg = malloc(len);
    memcpy(e->msg, p, len);
    e->len = len;
    rw_push(m, e);
    return 0;
}

static bool rw_skip(void *ctx, const struct item *e)
{
    (void)ctx;
    return (e->iflags & META_PENDING) != 0;
}

static struct rec_op *rw_op(struct rw_event *e, uint8_t type, const char *key)
{
    struct rec_op *op = &e->ops[e->nops];
    memset(op, 0, sizeof(*op));
    op->type = type;
    if (key) {
        snprintf(e->keys[e->nops], sizeof(e->keys[0]), "%s", key);
        op->key = e->keys[e->nops];
        op->nkey = (uint8_t)strlen(key);
    }
    e->nops++;
    return op;
}

/* One write at the source: the allocator now, the table at commit. */
static void rw_write(struct rw_model *m)
{
    if (m->ninflight == 64 || m->flush_inflight)
        return;
    struct rw_event *e = calloc(1, sizeof(*e));
    unsigned r = rw_rand(m);
    char key[16];
    snprintf(key, sizeof(key), "k%u", r % RW_KEYS);
    struct item *old = meta_find(&m->st, key, strlen(key));
    if (old && (old->iflags & META_PENDING)) {
        free(e);
        return;                      /* one record in flight per key */
    }
    if (r % 97 == 0) {
        rw_op(e, ROP_FLUSH, NULL);
        dalloc_reset(m->sa);
        m->flush_inflight = true;
    } else if (old && r % 4 == 0) {
        rw_op(e, ROP_FREE, NULL)->off = meta_off(old);
        ck_assert_int_eq(dalloc_free(m->sa, meta_off(old), NULL), 0);
        rw_op(e, ROP_DEL, key);
        old->iflags |= META_PENDING;
    } else {
        uint32_t nbytes = 1 + rw_rand(m) % 700;
        uint64_t off;
        if (dalloc_alloc(m->sa, nbytes, &off) != 0) {
            free(e);
            return;
        }
        if (old) {
            rw_op(e, ROP_FREE, NULL)->off = meta_off(old);
            ck_assert_int_eq(dalloc_free(m->sa, meta_off(old), NULL), 0);
        }
        struct rec_op *a = rw_op(e, ROP_ALLOC, NULL);
        a->off = off;
        a->size = nbytes;
        struct rec_op *put = rw_op(e, ROP_PUT, key);
        put->off = off;
        put->nbytes = nbytes;
        put->flags = r;
        put->cas = ++m->cas;
        if (old) {
            old->iflags |= META_PENDING;
        } else {
            struct item *ph = meta_put(&m->st, key, strlen(key), off, nbytes, 0, 0, 0);
            ph->iflags |= META_PENDING;   /* the placeholder of a new key */
        }
    }
    e->xid = ++m->xid;
    m->inflight[m->ninflight++] = e;
    /* The link carries a copy; the source keeps e until it commits. */
    struct rw_event *c = malloc(sizeof(*c));
    *c = *e;
    c->next = NULL;
    for (uint32_t i = 0; i < c->nops; i++)
        if (e->ops[i].key)
            c->ops[i].key = c->keys[i];
    rw_push(m, c);
}

static void rw_commit_one(struct rw_model *m)
{
    if (m->ninflight == 0)
        return;
    struct rw_event *e = m->inflight[0];
    memmove(m->inflight, m->inflight + 1, (size_t)--m->ninflight * sizeof(m->inflight[0]));
    for (uint32_t i = 0; i < e->nops; i++) {
        const struct rec_op *op = &e->ops[i];
        if (op->type == ROP_PUT) {
            struct item *it = meta_put(&m->st, op->key, op->nkey, op->off, op->nbytes,
                                       op->flags, 0, op->cas);
            it->iflags &= (uint8_t)~META_PENDING;
        } else if (op->type == ROP_DEL) {
            meta_del(&m->st, op->key, op->nkey);
        } else if (op->type == ROP_FLUSH) {
            meta_clear(&m->st);
            m->flush_inflight = false;
        }
    }
    m->committed = e->xid;
    free(e);
}

static void rw_walk(struct rw_model *m)
{
    if (m->walk_done || m->flush_inflight)
        return;
    int rc = rb_meta_walk_step(&m->walk, &m->st, m->sa, 1, rw_skip, NULL, rw_send_meta, m);
    ck_assert_int_ge(rc, 0);
    m->walk_done = rc == 1;
}

static void rw_apply(struct rw_model *m, uint64_t upto)
{
    char err[192];
    while (m->applied_xid < upto) {
        struct rw_event *e = m->received[m->applied_xid + 1];
        ck_assert_msg(rb_meta_catch_up(&m->u, e->xid - 1, &m->rt, m->rps, err,
                                       sizeof(err)) == 0, "seed %u: %s", m->id, err);
        bool lenient = rb_meta_lenient(&m->u);
        for (uint32_t i = 0; i < e->nops; i++)
            ck_assert_msg(meta_replay_op(&m->rt, m->rps, &e->ops[i], lenient, err,
                                         sizeof(err)) == 0,
                          "seed %u xid %llu (%s): %s", m->id, (unsigned long long)e->xid,
                          lenient ? "lenient" : "strict", err);
        m->applied_xid = e->xid;
    }
    ck_assert_msg(rb_meta_catch_up(&m->u, m->applied_xid, &m->rt, m->rps, err,
                                   sizeof(err)) == 0, "seed %u: %s", m->id, err);
}

/* The replica takes the next event off the link. */
static bool rw_receive(struct rw_model *m)
{
    struct rw_event *e = m->head;
    if (!e)
        return false;
    m->head = e->next;
    if (!m->head)
        m->tail = NULL;
    if (e->xid) {
        ck_assert_uint_eq(e->xid, m->received_xid + 1);
        ck_assert_uint_lt(e->xid, sizeof(m->received) / sizeof(m->received[0]));
        m->received[e->xid] = e;
        m->received_xid = e->xid;
        return true;
    }
    char err[192];
    ck_assert_msg(rb_meta_arrive(&m->u, m->received_xid, m->applied_xid, e->msg, e->len,
                                 &m->rt, m->rps, err, sizeof(err)) == 0,
                  "seed %u: %s", m->id, err);
    free(e->msg);
    free(e);
    return true;
}

static void rw_run(unsigned seed, int writes_before, int steps)
{
    struct rw_model *m = calloc(1, sizeof(*m));
    m->id = m->seed = seed;
    m->sa = dalloc_new(RW_REGION);
    m->rps = pieceset_new(RW_REGION);
    ck_assert_int_eq(meta_init(&m->st, 2), 0);
    ck_assert_int_eq(meta_init(&m->rt, 2), 0);
    ck_assert_int_eq(rb_units_init(&m->u, RW_REGION), 0);
    m->walk.chunk = 64 + seed % 512;
    /* The state before x0, quiet: nothing in flight, the link empty. */
    for (int i = 0; i < writes_before; i++) {
        rw_write(m);
        rw_commit_one(m);
    }
    while (m->head) {
        struct rw_event *e = m->head;
        m->head = e->next;
        free(e);
    }
    m->tail = NULL;
    uint64_t x0 = m->xid;
    rb_units_begin(&m->u, x0, RW_REGION);
    m->received_xid = m->applied_xid = x0;
    for (int i = 0; i < steps || !m->walk_done || m->head; i++) {
        ck_assert_msg(i < 50 * steps, "seed %u: flush %d inflight %d walk_done %d phase %d head %p piece_next %llu cursor %llu", seed, m->flush_inflight, m->ninflight, m->walk_done, m->walk.phase, (void *)m->head, (unsigned long long)m->walk.piece_next, (unsigned long long)m->walk.entry_cursor);
        unsigned r = rw_rand(m) % 100;
        if (i >= steps) {
            /* Drain: the walk finishes, records commit and arrive. */
            rw_commit_one(m);
            rw_walk(m);
            rw_receive(m);
        } else if (r < 40) {
            rw_write(m);
        } else if (r < 55) {
            rw_commit_one(m);
        } else if (r < 70) {
            rw_walk(m);
        } else if (r < 92) {
            rw_receive(m);
        } else {
            uint64_t span = m->received_xid - m->applied_xid;
            rw_apply(m, m->applied_xid + (span ? rw_rand(m) % (span + 1) : 0));
        }
    }
    while (m->ninflight)
        rw_commit_one(m);
    while (rw_receive(m))
        ;
    rw_apply(m, m->received_xid);
    ck_assert_msg(m->u.meta_done, "seed %u: the metadata did not end", seed);
    ck_assert_ptr_null(m->u.held);
    ck_assert_msg(meta_digest(&m->st) == meta_digest(&m->rt), "seed %u: tables differ", seed);
    ck_assert_uint_eq(m->st.count, m->rt.count);
    uint64_t digest;
    ck_assert_int_eq(pieceset_digest(m->rps, &digest), 0);
    ck_assert_msg(digest == dalloc_digest(m->sa), "seed %u: pieces differ", seed);
    for (uint64_t x = x0 + 1; x <= m->received_xid; x++)
        free(m->received[x]);
    meta_destroy(&m->st);
    meta_destroy(&m->rt);
    dalloc_destroy(m->sa);
    pieceset_destroy(m->rps);
    rb_units_destroy(&m->u);
    free(m);
}

START_TEST(test_rebuild_meta_while_writing)
{
    for (unsigned seed = 1; seed <= 200; seed++)
        rw_run(seed, 200 + (int)(seed % 5) * 100, 1500);
    /* An empty table and allocator at x0. */
    rw_run(7, 0, 300);
}
END_TEST

static Suite *recovery_suite(void)
{
    Suite *s = suite_create("recovery");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_view_round_trip);
    tcase_add_test(tc, test_rebuild_meta_while_writing);
    tcase_add_test(tc, test_view_refusals);
    tcase_add_test(tc, test_view_version_is_plain_decimal);
    tcase_add_test(tc, test_unit_map);
    tcase_add_test(tc, test_message_round_trip);
    tcase_add_test(tc, test_message_refusals);
    tcase_add_test(tc, test_parity_skips_data_units);
    tcase_add_test(tc, test_rebuild_unit_tags);
    tcase_add_test(tc, test_rebuild_messages);
    tcase_add_test(tc, test_rebuild_meta_entry_outside_region);
    tcase_add_test(tc, test_rebuild_meta_key_too_long);
    tcase_add_test(tc, test_rebuild_matches_full_stream);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(recovery_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
