/* test_cluster.c - the cluster file parser (repl/cluster.c): directives,
 * the computed interleaved layout, explicit proc lines, error messages. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"

static char err[512];

/* Writes text to a temporary file and loads it; returns cluster_load's rc. */
static int load_text(const char *text, struct cluster *c)
{
    char path[] = "/tmp/test_cluster.XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    size_t len = strlen(text);
    ck_assert_int_eq(write(fd, text, len), (ssize_t)len);
    close(fd);
    err[0] = '\0';
    int rc = cluster_load(path, c, err, sizeof(err));
    unlink(path);
    return rc;
}

static void load_ok(const char *text, struct cluster *c)
{
    int rc = load_text(text, c);
    ck_assert_msg(rc == 0, "cluster_load failed: %s", err);
}

/* Loading must fail with a message containing want. */
static void load_fails(const char *text, const char *want)
{
    struct cluster c;
    int rc = load_text(text, &c);
    ck_assert_msg(rc == -1, "accepted a bad file; expected error '%s'", want);
    ck_assert_msg(strstr(err, want) != NULL, "error '%s' does not contain '%s'", err, want);
}

#define HEAD "cluster demo\nsecret s3cret\n"

static const char *five_nodes =
    HEAD "scheme rs 3 5\nbase_port 30000\n"
    "node 0 10.0.0.1\nnode 1 10.0.0.2\nnode 2 10.0.0.3\nnode 3 10.0.0.4\nnode 4 10.0.0.5\n";

START_TEST(test_header_fields)
{
    struct cluster c;
    load_ok("# a comment\n\n" HEAD "  scheme   rs 3 5   # trailing comment\n"
            "region 128m\nmemory 1g\nnode 0 127.0.0.1\n", &c);
    ck_assert_str_eq(c.name, "demo");
    ck_assert_str_eq(c.secret, "s3cret");
    ck_assert_int_eq(c.scheme, SCHEME_RS);
    ck_assert_int_eq(c.k, 3);
    ck_assert_int_eq(c.n, 5);
    ck_assert_uint_eq(c.region_size, (size_t)128 << 20);
    ck_assert_uint_eq(c.memory, (size_t)1 << 30);
    ck_assert_int_eq(c.sync, SYNC_FULL);
    ck_assert_int_eq(c.nnodes, 1);
    ck_assert_str_eq(c.hosts[0], "127.0.0.1");
    cluster_free(&c);
}
END_TEST

START_TEST(test_defaults)
{
    struct cluster c;
    load_ok(HEAD "scheme plain\nnode 0 127.0.0.1\n", &c);
    ck_assert_uint_eq(c.region_size, (size_t)64 << 20);
    ck_assert_uint_eq(c.memory, (size_t)64 << 20);
    ck_assert_int_eq(c.base_port, 21000);
    ck_assert_int_eq(c.procs[0].port, 21000);
    ck_assert_int_eq(c.procs[0].link_port, 21001);
    cluster_free(&c);
}
END_TEST

START_TEST(test_sizes)
{
    struct cluster c;
    load_ok(HEAD "scheme plain\nnode 0 h\nregion 4096\nmemory 3072k\n", &c);
    ck_assert_uint_eq(c.region_size, 4096);
    ck_assert_uint_eq(c.memory, (size_t)3 << 20);
    cluster_free(&c);
}
END_TEST

