/* test_groups.c - cocytus-cli's reading of the coordinator's `cocytus
 * groups` lines (client/groups.c): every state, the view with the parity
 * states 'm<f>' and 'b' (not parity for anything that decodes), the
 * optional wall-clock figures, the progress words of recovery (rec),
 * migration (mig), parity rebuild (reb pp) and pbr backup rebuild (reb b),
 * lost groups, words of a newer coordinator, malformed lines, and the
 * arithmetic of progress (per cent, ETA, bar, text). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "groups.h"

#define FIXED(state, red, dps, pps) \
    "group 3 " state " redundancy " red " view 1700000000017 " dps " " pps \
    " last_serve_ms 12 last_prepare_us 830"

START_TEST(test_healthy_line)
{
    struct gview_group g;
    ck_assert_int_eq(gview_parse_group(FIXED("healthy", "2/2", "-,-,-", "p,p")
                                       " dead_at_ms 0 served_at_ms 0", &g), 0);
    ck_assert_int_eq(g.group, 3);
    ck_assert_str_eq(g.state, "healthy");
    ck_assert_int_eq(g.redundancy, 2);
    ck_assert_int_eq(g.target, 2);
    ck_assert_int_eq(g.view.k, 3);
    ck_assert_int_eq(g.view.m, 2);
    ck_assert_uint_eq(g.view.version, 1700000000017ull);
    ck_assert_uint_eq(g.last_serve_ms, 12);
    ck_assert_uint_eq(g.last_prepare_us, 830);
    ck_assert_int_eq(g.nprogress, 0);
    ck_assert_str_eq(g.lost, "");
    ck_assert(gview_group_healthy(&g));
    ck_assert(group_at_full_redundancy(&g));
}
END_TEST

/* The line of today's coordinator, before dead_at_ms existed, still parses. */
START_TEST(test_older_line)
{
    struct gview_group g;
    ck_assert_int_eq(gview_parse_group(FIXED("healthy", "2/2", "-,-,-", "p,p"), &g), 0);
    ck_assert_uint_eq(g.dead_at_ms, 0);
    ck_assert(group_at_full_redundancy(&g));
}
END_TEST

START_TEST(test_recovering_line)
{
    struct gview_group g;
    const char *line = FIXED("recovering", "1/2", "-,p0,-", "s1,p")
        " dead_at_ms 1764000000123 served_at_ms 1764000000135"
        " rec pp0 dp1 units 10852/16384 bytes 6815744 rate 41200000";
    ck_assert_int_eq(gview_parse_group(line, &g), 0);
    ck_assert_str_eq(g.state, "recovering");
    ck_assert_int_eq(g.redundancy, 1);
    ck_assert_uint_eq(g.dead_at_ms, 1764000000123ull);
    ck_assert_uint_eq(g.served_at_ms, 1764000000135ull);
    ck_assert_int_eq(g.view.dp_server[1], 0);
    ck_assert_int_eq(g.view.pp_state[0], GV_PP_SERVING);
    ck_assert_int_eq(g.pp[0], GROUP_PP_SERVING);
    ck_assert_int_eq(g.pp_dp[0], 1);
    ck_assert_int_eq(g.pp[1], GROUP_PP_PARITY);
    ck_assert_int_eq(g.nprogress, 1);
    const struct group_progress *p = &g.progress[0];
    ck_assert_int_eq(p->kind, PROGRESS_REC);
    ck_assert_int_eq(p->pp, 0);
    ck_assert_int_eq(p->dp, 1);
    ck_assert_uint_eq(p->done, 10852);
    ck_assert_uint_eq(p->total, 16384);
    ck_assert_uint_eq(p->bytes, 6815744);
    ck_assert_uint_eq(p->rate, 41200000);
    ck_assert(!progress_done(p));
    ck_assert(!gview_group_healthy(&g));
    ck_assert(!group_at_full_redundancy(&g));
}
END_TEST

/* Two data processes lost: two recovery processes, two rec words. */
START_TEST(test_two_recoveries)
{
    struct gview_group g;
    const char *line = FIXED("recovering", "0/2", "p0,-,p1", "s0,s2")
        " rec pp0 dp0 units 16384/16384 bytes 100 rate 0"
        " rec pp1 dp2 units 5/16384 bytes 20480 rate 0";
    ck_assert_int_eq(gview_parse_group(line, &g), 0);
    ck_assert_int_eq(g.nprogress, 2);
    ck_assert(progress_done(&g.progress[0]));
    ck_assert_int_eq(g.progress[1].dp, 2);
    ck_assert(progress_eta_s(&g.progress[1]) < 0);   /* no rate yet */
}
END_TEST

