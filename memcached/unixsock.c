/* unixsock.c - the client listener of -s: a Unix socket at a path.
 *
 * memcached's -s PATH serves the clients of one host over a Unix socket
 * instead of TCP ("disables network support"), with -a the socket file's
 * permissions in octal (0700 by default).  A client on the same host then
 * skips TCP's input path, the larger part of what a message costs on
 * loopback (docs/evaluation/cpu-per-op.md, "Links on one host").
 *
 * A socket file left by a server that died is removed before binding, as
 * memcached does; unlike memcached, a file with a live server behind it is
 * not (a second server started on the same path would take the first
 * one's clients from it without either saying so): we try to connect
 * first, and only a refused connection marks the file stale.  A path that
 * is not a socket is never removed. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "unixsock.h"

static int fill_addr(struct sockaddr_un *sun, const char *path, char *err, size_t errlen)
{
    memset(sun, 0, sizeof(*sun));
    sun->sun_family = AF_UNIX;
    if (path[0] == '\0' || strlen(path) >= sizeof(sun->sun_path)) {
        snprintf(err, errlen, "the Unix socket path must be 1 to %zu bytes",
                 sizeof(sun->sun_path) - 1);
        return -1;
    }
    memcpy(sun->sun_path, path, strlen(path));
    return 0;
}

/* Is a server accepting on the socket file at sun?  Only a refused
 * connection says no: a full backlog (EAGAIN) is a live server. */
static bool someone_listens(const struct sockaddr_un *sun)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    int rc = connect(fd, (const struct sockaddr *)sun, sizeof(*sun));
    int e = errno;
    close(fd);
    return rc == 0 || (e != ECONNREFUSED && e != ENOENT);
}

/* Removes what a dead server left at path; fails if the path is taken. */
static int clear_stale(const struct sockaddr_un *sun, char *err, size_t errlen)
{
    struct stat st;
    if (lstat(sun->sun_path, &st) < 0)
        return errno == ENOENT ? 0 : (snprintf(err, errlen, "%s: %s", sun->sun_path,
                                               strerror(errno)), -1);
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(err, errlen, "%s exists and is not a socket", sun->sun_path);
        return -1;
    }
    if (someone_listens(sun)) {
        snprintf(err, errlen, "%s: another server is listening on it", sun->sun_path);
        return -1;
    }
    if (unlink(sun->sun_path) < 0 && errno != ENOENT) {
        snprintf(err, errlen, "cannot remove the stale socket %s: %s", sun->sun_path,
                 strerror(errno));
        return -1;
    }
    return 0;
}

int unixsock_listen(const char *path, int mask, int backlog, char *err, size_t errlen)
{
    struct sockaddr_un sun;
    if (fill_addr(&sun, path, err, errlen) < 0 || clear_stale(&sun, err, errlen) < 0)
        return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    /* The file is created by bind(): the umask gives it -a's permissions
     * from the start, with no moment at which others could connect. */
    mode_t old = umask((mode_t)(~mask & 0777));
    int rc = bind(fd, (struct sockaddr *)&sun, sizeof(sun));
    int e = errno;
    umask(old);
    if (rc < 0 || listen(fd, backlog) < 0) {
        if (rc == 0)
            e = errno;
        snprintf(err, errlen, "cannot listen on %s: %s", path, strerror(e));
        close(fd);
        return -1;
    }
    return fd;
}

bool unixsock_is(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    return getsockname(fd, (struct sockaddr *)&ss, &len) == 0 && ss.ss_family == AF_UNIX;
}

const char *unixsock_peer(int fd, char *buf, size_t cap)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
        snprintf(buf, cap, "unix pid %ld uid %ld", (long)cred.pid, (long)cred.uid);
    else
        snprintf(buf, cap, "unix");
    return buf;
}
