/* cli.c - cocytus-cli, the admin tool of a Cocytus-KV cluster: option
 * parsing, loading the process list, and dispatch to the commands
 * (status, wait-healthy, mem, verify, decode-check, map, move).  The map
 * command is here: it fetches `config get cluster` from every process
 * (docs/routing.md); so is `move` (`cocytus move`, `cocytus moves` on the
 * coordinator).  The cluster half of `status` and `wait-healthy` are in
 * health.c.  See docs/cli.md. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "admin.h"
#include "cli.h"
#include "gview.h"
#include "procs.h"
#include "slotmap.h"

#define DEFAULT_DIR "./run/cluster"
#define DEFAULT_TIMEOUT_MS 5000
#define DEFAULT_QUIET_MS 2000
#define DEFAULT_CHUNK (1u << 20)
#define MOVE_POLL_MS 100
#define MOVE_WAIT_TIMEOUTS 12       /* move waits up to 12 x --timeout for the outcome */
#define COORD_LINE_MAX 512
#define DEFAULT_WAIT_S 60
#define MAX_WAIT_S 86400

static void usage(FILE *out)
{
    fprintf(out,
        "usage: cocytus-cli [--dir DIR | --cluster FILE] [options] <command>\n"
        "commands:\n"
        "  status         does every process answer; its xids and items; the health\n"
        "                 of every coding group (from the coordinator): redundancy,\n"
        "                 layout, progress of recoveries, migrations and rebuilds\n"
        "  wait-healthy   wait until every group is healthy at full redundancy and\n"
        "                 every process alive (--timeout S: give up after S seconds,\n"
        "                 default %d; exit 0 healthy, 1 not at the deadline)\n"
        "  mem            region, metadata and RSS bytes per process, totals per role\n"
        "  verify         backup metadata and parity of every coding group are right\n"
        "  decode-check   every K of N regions decode to the others (offline recovery)\n"
        "  map            the slot map (config get cluster) and whether every process has it\n"
        "  move SLOT GROUP [INDEX]\n"
        "                 move a slot to a group's serving process (through the coordinator)\n"
        "  admin ADDR WORD...\n"
        "                 send 'cocytus WORD...' to ADDR (<host>:<port>, or 'coordinator')\n"
        "                 after proving the cluster secret; print the reply\n"
        "options:\n"
        "  --dir DIR        cluster directory with the endpoints file (default " DEFAULT_DIR ")\n"
        "  --cluster FILE   take the processes from a cluster file instead\n"
        "  --group G        only coding group G\n"
        "  --full           verify/decode-check whole regions, not only used ranges;\n"
        "                   map: also every slot range\n"
        "  --raw-bytes N    mem: also print total RSS / N\n"
        "  --timeout MS     bound for each socket wait (default %d); for wait-healthy\n"
        "                   the whole wait, in seconds\n"
        "  --quiet-wait MS  how long to wait for a quiescent group, a takeover or a\n"
        "                   rebuild (default %d)\n"
        "  --chunk BYTES    bytes per region request (default %u)\n"
        "exit: 0 OK, 1 a check found a difference (status: a coding group short of\n"
        "      full redundancy, or a process joining; wait-healthy: not healthy at the\n"
        "      deadline), 2 usage or configuration error, 3 a process did not answer\n"
        "      or the group never became quiescent or ready\n",
        DEFAULT_WAIT_S, DEFAULT_TIMEOUT_MS, DEFAULT_QUIET_MS, DEFAULT_CHUNK);
}

/* Non-negative decimal with optional k/m/g suffix. */
static bool parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || s[0] == '-')
        return false;
    switch (*end) {
    case 'k': case 'K': v <<= 10; end++; break;
    case 'm': case 'M': v <<= 20; end++; break;
    case 'g': case 'G': v <<= 30; end++; break;
    default: break;
    }
    if (*end != '\0')
        return false;
    *out = v;
    return true;
}

