/* Integration-test harness: server process lifecycle (free port, fork/exec,
 * readiness wait, guaranteed stop) and raw-socket helpers. */
#define _GNU_SOURCE
#include "harness.h"
#include "auth.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define START_ATTEMPTS 5
#define READY_TIMEOUT_MS 5000
#define STOP_GRACE_MS 3000
#define MAX_SERVERS 32
#define MAX_TRACKED 128
#define MAX_ARGS 64

/* ---- time ---- */

int64_t harness_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void harness_sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---- registry of started servers, so nothing is ever left running ---- */

typedef struct started_server {
    harness_server srv;   /* srv.pid == 0: free slot */
    pid_t owner;          /* process that forked it; only it may reap it */
} started_server;

static started_server registry[MAX_SERVERS];
static bool cleanup_installed;

static void registry_add(const harness_server *srv)
{
    for (int i = 0; i < MAX_SERVERS; i++) {
        if (registry[i].srv.pid == 0) {
            registry[i].srv = *srv;
            registry[i].owner = getpid();
            return;
        }
    }
}

static void registry_remove(pid_t pid)
{
    for (int i = 0; i < MAX_SERVERS; i++) {
        if (registry[i].srv.pid == pid)
            registry[i].srv.pid = 0;
    }
}

/* Async-signal-safe: SIGKILL every server this process started. */
static void kill_owned_servers(void)
{
    pid_t self = getpid();
    for (int i = 0; i < MAX_SERVERS; i++) {
        if (registry[i].srv.pid > 0 && registry[i].owner == self) {
            kill(registry[i].srv.pid, SIGKILL);
            unlink(registry[i].srv.log_path);
        }
    }
}

static void remove_log(const harness_server *srv)
{
    char marker[sizeof srv->log_path + 16];
    if (srv->log_path[0] == '\0')
        return;
    snprintf(marker, sizeof marker, "%s.reported", srv->log_path);
    unlink(marker);
    unlink(srv->log_path);
}

static void stop_owned_servers_at_exit(void)
{
    pid_t self = getpid();
    for (int i = 0; i < MAX_SERVERS; i++) {
        if (registry[i].srv.pid > 0 && registry[i].owner == self) {
            harness_server srv = registry[i].srv;
            harness_server_stop(&srv);
        }
    }
}

/* Other child processes a test tracks (harness_track_pid), each with the
 * process that started it: only that one may kill it. */
struct tracked_pid {
    pid_t pid;            /* 0: free slot */
    pid_t owner;
};

static struct tracked_pid tracked[MAX_TRACKED];

void harness_track_pid(pid_t pid)
{
    harness_install_cleanup();
    for (int i = 0; i < MAX_TRACKED; i++) {
        if (tracked[i].pid == 0) {
            tracked[i].pid = pid;
            tracked[i].owner = getpid();
            return;
        }
    }
    fprintf(stderr, "harness: more than %d processes to track; pid %d is not\n",
            MAX_TRACKED, (int)pid);
}

void harness_forget_pid(pid_t pid)
{
    for (int i = 0; i < MAX_TRACKED; i++)
        if (tracked[i].pid == pid)
            tracked[i].pid = 0;
}

/* Async-signal-safe: SIGKILL every tracked process this process started. */
static void kill_tracked(void)
{
    pid_t self = getpid();
    for (int i = 0; i < MAX_TRACKED; i++)
        if (tracked[i].pid > 0 && tracked[i].owner == self)
            kill(tracked[i].pid, SIGKILL);
}

static void cleanup_at_exit(void)
{
    kill_tracked();
    stop_owned_servers_at_exit();
}

static void on_fatal_signal(int sig)
{
    kill_tracked();
    kill_owned_servers();
    signal(sig, SIG_DFL);
    raise(sig);
}

void harness_install_cleanup(void)
{
    if (cleanup_installed)
        return;
    cleanup_installed = true;
    atexit(cleanup_at_exit);
    signal(SIGINT, on_fatal_signal);
    signal(SIGTERM, on_fatal_signal);
    signal(SIGHUP, on_fatal_signal);
    signal(SIGPIPE, SIG_IGN);
}

/* ---- locating the binary ---- */

static bool is_executable(const char *path)
{
    return access(path, X_OK) == 0;
}

static void test_program_dir(char *out, size_t cap)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        snprintf(out, cap, ".");
        return;
    }
    exe[n] = '\0';
    snprintf(out, cap, "%s", dirname(exe));
}

