/* test_coord.c - the coordinator's pure parts: the control message parser
 * (cluster/coord_msg.c) and the state file (cluster/coord_state.c):
 * round trip, atomic replacement, and refusal of corrupt files and of files
 * of another layout. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "coord.h"
#include "slotmap.h"

static char err[1024];

static int parse(const char *text, struct ctl_msg *m)
{
    err[0] = '\0';
    return ctl_parse(text, strlen(text), m, err, sizeof(err));
}

START_TEST(test_parse_server_messages)
{
    struct ctl_msg m;
    ck_assert_int_eq(parse("hello 1234 7", &m), 0);
    ck_assert_int_eq(m.kind, CTL_HELLO);
    ck_assert_int_eq(m.pid, 1234);
    ck_assert_uint_eq(m.epoch, 7);
    ck_assert_uint_eq(m.incarnation, 0);     /* a build before incarnations */

    ck_assert_int_eq(parse("hello 1234 7 9223372036854775807", &m), 0);
    ck_assert_int_eq(m.kind, CTL_HELLO);
    ck_assert_int_eq(m.pid, 1234);
    ck_assert_uint_eq(m.epoch, 7);
    ck_assert_uint_eq(m.incarnation, 9223372036854775807ULL);

    ck_assert_int_eq(parse("retire", &m), 0);
    ck_assert_int_eq(m.kind, CTL_RETIRE);

    ck_assert_int_eq(parse("hb 99 18446744073709551615 4096000", &m), 0);
    ck_assert_int_eq(m.kind, CTL_HB);
    ck_assert_int_eq(m.pid, 99);
    ck_assert_uint_eq(m.epoch, UINT64_MAX);
    ck_assert_uint_eq(m.rss, 4096000);
    ck_assert_ptr_null(m.body);

    /* Recovery progress rides on the heartbeat after <rss>. */
    ck_assert_int_eq(parse("hb 1 2 3 rec 0 10 20 5", &m), 0);
    ck_assert_int_eq(m.kind, CTL_HB);
    ck_assert_uint_eq(m.rss, 3);
    ck_assert_uint_eq(m.body_len, 13);
    ck_assert_int_eq(memcmp(m.body, "rec 0 10 20 5", 13), 0);

    ck_assert_int_eq(parse("migrated 16383 8 ok", &m), 0);
    ck_assert_int_eq(m.kind, CTL_MIGRATED);
    ck_assert_uint_eq(m.slot, 16383);
    ck_assert_uint_eq(m.epoch, 8);
    ck_assert(m.ok);

    ck_assert_int_eq(parse("migrated 5 8 failed destination 127.0.0.1:21002 refused", &m), 0);
    ck_assert(!m.ok);
    ck_assert_str_eq(m.why, "destination 127.0.0.1:21002 refused");

    /* A replication peer whose link is down, and for how long. */
    ck_assert_int_eq(parse("lost data 2 1750", &m), 0);
    ck_assert_int_eq(m.kind, CTL_LOST);
    ck_assert_int_eq(m.role, ROLE_DATA);
    ck_assert_int_eq(m.index, 2);
    ck_assert_uint_eq(m.down_ms, 1750);
    ck_assert_int_eq(parse("lost primary 0 0", &m), 0);
    ck_assert_int_eq(m.role, ROLE_PRIMARY);
    ck_assert_int_eq(parse("lost backup 31 18446744073709551615", &m), 0);
    ck_assert_int_eq(m.role, ROLE_BACKUP);
    ck_assert_int_eq(m.index, 31);
    ck_assert_uint_eq(m.down_ms, UINT64_MAX);
}
END_TEST

START_TEST(test_parse_coordinator_messages)
{
    struct ctl_msg m;
    ck_assert_int_eq(parse("migrate 42 127.0.0.1:21002 3", &m), 0);
    ck_assert_int_eq(m.kind, CTL_MIGRATE);
    ck_assert_uint_eq(m.slot, 42);
    ck_assert_str_eq(m.host, "127.0.0.1");
    ck_assert_int_eq(m.port, 21002);
    ck_assert_uint_eq(m.epoch, 3);

    ck_assert_int_eq(parse("migrate 1 ::1:11211 4", &m), 0);
    ck_assert_str_eq(m.host, "::1");
    ck_assert_int_eq(m.port, 11211);

    const char *text = "map 2\nh|h|1\n0-16383:0\n";
    ck_assert_int_eq(parse(text, &m), 0);
    ck_assert_int_eq(m.kind, CTL_MAP);
    ck_assert_ptr_eq(m.body, text + 4);
    ck_assert_uint_eq(m.body_len, strlen(text) - 4);
}
END_TEST

