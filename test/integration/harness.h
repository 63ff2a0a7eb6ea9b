/* Integration-test harness: starts and stops the server under test on a free
 * loopback port, and offers small raw-socket helpers for protocol tests. */
#ifndef COCYTUS_TEST_HARNESS_H
#define COCYTUS_TEST_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <libmemcached/memcached.h>

/* Upper bound for one reply wait in the raw helpers, in milliseconds. */
#define HARNESS_IO_TIMEOUT_MS 3000

typedef struct harness_server {
    pid_t pid;           /* 0 when not running */
    int port;
    char log_path[64];   /* server stdout/stderr, shown if start-up fails */
} harness_server;

/* Path of the server binary: $COCYTUS_SERVER, else ../memcached/cocytus-server
 * relative to the test program's directory (also tried one level higher). */
const char *harness_server_path(void);

/* True when the binary under test is Debian's memcached (basename "memcached"),
 * for the few assertions where memcached is knowingly looser than our spec. */
bool harness_target_is_memcached(void);

/* Starts the server with "-p PORT -l 127.0.0.1 -U 0" (+ "-u root" as root)
 * followed by extra_args (NULL-terminated, may be NULL).  Waits until it
 * accepts connections; retries on another port if it dies during start-up.
 * Returns false (with a message on stderr) if it never came up. */
bool harness_server_start(harness_server *srv, const char *const *extra_args);

/* SIGTERM, wait up to 3 s, then SIGKILL; always reaps.  Safe to call twice. */
void harness_server_stop(harness_server *srv);

/* True while process pid exists and is not a zombie, from /proc: usable
 * for processes that are not our children (a forked Check test). */
bool harness_pid_running(pid_t pid);

/* True while the server process runs (usable from forked test processes).
 * If it has died, prints the tail of its output once (e.g. a crash report). */
bool harness_server_alive(const harness_server *srv);

/* Prints the last lines of the server's output to stderr, each prefixed
 * with label: what a failing test shows of a server that is still up. */
void harness_server_print_log(const harness_server *srv, const char *label);

/* For Check fixtures: fail the current test if the server is gone. */
#define harness_assert_server_up(srv) \
    ck_assert_msg(harness_server_alive(srv), "server under test is not running " \
                  "(did not start, or died in this or an earlier test)")

/* Waits up to timeout_ms for the server process to exit on its own.
 * Returns true if it exited (and reaps it). */
bool harness_server_wait_exit(harness_server *srv, int timeout_ms);

/* A libmemcached client for 127.0.0.1:port with bounded timeouts. */
memcached_st *harness_client(int port, bool binary);

/* Makes sure nothing a test started outlives it: at exit, and on SIGINT,
 * SIGTERM or SIGHUP, the servers of harness_server_start and the tracked
 * pids are killed; SIGPIPE is ignored.  Called by the functions below;
 * idempotent. */
void harness_install_cleanup(void);

/* Tracks a child process (not started by harness_server_start) to be
 * SIGKILLed if the test exits or dies before harness_forget_pid(pid).
 * Only the process that tracked a pid kills it (forked tests are safe). */
void harness_track_pid(pid_t pid);
void harness_forget_pid(pid_t pid);

/* Forks and execs argv (argv[0] a path; NULL-terminated): stdin from
 * /dev/null, stdout and stderr appended to log_path, or to out_fd when it
 * is >= 0; no other descriptors inherited; the child is killed if the test
 * process dies.  Returns the pid, or -1 if fork failed.  Not tracked. */
pid_t harness_spawn(const char *const *argv, const char *log_path, int out_fd);

/* Starts one cluster process of the server under test: --cluster conf
 * --role role --group group --index index -U 0 (+ -u root as root), output
 * to log_path, tracked with harness_track_pid.  Returns the pid or -1. */
pid_t harness_spawn_role(const char *conf, const char *role, int group, int index,
                         const char *log_path);

/* Picks count distinct free loopback ports into ports[] (all held open while
 * picking, so no two are the same).  False if a socket could not be bound. */
bool harness_pick_ports(int *ports, int count);
/* One free loopback port, or -1. */
int harness_free_port(void);

/* Milliseconds sleep. */
void harness_sleep_ms(int ms);

/* CLOCK_MONOTONIC in milliseconds. */
int64_t harness_now_ms(void);

/* ---- raw sockets ---- */

#define RAW_BUF_SIZE (1 << 16)

typedef struct raw_conn {
    int fd;
    size_t len;               /* bytes buffered in buf but not consumed */
    char buf[RAW_BUF_SIZE];
} raw_conn;

/* Connects to 127.0.0.1:port.  Returns false on failure. */
bool raw_open(raw_conn *c, int port);
void raw_close(raw_conn *c);

/* Sends all bytes (no SIGPIPE).  Returns false on error. */
bool raw_send(raw_conn *c, const void *data, size_t n);
bool raw_send_str(raw_conn *c, const char *s);

/* Reads one line including its "\r\n" into out (NUL-terminated).
 * Returns its length, 0 if the peer closed first, -1 on timeout/error. */
int raw_read_line(raw_conn *c, char *out, size_t cap, int timeout_ms);

/* Reads exactly n bytes.  Returns true on success. */
bool raw_read_exact(raw_conn *c, void *out, size_t n, int timeout_ms);

/* Reads until the data read so far ends with terminator (e.g. "END\r\n").
 * Returns total length stored in out (NUL-terminated) or -1. */
int raw_read_until(raw_conn *c, const char *terminator, char *out, size_t cap,
                   int timeout_ms);

/* Collects everything that arrives until nothing more comes for quiet_ms
 * (or the peer closes).  Returns the length stored in out. */
size_t raw_read_quiet(raw_conn *c, char *out, size_t cap, int quiet_ms);

/* True if the peer closes the connection (EOF or reset) within timeout_ms;
 * any data that arrives first is discarded. */
bool raw_wait_closed(raw_conn *c, int timeout_ms);

/* Sends request, then reads one reply line into out.  Returns the line length
 * as raw_read_line does, or -1 if sending failed. */
int raw_command(raw_conn *c, const char *request, char *out, size_t cap);

/* Proves the cluster secret on the connection ("cocytus auth", repl/auth.h),
 * so that `cocytus ...` control commands are accepted on it.  True when
 * the server answered OK. */
bool raw_auth(raw_conn *c, const char *secret);

/* ---- raw binary protocol ---- */

#define BIN_REQ_MAGIC 0x80
#define BIN_RES_MAGIC 0x81
#define BIN_HEADER_LEN 24
#define BIN_BODY_MAX 4096

typedef struct bin_response {
    uint8_t magic;
    uint8_t opcode;
    uint16_t keylen;
    uint8_t extlen;
    uint8_t datatype;
    uint16_t status;
    uint32_t bodylen;
    uint32_t opaque;
    uint64_t cas;
    char body[BIN_BODY_MAX + 1];   /* first BIN_BODY_MAX bytes, NUL-terminated */
} bin_response;

typedef struct bin_request {
    uint8_t magic;        /* 0 means BIN_REQ_MAGIC */
    uint8_t opcode;
    const void *extras;
    uint8_t extlen;
    const void *key;
    uint16_t keylen;
    const void *value;
    uint32_t valuelen;
    uint64_t cas;
    uint32_t opaque;
} bin_request;

/* Encodes and sends one binary request. */
bool raw_bin_send(raw_conn *c, const bin_request *req);

/* Reads one binary response (body beyond BIN_BODY_MAX is discarded).
 * False on timeout, close, or a short read. */
bool raw_bin_read(raw_conn *c, bin_response *res, int timeout_ms);

#endif