const char *harness_server_path(void)
{
    static char path[PATH_MAX + 64];
    const char *env = getenv("COCYTUS_SERVER");
    if (env != NULL && env[0] != '\0')
        return env;

    char dir[PATH_MAX];
    test_program_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/../../memcached/cocytus-server", dir);
    if (is_executable(path))
        return path;
    snprintf(path, sizeof path, "%s/../memcached/cocytus-server", dir);
    return path;
}

bool harness_target_is_memcached(void)
{
    const char *path = harness_server_path();
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    return strcmp(base, "memcached") == 0;
}

/* ---- ports ---- */

bool harness_pick_ports(int *ports, int count)
{
    /* All sockets stay bound until every port is picked, so the kernel
     * cannot hand out the same port twice. */
    int *fds = calloc((size_t)(count > 0 ? count : 1), sizeof *fds);
    if (fds == NULL)
        return false;
    bool ok = true;
    int opened = 0;
    for (; opened < count && ok; opened++) {
        fds[opened] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = { .sin_family = AF_INET };
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof a;
        ok = fds[opened] >= 0 && bind(fds[opened], (struct sockaddr *)&a, sizeof a) == 0 &&
             getsockname(fds[opened], (struct sockaddr *)&a, &len) == 0;
        ports[opened] = ok ? ntohs(a.sin_port) : -1;
    }
    for (int i = 0; i < opened; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(fds);
    return ok;
}

int harness_free_port(void)
{
    int port;
    return harness_pick_ports(&port, 1) ? port : -1;
}

static int connect_loopback(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in addr = { .sin_family = AF_INET };
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons((uint16_t)port);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* ---- process control ---- */

static size_t build_argv(const char **argv, const char *path, const char *port,
                         const char *const *extra_args)
{
    size_t n = 0;
    argv[n++] = path;
    argv[n++] = "-p";
    argv[n++] = port;
    argv[n++] = "-l";
    argv[n++] = "127.0.0.1";
    argv[n++] = "-U";
    argv[n++] = "0";
    if (geteuid() == 0) {
        argv[n++] = "-u";
        argv[n++] = "root";
    }
    for (size_t i = 0; extra_args != NULL && extra_args[i] != NULL; i++) {
        if (n < MAX_ARGS - 1)
            argv[n++] = extra_args[i];
    }
    argv[n] = NULL;
    return n;
}

static void close_inherited_fds(void)
{
    long max = sysconf(_SC_OPEN_MAX);
    if (max < 0 || max > 65536)
        max = 65536;
    for (int fd = 3; fd < max; fd++)
        close(fd);
}

/* In the forked child: die with the test process, quiet I/O, exec. */
static void exec_child(const char *const *argv, const char *log_path, int out_fd,
                       pid_t parent)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0)
        dup2(devnull, STDIN_FILENO);
    int out = out_fd >= 0 ? out_fd : open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (out >= 0) {
        dup2(out, STDOUT_FILENO);
        dup2(out, STDERR_FILENO);
    }
    close_inherited_fds();
    signal(SIGPIPE, SIG_DFL);
    execv(argv[0], (char *const *)argv);
    fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

pid_t harness_spawn(const char *const *argv, const char *log_path, int out_fd)
{
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0)
        exec_child(argv, log_path, out_fd, parent);
    return pid;
}

pid_t harness_spawn_role(const char *conf, const char *role, int group, int index,
                         const char *log_path)
{
    char group_text[16], index_text[16];
    snprintf(group_text, sizeof group_text, "%d", group);
    snprintf(index_text, sizeof index_text, "%d", index);
    const char *argv[16];
    int n = 0;
    argv[n++] = harness_server_path();
    argv[n++] = "--cluster";
    argv[n++] = conf;
    argv[n++] = "--role";
    argv[n++] = role;
    argv[n++] = "--group";
    argv[n++] = group_text;
    argv[n++] = "--index";
    argv[n++] = index_text;
    argv[n++] = "-U";
    argv[n++] = "0";
    if (geteuid() == 0) {
        argv[n++] = "-u";
        argv[n++] = "root";
    }
    argv[n] = NULL;
    pid_t pid = harness_spawn(argv, log_path, -1);
    if (pid > 0)
        harness_track_pid(pid);
    return pid;
}

#define LOG_TAIL_LINES 30

/* Prints the last lines of the server's output (start-up errors, crash
 * reports such as sanitizer output) to stderr. */