static bool parse_ms(const char *s, int *out)
{
    uint64_t v;
    if (!parse_u64(s, &v) || v < 1 || v > 3600 * 1000)
        return false;
    *out = (int)v;
    return true;
}

enum { OPT_DIR = 1000, OPT_CLUSTER, OPT_GROUP, OPT_FULL, OPT_RAW, OPT_TIMEOUT,
       OPT_QUIET, OPT_CHUNK };

struct args {
    const char *dir;
    const char *cluster;
    const char *command;
    const char *timeout;    /* --timeout as given: its unit depends on the command */
    struct cli_opts o;
};

/* Seconds, decimals allowed, for wait-healthy's --timeout: into ms. */
static bool parse_seconds(const char *s, int *out_ms)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !(v > 0) || v > MAX_WAIT_S)
        return false;
    *out_ms = (int)(v * 1000.0 + 0.5);
    return *out_ms > 0;
}

/* --timeout: milliseconds per socket wait, or for wait-healthy the
 * seconds of the whole wait. */
static int apply_timeout(struct args *a)
{
    if (a->timeout == NULL)
        return 0;
    bool ok = strcmp(a->command, "wait-healthy") == 0 ? parse_seconds(a->timeout, &a->o.wait_ms)
                                                        : parse_ms(a->timeout, &a->o.timeout_ms);
    if (!ok)
        fprintf(stderr, "cocytus-cli: invalid value '%s' for --timeout\n", a->timeout);
    return ok ? 0 : -1;
}

static int parse_option(int ch, struct args *a)
{
    uint64_t v;
    switch (ch) {
    case OPT_DIR: a->dir = optarg; return 0;
    case OPT_CLUSTER: a->cluster = optarg; return 0;
    case OPT_FULL: a->o.full = true; return 0;
    case OPT_GROUP:
        if (!parse_u64(optarg, &v) || v > 1000000)
            return -1;
        a->o.group = (int)v;
        return 0;
    case OPT_RAW:
        return parse_u64(optarg, &a->o.raw_bytes) && a->o.raw_bytes > 0 ? 0 : -1;
    case OPT_TIMEOUT: a->timeout = optarg; return 0;
    case OPT_QUIET: return parse_ms(optarg, &a->o.quiet_ms) ? 0 : -1;
    case OPT_CHUNK:
        if (!parse_u64(optarg, &a->o.chunk) || a->o.chunk < 16 || a->o.chunk > (256u << 20))
            return -1;
        return 0;
    default:
        return -1;
    }
}

static int parse_args(int argc, char **argv, struct args *a)
{
    static const struct option longopts[] = {
        { "dir", required_argument, NULL, OPT_DIR },
        { "cluster", required_argument, NULL, OPT_CLUSTER },
        { "group", required_argument, NULL, OPT_GROUP },
        { "full", no_argument, NULL, OPT_FULL },
        { "raw-bytes", required_argument, NULL, OPT_RAW },
        { "timeout", required_argument, NULL, OPT_TIMEOUT },
        { "quiet-wait", required_argument, NULL, OPT_QUIET },
        { "chunk", required_argument, NULL, OPT_CHUNK },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    memset(a, 0, sizeof *a);
    a->o.timeout_ms = DEFAULT_TIMEOUT_MS;
    a->o.wait_ms = DEFAULT_WAIT_S * 1000;
    a->o.quiet_ms = DEFAULT_QUIET_MS;
    a->o.group = -1;
    a->o.chunk = DEFAULT_CHUNK;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (ch == 'h') {
            usage(stdout);
            exit(CLI_OK);
        }
        if (ch == '?' || parse_option(ch, a) < 0) {
            if (ch != '?')
                fprintf(stderr, "cocytus-cli: invalid value '%s'\n", optarg);
            return -1;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "cocytus-cli: no command given\n");
        return -1;
    }
    /* Only move and admin take arguments. */
    bool is_move = strcmp(argv[optind], "move") == 0;
    bool is_admin = strcmp(argv[optind], "admin") == 0;
    int nargs = argc - optind - 1;
    if (is_admin ? nargs < 2 : is_move ? (nargs < 2 || nargs > 3) : nargs != 0) {
        fprintf(stderr, "cocytus-cli: %s\n", is_admin ? "usage: admin ADDR WORD..."
                                            : is_move ? "usage: move SLOT GROUP [INDEX]"
                                                      : "one command at a time");
        return -1;
    }
    a->o.args = argv + optind + 1;
    a->o.nargs = nargs;
    if (a->dir != NULL && a->cluster != NULL) {
        fprintf(stderr, "cocytus-cli: give --dir or --cluster, not both\n");
        return -1;
    }
    a->command = argv[optind];
    return apply_timeout(a);
}

