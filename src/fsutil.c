/* fsutil.c: whole-file reads, atomic writes, mkdir -p and directory fsync (see fsutil.h). */
#include "fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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
    (void)fs_fsync_parent(path);
    free(tmp);
}

int fs_mkdir_p(const char *path) {
    char buf[PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) {
        errno = n ? ENAMETOOLONG : ENOENT;
        return -1;
    }
    memcpy(buf, path, n + 1);
    /* Create each prefix in turn; EEXIST is fine as long as what exists is a directory (checked at the end). */
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
    struct stat st;
    if (stat(buf, &st) != 0) return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

int fs_fsync_parent(const char *path) {
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : 0;
    if (n >= sizeof dir) {
        errno = ENAMETOOLONG;
        return -1;
    }
    if (slash == path) n = 1; /* a file directly under / */
    if (n) memcpy(dir, path, n);
    else dir[n++] = '.';
    dir[n] = '\0';
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

void fs_mkdirs(const char *path) {
    if (fs_mkdir_p(path) != 0) vx_usage_error("cannot create directory %s (%s); choose another --out", path, strerror(errno));
}