/* 'm<f>' and 'b': kept here, "not parity" (x) in the shared view. */
START_TEST(test_migrating_and_rebuilding)
{
    struct gview_group g;
    const char *line = FIXED("migrating", "0/2", "-,-,-", "m1,b")
        " mig dp1 pp0 units 4000/16384 bytes 16384000 rate 200000000"
        " reb pp1 units 100/16384 bytes 409600 rate 0";
    ck_assert_int_eq(gview_parse_group(line, &g), 0);
    ck_assert_str_eq(g.state, "migrating");
    ck_assert_int_eq(g.pp[0], GROUP_PP_MIGRATING);
    ck_assert_int_eq(g.pp_dp[0], 1);
    ck_assert_int_eq(g.pp[1], GROUP_PP_REBUILDING);
    ck_assert_int_eq(g.pp_dp[1], -1);
    ck_assert_int_eq(g.view.pp_state[0], GV_PP_DEAD);
    ck_assert_int_eq(g.view.pp_state[1], GV_PP_DEAD);
    ck_assert_int_eq(g.view.dp_server[1], -1);
    ck_assert(group_migrating_to(&g, 1));
    ck_assert(!group_migrating_to(&g, 0));
    ck_assert(!gview_group_healthy(&g));
    ck_assert_int_eq(g.nprogress, 2);
    ck_assert_int_eq(g.progress[0].kind, PROGRESS_MIG);
    ck_assert_int_eq(g.progress[0].dp, 1);
    ck_assert_int_eq(g.progress[0].pp, 0);
    ck_assert_uint_eq(g.progress[0].done, 4000);
    ck_assert_int_eq(g.progress[1].kind, PROGRESS_REB);
    ck_assert_int_eq(g.progress[1].pp, 1);
    ck_assert_int_eq(g.progress[1].dp, -1);
    ck_assert_uint_eq(g.progress[1].total, 16384);

    ck_assert_int_eq(gview_parse_group(FIXED("rebuilding", "1/2", "-,-,-", "p,b")
                                       " reb pp1 units 16384/16384 bytes 1 rate 5", &g), 0);
    ck_assert_str_eq(g.state, "rebuilding");
    ck_assert(!gview_group_healthy(&g));
    ck_assert(!group_at_full_redundancy(&g));
}
END_TEST

/* A pbr group's line: a backup rebuilt item by item. */
START_TEST(test_pbr_rebuild)
{
    struct gview_group g;
    const char *line = "group 7 rebuilding redundancy 1/2 view 9 - p,b last_serve_ms 0 "
        "last_prepare_us 0 dead_at_ms 5 served_at_ms 6 reb b1 items 250/1000 bytes 256000 "
        "rate 1024000";
    ck_assert_int_eq(gview_parse_group(line, &g), 0);
    ck_assert_int_eq(g.view.k, 1);
    ck_assert_int_eq(g.view.m, 2);
    ck_assert_int_eq(g.nprogress, 1);
    const struct group_progress *p = &g.progress[0];
    ck_assert_int_eq(p->kind, PROGRESS_REB_PBR);
    ck_assert_int_eq(p->pp, 1);
    ck_assert_uint_eq(p->done, 250);
    ck_assert_uint_eq(p->total, 1000);
    /* 750 items left at 1024 bytes each (256000 / 250), 1024000 B/s: 0.75 s */
    ck_assert_double_eq_tol(progress_eta_s(p), 0.75, 1e-9);
    char text[256];
    progress_text(p, 10, text, sizeof text);
    ck_assert_str_eq(text, "backup 1 being rebuilt [##........]  25.0%  250/1000 items, "
                           "256000 bytes transferred, 1.02 MB/s, ETA 0.8 s");
}
END_TEST

/* The coordinator's real pbr line (cluster/coord_pbr.c): no coding view,
 * the primary's member number and the members' letters. */