/* ---- map ---- */

#define CONFIG_TRAILER_LEN 7    /* "\r\nEND\r\n" after the body */
#define CONFIG_BODY_LIMIT (16u << 20)

/* Read the rest of a `config get cluster` reply whose first line is
 * header and decode it into *m.  0, or -1 with a message in err. */
static int read_map_reply(struct admin_conn *c, const char *header, struct slotmap *m,
                          char *err, size_t errlen)
{
    unsigned long long nbody;
    char tail;
    if (sscanf(header, "CONFIG cluster 0 %llu%c", &nbody, &tail) != 1 ||
        nbody > CONFIG_BODY_LIMIT) {
        snprintf(err, errlen, "answered '%.80s'", header);
        return -1;
    }
    size_t nhead = strlen(header) + 2;
    size_t total = nhead + (size_t)nbody + CONFIG_TRAILER_LEN;
    char *text = malloc(total);
    if (!text) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    snprintf(text, nhead + 1, "%s\r\n", header);
    int rc = -1;
    size_t used;
    if (admin_read_exact(c, text + nhead, total - nhead) < 0)
        snprintf(err, errlen, "%s", c->err);
    else
        rc = slotmap_parse_config_reply(m, text, total, &used, err, errlen) == 0 ? 0 : -1;
    free(text);
    return rc;
}

/* The map process p answers.  0, or -1 with a message in err.  The
 * cluster secret is proved first when we have it: a server started with
 * -Y answers nothing else before its clients authenticate. */
static int fetch_map(const struct proc_info *p, const struct cli_opts *o, struct slotmap *m,
                     char *err, size_t errlen)
{
    struct admin_conn *c = malloc(sizeof *c);
    char header[128];
    int rc = -1;
    if (!c)
        snprintf(err, errlen, "out of memory");
    else if (admin_open(c, p->host, p->port, o->timeout_ms, o->secret, o->tls) < 0 ||
             admin_send_line(c, "config get cluster") < 0 ||
             admin_read_line(c, header, sizeof header) < 0)
        snprintf(err, errlen, "%s", c->err);
    else
        rc = read_map_reply(c, header, m, err, errlen);
    if (c)
        admin_close(c);
    free(c);
    return rc;
}

static bool maps_equal(const struct slotmap *a, const struct slotmap *b)
{
    if (a->epoch != b->epoch || a->nendpoints != b->nendpoints ||
        memcmp(a->slot, b->slot, sizeof(a->slot)) != 0)
        return false;
    for (int i = 0; i < a->nendpoints; i++)
        if (!slotmap_endpoint_same(&a->endpoints[i], &b->endpoints[i]))
            return false;
    return true;
}

/* The process list's entry for an endpoint of the map, or NULL. */
static const struct proc_info *proc_at(const struct proc_list *l, const char *host, int port)
{
    for (int i = 0; i < l->n; i++)
        if (l->v[i].port == port && strcmp(l->v[i].host, host) == 0)
            return &l->v[i];
    return NULL;
}

