/* main.c - cocytus-server's entry point: memcached's command-line flags,
 * daemon mode, pid file and user switch, then the event loop.
 *
 * Flags that only make sense for memcached's threads or UDP are accepted so
 * existing scripts run unchanged; we say when one is ignored. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <pwd.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <event2/event.h>

#include "sasl_auth.h"
#include "server.h"

static void usage(FILE *out)
{
    fprintf(out,
        "cocytus-server " PACKAGE_VERSION " - memcached-compatible server of Cocytus-KV\n"
        "  -p, --port=<num>          TCP port to listen on (default 11211; 0 = any)\n"
        "  -l, --listen=<addr>       interface(s) to listen on, comma separated (default all)\n"
        "  -U, --udp-port=<num>      UDP port; only 0 (off) is supported\n"
        "  -s, --unix-socket=<file>  Unix socket to listen on instead of TCP (plain role)\n"
        "  -a, --unix-mask=<perms>   the Unix socket's permissions, octal (default 0700)\n"
        "  -m, --memory-limit=<mb>   item memory in megabytes (default 64)\n"
        "  -c, --conn-limit=<num>    max simultaneous connections (default 1024)\n"
        "  -I, --max-item-size=<n>   item size limit, e.g. 1m, 512k (default 1m)\n"
        "  -M, --disable-evictions   return errors when memory is exhausted\n"
        "  -C, --disable-cas         (accepted; cas values are always kept)\n"
        "  -v, -vv                   verbose / very verbose\n"
        "  -d, --daemon              run as a daemon\n"
        "  -P, --pidfile=<file>      write the pid here\n"
        "  -u, --user=<name>         run as this user (when started as root)\n"
        "  -A, --enable-shutdown     allow the shutdown command\n"
        "  -b, --listen-backlog=<n>  listen backlog (default 1024)\n"
        "  -t, --threads=<n>         accepted for compatibility; the server is single-threaded\n"
        "  -F, --disable-flush-all   refuse flush_all\n"
        "  -X, --disable-dumping     refuse stats cachedump and lru_crawler metadump\n"
        "  -W, --disable-watch       refuse watch (the log streams)\n"
        "  -k, --lock-memory         lock the process's memory in RAM (mlockall)\n"
        "  -N, --napi_ids=<n>        accepted and ignored (one thread)\n"
        "  -e, --memory-file=<file>  a restartable cache: SIGUSR1 stops and saves the items to\n"
        "                            <file> (and <file>.meta), the next start with it restores\n"
        "                            them (plain role)\n"
        "  -Y, --auth-file=<file>    authentication: user:pass lines (memcached's format);\n"
        "                            ASCII auth set, or binary SASL PLAIN\n"
        "  -S, --enable-sasl         binary clients only, authenticated with SASL (Cyrus SASL,\n"
        "                            service memcached; plain role)\n"
        "  -B, --protocol=<proto>    accepted for compatibility: auto, ascii or binary\n"
        "  -D <char>                 stats detail's key prefix delimiter (turns stats detail on)\n"
        "  -o, --extended=<opts>     hashpower=N, idle_timeout=S (close clients idle S s),\n"
        "                            track_sizes, and with -Z: ssl_chain_cert=FILE, ssl_key=FILE,\n"
        "                            ssl_ca_cert=FILE, ssl_verify_mode=0-3, ssl_keyformat=1|2,\n"
        "                            ssl_ciphers=LIST, ssl_min_version=tlsv1.2, ssl_wbuf_size=KB\n"
        "                            (others ignored)\n"
        "  -Z, --enable-ssl          clients connect with TLS (see -o ssl_*)\n"
        "      --role=<role>         plain (default), data, parity, primary, backup, coordinator\n"
        "      --cluster=<file>      cluster file (replicated roles)\n"
        "      --group=<g> --index=<i>  this process's group and index within its role\n"
        "      --no-io-uring         write each socket with its own system call instead of\n"
        "                            batching a loop pass's deferred writes with io_uring\n"
        "  -V, --version             print the version\n"
        "  -h, --help                this help\n");
}

/* "64", "1m", "512k", "2g" -> bytes; unit is the default multiplier. */
static bool parse_size(const char *s, size_t unit, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return false;
    switch (*end) {
    case '\0': v *= unit; break;
    case 'k': case 'K': v <<= 10; end++; break;
    case 'm': case 'M': v <<= 20; end++; break;
    case 'g': case 'G': v <<= 30; end++; break;
    default: return false;
    }
    if (*end != '\0')
        return false;
    *out = (size_t)v;
    return true;
}

