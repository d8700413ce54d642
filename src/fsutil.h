/* fsutil.h: file helpers that never leave a half-written file behind. */
#pragma once
#include <stddef.h>

/* Reads a whole file; returns a NUL-terminated malloc'd buffer, or NULL with errno set. */
char *fs_read_file(const char *path, size_t *len);
/* Writes path.tmp, fsyncs it, renames it over path and fsyncs the directory: a crash leaves the old or the new
 * file, never a torn one. Dies with a hint on failure (disk full, permissions). */
void fs_write_atomic(const char *path, const void *data, size_t len);
/* mkdir -p; dies with a hint on failure. */
void fs_mkdirs(const char *path);
