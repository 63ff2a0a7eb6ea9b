/* netaddr.h - the port a socket is bound to.  Asked for port 0, the kernel
 * chooses one; whoever listens must then find out which, to print it and
 * to tell its peers (the server's and the proxy's -l lists, the links'
 * listener).  One getsockname, for IPv4 and IPv6 alike. */
#ifndef REPL_NETADDR_H
#define REPL_NETADDR_H

/* The local port of fd, or -1 (not bound, or not an IP socket). */
int netaddr_local_port(int fd);

#endif
