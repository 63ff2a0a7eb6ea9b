/* unixsock.h - the client listener of -s: a Unix socket at a path
 * (memcached's -s and -a; unixsock.c). */
#ifndef UNIXSOCK_H
#define UNIXSOCK_H

#include <stdbool.h>
#include <stddef.h>

/* A listening, non-blocking Unix socket at path, its file's permissions
 * mask (octal, as -a), or -1 with err saying why.  A socket file no server
 * listens on is replaced; a live one, or a path that is not a socket, is
 * an error. */
int unixsock_listen(const char *path, int mask, int backlog, char *err, size_t errlen);

/* Is fd a Unix socket? */
bool unixsock_is(int fd);

/* "unix pid N uid U" for the process at the other end of fd (for logs). */
const char *unixsock_peer(int fd, char *buf, size_t cap);

#endif