START_TEST(test_rs_interleaved_layout)
{
    struct cluster c;
    load_ok(five_nodes, &c);
    ck_assert_int_eq(c.ngroups, 5);
    ck_assert_int_eq(c.nprocs, 25);
    for (int q = 0; q < c.nprocs; q++) {
        const struct cluster_proc *p = &c.procs[q];
        int g = q / 5, pos = q % 5;
        ck_assert_int_eq(p->group, g);
        ck_assert_int_eq(p->role, pos < 3 ? ROLE_DATA : ROLE_PARITY);
        ck_assert_int_eq(p->index, pos < 3 ? pos : pos - 3);
        ck_assert_int_eq(p->node, (g + pos) % 5);
        ck_assert_str_eq(p->host, c.hosts[p->node]);
        ck_assert_int_eq(p->port, 30000 + 2 * q);
        ck_assert_int_eq(p->link_port, 30000 + 2 * q + 1);
    }
    /* Every node runs 3 data and 2 parity processes of different groups. */
    for (int node = 0; node < 5; node++) {
        int data = 0, parity = 0;
        for (int q = 0; q < c.nprocs; q++) {
            if (c.procs[q].node != node)
                continue;
            data += c.procs[q].role == ROLE_DATA;
            parity += c.procs[q].role == ROLE_PARITY;
        }
        ck_assert_int_eq(data, 3);
        ck_assert_int_eq(parity, 2);
    }
    cluster_free(&c);
}
END_TEST

START_TEST(test_rs_fewer_nodes_than_group)
{
    struct cluster c;
    load_ok(HEAD "scheme rs 3 5\nnode 0 a\nnode 1 b\nnode 2 c\n", &c);
    ck_assert_int_eq(c.ngroups, 1);
    ck_assert_int_eq(c.nprocs, 5);
    static const int want_node[] = { 0, 1, 2, 0, 1 };
    for (int q = 0; q < 5; q++)
        ck_assert_int_eq(c.procs[q].node, want_node[q]);
    cluster_free(&c);

    load_ok(HEAD "scheme rs 3 5\nnode 0 127.0.0.1\n", &c);
    ck_assert_int_eq(c.ngroups, 1);
    ck_assert_int_eq(c.nprocs, 5);
    for (int q = 0; q < 5; q++)
        ck_assert_int_eq(c.procs[q].node, 0);
    cluster_free(&c);
}
END_TEST

START_TEST(test_pbr_layout)
{
    struct cluster c;
    load_ok(HEAD "scheme pbr 2\nsync semi\nnode 0 a\nnode 1 b\nnode 2 c\nbase_port 100\n", &c);
    ck_assert_int_eq(c.scheme, SCHEME_PBR);
    ck_assert_int_eq(c.sync, SYNC_SEMI);
    ck_assert_int_eq(c.k, 1);
    ck_assert_int_eq(c.n, 3);
    ck_assert_int_eq(c.ngroups, 3);
    ck_assert_int_eq(c.nprocs, 9);
    const struct cluster_proc *p = cluster_find(&c, 2, ROLE_PRIMARY, 0);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(p->node, 2);
    ck_assert_int_eq(p->port, 100 + 2 * 6);
    p = cluster_find(&c, 2, ROLE_BACKUP, 1);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(p->node, 1);
    ck_assert_str_eq(p->host, "b");
    ck_assert_int_eq(p->link_port, 100 + 2 * 8 + 1);
    ck_assert_ptr_null(cluster_find(&c, 2, ROLE_BACKUP, 2));
    ck_assert_ptr_null(cluster_find(&c, 3, ROLE_PRIMARY, 0));
    ck_assert_ptr_null(cluster_find(&c, 0, ROLE_DATA, 0));
    cluster_free(&c);
}
END_TEST

START_TEST(test_plain_layout)
{
    struct cluster c;
    load_ok(HEAD "scheme plain\nnode 1 b\nnode 0 a\nbase_port 21000\n", &c);
    ck_assert_int_eq(c.ngroups, 2);
    ck_assert_int_eq(c.nprocs, 2);
    for (int g = 0; g < 2; g++) {
        const struct cluster_proc *p = cluster_find(&c, g, ROLE_PLAIN, 0);
        ck_assert_ptr_nonnull(p);
        ck_assert_int_eq(p->node, g);
        ck_assert_int_eq(p->port, 21000 + 2 * g);
    }
    ck_assert_str_eq(c.procs[1].host, "b");
    cluster_free(&c);
}
END_TEST

