/* printable.h - bytes that came from a peer, made fit for a log line.
 * Anyone who can reach a port chooses some of the text our logs quote (a
 * cluster name in a HELLO, a refused command, a key, a control message):
 * quoted as it came, a newline in it would forge a log line of its own and
 * an escape sequence would reach the terminal of whoever reads the log.
 * Everything outside printable ASCII is shown as '?'. */
#ifndef REPL_PRINTABLE_H
#define REPL_PRINTABLE_H

#include <stddef.h>

/* Copies at most outlen - 1 of the len bytes at p to out, each byte outside
 * 0x20..0x7e as '?', and terminates it; returns out.  outlen >= 1. */
char *printable_copy(char *out, size_t outlen, const void *p, size_t len);

#endif