static void print_log_tail(const char *log_path, const char *label)
{
    static char lines[LOG_TAIL_LINES][512];
    FILE *f = fopen(log_path, "r");
    if (f == NULL)
        return;
    int count = 0;
    while (fgets(lines[count % LOG_TAIL_LINES], sizeof lines[0], f) != NULL)
        count++;
    fclose(f);
    int first = count > LOG_TAIL_LINES ? count - LOG_TAIL_LINES : 0;
    for (int i = first; i < count; i++)
        fprintf(stderr, "  %s: %s", label, lines[i % LOG_TAIL_LINES]);
}

void harness_server_print_log(const harness_server *srv, const char *label)
{
    if (srv->log_path[0] != '\0')
        print_log_tail(srv->log_path, label);
}

static bool reap_if_exited(pid_t pid, int *status)
{
    pid_t r = waitpid(pid, status, WNOHANG);
    return r == pid || (r < 0 && errno == ECHILD);
}

/* Waits for the server to accept a connection.  False if it died or hung. */
static bool wait_until_ready(pid_t pid, int port)
{
    int64_t deadline = harness_now_ms() + READY_TIMEOUT_MS;
    int status = 0;
    while (harness_now_ms() < deadline) {
        if (reap_if_exited(pid, &status))
            return false;
        int fd = connect_loopback(port);
        if (fd >= 0) {
            close(fd);
            harness_sleep_ms(10);
            return !reap_if_exited(pid, &status);
        }
        harness_sleep_ms(20);
    }
    return false;
}

static bool start_once(harness_server *srv, const char *path,
                       const char *const *extra_args)
{
    int port = harness_free_port();
    if (port <= 0)
        return false;
    char port_text[16];
    snprintf(port_text, sizeof port_text, "%d", port);
    const char *argv[MAX_ARGS];
    build_argv(argv, path, port_text, extra_args);

    snprintf(srv->log_path, sizeof srv->log_path, "/tmp/cocytus-itest-%d-%d.log",
             (int)getpid(), port);
    unlink(srv->log_path);

    pid_t pid = harness_spawn(argv, srv->log_path, -1);
    if (pid < 0)
        return false;
    srv->pid = pid;
    srv->port = port;
    registry_add(srv);
    if (wait_until_ready(pid, port))
        return true;
    fprintf(stderr, "harness: %s did not come up on port %d\n", path, port);
    print_log_tail(srv->log_path, "server");
    harness_server_stop(srv);
    return false;
}

bool harness_server_start(harness_server *srv, const char *const *extra_args)
{
    harness_install_cleanup();
    memset(srv, 0, sizeof *srv);
    const char *path = harness_server_path();
    if (!is_executable(path)) {
        fprintf(stderr, "harness: server binary %s not found or not executable "
                        "(set COCYTUS_SERVER)\n", path);
        return false;
    }
    for (int attempt = 0; attempt < START_ATTEMPTS; attempt++) {
        if (start_once(srv, path, extra_args))
            return true;
    }
    return false;
}

bool harness_server_wait_exit(harness_server *srv, int timeout_ms)
{
    if (srv->pid <= 0)
        return true;
    int64_t deadline = harness_now_ms() + timeout_ms;
    int status = 0;
    do {
        if (reap_if_exited(srv->pid, &status)) {
            registry_remove(srv->pid);
            srv->pid = 0;
            return true;
        }
        harness_sleep_ms(10);
    } while (harness_now_ms() < deadline);
    return false;
}

void harness_server_stop(harness_server *srv)
{
    if (srv->pid <= 0) {
        remove_log(srv);
        return;
    }
    kill(srv->pid, SIGTERM);
    if (!harness_server_wait_exit(srv, STOP_GRACE_MS)) {
        fprintf(stderr, "harness: server %d ignored SIGTERM, killing\n", (int)srv->pid);
        kill(srv->pid, SIGKILL);
        waitpid(srv->pid, NULL, 0);
        registry_remove(srv->pid);
        srv->pid = 0;
    }
    remove_log(srv);
}