START_TEST(test_explicit_procs)
{
    struct cluster c;
    load_ok(HEAD "scheme rs 2 3\nnode 0 a\nnode 1 b\n"
            "proc 1 parity 0 0 5006 5007\n"
            "proc 0 data 1 1 5002 5003\n"
            "proc 0 parity 0 0 5004 5005\n"
            "proc 0 data 0 0 5000 5001\n"
            "proc 1 data 0 1 5008 5009\n"
            "proc 1 data 1 1 5000 5001\n", &c);   /* same ports, other host */
    ck_assert_int_eq(c.ngroups, 2);
    ck_assert_int_eq(c.nprocs, 6);
    /* Stored in layout order: group-major, data before parity. */
    ck_assert_int_eq(c.procs[0].role, ROLE_DATA);
    ck_assert_int_eq(c.procs[0].port, 5000);
    ck_assert_int_eq(c.procs[1].port, 5002);
    ck_assert_int_eq(c.procs[2].role, ROLE_PARITY);
    ck_assert_int_eq(c.procs[3].group, 1);
    ck_assert_int_eq(c.procs[3].port, 5008);
    ck_assert_str_eq(c.procs[3].host, "b");
    ck_assert_int_eq(c.procs[5].link_port, 5007);
    ck_assert_str_eq(c.procs[5].host, "a");
    cluster_free(&c);
}
END_TEST

START_TEST(test_role_names)
{
    static const char *const names[] = { "plain", "data", "parity", "primary", "backup" };
    for (int i = 0; i < 5; i++) {
        enum cluster_role r;
        ck_assert_int_eq(cluster_role_from_name(names[i], &r), 0);
        ck_assert_str_eq(cluster_role_name(r), names[i]);
    }
    enum cluster_role r;
    ck_assert_int_eq(cluster_role_from_name("Data", &r), -1);
    ck_assert_int_eq(cluster_role_from_name("", &r), -1);
    ck_assert_str_eq(cluster_role_name((enum cluster_role)42), "?");
    ck_assert_str_eq(cluster_scheme_name(SCHEME_RS), "rs");
    ck_assert_str_eq(cluster_scheme_name(SCHEME_PBR), "pbr");
    ck_assert_str_eq(cluster_scheme_name(SCHEME_PLAIN), "plain");
}
END_TEST

START_TEST(test_missing_file)
{
    struct cluster c;
    ck_assert_int_eq(cluster_load("/nonexistent/cluster.conf", &c, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "cannot open /nonexistent/cluster.conf"));
}
END_TEST

START_TEST(test_errors_header)
{
    load_fails(HEAD "scheme plain\nnode 0 a\nfrobnicate 3\n", "line 5: unknown directive 'frobnicate'");
    load_fails("secret x\nscheme plain\nnode 0 a\n", "no 'cluster <name>' line");
    load_fails("cluster x\nscheme plain\nnode 0 a\n", "no 'secret <text>' line");
    load_fails(HEAD "node 0 a\n", "no 'scheme' line");
    load_fails(HEAD "scheme plain\n", "no 'node <index> <host>' line");
    load_fails(HEAD "cluster again\n", "line 3: 'cluster' given twice (first on line 1)");
    load_fails(HEAD "scheme plain\nscheme plain\n", "line 4: 'scheme' given twice (first on line 3)");
    load_fails("cluster\n", "line 1: expected 'cluster <name>'");
    load_fails("cluster a b\n", "line 1: expected 'cluster <name>'");
    load_fails("cluster aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
               "line 1: the cluster name is too long");
    load_fails("proc 1 2 3 4 5 6 7 8 9\n", "line 1: too many fields");
}
END_TEST