static void print_map(const struct slotmap *m, const struct proc_list *l, bool ranges)
{
    unsigned count[SLOTMAP_MAX_ENDPOINTS + 1];
    memset(count, 0, sizeof(unsigned) * (size_t)(m->nendpoints + 1));
    for (unsigned s = 0; s < SLOTMAP_SLOTS; s++)
        count[m->slot[s]]++;
    printf("epoch %llu, %d endpoints, %u slots\n", (unsigned long long)m->epoch,
           m->nendpoints, SLOTMAP_SLOTS);
    for (int i = 0; i < m->nendpoints; i++) {
        const struct slotmap_endpoint *e = &m->endpoints[i];
        const struct proc_info *p = proc_at(l, e->host, e->port);
        printf("endpoint %d %s:%d", i, e->host, e->port);
        if (p)
            printf(" %s %d %d node %d", p->role, p->group, p->index, p->node);
        printf(" slots %u (%.1f%%)\n", count[i], 100.0 * count[i] / SLOTMAP_SLOTS);
    }
    if (!ranges)
        return;
    unsigned first = 0;
    for (unsigned s = 1; s <= SLOTMAP_SLOTS; s++) {
        if (s < SLOTMAP_SLOTS && m->slot[s] == m->slot[first])
            continue;
        const struct slotmap_endpoint *e = &m->endpoints[m->slot[first]];
        printf("slots %u-%u %s:%d\n", first, s - 1, e->host, e->port);
        first = s;
    }
}

/* Fetch the map from every process; print the first one answered and which
 * processes answer another map or none. */
static int cmd_map(const struct proc_list *l, const struct cli_opts *o)
{
    struct slotmap *first = calloc(1, sizeof *first), *other = calloc(1, sizeof *other);
    int code = CLI_OK, answered = 0;
    char err[ADMIN_ERR_MAX + 64];
    for (int i = 0; first && other && i < l->n; i++) {
        const struct proc_info *p = &l->v[i];
        struct slotmap *m = answered ? other : first;
        if (fetch_map(p, o, m, err, sizeof err) < 0) {
            printf("%s %d %d %s:%d: no map (%s)\n", p->role, p->group, p->index, p->host,
                   p->port, err);
            if (code == CLI_OK)
                code = CLI_UNREACHABLE;
            continue;
        }
        if (answered++ == 0) {
            printf("map of %s:%d: ", p->host, p->port);
            print_map(first, l, o->full);
        } else if (!maps_equal(first, other)) {
            printf("%s %d %d %s:%d: a different map (epoch %llu)\n", p->role, p->group,
                   p->index, p->host, p->port, (unsigned long long)other->epoch);
            code = CLI_MISMATCH;
        }
        if (m == other)
            slotmap_free(other);
    }
    if (!first || !other) {
        fprintf(stderr, "cocytus-cli: out of memory\n");
        code = CLI_UNREACHABLE;
    } else if (answered > 0) {
        printf("%d of %d processes answer %s\n", answered, l->n,
               code == CLI_MISMATCH ? "a map (they differ)" : "this map");
    }
    if (first)
        slotmap_free(first);
    free(first);
    free(other);
    return answered == 0 ? CLI_UNREACHABLE : code;
}

/* ---- the coordinator: status, move ---- */

/* Without a coordinator: the epoch of the first process that answers
 * `config get cluster`. */
static int print_map_epoch(const struct proc_list *l, const struct cli_opts *o)
{
    struct slotmap *m = calloc(1, sizeof *m);
    char err[ADMIN_ERR_MAX + 64];
    for (int i = 0; m && i < l->n; i++) {
        const struct proc_info *p = &l->v[i];
        if (fetch_map(p, o, m, err, sizeof err) < 0)
            continue;
        printf("epoch %llu (map of %s:%d; no coordinator)\n", (unsigned long long)m->epoch,
               p->host, p->port);
        slotmap_free(m);
        free(m);
        return CLI_OK;
    }
    free(m);
    printf("epoch unknown: no process answers config get cluster\n");
    return CLI_UNREACHABLE;
}

