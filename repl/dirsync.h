/* dirsync.h - the directory a file lives in, and making a rename in it
 * durable.  A file written to PATH.tmp, fsynced and renamed over PATH is
 * whole after a crash only if the directory entry the rename changed has
 * reached the disk too: that takes an fsync of the directory itself.  The
 * coordinator's saved slot map and the -e restart file's meta both commit
 * that way, and the server checks at start that it can write beside its -e
 * file; all three need PATH's directory, worked out one way here. */
#ifndef REPL_DIRSYNC_H
#define REPL_DIRSYNC_H

#include <stddef.h>

/* The directory part of path into out: "." when path has no slash, "/" for
 * a file in the root.  -1 (errno ENAMETOOLONG) when it does not fit. */
int dirsync_parent(const char *path, char *out, size_t outlen);

/* fsync the directory holding path.  -1 with errno on failure. */
int dirsync_parent_sync(const char *path);

#endif