START_TEST(test_errors_scheme)
{
    load_fails(HEAD "scheme rs 5 5\n", "line 3: scheme rs 5 5: K must be smaller than N");
    load_fails(HEAD "scheme rs 6 5\n", "K must be smaller than N");
    load_fails(HEAD "scheme rs 3 256\n", "line 3: scheme rs 3 256: N may be at most 255");
    load_fails(HEAD "scheme rs 0 2\n", "line 3: bad K '0'");
    load_fails(HEAD "scheme rs x 2\n", "bad K 'x'");
    load_fails(HEAD "scheme rs 3 5x\n", "bad N '5x'");
    load_fails(HEAD "scheme rs 3\n", "expected 'scheme rs <K> <N>'");
    load_fails(HEAD "scheme pbr 0\n", "bad M '0'");
    load_fails(HEAD "scheme pbr\n", "expected 'scheme pbr <M>'");
    load_fails(HEAD "scheme plain 3\n", "expected 'scheme plain'");
    load_fails(HEAD "scheme raid5\n", "unknown scheme 'raid5'");
    load_fails(HEAD "scheme\n", "line 3: expected 'scheme rs <K> <N>'");
    load_fails(HEAD "sync sometimes\n", "line 3: unknown sync mode 'sometimes'");
}
END_TEST

START_TEST(test_errors_numbers)
{
    load_fails(HEAD "region 64x\n", "line 3: bad region size '64x'");
    load_fails(HEAD "region -1m\n", "bad region size '-1m'");
    load_fails(HEAD "region 0\n", "bad region size '0'");
    load_fails(HEAD "region 99999999999999999g\n", "bad region size");
    load_fails(HEAD "region 1000\n", "region size 1000 is not a multiple of 4k");
    load_fails(HEAD "memory 1m\n", "memory 1m is too small");
    load_fails(HEAD "base_port 0\n", "line 3: bad base_port '0'");
    load_fails(HEAD "base_port 65536\n", "bad base_port '65536'");
    load_fails(HEAD "base_port 2x\n", "bad base_port '2x'");
    load_fails(HEAD "scheme plain\nnode 0 a\nbase_port 65535\n",
               "1 process(es) need ports 65535 to 65536, beyond 65535");
    load_fails(HEAD "scheme rs 3 5\nnode 0 a\nbase_port 65530\n", "beyond 65535");
}
END_TEST

START_TEST(test_errors_nodes)
{
    load_fails(HEAD "scheme plain\nnode 0 a\nnode 2 c\n",
               "node 1 is missing (nodes are numbered 0 to 2 without gaps; node 2 is on line 5)");
    load_fails(HEAD "scheme plain\nnode 1 b\n", "node 0 is missing");
    load_fails(HEAD "node 0 a\nnode 0 b\n", "line 4: node 0 given twice (first on line 3)");
    load_fails(HEAD "node 64 a\n", "line 3: bad node index '64' (0 to 63)");
    load_fails(HEAD "node x a\n", "bad node index 'x'");
    load_fails(HEAD "node 0\n", "line 3: expected 'node <index> <host>'");
}
END_TEST