/* State letter of a process from /proc (works for non-children too). */
static char process_state(pid_t pid)
{
    char path[64], text[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 'X';
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    char *paren = strrchr(text, ')');
    return paren != NULL && paren[1] == ' ' ? paren[2] : 'X';
}

/* Prints the server's last output the first time anyone notices its death
 * (a marker file makes this once-only across forked test processes). */
static void report_death_once(const harness_server *srv)
{
    char marker[sizeof srv->log_path + 16];
    snprintf(marker, sizeof marker, "%s.reported", srv->log_path);
    int fd = open(marker, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return;
    close(fd);
    fprintf(stderr, "harness: server pid %d (port %d) is gone; its last output:\n",
            (int)srv->pid, srv->port);
    print_log_tail(srv->log_path, "server");
}

bool harness_pid_running(pid_t pid)
{
    char state = process_state(pid);
    return state != 'Z' && state != 'X';
}

bool harness_server_alive(const harness_server *srv)
{
    if (srv->pid <= 0)
        return false;
    if (harness_pid_running(srv->pid))
        return true;
    report_death_once(srv);
    return false;
}

/* ---- libmemcached client ---- */

memcached_st *harness_client(int port, bool binary)
{
    memcached_st *memc = memcached_create(NULL);
    if (memc == NULL)
        return NULL;
    memcached_server_add(memc, "127.0.0.1", (in_port_t)port);
    memcached_behavior_set(memc, MEMCACHED_BEHAVIOR_BINARY_PROTOCOL, binary ? 1 : 0);
    memcached_behavior_set(memc, MEMCACHED_BEHAVIOR_CONNECT_TIMEOUT, HARNESS_IO_TIMEOUT_MS);
    memcached_behavior_set(memc, MEMCACHED_BEHAVIOR_POLL_TIMEOUT, HARNESS_IO_TIMEOUT_MS);
    memcached_behavior_set(memc, MEMCACHED_BEHAVIOR_TCP_NODELAY, 1);
    return memc;
}

/* ---- raw sockets ---- */

bool raw_open(raw_conn *c, int port)
{
    harness_install_cleanup();
    c->len = 0;
    c->fd = connect_loopback(port);
    if (c->fd < 0)
        return false;
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return true;
}

void raw_close(raw_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->len = 0;
}

bool raw_send(raw_conn *c, const void *data, size_t n)
{
    const char *p = data;
    while (n > 0) {
        ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

bool raw_send_str(raw_conn *c, const char *s)
{
    return raw_send(c, s, strlen(s));
}

/* Reads more bytes into the buffer.  >0 bytes read, 0 on EOF,
 * -1 on timeout, -2 on error (e.g. reset). */
static int raw_fill(raw_conn *c, int64_t deadline)
{
    if (c->len >= RAW_BUF_SIZE)
        return -2;
    for (;;) {
        int64_t left = deadline - harness_now_ms();
        if (left <= 0)
            return -1;
        struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
        int r = poll(&pfd, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -2;
        if (r == 0)
            return -1;
        ssize_t got = recv(c->fd, c->buf + c->len, RAW_BUF_SIZE - c->len, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return -2;
        c->len += (size_t)got;
        return (int)got;
    }
}

static void raw_consume(raw_conn *c, size_t n)
{
    memmove(c->buf, c->buf + n, c->len - n);
    c->len -= n;
}

static char *find_crlf(const char *buf, size_t len)
{
    for (size_t i = 0; i + 1 < len; i++) {
        if (buf[i] == '\r' && buf[i + 1] == '\n')
            return (char *)buf + i;
    }
    return NULL;
}

bool raw_auth(raw_conn *c, const char *secret)
{
    char reply[256], proof[96], line[128];
    if (raw_command(c, "cocytus auth\r\n", reply, sizeof reply) <= 0)
        return false;
    reply[strcspn(reply, "\r\n")] = '\0';
    if (auth_admin_reply_line(secret, reply, proof, sizeof proof) < 0)
        return false;
    snprintf(line, sizeof line, "%s\r\n", proof);
    return raw_command(c, line, reply, sizeof reply) > 0 && strcmp(reply, "OK\r\n") == 0;
}

int raw_read_line(raw_conn *c, char *out, size_t cap, int timeout_ms)
{
    int64_t deadline = harness_now_ms() + timeout_ms;
    for (;;) {
        char *crlf = find_crlf(c->buf, c->len);
        if (crlf != NULL) {
            size_t n = (size_t)(crlf - c->buf) + 2;
            size_t copy = n < cap - 1 ? n : cap - 1;
            memcpy(out, c->buf, copy);
            out[copy] = '\0';
            raw_consume(c, n);
            return (int)copy;
        }
        int r = raw_fill(c, deadline);
        if (r == 0 || r == -2) {
            out[0] = '\0';
            return 0;
        }
        if (r < 0) {
            out[0] = '\0';
            return -1;
        }
    }
}

bool raw_read_exact(raw_conn *c, void *out, size_t n, int timeout_ms)
{
    int64_t deadline = harness_now_ms() + timeout_ms;
    char *dst = out;
    while (n > 0) {
        if (c->len == 0 && raw_fill(c, deadline) <= 0)
            return false;
        size_t take = c->len < n ? c->len : n;
        memcpy(dst, c->buf, take);
        raw_consume(c, take);
        dst += take;
        n -= take;
    }
    return true;
}

static bool ends_with(const char *s, size_t len, const char *suffix)
{
    size_t sl = strlen(suffix);
    return len >= sl && memcmp(s + len - sl, suffix, sl) == 0;
}

int raw_read_until(raw_conn *c, const char *terminator, char *out, size_t cap,
                   int timeout_ms)
{
    int64_t deadline = harness_now_ms() + timeout_ms;
    size_t len = 0;
    while (len + 1 < cap) {
        if (c->len == 0 && raw_fill(c, deadline) <= 0)
            break;
        out[len++] = c->buf[0];
        raw_consume(c, 1);
        if (ends_with(out, len, terminator)) {
            out[len] = '\0';
            return (int)len;
        }
    }
    out[len] = '\0';
    return -1;
}

size_t raw_read_quiet(raw_conn *c, char *out, size_t cap, int quiet_ms)
{
    size_t len = 0;
    for (;;) {
        size_t take = c->len < cap - 1 - len ? c->len : cap - 1 - len;
        memcpy(out + len, c->buf, take);
        raw_consume(c, take);
        len += take;
        if (len + 1 >= cap || raw_fill(c, harness_now_ms() + quiet_ms) <= 0)
            break;
    }
    out[len] = '\0';
    return len;
}

bool raw_wait_closed(raw_conn *c, int timeout_ms)
{
    int64_t deadline = harness_now_ms() + timeout_ms;
    for (;;) {
        c->len = 0;
        int r = raw_fill(c, deadline);
        if (r == 0 || r == -2)
            return true;
        if (r == -1)
            return false;
    }
}

int raw_command(raw_conn *c, const char *request, char *out, size_t cap)
{
    if (!raw_send_str(c, request))
        return -1;
    return raw_read_line(c, out, cap, HARNESS_IO_TIMEOUT_MS);
}

/* ---- raw binary protocol ---- */

static void put_be16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)(v >> 8);
    p[1] = (unsigned char)v;
}

static void put_be32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (24 - 8 * i));
}

static void put_be64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (56 - 8 * i));
}

