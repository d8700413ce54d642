/* fsutil.h: file helpers that never leave a half-written file behind. */
#pragma once
#include <stddef.h>

/* Reads a whole file; returns a NUL-terminated malloc'd buffer, or NULL with errno set. */
char *fs_read_file(const char *path, size_t *len);
/* Writes path.tmp, fsyncs it, renames it over path and fsyncs the directory: a crash leaves the old or the new
 * file, never a torn one. Dies with a hint on failure (disk full, permissions). */
void fs_write_atomic(const char *path, const void *data, size_t len);
/* Creates path and its missing parents (mode 0755), like `mkdir -p`. Returns 0 or -1 with errno set
 * (ENOTDIR when something that is not a directory is in the way). */
int fs_mkdir_p(const char *path);
/* mkdir -p that exits 2 with a hint on failure (for user-given paths). */
void fs_mkdirs(const char *path);
/* fsyncs the directory holding path, so that a rename or a new file in it survives a power cut. */
int fs_fsync_parent(const char *path);