START_TEST(test_errors_procs)
{
    const char *two = HEAD "scheme rs 2 3\nnode 0 a\nnode 1 b\n";
    char buf[1024];
#define WITH(procs) (snprintf(buf, sizeof(buf), "%s%s", two, procs), buf)
    load_fails(WITH("proc 0 data 0 2 5000 5001\n"),
               "line 6: proc on node 2, but only 2 nodes are declared");
    load_fails(WITH("proc 0 primary 0 0 5000 5001\n"), "line 6: no primary process 0 in scheme rs 2/3");
    load_fails(WITH("proc 0 data 2 0 5000 5001\n"), "line 6: no data process 2 in scheme rs 2/3");
    load_fails(WITH("proc 0 leader 0 0 5000 5001\n"), "line 6: unknown role 'leader'");
    load_fails(WITH("proc 0 data 0 0 70000 5001\n"), "line 6: bad port '70000'");
    load_fails(WITH("proc 0 data 0 0 5000 0\n"), "line 6: bad link port '0'");
    load_fails(WITH("proc 0 data 0 0 5000 5000\n"), "line 6: port and link port are both 5000");
    load_fails(WITH("proc -1 data 0 0 5000 5001\n"), "line 6: bad group '-1'");
    load_fails(WITH("proc 0 data 0 0 5000\n"), "line 6: expected 'proc <group>");
    load_fails(WITH("proc 0 data 0 0 5000 5001\nproc 0 data 1 0 5002 5003\n"),
               "group 0 has no parity process 0");
    load_fails(WITH("proc 0 data 0 0 5000 5001\nproc 0 data 1 0 5002 5003\n"
                    "proc 0 parity 0 1 5004 5005\nproc 2 data 0 0 6000 6001\n"),
               "group 1 has no data process 0");
    load_fails(WITH("proc 0 data 0 0 5000 5001\nproc 0 data 0 1 5002 5003\n"),
               "line 7: data process 0 of group 0 given twice (first on line 6)");
    load_fails(WITH("proc 0 data 0 0 5000 5001\nproc 0 data 1 0 5002 5003\n"
                    "proc 0 parity 0 0 5001 5005\n"),
               "line 8: port 5001 on a is already used on line 6");
    load_fails(WITH("proc 0 data 0 0 5000 5001\nproc 0 data 1 0 5002 5000\n"
                    "proc 0 parity 0 1 5004 5005\n"),
               "line 7: port 5000 on a is already used on line 6");
#undef WITH
}
END_TEST

START_TEST(test_coordinator)
{
    struct cluster c;
    load_ok(HEAD "scheme plain\nbase_port 30000\nnode 0 10.0.0.1\nnode 1 10.0.0.2\n", &c);
    ck_assert(!c.has_coordinator);
    ck_assert_int_eq(cluster_coordinator_node(&c), -1);
    cluster_free(&c);

    /* Default state file: coordinator.state beside the cluster file (in /tmp). */
    load_ok(HEAD "scheme plain\nbase_port 30000\nnode 0 10.0.0.1\nnode 1 10.0.0.2\n"
            "coordinator 10.0.0.2 30004 30005\n", &c);
    ck_assert(c.has_coordinator);
    ck_assert_str_eq(c.coord_host, "10.0.0.2");
    ck_assert_int_eq(c.coord_port, 30004);
    ck_assert_int_eq(c.coord_link_port, 30005);
    ck_assert_str_eq(c.coord_state, "/tmp/coordinator.state");
    ck_assert_int_eq(cluster_coordinator_node(&c), 1);
    cluster_free(&c);

    /* A relative coord_state is taken from the file's directory; absolute as is. */
    load_ok(HEAD "scheme plain\nnode 0 10.0.0.1\ncoordinator 10.0.0.9 30004 30005\n"
            "coord_state sub/coord.st\n", &c);
    ck_assert_str_eq(c.coord_state, "/tmp/sub/coord.st");
    ck_assert_int_eq(cluster_coordinator_node(&c), -1);   /* on no node's host */
    cluster_free(&c);
    load_ok(HEAD "scheme plain\nnode 0 10.0.0.1\ncoordinator 10.0.0.1 9 10\n"
            "coord_state /var/lib/c.state\n", &c);
    ck_assert_str_eq(c.coord_state, "/var/lib/c.state");
    cluster_free(&c);
}
END_TEST

/* coordinator zookeeper: several coordinator lines, each started by a node
 * of its host (one node each while there are enough). */
