/* fsutil.h: file helpers that never leave a half-written file behind. */
#pragma once
#include <stddef.h>

/* Reads a whole file of at most max_bytes; returns a NUL-terminated malloc'd buffer, or NULL with errno set:
 * EFBIG when the file holds more than max_bytes (a config pointed at /dev/zero must not read forever), EISDIR for
 * a directory. */
char *fs_read_file(const char *path, size_t max_bytes, size_t *len);
/* Whether path (links followed) is a regular file an input may be read from: 1, or 0 and why ("no such file", "a
 * FIFO (named pipe), not a regular file", ...; for `want_dir`, a directory is accepted too and is_dir says which).
 * A FIFO, socket or device would block a reader forever or feed it endless bytes: inputs are refused before they
 * are opened. */
int fs_input_kind(const char *path, int want_dir, int *is_dir, char *why, size_t why_len);
/* Writes a temporary file beside path (path.<6 random letters>.tmp, created exclusively: never a file that was
 * there), fsyncs it, renames it over path and fsyncs the directory: a crash leaves the old or the new file, never a
 * torn one. On failure the temporary is removed and the run ends with one line saying why and what to do (disk full,
 * permissions, a directory in the way) and exit code VX_EXIT_STORAGE. For the files a command owns (its run's, in a
 * directory it locked); a path the user named goes through core/outguard.h. A file of more than 4 MiB is written
 * and synced in 4 MiB pieces with a progress line (core/progress.h). */
void fs_write_atomic(const char *path, const void *data, size_t len);
/* The same, but never over an existing entry at path: 0, or EEXIST with nothing written (the temporary removed). */
int fs_write_new(const char *path, const void *data, size_t len);
/* The one message for an output file that cannot be written (errno says why), exit VX_EXIT_STORAGE. */
__attribute__((noreturn)) void fs_write_failed(const char *what, const char *path, int err);
/* Creates path and its missing parents (mode 0755), like `mkdir -p`. Returns 0 or -1 with errno set
 * (ENOTDIR when something that is not a directory is in the way). */
int fs_mkdir_p(const char *path);
/* mkdir -p that ends the run through fs_write_failed (exit VX_EXIT_STORAGE) on failure. */
void fs_mkdirs(const char *path);
/* fsyncs the directory holding path, so that a rename or a new file in it survives a power cut. */
int fs_fsync_parent(const char *path);