static bool parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

/* One of memcached's -o ssl_* options; false (said) for a bad value. */
static bool parse_tls_option(struct tls_config *t, char *o)
{
    char *v = strchr(o, '=');
    int n;
    if (v != NULL)
        *v++ = '\0';
    if (v == NULL || *v == '\0') {
        if (strcmp(o, "ssl_session_cache") == 0) {
            t->session_cache = true;
            return true;
        }
        if (strcmp(o, "ssl_kernel_tls") == 0) {
            fprintf(stderr, "cocytus-server: ignoring extended option '%s'\n", o);
            return true;
        }
        fprintf(stderr, "cocytus-server: -o %s needs a value\n", o);
        return false;
    }
    if (strcmp(o, "ssl_chain_cert") == 0)
        t->chain_cert = v;
    else if (strcmp(o, "ssl_key") == 0)
        t->key = v;
    else if (strcmp(o, "ssl_ca_cert") == 0)
        t->ca_cert = v;
    else if (strcmp(o, "ssl_ciphers") == 0)
        t->ciphers = v;
    else if (strcmp(o, "ssl_verify_mode") == 0 && parse_int(v, 0, TLS_VERIFY_MAX, &n))
        t->verify_mode = n;
    else if (strcmp(o, "ssl_keyformat") == 0 && parse_int(v, 1, 2, &n))
        t->keyformat = n;
    else if (strcmp(o, "ssl_min_version") == 0 && (n = tls_min_version_parse(v)) >= 0)
        t->min_version = n;
    else if (strcmp(o, "ssl_wbuf_size") == 0 && parse_int(v, 1, 1024, &n))
        t->wbuf_size = (size_t)n * 1024;
    else {
        fprintf(stderr, "cocytus-server: invalid -o %s=%s (ssl_chain_cert, ssl_key, ssl_ca_cert "
                "and ssl_ciphers take a file or list, ssl_verify_mode 0-3, ssl_keyformat 1 (PEM) "
                "or 2 (DER), ssl_min_version tlsv1, tlsv1.1, tlsv1.2 or tlsv1.3, ssl_wbuf_size "
                "kilobytes, 1 to 1024)\n", o, v);
        return false;
    }
    return true;
}

static bool parse_extended(struct settings *st, char *opts)
{
    char *save = NULL;
    for (char *o = strtok_r(opts, ",", &save); o; o = strtok_r(NULL, ",", &save)) {
        int hp;
        if (strncmp(o, "hashpower=", 10) == 0 && parse_int(o + 10, 12, 32, &hp))
            st->hashpower = (unsigned)hp;
        else if (strncmp(o, "idle_timeout=", 13) == 0 && parse_int(o + 13, 0, 1 << 30, &hp))
            st->idle_timeout = hp;
        else if (strcmp(o, "track_sizes") == 0)
            st->sizes_enabled = true;
        else if (strncmp(o, "ssl_", 4) == 0) {
            if (!parse_tls_option(&st->tls, o))
                return false;
        } else
            fprintf(stderr, "cocytus-server: ignoring extended option '%s'\n", o);
    }
    return true;
}

enum { OPT_ROLE = 1000, OPT_CLUSTER, OPT_GROUP, OPT_INDEX, OPT_NO_URING };

/* -S as memcached takes it: binary only (an ASCII -B is refused, as is
 * UDP), not with -Y (memcached then speaks ASCII and never answers SASL:
 * refused here rather than copied).  Plain role only: a cluster's
 * coordinator, nodes and cocytus-cli speak ASCII to its processes, and its
 * clients authenticate at cocytus-proxy or with -Y (docs/security.md). */