START_TEST(test_coordinator_zookeeper)
{
    struct cluster c;
    load_ok(HEAD "scheme plain\nbase_port 30000\nnode 0 10.0.0.1\nnode 1 10.0.0.1\n"
            "node 2 10.0.0.3\ncoordinator 10.0.0.1 30100 30101\n"
            "coordinator zookeeper 10.0.0.7:2181,10.0.0.8:2181/cocytus\n"
            "coordinator 10.0.0.1 30102 30103\ncoordinator 10.0.0.3 30100 30101\n", &c);
    ck_assert(c.has_coordinator);
    ck_assert(c.has_zookeeper);
    ck_assert_str_eq(c.zk_connect, "10.0.0.7:2181,10.0.0.8:2181/cocytus");
    ck_assert_int_eq(c.ncoords, 3);
    ck_assert_int_eq(c.coord_port, 30100);              /* the first line */
    ck_assert_int_eq(c.coords[1].port, 30102);
    ck_assert_int_eq(c.coords[2].link_port, 30101);
    ck_assert_int_eq(cluster_coordinator_node_of(&c, 0), 0);
    ck_assert_int_eq(cluster_coordinator_node_of(&c, 1), 1);
    ck_assert_int_eq(cluster_coordinator_node_of(&c, 2), 2);
    ck_assert_int_eq(cluster_coordinator_node_of(&c, 3), -1);
    cluster_free(&c);
    /* One node on the host: it runs both. */
    load_ok(HEAD "scheme plain\nbase_port 30000\nnode 0 10.0.0.1\n"
            "coordinator 10.0.0.1 30100 30101\ncoordinator 10.0.0.1 30102 30103\n"
            "coordinator zookeeper 10.0.0.7:2181\n", &c);
    ck_assert_int_eq(cluster_coordinator_node_of(&c, 0), 0);
    ck_assert_int_eq(cluster_coordinator_node_of(&c, 1), 0);
    cluster_free(&c);
}
END_TEST

START_TEST(test_errors_coordinator)
{
    const char *plain = HEAD "scheme plain\nbase_port 30000\nnode 0 a\nnode 1 b\n";
    char buf[1024];
#define WITH(extra) (snprintf(buf, sizeof(buf), "%s%s", plain, extra), buf)
    load_fails(WITH("coordinator a 30100\n"), "line 7: expected 'coordinator <host> <port> <link_port>'");
    load_fails(WITH("coordinator a 0 30101\n"), "line 7: bad coordinator port '0'");
    load_fails(WITH("coordinator a 30100 65536\n"), "line 7: bad coordinator link port '65536'");
    load_fails(WITH("coordinator a 30100 30100\n"), "line 7: coordinator port and link port are both 30100");
    load_fails(WITH("coordinator a 30100 30101\ncoordinator a 30102 30103\n"),
               "line 8: 'coordinator' given twice (first on line 7)");
    load_fails(WITH("coordinator b 30100 30002\n"),
               "line 7: coordinator port 30002 on b is already used by plain process 0 of group 1");
    load_fails(WITH("coordinator a 30001 30101\n"),
               "line 7: coordinator port 30001 on a is already used by plain process 0 of group 0");
    load_fails(WITH("coord_state x\n"), "line 7: 'coord_state' without a 'coordinator' line");
    load_fails(WITH("coordinator zookeeper z:2181\n"),
               "line 7: 'coordinator zookeeper' needs 'coordinator <host> <port> <link_port>' lines");
    load_fails(WITH("coordinator zookeeper\n"), "line 7: expected 'coordinator zookeeper <host:port,...[/chroot]>'");
    load_fails(WITH("coordinator zookeeper z:1\ncoordinator zookeeper z:2\n"),
               "line 8: 'coordinator zookeeper' given twice");
    load_fails(WITH("coordinator zookeeper z:1\ncoordinator a 30100 30101\ncoordinator a 30101 30102\n"),
               "line 9: coordinator ports 30101/30102 on a clash with another coordinator line");
    load_fails(WITH("coordinator a 30100 30101\ncoord_state\n"), "line 8: expected 'coord_state <path>'");
#undef WITH
}
END_TEST

/* link_tls: three files, relative ones taken from the cluster file's
 * directory; once; exactly three fields.  Loading the file does not load
 * the certificates (the server does: link_tls stays NULL here). */