START_TEST(test_pbr_line)
{
    struct gview_group g;
    const char *healthy = "group 0 healthy redundancy 2/2 view pbr primary m2 members ffP "
        "last_serve_ms 0 dead_at_ms 0 served_at_ms 0";
    ck_assert_int_eq(gview_parse_group(healthy, &g), 0);
    ck_assert(g.pbr);
    ck_assert_int_eq(g.pbr_primary, 2);
    ck_assert(gview_group_healthy(&g));
    ck_assert(group_at_full_redundancy(&g));
    const char *rebuilding = "group 3 rebuilding redundancy 1/2 view pbr primary m1 members fPr "
        "last_serve_ms 12 dead_at_ms 5 served_at_ms 17 reb b2 items 4399/10555 bytes 439900 "
        "rate 218951";
    ck_assert_int_eq(gview_parse_group(rebuilding, &g), 0);
    ck_assert(g.pbr);
    ck_assert_uint_eq(g.served_at_ms, 17);
    ck_assert_int_eq(g.nprogress, 1);
    ck_assert_int_eq(g.progress[0].kind, PROGRESS_REB_PBR);
    ck_assert_uint_eq(g.progress[0].done, 4399);
    ck_assert(!gview_group_healthy(&g));
    ck_assert(!group_at_full_redundancy(&g));
}
END_TEST

START_TEST(test_lost_line)
{
    struct gview_group g;
    const char *line = FIXED("lost", "0/2", "p0,x,p1", "s0,s2")
        " keys_lost_at_ms 1795833519005"
        " lost dp 1: no parity process of the group is left (parity 0, 1 serve)";
    ck_assert_int_eq(gview_parse_group(line, &g), 0);
    ck_assert_str_eq(g.state, "lost");
    ck_assert_uint_eq(g.keys_lost_at_ms, 1795833519005ull);
    ck_assert_int_eq(g.view.dp_server[1], -2);
    ck_assert_str_eq(g.lost, "dp 1: no parity process of the group is left (parity 0, 1 serve)");
    ck_assert(!gview_group_healthy(&g));
    ck_assert(!group_at_full_redundancy(&g));
}
END_TEST

/* A group whose state word says healthy but is short of its target, or
 * still has a rebuild running, is not at full redundancy. */
START_TEST(test_full_redundancy_needs_everything)
{
    struct gview_group g;
    ck_assert_int_eq(gview_parse_group(FIXED("healthy", "1/2", "-,-,-", "p,p"), &g), 0);
    ck_assert(gview_group_healthy(&g));
    ck_assert(!group_at_full_redundancy(&g));
    ck_assert_int_eq(gview_parse_group(FIXED("healthy", "2/2", "-,-,-", "p,p")
                                       " reb pp0 units 1/2 bytes 1 rate 1", &g), 0);
    ck_assert(!group_at_full_redundancy(&g));
    ck_assert_int_eq(gview_parse_group(FIXED("degraded", "2/2", "-,-,-", "p,p"), &g), 0);
    ck_assert(!group_at_full_redundancy(&g));
}
END_TEST

/* Words a newer coordinator may add are skipped, wherever they are. */
START_TEST(test_unknown_words_skipped)
{
    struct gview_group g;
    const char *line = FIXED("recovering", "1/2", "-,p0,-", "s1,p")
        " spare_node 5 rec pp0 dp1 units 1/2 bytes 3 rate 4 future word";
    ck_assert_int_eq(gview_parse_group(line, &g), 0);
    ck_assert_int_eq(g.nprogress, 1);
    ck_assert_uint_eq(g.progress[0].rate, 4);
    /* an unknown parity state: not parity, the line still reads */
    ck_assert_int_eq(gview_parse_group(FIXED("degraded", "1/2", "-,-,-", "p,q7"), &g), 0);
    ck_assert_int_eq(g.pp[1], GROUP_PP_OTHER);
    ck_assert_int_eq(g.view.pp_state[1], GV_PP_DEAD);
}
END_TEST

