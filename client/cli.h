/* cli.h - what cocytus-cli's commands share: options, exit codes and the
 * command entry points (check.c: verify, decode-check; mem.c: mem, status;
 * cli.c: map, move; health.c: the cluster half of status, wait-healthy). */
#ifndef CLIENT_CLI_H
#define CLIENT_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "procs.h"

/* Exit codes (docs/cli.md). */
enum cli_exit {
    CLI_OK = 0,          /* every check passed */
    CLI_MISMATCH = 1,    /* a check found a difference */
    CLI_USAGE = 2,       /* bad command line, unreadable endpoints or cluster file */
    CLI_UNREACHABLE = 3  /* a process did not answer, answered nonsense, or never became quiescent */
};

struct cli_opts {
    bool full;              /* verify/decode-check: the whole region, not only used ranges */
    uint64_t raw_bytes;     /* mem: raw value bytes for the ratio line (0: none) */
    int timeout_ms;         /* bound for each socket wait */
    int wait_ms;            /* wait-healthy: how long to wait in all */
    int quiet_ms;           /* how long to wait for a quiescent group */
    int group;              /* only this group (-1: all) */
    uint64_t chunk;         /* bytes fetched per region request */
    char coord_host[PROC_HOST_MAX]; /* the coordinator, when coord_port > 0 */
    int coord_port;
    const char *secret;     /* the cluster secret, proved before control commands */
    struct tls_dialer *tls; /* client_tls: the processes' client ports speak TLS */
    char *const *args;      /* words after the command (move) */
    int nargs;
};

int cmd_verify(const struct proc_list *l, const struct cli_opts *o);
int cmd_decode_check(const struct proc_list *l, const struct cli_opts *o);
int cmd_mem(const struct proc_list *l, const struct cli_opts *o);
int cmd_status(const struct proc_list *l, const struct cli_opts *o);
int cmd_move(const struct proc_list *l, const struct cli_opts *o);
/* admin ADDR WORD... (cli_admin.c): one authenticated control command;
 * prints the reply; CLI_OK, CLI_MISMATCH when the reply is an error,
 * CLI_UNREACHABLE when the process does not answer or refuses the proof. */
int cmd_admin(const struct proc_list *l, const struct cli_opts *o);
/* wait-healthy (health.c): polls the coordinator until every coding group
 * is healthy at full redundancy and every process is alive and answers;
 * CLI_OK, or CLI_MISMATCH at the deadline (o->wait_ms) with what is still
 * missing printed. */
int cmd_wait_healthy(const struct proc_list *l, const struct cli_opts *o);

/* status, cluster part (cli.c): the epoch, and with a coordinator each
 * process's liveness as the coordinator sees it and each coding group's
 * health (`cocytus groups`).  Returns CLI_OK; CLI_MISMATCH when every
 * process is alive but a group is short of full redundancy (degraded,
 * recovering, taking over, lost) or a process is joining; CLI_UNREACHABLE
 * when the coordinator does not answer or a process is dead or unknown. */
int cli_cluster_status(const struct proc_list *l, const struct cli_opts *o);
/* The coordinator's part of that (health.c), same return values. */
int health_print_coordinator(const struct cli_opts *o);

#endif