START_TEST(test_link_tls)
{
    struct cluster c;
    load_ok(HEAD "scheme plain\nnode 0 10.0.0.1\n", &c);
    ck_assert(!c.has_link_tls);
    ck_assert_ptr_null(c.link_tls);
    cluster_free(&c);
    load_ok(HEAD "scheme plain\nnode 0 10.0.0.1\nlink_tls certs/n.pem /etc/k.pem ca.pem\n", &c);
    ck_assert(c.has_link_tls);
    ck_assert_str_eq(c.tls_cert, "/tmp/certs/n.pem");
    ck_assert_str_eq(c.tls_key, "/etc/k.pem");
    ck_assert_str_eq(c.tls_ca, "/tmp/ca.pem");
    ck_assert_ptr_null(c.link_tls);
    cluster_free(&c);
    load_fails(HEAD "scheme plain\nnode 0 a\nlink_tls a b\n",
               "line 5: expected 'link_tls <cert-file> <key-file> <ca-file>'");
    load_fails(HEAD "scheme plain\nnode 0 a\nlink_tls a b c\nlink_tls a b c\n",
               "line 6: 'link_tls' given twice");
}
END_TEST

/* client_tls: the same rules as link_tls, its own files; both lines may
 * be given, each once. */
START_TEST(test_client_tls)
{
    struct cluster c;
    load_ok(HEAD "scheme plain\nnode 0 10.0.0.1\n", &c);
    ck_assert(!c.has_client_tls);
    cluster_free(&c);
    load_ok(HEAD "scheme plain\nnode 0 10.0.0.1\nlink_tls l.pem l.key lca.pem\n"
                 "client_tls certs/c.pem /etc/c.key cca.pem\n", &c);
    ck_assert(c.has_client_tls && c.has_link_tls);
    ck_assert_str_eq(c.client_tls_cert, "/tmp/certs/c.pem");
    ck_assert_str_eq(c.client_tls_key, "/etc/c.key");
    ck_assert_str_eq(c.client_tls_ca, "/tmp/cca.pem");
    ck_assert_str_eq(c.tls_cert, "/tmp/l.pem");
    ck_assert_str_eq(c.tls_ca, "/tmp/lca.pem");
    cluster_free(&c);
    load_fails(HEAD "scheme plain\nnode 0 a\nclient_tls a b c d\n",
               "line 5: expected 'client_tls <cert-file> <key-file> <ca-file>'");
    load_fails(HEAD "scheme plain\nnode 0 a\nclient_tls a b c\nclient_tls a b c\n",
               "line 6: 'client_tls' given twice");
}
END_TEST

static Suite *cluster_suite(void)
{
    Suite *s = suite_create("cluster");
    TCase *parse = tcase_create("parse");
    tcase_add_test(parse, test_header_fields);
    tcase_add_test(parse, test_defaults);
    tcase_add_test(parse, test_sizes);
    tcase_add_test(parse, test_role_names);
    tcase_add_test(parse, test_missing_file);
    tcase_add_test(parse, test_link_tls);
    tcase_add_test(parse, test_client_tls);
    suite_add_tcase(s, parse);
    TCase *layout = tcase_create("layout");
    tcase_add_test(layout, test_rs_interleaved_layout);
    tcase_add_test(layout, test_rs_fewer_nodes_than_group);
    tcase_add_test(layout, test_pbr_layout);
    tcase_add_test(layout, test_plain_layout);
    tcase_add_test(layout, test_explicit_procs);
    tcase_add_test(layout, test_coordinator);
    suite_add_tcase(s, layout);
    TCase *errors = tcase_create("errors");
    tcase_add_test(errors, test_errors_header);
    tcase_add_test(errors, test_errors_scheme);
    tcase_add_test(errors, test_errors_numbers);
    tcase_add_test(errors, test_errors_nodes);
    tcase_add_test(errors, test_errors_procs);
    tcase_add_test(errors, test_errors_coordinator);
    tcase_add_test(errors, test_coordinator_zookeeper);
    suite_add_tcase(s, errors);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(cluster_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
