/* localtwin.h - a loopback address's twin: an abstract Unix socket that a
 * link listener binds beside its TCP port, and that a link to a process on
 * the same host dials instead (localtwin.c says why and how it stays safe). */
#ifndef COCYTUS_LOCALTWIN_H
#define COCYTUS_LOCALTWIN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>

/* Set to a non-empty value other than "0", links use TCP only (neither
 * twins bound nor dialled): for measuring one against the other. */
#define LOCALTWIN_ENV_TCP_ONLY "COCYTUS_LINK_TCP_ONLY"

/* Whether twins are used by this process (the environment above). */
bool localtwin_enabled(void);

/* The twin a listener bound to sa (its port: port) binds beside it: for
 * 127.0.0.0/8 "@cocytus-link/A.B.C.D:P", for 0.0.0.0 "@cocytus-link/ *:P"
 * (without the space).  False for any other address: no twin. */
bool localtwin_listen_name(const struct sockaddr *sa, int port, struct sockaddr_un *un,
                           socklen_t *len);

/* A connected, non-blocking Unix socket to the twin of sa:port (an address
 * in 127.0.0.0/8), the specific name first, then the wildcard's, or -1
 * when there is none to use: sa is not a loopback address, no twin
 * listens, its listener runs under another user, or a call failed.  Then
 * the caller dials TCP, which is always right, only dearer. */
int localtwin_connect(const struct sockaddr *sa, int port);

/* "local pid N" for an accepted twin connection (its peer has no address). */
void localtwin_peer_name(int fd, char *out, size_t outlen);

/* Who is at the other end of a Unix socket (for a connector, the process
 * that listened, as it was at listen()); false if the kernel does not say. */
struct ucred;
bool localtwin_peer_cred(int fd, struct ucred *cred);
/* The other end of a Unix socket runs under our own user. */
bool localtwin_peer_is_me(int fd);

#endif
