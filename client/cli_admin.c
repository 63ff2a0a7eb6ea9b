/* cli_admin.c - `cocytus-cli admin ADDR WORD...`: one control command sent
 * to one process, on a connection that first proves the cluster secret.
 *
 * Scripts and tests use it instead of piping "cocytus ..." into nc, which
 * the servers refuse.  The reply can be one line or many (STAT lists,
 * "... END"), so a "version" request follows the command and everything
 * before its VERSION line is the command's reply (one connection answers
 * in request order).  With the single word "-" the lines of stdin are sent
 * as they are (several commands, or "cocytus import begin" and the sets
 * that follow it on one connection). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin.h"
#include "cli.h"

#define ADMIN_CMD_MAX 1024
#define ADMIN_REPLY_LINE_MAX 4096

/* "host:port" (IPv6 as [host]:port) or "coordinator". */
static int parse_target(const char *s, const struct cli_opts *o, char *host, size_t cap, int *port)
{
    if (strcmp(s, "coordinator") == 0) {
        if (o->coord_port <= 0)
            return -1;
        snprintf(host, cap, "%s", o->coord_host);
        *port = o->coord_port;
        return 0;
    }
    const char *colon = strrchr(s, ':');
    if (colon == NULL || colon == s)
        return -1;
    size_t n = (size_t)(colon - s);
    if (s[0] == '[' && n >= 2 && s[n - 1] == ']') {
        s++;
        n -= 2;
    }
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end != '\0' || p <= 0 || p > 65535 || n >= cap)
        return -1;
    memcpy(host, s, n);
    host[n] = '\0';
    *port = (int)p;
    return 0;
}

/* "cocytus" and the words (a leading "cocytus" among them is dropped). */
static int build_command(char *const *words, int n, char *out, size_t cap)
{
    size_t len = (size_t)snprintf(out, cap, "cocytus");
    for (int i = 0; i < n; i++) {
        if (i == 0 && strcmp(words[0], "cocytus") == 0)
            continue;
        int w = snprintf(out + len, cap - len, " %s", words[i]);
        if (w < 0 || (size_t)w >= cap - len)
            return -1;
        len += (size_t)w;
    }
    return strcmp(out, "cocytus") == 0 ? -1 : 0;
}

/* Every line of stdin, CRLF-terminated, on the connection.  0 or -1. */
static int send_stdin(struct admin_conn *c)
{
    char line[ADMIN_REPLY_LINE_MAX];
    while (fgets(line, sizeof line, stdin) != NULL) {
        line[strcspn(line, "\r\n")] = '\0';
        if (admin_send_line(c, line) < 0)
            return -1;
    }
    return 0;
}

/* The command, or stdin's lines for "-".  0 or -1. */
static int send_request(struct admin_conn *c, const struct cli_opts *o, const char *cmd)
{
    if (o->nargs == 2 && strcmp(o->args[1], "-") == 0)
        return send_stdin(c);
    return admin_send_line(c, cmd);
}

static bool is_error_line(const char *line)
{
    return strcmp(line, "ERROR") == 0 || strncmp(line, "CLIENT_ERROR", 12) == 0 ||
           strncmp(line, "SERVER_ERROR", 12) == 0;
}

int cmd_admin(const struct proc_list *l, const struct cli_opts *o)
{
    (void)l;
    char host[PROC_HOST_MAX], cmd[ADMIN_CMD_MAX], line[ADMIN_REPLY_LINE_MAX];
    int port;
    if (parse_target(o->args[0], o, host, sizeof host, &port) < 0) {
        fprintf(stderr, "cocytus-cli: admin: '%s' is not <host>:<port> or a known coordinator\n",
                o->args[0]);
        return CLI_USAGE;
    }
    if (build_command(o->args + 1, o->nargs - 1, cmd, sizeof cmd) < 0) {
        fprintf(stderr, "cocytus-cli: admin: no command words, or too long\n");
        return CLI_USAGE;
    }
    if (o->secret == NULL || o->secret[0] == '\0') {
        fprintf(stderr, "cocytus-cli: admin: no cluster secret to authenticate with\n");
        return CLI_USAGE;
    }
    struct admin_conn *c = malloc(sizeof *c);
    if (c == NULL)
        return CLI_UNREACHABLE;
    int code = CLI_OK;
    bool first = true;
    if (admin_open(c, host, port, o->timeout_ms, o->secret, o->tls) < 0 || send_request(c, o, cmd) < 0 ||
        admin_send_line(c, "version") < 0) {
        fprintf(stderr, "cocytus-cli: admin: %s\n", c->err);
        code = CLI_UNREACHABLE;
    }
    while (code != CLI_UNREACHABLE) {
        if (admin_read_line(c, line, sizeof line) < 0) {
            fprintf(stderr, "cocytus-cli: admin: %s\n", c->err);
            code = CLI_UNREACHABLE;
            break;
        }
        if (strncmp(line, "VERSION ", 8) == 0)
            break;
        if (first && is_error_line(line))
            code = CLI_MISMATCH;
        first = false;
        printf("%s\n", line);
    }
    admin_close(c);
    free(c);
    return code;
}