static int check_sasl(const struct settings *st, bool udp_asked)
{
    if (!mcsasl_available()) {
        fprintf(stderr, "cocytus-server: -S: built without SASL (apt-get install "
                "libsasl2-dev, then configure again)\n");
        return -1;
    }
    if (st->protocol != NULL && strcmp(st->protocol, "binary") != 0) {
        fprintf(stderr, "cocytus-server: -S: you cannot allow the ASCII protocol while using "
                "SASL (-B %s)\n", st->protocol);
        return -1;
    }
    if (udp_asked) {
        fprintf(stderr, "cocytus-server: -S: cannot enable UDP while using binary SASL "
                "authentication\n");
        return -1;
    }
    if (st->auth_file) {
        fprintf(stderr, "cocytus-server: -S and -Y cannot be used together (-Y authenticates "
                "ASCII clients from its file, -S binary clients through SASL)\n");
        return -1;
    }
    if (strcmp(st->role, "plain") != 0) {
        fprintf(stderr, "cocytus-server: -S (SASL) serves the plain role only; a %s process "
                "is spoken to in ASCII by the cluster's coordinator and tools (use -Y, or "
                "cocytus-proxy -Y in front)\n", st->role);
        return -1;
    }
    return 0;
}

static int parse_args(int argc, char **argv, struct settings *st)
{
    static const struct option longopts[] = {
        { "port", required_argument, NULL, 'p' },
        { "listen", required_argument, NULL, 'l' },
        { "udp-port", required_argument, NULL, 'U' },
        { "unix-socket", required_argument, NULL, 's' },
        { "unix-mask", required_argument, NULL, 'a' },
        { "memory-limit", required_argument, NULL, 'm' },
        { "conn-limit", required_argument, NULL, 'c' },
        { "max-item-size", required_argument, NULL, 'I' },
        { "disable-evictions", no_argument, NULL, 'M' },
        { "disable-cas", no_argument, NULL, 'C' },
        { "verbose", no_argument, NULL, 'v' },
        { "daemon", no_argument, NULL, 'd' },
        { "pidfile", required_argument, NULL, 'P' },
        { "user", required_argument, NULL, 'u' },
        { "enable-shutdown", no_argument, NULL, 'A' },
        { "listen-backlog", required_argument, NULL, 'b' },
        { "threads", required_argument, NULL, 't' },
        { "extended", required_argument, NULL, 'o' },
        { "enable-ssl", no_argument, NULL, 'Z' },
        { "disable-flush-all", no_argument, NULL, 'F' },
        { "disable-dumping", no_argument, NULL, 'X' },
        { "disable-watch", no_argument, NULL, 'W' },
        { "lock-memory", no_argument, NULL, 'k' },
        { "memory-file", required_argument, NULL, 'e' },
        { "napi_ids", required_argument, NULL, 'N' },
        { "auth-file", required_argument, NULL, 'Y' },
        { "enable-sasl", no_argument, NULL, 'S' },
        { "protocol", required_argument, NULL, 'B' },
        { "role", required_argument, NULL, OPT_ROLE },
        { "cluster", required_argument, NULL, OPT_CLUSTER },
        { "group", required_argument, NULL, OPT_GROUP },
        { "index", required_argument, NULL, OPT_INDEX },
        { "no-io-uring", no_argument, NULL, OPT_NO_URING },
        { "version", no_argument, NULL, 'V' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int ch, n;
    bool udp_asked = false;
    while ((ch = getopt_long(argc, argv, "p:l:U:s:a:m:c:I:MCvdP:u:Ab:t:o:R:B:f:n:VhrLFY:D:ZXWkN:Se:", longopts, NULL)) != -1) {
        switch (ch) {
        case 'p':
            if (!parse_int(optarg, 0, 65535, &st->port))
                goto bad;
            st->port_given = true;
            break;
        case 'l':
            if (!listen_list_add(&st->listen_addr, optarg))
                goto bad;
            break;
        case 'U':
            if (!parse_int(optarg, 0, 65535, &n))
                goto bad;
            udp_asked = n != 0;
            if (n != 0)
                fprintf(stderr, "cocytus-server: UDP is not supported; -U %d ignored\n", n);
            st->udp_port = 0;
            break;
        case 's':
            st->unix_path = optarg;
            break;
        case 'a':
            if (!unixsock_parse_mask(optarg, &st->unix_mask))
                goto bad;
            break;
        case 'm':
            if (!parse_size(optarg, 1u << 20, &st->mem_limit) || st->mem_limit == 0)
                goto bad;
            break;
        case 'c':
            if (!parse_int(optarg, 1, 1 << 20, &st->max_conns))
                goto bad;
            break;
        case 'I':
            if (!parse_size(optarg, 1, &st->item_size_max))
                goto bad;
            break;
        case 'M':
            st->evict = false;
            break;
        case 'C':
            st->cas_enabled = false;
            break;
        case 'v':
            st->verbose++;
            break;
        case 'd':
            st->daemonize = true;
            break;
        case 'P':
            st->pid_file = optarg;
            break;
        case 'u':
            st->user = optarg;
            break;
        case 'A':
            st->shutdown_enabled = true;
            break;
        case 'b':
            if (!parse_int(optarg, 1, 1 << 20, &st->backlog))
                goto bad;
            break;
        case 't':
            if (!parse_int(optarg, 1, 1024, &n))
                goto bad;
            if (n != 1 && st->verbose)
                fprintf(stderr, "cocytus-server: single-threaded; -t %d ignored\n", n);
            break;
        case 'o':
            if (!parse_extended(st, optarg))
                return -1;
            break;
        case 'Z':
            st->tls_enabled = true;
            break;
        case 'F':
            st->flush_enabled = false;
            break;
        case 'Y':
            st->auth_file = optarg;
            break;
        case 'D':
            if (strlen(optarg) != 1)
                goto bad;
            st->prefix_delimiter = optarg[0];
            st->detail_enabled = true;
            break;
        case 'S':
            st->sasl_enabled = true;
            break;
        case 'B':
            if (strcmp(optarg, "auto") != 0 && strcmp(optarg, "ascii") != 0 &&
                strcmp(optarg, "binary") != 0)
                goto bad;
            st->protocol = optarg;
            break;
        case 'R': case 'f': case 'n': case 'r': case 'L':
            /* memcached tuning flags with no meaning here. */
            break;
        case 'N':
            /* NAPI ids steer memcached's worker threads by receive queue;
             * one thread has nothing to steer. */
            fprintf(stderr, "cocytus-server: -N (napi_ids) ignored: one thread\n");
            break;
        case 'X':
            st->dump_enabled = false;
            break;
        case 'W':
            st->watch_enabled = false;
            break;
        case 'k':
            st->lock_memory = true;
            break;
        case 'e':
            st->memory_file = optarg;
            break;
        case OPT_ROLE:
            st->role = optarg;
            break;
        case OPT_CLUSTER:
            st->cluster_file = optarg;
            break;
        case OPT_GROUP:
            if (!parse_int(optarg, 0, 1 << 20, &st->group))
                goto bad;
            break;
        case OPT_INDEX:
            if (!parse_int(optarg, 0, 255, &st->index))
                goto bad;
            break;
        case OPT_NO_URING:
            st->no_uring = true;
            break;
        case 'V':
            printf("cocytus-server " PACKAGE_VERSION " (memcached protocol " MC_VERSION_STRING ")\n");
            exit(EXIT_SUCCESS);
        case 'h':
            usage(stdout);
            exit(EXIT_SUCCESS);
        default:
            usage(stderr);
            return -1;
        }
        continue;
    bad:
        if (ch < OPT_ROLE) {
            fprintf(stderr, "cocytus-server: invalid value '%s' for -%c\n", optarg, ch);
            return -1;
        }
        for (const struct option *o = longopts; o->name; o++)   /* a long-only option */
            if (o->val == ch)
                fprintf(stderr, "cocytus-server: invalid value '%s' for --%s\n", optarg, o->name);
        return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "cocytus-server: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    /* A cluster's processes are named by host:port in the cluster file
     * and the slot map: a Unix socket would be an address nobody routes to. */
    if (st->unix_path && strcmp(st->role, "plain") != 0) {
        fprintf(stderr, "cocytus-server: -s (a Unix socket) serves the plain role only; a %s "
                "process is reached at the host:port of its cluster file\n", st->role);
        return -1;
    }
    if (st->sasl_enabled && check_sasl(st, udp_asked) < 0)
        return -1;
    /* A cluster process's items come back by recovery from its group, not
     * from a file of its own. */
    if (st->memory_file && strcmp(st->role, "plain") != 0) {
        fprintf(stderr, "cocytus-server: -e (a restartable cache) serves the plain role only; a "
                "%s process is restored from its group by recovery\n", st->role);
        return -1;
    }
    if (st->tls_enabled && st->unix_path) {
        fprintf(stderr, "cocytus-server: -Z (TLS) is for TCP clients, not a Unix socket (-s)\n");
        return -1;
    }
    if (st->item_size_max < 1024) {
        fprintf(stderr, "cocytus-server: item size limit must be at least 1k\n");
        return -1;
    }
    if (st->item_size_max > (1u << 30) || st->item_size_max > st->mem_limit / 2) {
        fprintf(stderr, "cocytus-server: item size limit (-I) may be at most half the memory limit (-m) and 1g\n");
        return -1;
    }
    return 0;
}

/* Drop root privileges to the user -u names. */
static int switch_user(const char *user)
{
    if (getuid() != 0 && geteuid() != 0)
        return 0;
    if (!user)
        return 0;
    struct passwd *pw = getpwnam(user);
    if (!pw) {
        fprintf(stderr, "cocytus-server: can't find the user %s to switch to\n", user);
        return -1;
    }
    if (setgroups(0, NULL) < 0 && errno != EPERM) {
        perror("setgroups");
        return -1;
    }
    if (setgid(pw->pw_gid) < 0 || setuid(pw->pw_uid) < 0) {
        fprintf(stderr, "cocytus-server: failed to assume identity of user %s\n", user);
        return -1;
    }
    return 0;
}

static int daemonize(void)
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid > 0)
        _exit(EXIT_SUCCESS);
    if (setsid() < 0)
        return -1;
    int fd = open("/dev/null", O_RDWR);
    if (fd < 0)
        return -1;
    dup2(fd, STDIN_FILENO);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    if (fd > STDERR_FILENO)
        close(fd);
    return 0;
}

static int write_pid_file(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cocytus-server: could not open the pid file %s: %s\n", path, strerror(errno));
        return -1;
    }
    fprintf(f, "%ld\n", (long)getpid());
    return fclose(f);
}

