/* fs_util.h: small file-system helpers shared by the event writer and the trace writer. */
#pragma once

/* Creates path and its missing parents (mode 0755), like `mkdir -p`. Returns 0 or -1 with errno set. */
int fs_util_mkdir_p(const char *path);
/* fsyncs the directory holding path, so that a rename or a new file in it survives a power cut. */
int fs_util_fsync_parent(const char *path);
