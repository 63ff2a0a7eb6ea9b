/* unixsock.h - the client listener of -s: a Unix socket at a path
 * (memcached's -s and -a; unixsock.c). */
#ifndef UNIXSOCK_H
#define UNIXSOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct unixsock {
    int fd;                 /* the listener */
    int lock_fd;            /* PATH.lock, flocked for the process's life */
    dev_t dev;              /* the socket file made, to remove only it */
    ino_t ino;
};

/* Listens, non-blocking, on a Unix socket at path, its file's permissions
 * mask (octal, as -a), made as user if given and running as root (as
 * memcached, which makes it after taking -u's identity).  0, or -1 with
 * err saying why: another server holds the path, some program listens on
 * it, or it is not a socket.  A socket file nobody listens on is replaced. */
int unixsock_listen(struct unixsock *u, const char *path, int mask, int backlog,
                    const char *user, char *err, size_t errlen);

/* Closes the listener and the lock; with path, first removes the socket
 * file if it is still the one made (-1 and err if that failed). */
int unixsock_close(struct unixsock *u, const char *path, char *err, size_t errlen);

/* -a / --unix-mask: permissions in octal, 0 to 0777 ("770", "0660"). */
bool unixsock_parse_mask(const char *s, int *out);

/* "unix pid N uid U" for the process at the other end of fd (for logs). */
const char *unixsock_peer(int fd, char *buf, size_t cap);

#endif