int cli_cluster_status(const struct proc_list *l, const struct cli_opts *o)
{
    if (o->coord_port <= 0)
        return print_map_epoch(l, o);
    return health_print_coordinator(o);
}

static bool all_digits(const char *s)
{
    if (*s == '\0')
        return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

/* One pause between two questions to the coordinator; its length. */
static long poll_pause(void)
{
    struct timespec ts = { .tv_sec = 0, .tv_nsec = MOVE_POLL_MS * 1000000L };
    nanosleep(&ts, NULL);
    return MOVE_POLL_MS;
}

/* Our move's line in `cocytus moves` ("move <slot> <from> <to> <epoch>
 * <state> [why]"), the last one that matches.  0 found, 1 not listed, -1
 * no answer. */
static int find_move(struct admin_conn *c, unsigned long slot, unsigned long long epoch,
                     char *out, size_t cap)
{
    char line[COORD_LINE_MAX];
    int rc = 1;
    if (admin_send_line(c, "cocytus moves") < 0)
        return -1;
    for (;;) {
        if (admin_read_line(c, line, sizeof line) < 0)
            return -1;
        if (strcmp(line, "END") == 0)
            return rc;
        unsigned long s;
        unsigned long long e;
        char from[128], to[128];
        if (sscanf(line, "move %lu %127s %127s %llu", &s, from, to, &e) == 4 && s == slot &&
            e == epoch) {
            snprintf(out, cap, "%s", line);
            rc = 0;
        }
    }
}

/* Wait for the outcome of the move of slot to epoch. */
static int wait_for_move(struct admin_conn *c, unsigned long slot, unsigned long long epoch,
                         const struct cli_opts *o)
{
    char line[COORD_LINE_MAX] = "";
    long waited = 0, limit = (long)o->timeout_ms * MOVE_WAIT_TIMEOUTS;
    for (;;) {
        int rc = find_move(c, slot, epoch, line, sizeof line);
        if (rc < 0) {
            printf("move: lost the coordinator (%s)\n", c->err);
            return CLI_UNREACHABLE;
        }
        if (rc == 0 && !strstr(line, " running")) {
            printf("%s\n", line);
            return strstr(line, " done") ? CLI_OK : CLI_MISMATCH;
        }
        if (waited >= limit) {
            printf("move: still running after %ld ms: %s\n", waited, line);
            return CLI_UNREACHABLE;
        }
        waited += poll_pause();
    }
}

/* Refusals that pass by themselves: another move still running, or a
 * process that has not yet taken the map the last move made (a move right
 * after another one, as a script moving many slots does). */
static bool refusal_passes(const char *line)
{
    return strstr(line, "a move is already running") != NULL ||
           strstr(line, ", not the coordinator's ") != NULL;
}

/* Ask the coordinator for the move until it is not refused for a reason
 * that passes, or the wait's limit; the last answer in line.  0 answered,
 * -1 no answer. */
static int ask_move(struct admin_conn *c, const char *request, const struct cli_opts *o,
                    char *line, size_t cap)
{
    long waited = 0, limit = (long)o->timeout_ms * MOVE_WAIT_TIMEOUTS;
    bool said = false;
    for (;;) {
        if (admin_send_line(c, request) < 0 || admin_read_line(c, line, cap) < 0)
            return -1;
        if (strncmp(line, "OK ", 3) == 0 || !refusal_passes(line) || waited >= limit)
            return 0;
        if (!said) {
            printf("move: waiting: %s\n", line);
            said = true;
        }
        waited += poll_pause();
    }
}

/* move SLOT GROUP [INDEX]: ask the coordinator, then wait for the outcome. */
int cmd_move(const struct proc_list *l, const struct cli_opts *o)
{
    char request[128], line[COORD_LINE_MAX];
    (void)l;
    for (int i = 0; i < o->nargs; i++) {
        if (!all_digits(o->args[i]) || strlen(o->args[i]) > 10) {
            fprintf(stderr, "cocytus-cli: move: '%s' is not a number\n", o->args[i]);
            return CLI_USAGE;
        }
    }
    if (o->coord_port <= 0) {
        fprintf(stderr, "cocytus-cli: move needs the coordinator, and this cluster has none "
                "(no DIR/coordinator file or coordinator line)\n");
        return CLI_USAGE;
    }
    snprintf(request, sizeof request, "cocytus move %s %s%s%s", o->args[0], o->args[1],
             o->nargs == 3 ? " " : "", o->nargs == 3 ? o->args[2] : "");
    struct admin_conn *c = malloc(sizeof *c);
    if (!c)
        return CLI_UNREACHABLE;
    int code;
    unsigned long slot;
    unsigned long long epoch;
    const char *ep;
    if (admin_open(c, o->coord_host, o->coord_port, o->timeout_ms, o->secret, o->tls) < 0 ||
        ask_move(c, request, o, line, sizeof line) < 0) {
        printf("move: coordinator %s:%d not answering (%s)\n", o->coord_host, o->coord_port,
               c->err);
        code = CLI_UNREACHABLE;
    } else if (strncmp(line, "OK moving ", 10) != 0 || sscanf(line + 10, "%lu", &slot) != 1 ||
               (ep = strstr(line, " epoch ")) == NULL || sscanf(ep, " epoch %llu", &epoch) != 1) {
        printf("move refused: %s\n", line);
        code = CLI_MISMATCH;
    } else {
        printf("%s\n", line);
        code = wait_for_move(c, slot, epoch, o);
    }
    admin_close(c);
    free(c);
    return code;
}

typedef int (*command_fn)(const struct proc_list *l, const struct cli_opts *o);

static command_fn find_command(const char *name)
{
    static const struct { const char *name; command_fn fn; } commands[] = {
        { "status", cmd_status },
        { "wait-healthy", cmd_wait_healthy },
        { "mem", cmd_mem },
        { "verify", cmd_verify },
        { "decode-check", cmd_decode_check },
        { "map", cmd_map },
        { "move", cmd_move },
        { "admin", cmd_admin },
    };
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(name, commands[i].name) == 0)
            return commands[i].fn;
    return NULL;
}