START_TEST(test_parse_refuses)
{
    static const char *const bad[] = {
        "", "hello", "hello 1", "hello 1 2 3 4", "hello 1 2 x", "hello 1 2 3 ", "hello 1 2 0",
        "hello -1 2",
        "hello 1 x", "hello  1 2", "retire 1", "retire ", " retire",
        "hello 1 2 ", " hello 1 2", "hb 1 2", "hb 1 2 3 ", "hb 1 2 +3",
        "hello 1 99999999999999999999", "hello 99999999999 1",
        "migrated 16384 1 ok", "migrated 1 1", "migrated 1 1 ok extra", "migrated 1 1 maybe",
        "migrated 1 1 failed", "migrate 1 127.0.0.1 2", "migrate 1 127.0.0.1:0 2",
        "migrate 1 127.0.0.1:65536 2", "migrate 1 :80 2", "migrate 16384 h:1 2",
        "migrate 1 h:1 2 3", "map ", "nonsense", "hello 1 2\n", "hb 1\r2 3 4",
        "lost", "lost data", "lost data 1", "lost data 1 2 3", "lost plain 0 5",
        "lost coordinator 0 5", "lost dat 0 5", "lost parityparityparity 0 5",
        "lost data -1 5", "lost data 1024 5", "lost data 1 x", "lost data 1 99999999999999999999",
    };
    struct ctl_msg m;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(parse(bad[i], &m) == -1 && err[0] != '\0', "accepted '%s'", bad[i]);
    /* Not NUL-terminated input stops at len. */
    ck_assert_int_eq(ctl_parse("hello 1 2XYZ", 9, &m, err, sizeof(err)), 0);
    ck_assert_uint_eq(m.epoch, 2);
    ck_assert_int_eq(ctl_parse("hello 1 2\0 3", 12, &m, err, sizeof(err)), -1);
}
END_TEST

/* ---- state file ---- */

static char dir[64];
static char conf[128], state[128];
static struct cluster cl;

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static char *read_text(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    char *buf = malloc(1 << 20);
    *len = fread(buf, 1, (1 << 20) - 1, f);
    buf[*len] = '\0';
    fclose(f);
    return buf;
}

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/test_coord.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(conf, sizeof(conf), "%s/cluster.conf", dir);
    write_text(conf, "cluster demo\nsecret s\nscheme plain\nbase_port 30000\n"
               "node 0 127.0.0.1\nnode 1 127.0.0.1\nnode 2 127.0.0.1\n"
               "coordinator 127.0.0.1 30010 30011\n");
    ck_assert_msg(cluster_load(conf, &cl, err, sizeof(err)) == 0, "%s", err);
    snprintf(state, sizeof(state), "%s/coordinator.state", dir);
    ck_assert_str_eq(cl.coord_state, state);
}

static void teardown(void)
{
    char path[200];
    cluster_free(&cl);
    snprintf(path, sizeof(path), "%s/other.conf", dir);
    unlink(path);
    unlink(state);
    unlink(conf);
    rmdir(dir);
}

static void build_map(struct slotmap *m, uint64_t epoch)
{
    ck_assert_msg(slotmap_build(m, &cl, epoch, err, sizeof(err)) == 0, "%s", err);
}