static uint16_t get_be16(const unsigned char *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}

static uint32_t get_be32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static uint64_t get_be64(const unsigned char *p)
{
    return ((uint64_t)get_be32(p) << 32) | get_be32(p + 4);
}

bool raw_bin_send(raw_conn *c, const bin_request *req)
{
    unsigned char hdr[BIN_HEADER_LEN] = { 0 };
    hdr[0] = req->magic ? req->magic : BIN_REQ_MAGIC;
    hdr[1] = req->opcode;
    put_be16(hdr + 2, req->keylen);
    hdr[4] = req->extlen;
    put_be32(hdr + 8, (uint32_t)req->extlen + req->keylen + req->valuelen);
    put_be32(hdr + 12, req->opaque);
    put_be64(hdr + 16, req->cas);
    return raw_send(c, hdr, sizeof hdr)
        && (req->extlen == 0 || raw_send(c, req->extras, req->extlen))
        && (req->keylen == 0 || raw_send(c, req->key, req->keylen))
        && (req->valuelen == 0 || raw_send(c, req->value, req->valuelen));
}

bool raw_bin_read(raw_conn *c, bin_response *res, int timeout_ms)
{
    unsigned char hdr[BIN_HEADER_LEN];
    memset(res, 0, sizeof *res);
    if (!raw_read_exact(c, hdr, sizeof hdr, timeout_ms))
        return false;
    res->magic = hdr[0];
    res->opcode = hdr[1];
    res->keylen = get_be16(hdr + 2);
    res->extlen = hdr[4];
    res->datatype = hdr[5];
    res->status = get_be16(hdr + 6);
    res->bodylen = get_be32(hdr + 8);
    res->opaque = get_be32(hdr + 12);
    res->cas = get_be64(hdr + 16);
    size_t keep = res->bodylen < BIN_BODY_MAX ? res->bodylen : BIN_BODY_MAX;
    if (!raw_read_exact(c, res->body, keep, timeout_ms))
        return false;
    char sink[1024];
    for (size_t left = res->bodylen - keep; left > 0;) {
        size_t n = left < sizeof sink ? left : sizeof sink;
        if (!raw_read_exact(c, sink, n, timeout_ms))
            return false;
        left -= n;
    }
    return true;
}
