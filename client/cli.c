/* cli.c - cocytus-cli, the admin tool of a Cocytus-KV cluster: option
 * parsing, loading the process list, and dispatch to the commands
 * (status, mem, verify, decode-check).  See docs/cli.md. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "procs.h"

#define DEFAULT_DIR "./run/cluster"
#define DEFAULT_TIMEOUT_MS 5000
#define DEFAULT_QUIET_MS 2000
#define DEFAULT_CHUNK (1u << 20)

static void usage(FILE *out)
{
    fprintf(out,
        "usage: cocytus-cli [--dir DIR | --cluster FILE] [options] <command>\n"
        "commands:\n"
        "  status         does every process answer; its xids and items\n"
        "  mem            region, metadata and RSS bytes per process, totals per role\n"
        "  verify         backup metadata and parity of every coding group are right\n"
        "  decode-check   every K of N regions decode to the others (offline recovery)\n"
        "options:\n"
        "  --dir DIR        cluster directory with the endpoints file (default " DEFAULT_DIR ")\n"
        "  --cluster FILE   take the processes from a cluster file instead\n"
        "  --group G        only coding group G\n"
        "  --full           verify/decode-check whole regions, not only used ranges\n"
        "  --raw-bytes N    mem: also print total RSS / N\n"
        "  --timeout MS     bound for each socket wait (default %d)\n"
        "  --quiet-wait MS  how long to wait for a quiescent group (default %d)\n"
        "  --chunk BYTES    bytes per region request (default %u)\n"
        "exit: 0 OK, 1 a check found a difference, 2 usage or configuration error,\n"
        "      3 a process did not answer or the group never became quiescent\n",
        DEFAULT_TIMEOUT_MS, DEFAULT_QUIET_MS, DEFAULT_CHUNK);
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
    struct cli_opts o;
};

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
    case OPT_TIMEOUT: return parse_ms(optarg, &a->o.timeout_ms) ? 0 : -1;
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
    if (optind != argc - 1) {
        fprintf(stderr, "cocytus-cli: %s\n", optind >= argc ? "no command given"
                                                             : "one command at a time");
        return -1;
    }
    if (a->dir != NULL && a->cluster != NULL) {
        fprintf(stderr, "cocytus-cli: give --dir or --cluster, not both\n");
        return -1;
    }
    a->command = argv[optind];
    return 0;
}

typedef int (*command_fn)(const struct proc_list *l, const struct cli_opts *o);

static command_fn find_command(const char *name)
{
    static const struct { const char *name; command_fn fn; } commands[] = {
        { "status", cmd_status },
        { "mem", cmd_mem },
        { "verify", cmd_verify },
        { "decode-check", cmd_decode_check },
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
    int code = fn(&procs, &a.o);
    procs_free(&procs);
    return code;
}