/* -k.  Not in an AddressSanitizer build: its shadow memory spans
 * terabytes of address space, which mlockall would try to make resident
 * (a root process is not held back by RLIMIT_MEMLOCK). */
static void lock_memory(void)
{
#if defined(__SANITIZE_ADDRESS__)
    fprintf(stderr, "warning: -k ignored: this is an AddressSanitizer build\n");
#else
    if (mlockall(MCL_CURRENT | MCL_FUTURE) != 0)
        fprintf(stderr, "warning: -k invalid, mlockall() failed: %s\n", strerror(errno));
#endif
}

int main(int argc, char **argv)
{
    struct settings st;
    settings_defaults(&st);
    if (parse_args(argc, argv, &st) < 0)
        return EXIT_FAILURE;

    struct event_base *base = event_base_new();
    if (!base) {
        fprintf(stderr, "cocytus-server: cannot create the event loop\n");
        return EXIT_FAILURE;
    }
    /* An unknown -u user is said before anything is bound or made. */
    if (st.user && (getuid() == 0 || geteuid() == 0) && !getpwnam(st.user)) {
        fprintf(stderr, "cocytus-server: can't find the user %s to switch to\n", st.user);
        return EXIT_FAILURE;
    }
    static struct server srv;   /* the process's one server context */
    if (server_init(&srv, &st, base) < 0)
        return EXIT_FAILURE;
    if (switch_user(st.user) < 0) {
        server_destroy(&srv);   /* removes a -s socket file it made */
        return EXIT_FAILURE;
    }
    if (st.daemonize) {
        if (daemonize() < 0) {
            fprintf(stderr, "cocytus-server: failed to daemonize\n");
            server_destroy(&srv);
            return EXIT_FAILURE;
        }
        /* The event loop must be told it lives in a new process. */
        event_reinit(base);
    }
    /* After the fork (locks are not inherited), as memcached does; a
     * refusal (RLIMIT_MEMLOCK) is only a warning there too. */
    if (st.lock_memory)
        lock_memory();
    if (st.pid_file && write_pid_file(st.pid_file) < 0) {
        server_destroy(&srv);
        return EXIT_FAILURE;
    }
    if (server_started(&srv) < 0) {
        server_destroy(&srv);
        if (st.pid_file)
            unlink(st.pid_file);
        return EXIT_FAILURE;
    }
    if (st.verbose && st.unix_path)
        fprintf(stderr, "cocytus-server %s listening on Unix socket %s (role %s)\n",
                PACKAGE_VERSION, st.unix_path, st.role);
    else if (st.verbose)
        fprintf(stderr, "cocytus-server %s listening on port %d (role %s)\n",
                PACKAGE_VERSION, srv.bound_port, st.role);
    server_run(&srv);
    server_destroy(&srv);
    event_base_free(base);
    if (st.pid_file)
        unlink(st.pid_file);
    /* -e: a SIGUSR1 stop whose save failed is not a clean stop. */
    return srv.save_failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
