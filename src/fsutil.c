/* fsutil.c: whole-file reads, atomic writes and mkdir -p (see fsutil.h). */
#include "fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

char *fs_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = vx_malloc(cap);
    for (;;) {
        if (n + 1 >= cap) buf = realloc(buf, cap *= 2);
        if (!buf) vx_fatal("out of memory reading %s", path);
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        errno = EIO;
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

void fs_write_atomic(const char *path, const void *data, size_t len) {
    size_t plen = strlen(path) + 8;
    char *tmp = vx_malloc(plen);
    snprintf(tmp, plen, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) vx_fatal("cannot create %s; check that the run directory is writable", tmp);
    const char *p = data;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) vx_fatal("cannot write %s; is the disk full?", tmp);
        p += w;
        len -= (size_t)w;
    }
    if (fsync(fd) != 0) vx_fatal("cannot fsync %s", tmp);
    if (close(fd) != 0) vx_fatal("cannot close %s", tmp);
    if (rename(tmp, path) != 0) vx_fatal("cannot rename %s to %s", tmp, path);
    /* The rename itself is durable only once the directory entry is on disk. */
    char *dir_copy = strdup(path);
    int dfd = open(dirname(dir_copy), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    free(dir_copy);
    free(tmp);
}

void fs_mkdirs(const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) vx_usage_error("path too long: %s", path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == 0) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                vx_usage_error("cannot create directory %s (%s); choose another --out", buf, strerror(errno));
            *p = c;
            if (c == 0) break;
        }
    }
}
