/* dirsync.c - a file's directory, and its fsync (dirsync.h says why). */
#include "dirsync.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

int dirsync_parent(const char *path, char *out, size_t outlen)
{
    const char *slash = strrchr(path, '/');
    const char *dir = ".";
    size_t n = 1;
    if (slash == path) {
        dir = "/";
    } else if (slash != NULL) {
        dir = path;
        n = (size_t)(slash - path);
    }
    if (n >= outlen) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(out, dir, n);
    out[n] = '\0';
    return 0;
}

int dirsync_parent_sync(const char *path)
{
    char dir[PATH_MAX];
    if (dirsync_parent(path, dir, sizeof(dir)) < 0)
        return -1;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}
