/* unixsock.c - the client listener of -s: a Unix socket at a path.
 *
 * memcached's -s PATH serves the clients of one host over a Unix socket
 * instead of TCP ("disables network support"), with -a the socket file's
 * permissions in octal (0700 by default).  A client on the same host then
 * skips TCP's input path, the larger part of what a message costs on
 * loopback (docs/evaluation/cpu-per-op.md, "Links on one host").
 *
 * Who owns the path.  memcached removes any socket file at the path
 * before binding, so a second server started on it takes the first one's
 * clients without either saying so.  Here a server holds an exclusive
 * flock on PATH.lock for its whole life (the kernel drops it when the
 * process dies, however it dies), so while it is held no other
 * cocytus-server touches the path, and a socket file found by the holder
 * was left by a dead one.  A file some other program still accepts on is
 * not removed either; a path that is not a socket never is.  At a clean
 * stop the server removes the socket file if it is still the one it made.
 *
 * With -u, as memcached, the files are made as that user (not made by
 * root and handed over: root following a path an ordinary user can
 * change would give them whatever a symbolic link put there). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "localtwin.h"
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

/* Does some program accept on the socket file at sun?  0: no (refused:
 * a dead server's file), 1: yes, -1: cannot tell (errno). */
static int someone_listens(const struct sockaddr_un *sun)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int rc = connect(fd, (const struct sockaddr *)sun, sizeof(*sun));
    int e = errno;
    close(fd);
    if (rc == 0 || e == EAGAIN)     /* EAGAIN: a full backlog, a live server */
        return 1;
    if (e == ECONNREFUSED || e == ENOENT)
        return 0;
    errno = e;
    return -1;
}

/* Takes PATH.lock; fails if another server holds it. */
static int take_lock(const char *path, char *err, size_t errlen)
{
    char lock[sizeof(((struct sockaddr_un *)0)->sun_path) + 8];
    snprintf(lock, sizeof(lock), "%s.lock", path);
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open %s: %s", lock, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno;
        close(fd);
        if (e == EWOULDBLOCK)
            snprintf(err, errlen, "%s: another server is listening on it (it holds %s)", path,
                     lock);
        else
            snprintf(err, errlen, "cannot lock %s: %s", lock, strerror(e));
        return -1;
    }
    return fd;
}

/* Removes what a dead server left at the path (the lock is held). */
static int clear_stale(const struct sockaddr_un *sun, char *err, size_t errlen)
{
    struct stat st;
    if (lstat(sun->sun_path, &st) < 0) {
        if (errno == ENOENT)
            return 0;
        snprintf(err, errlen, "%s: %s", sun->sun_path, strerror(errno));
        return -1;
    }
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(err, errlen, "%s exists and is not a socket", sun->sun_path);
        return -1;
    }
    int live = someone_listens(sun);
    if (live != 0) {
        if (live > 0)
            snprintf(err, errlen, "%s: another program is listening on it", sun->sun_path);
        else
            snprintf(err, errlen, "%s: cannot tell whether anything listens on it: %s",
                     sun->sun_path, strerror(errno));
        return -1;
    }
    if (unlink(sun->sun_path) < 0 && errno != ENOENT) {
        snprintf(err, errlen, "cannot remove the stale socket %s: %s", sun->sun_path,
                 strerror(errno));
        return -1;
    }
    return 0;
}

/* The lock, the stale file and the bind, as whoever runs this. */
static int listen_as_me(struct unixsock *u, const char *path, int mask, int backlog,
                        char *err, size_t errlen)
{
    struct sockaddr_un sun;
    if (fill_addr(&sun, path, err, errlen) < 0)
        return -1;
    u->lock_fd = take_lock(path, err, errlen);
    if (u->lock_fd < 0)
        return -1;
    if (clear_stale(&sun, err, errlen) < 0)
        return -1;
    u->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (u->fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    /* The file is created by bind(): the umask gives it -a's permissions
     * from the start, with no moment at which others could connect. */
    mode_t old = umask((mode_t)(~mask & 0777));
    int rc = bind(u->fd, (struct sockaddr *)&sun, sizeof(sun));
    int e = errno;
    umask(old);
    struct stat st;
    if (rc < 0 || listen(u->fd, backlog) < 0 || lstat(path, &st) < 0) {
        if (rc == 0)
            e = errno;
        snprintf(err, errlen, "cannot listen on %s: %s", path, strerror(e));
        return -1;
    }
    u->dev = st.st_dev;
    u->ino = st.st_ino;
    return 0;
}

int unixsock_listen(struct unixsock *u, const char *path, int mask, int backlog,
                    const char *user, char *err, size_t errlen)
{
    u->fd = u->lock_fd = -1;
    uid_t euid = geteuid();
    gid_t egid = getegid();
    struct passwd *pw = NULL;
    if (user && euid == 0) {
        pw = getpwnam(user);
        if (!pw) {
            snprintf(err, errlen, "can't find the user %s to switch to", user);
            return -1;
        }
        if (setegid(pw->pw_gid) < 0 || seteuid(pw->pw_uid) < 0) {
            snprintf(err, errlen, "cannot act as user %s: %s", user, strerror(errno));
            setegid(egid);
            return -1;
        }
    }
    int rc = listen_as_me(u, path, mask, backlog, err, errlen);
    if (pw && (seteuid(euid) < 0 || setegid(egid) < 0)) {
        snprintf(err, errlen, "cannot return from user %s: %s", user, strerror(errno));
        rc = -1;
    }
    if (rc < 0)
        unixsock_close(u, NULL, NULL, 0);
    return rc;
}

int unixsock_close(struct unixsock *u, const char *path, char *err, size_t errlen)
{
    int rc = 0;
    struct stat st;
    /* Removed before the listener closes, and only if it is still the
     * file this server made (someone may have moved another into place). */
    if (path && u->fd >= 0 && lstat(path, &st) == 0 && st.st_dev == u->dev &&
        st.st_ino == u->ino && unlink(path) < 0) {
        snprintf(err, errlen, "cannot remove %s: %s", path, strerror(errno));
        rc = -1;
    }
    if (u->fd >= 0)
        close(u->fd);
    if (u->lock_fd >= 0)
        close(u->lock_fd);
    u->fd = u->lock_fd = -1;
    return rc;
}

bool unixsock_parse_mask(const char *s, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 8);
    if (errno || end == s || *end != '\0' || v < 0 || v > 0777)
        return false;
    *out = (int)v;
    return true;
}

const char *unixsock_peer(int fd, char *buf, size_t cap)
{
    struct ucred cred;
    if (localtwin_peer_cred(fd, &cred))
        snprintf(buf, cap, "unix pid %ld uid %ld", (long)cred.pid, (long)cred.uid);
    else
        snprintf(buf, cap, "unix");
    return buf;
}