int main(int argc, char **argv)
{
    struct args a;
    if (parse_args(argc, argv, &a) < 0) {
        usage(stderr);
        return CLI_USAGE;
    }
    command_fn fn = find_command(a.command);
    if (fn == NULL) {
        fprintf(stderr, "cocytus-cli: unknown command '%s'\n", a.command);
        usage(stderr);
        return CLI_USAGE;
    }
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);

    struct proc_list procs = { 0 };
    char err[512];
    int rc = a.cluster ? procs_from_cluster(a.cluster, &procs, err, sizeof err)
                       : procs_from_endpoints(a.dir ? a.dir : DEFAULT_DIR, &procs, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "cocytus-cli: %s\n", err);
        procs_free(&procs);
        return CLI_USAGE;
    }
    rc = procs_load_secret(&procs, a.dir ? a.dir : DEFAULT_DIR, a.cluster, err, sizeof err);
    if (rc == -2) {
        fprintf(stderr, "cocytus-cli: %s\n", err);
        procs_free(&procs);
        return CLI_USAGE;
    }
    if (rc < 0)
        fprintf(stderr, "cocytus-cli: no cluster secret (%s); control commands will be refused\n",
                err);
    a.o.secret = procs.secret;
    a.o.tls = procs.tls;
    rc = procs_coordinator(a.dir ? a.dir : DEFAULT_DIR, a.cluster, a.o.coord_host,
                           sizeof a.o.coord_host, &a.o.coord_port, err, sizeof err);
    if (rc < 0)
        fprintf(stderr, "cocytus-cli: %s; going on without the coordinator\n", err);
    if (rc <= 0)
        a.o.coord_port = 0;
    int code = fn(&procs, &a.o);
    procs_free(&procs);
    return code;
}