START_TEST(test_state_round_trip)
{
    struct slotmap m, back;
    ck_assert_int_eq(coord_state_load(state, &cl, &back, NULL, NULL, err, sizeof(err)), 1);   /* no file yet */
    build_map(&m, 1);
    m.slot[77] = (uint16_t)((m.slot[77] + 1) % m.nendpoints);
    m.epoch = 9;
    ck_assert_msg(coord_state_save(state, &m, err, sizeof(err)) == 0, "%s", err);
    ck_assert_msg(coord_state_load(state, &cl, &back, NULL, NULL, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(back.epoch, 9);
    ck_assert_int_eq(back.nendpoints, m.nendpoints);
    ck_assert_mem_eq(back.slot, m.slot, sizeof(m.slot));
    for (int i = 0; i < m.nendpoints; i++) {
        ck_assert_int_eq(back.endpoints[i].group, m.endpoints[i].group);   /* from the cluster */
        ck_assert_int_eq(back.endpoints[i].index, m.endpoints[i].index);
    }
    slotmap_free(&back);

    /* A second save replaces the first; no temporary file is left. */
    m.epoch = 10;
    ck_assert_int_eq(coord_state_save(state, &m, err, sizeof(err)), 0);
    ck_assert_int_eq(coord_state_load(state, &cl, &back, NULL, NULL, err, sizeof(err)), 0);
    ck_assert_uint_eq(back.epoch, 10);
    char tmp[200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", state);
    ck_assert_int_eq(access(tmp, F_OK), -1);

    struct slotmap copy;
    ck_assert_int_eq(coord_map_copy(&copy, &back), 0);
    ck_assert_uint_eq(copy.epoch, 10);
    ck_assert_mem_eq(copy.slot, back.slot, sizeof(copy.slot));
    ck_assert_str_eq(copy.endpoints[1].host, back.endpoints[1].host);
    slotmap_free(&copy);
    slotmap_free(&back);
    slotmap_free(&m);
}
END_TEST

/* Load must fail with a message containing want. */
static void load_fails(const char *want)
{
    struct slotmap m;
    err[0] = '\0';
    ck_assert_int_eq(coord_state_load(state, &cl, &m, NULL, NULL, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, want) != NULL, "error '%s' does not contain '%s'", err, want);
}

START_TEST(test_state_corrupt)
{
    struct slotmap m;
    build_map(&m, 4);
    ck_assert_int_eq(coord_state_save(state, &m, err, sizeof(err)), 0);
    size_t len;
    char *good = read_text(state, &len);

    /* truncated */
    char *cut = strndup(good, len - 10);
    write_text(state, cut);
    load_fails("bytes of map announced");
    free(cut);

    /* one slot range edited: still decodes, the CRC catches it */
    char *edited = strdup(good);
    char *colon = strstr(strstr(edited, "crc32c"), ":0 ");
    ck_assert_ptr_nonnull(colon);
    colon[1] = '1';
    write_text(state, edited);
    load_fails("CRC-32C");
    free(edited);

    write_text(state, "garbage\n");
    load_fails("not a coordinator state file");
    write_text(state, "cocytus-coordinator-state 1\nepoch x\n");
    load_fails("bad 'epoch'");
    write_text(state, "");
    load_fails("not a coordinator state file");

    /* header epoch differs from the map's */
    char *other = strdup(good);
    char *e = strstr(other, "epoch 4\n");
    ck_assert_ptr_nonnull(e);
    e[6] = '5';
    write_text(state, other);
    load_fails("epoch 5 in the header, 4 in the map");
    free(other);

    free(good);
    slotmap_free(&m);
}
END_TEST

START_TEST(test_state_other_layout)
{
    struct slotmap m;
    build_map(&m, 3);
    ck_assert_int_eq(coord_state_save(state, &m, err, sizeof(err)), 0);
    slotmap_free(&m);

    /* The same directory, a cluster file with another port range. */
    char path[200];
    struct cluster other;
    snprintf(path, sizeof(path), "%s/other.conf", dir);
    write_text(path, "cluster demo\nsecret s\nscheme plain\nbase_port 31000\n"
               "node 0 127.0.0.1\nnode 1 127.0.0.1\nnode 2 127.0.0.1\n"
               "coordinator 127.0.0.1 30010 30011\n");
    ck_assert_int_eq(cluster_load(path, &other, err, sizeof(err)), 0);
    err[0] = '\0';
    ck_assert_int_eq(coord_state_load(state, &other, &m, NULL, NULL, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, "endpoint 0 is 127.0.0.1:30000, the cluster file says 127.0.0.1:31000"),
                  "%s", err);
    cluster_free(&other);

    /* Fewer nodes: fewer endpoints. */
    write_text(path, "cluster demo\nsecret s\nscheme plain\nbase_port 30000\n"
               "node 0 127.0.0.1\nnode 1 127.0.0.1\ncoordinator 127.0.0.1 30010 30011\n");
    ck_assert_int_eq(cluster_load(path, &other, err, sizeof(err)), 0);
    ck_assert_int_eq(coord_state_load(state, &other, &m, NULL, NULL, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, "holds 3 endpoints, the cluster file has 2"), "%s", err);
    cluster_free(&other);
}
END_TEST

/* The ZooKeeper backend's bytes: the state, then progress lines, which the
 * file loader refuses and the decoder with `used` leaves to the caller. */
START_TEST(test_state_with_progress)
{
    struct slotmap m, back;
    size_t len, used = 0;
    build_map(&m, 1);
    m.epoch = 4;
    char *bytes = coord_state_encode(&m, &len);
    ck_assert_ptr_nonnull(bytes);
    const char *extra = "progress 1\nview 0 7 -,-,- p,p\npid 3 4711\n";
    char *all = malloc(len + strlen(extra) + 1);
    memcpy(all, bytes, len);
    strcpy(all + len, extra);
    ck_assert_msg(coord_state_decode("zk", all, len + strlen(extra), &cl, &back, &used, err,
                                     sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(used, len);
    ck_assert_uint_eq(back.epoch, 4);
    ck_assert_mem_eq(back.slot, m.slot, sizeof(m.slot));
    slotmap_free(&back);
    /* Exactly one state without `used`: the extra bytes are refused. */
    ck_assert_int_eq(coord_state_decode("zk", all, len + strlen(extra), &cl, &back, NULL, err,
                                        sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "bytes of map announced"));
    /* And what the file backend writes is exactly the encoded bytes. */
    ck_assert_int_eq(coord_state_save(state, &m, err, sizeof(err)), 0);
    size_t flen;
    char *file = read_text(state, &flen);
    ck_assert_uint_eq(flen, len);
    ck_assert_mem_eq(file, bytes, len);
    free(file);
    /* A file with the work in progress after the map: loaded with rest,
     * the lines come back; without, the file is refused as not one map. */
    ck_assert_int_eq(coord_state_write(state, all, len + strlen(extra), err, sizeof(err)), 0);
    char *rest = NULL;
    size_t nrest = 0;
    ck_assert_msg(coord_state_load(state, &cl, &back, &rest, &nrest, err, sizeof(err)) == 0, "%s",
                  err);
    ck_assert_uint_eq(back.epoch, 4);
    ck_assert_uint_eq(nrest, strlen(extra));
    ck_assert_str_eq(rest, extra);
    slotmap_free(&back);
    free(rest);
    ck_assert_int_eq(coord_state_load(state, &cl, &back, NULL, NULL, err, sizeof(err)), -1);
    free(all);
    free(bytes);
    slotmap_free(&m);
}
END_TEST

START_TEST(test_state_unwritable)
{
    struct slotmap m;
    build_map(&m, 1);
    ck_assert_int_eq(coord_state_save("/nonexistent-dir/x.state", &m, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, "cannot create /nonexistent-dir/x.state.tmp"), "%s", err);
    slotmap_free(&m);
}
END_TEST

static Suite *coord_suite(void)
{
    Suite *s = suite_create("coord");
    TCase *msg = tcase_create("messages");
    tcase_add_test(msg, test_parse_server_messages);
    tcase_add_test(msg, test_parse_coordinator_messages);
    tcase_add_test(msg, test_parse_refuses);
    suite_add_tcase(s, msg);
    TCase *st = tcase_create("state");
    tcase_add_checked_fixture(st, setup, teardown);
    tcase_add_test(st, test_state_round_trip);
    tcase_add_test(st, test_state_corrupt);
    tcase_add_test(st, test_state_other_layout);
    tcase_add_test(st, test_state_unwritable);
    tcase_add_test(st, test_state_with_progress);
    suite_add_tcase(s, st);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(coord_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