START_TEST(test_malformed_lines)
{
    struct gview_group g;
    ck_assert_int_eq(gview_parse_group("", &g), -1);
    ck_assert_int_eq(gview_parse_group("group 0 healthy", &g), -1);
    ck_assert_int_eq(gview_parse_group("group 0 healthy redundancy 2/2 view 1 -,-,- p,p", &g), -1);
    /* a dps entry naming a parity process the group does not have */
    ck_assert_int_eq(gview_parse_group(FIXED("recovering", "1/2", "-,p5,-", "p,p"), &g), -1);
    /* migrating to a data process the group does not have */
    ck_assert_int_eq(gview_parse_group(FIXED("migrating", "1/2", "-,-,-", "m3,p"), &g), -1);
    /* a progress word cut short */
    ck_assert_int_eq(gview_parse_group(FIXED("recovering", "1/2", "-,p0,-", "s1,p")
                                       " rec pp0 dp1 units 5", &g), -1);
    ck_assert_int_eq(gview_parse_group(FIXED("rebuilding", "1/2", "-,-,-", "p,b")
                                       " reb pp1 units x/2 bytes 1 rate 1", &g), -1);
    ck_assert_int_eq(gview_parse_group(FIXED("migrating", "1/2", "-,-,-", "m1,p")
                                       " mig dp1 units 1/2 bytes 1 rate 1", &g), -1);
    ck_assert_int_eq(gview_parse_group(FIXED("healthy", "2/2", "-,-,-", "p,,p"), &g), -1);
}
END_TEST

START_TEST(test_progress_arithmetic)
{
    struct group_progress p = { .kind = PROGRESS_REC, .pp = 0, .dp = 2, .done = 0, .total = 0 };
    char bar[64], text[256];
    ck_assert_double_eq(progress_percent(&p), 0.0);
    progress_text(&p, 10, text, sizeof text);
    ck_assert_str_eq(text, "parity 0 rebuilding data 2: no progress reported yet");

    p.done = 8192;
    p.total = 16384;
    p.bytes = 1000;
    p.rate = 4096 * 1000;          /* 1000 units a second */
    ck_assert_double_eq_tol(progress_percent(&p), 50.0, 1e-9);
    ck_assert_double_eq_tol(progress_eta_s(&p), 8.192, 1e-9);
    ck_assert_str_eq(progress_bar(&p, 10, bar, sizeof bar), "[#####.....]");
    progress_text(&p, 10, text, sizeof text);
    ck_assert_str_eq(text, "parity 0 rebuilding data 2 [#####.....]  50.0%  8192/16384 units, "
                           "1000 bytes transferred, 4.10 MB/s, ETA 8.2 s");

    /* one unit short never shows 100% */
    p.done = 16383;
    ck_assert(progress_percent(&p) < 100.0);
    ck_assert_str_eq(progress_bar(&p, 10, bar, sizeof bar), "[#########.]");

    p.done = 16384;
    ck_assert(progress_done(&p));
    ck_assert_double_eq(progress_eta_s(&p), 0.0);
    ck_assert_str_eq(progress_bar(&p, 4, bar, sizeof bar), "[####]");
    progress_text(&p, 4, text, sizeof text);
    ck_assert_str_eq(text, "parity 0 rebuilt data 2 [####] 100.0%  16384/16384 units, "
                           "1000 bytes transferred, done");

    /* a bar never overruns a small buffer */
    ck_assert_str_eq(progress_bar(&p, 50, bar, 6), "[###]");

    struct group_progress mig = { .kind = PROGRESS_MIG, .pp = 1, .dp = 0, .done = 1, .total = 4 };
    ck_assert_str_eq(progress_what(&mig, text, sizeof text),
                     "parity 1 handing back data 0 to its data process");
    struct group_progress reb = { .kind = PROGRESS_REB, .pp = 1, .dp = -1, .done = 4, .total = 4 };
    ck_assert_str_eq(progress_what(&reb, text, sizeof text), "parity 1 rebuilt");
}
END_TEST

static Suite *groups_suite(void)
{
    Suite *s = suite_create("groups");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, test_healthy_line);
    tcase_add_test(tc, test_older_line);
    tcase_add_test(tc, test_recovering_line);
    tcase_add_test(tc, test_two_recoveries);
    tcase_add_test(tc, test_migrating_and_rebuilding);
    tcase_add_test(tc, test_pbr_rebuild);
    tcase_add_test(tc, test_pbr_line);
    tcase_add_test(tc, test_lost_line);
    tcase_add_test(tc, test_full_redundancy_needs_everything);
    tcase_add_test(tc, test_unknown_words_skipped);
    tcase_add_test(tc, test_malformed_lines);
    tcase_add_test(tc, test_progress_arithmetic);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(groups_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
