/* fsutil.c: whole-file reads, atomic writes (replacing, or never over an existing file), mkdir -p and directory
 * fsync (see fsutil.h). */
#include "core/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/progress.h"
#include "core/util.h"

char *fs_read_file(const char *path, size_t max_bytes, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        errno = EISDIR;
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = vx_malloc(cap);
    for (;;) {
        if (n + 1 >= cap) {
            cap *= 2;
            buf = vx_realloc(buf, cap);
        }
        /* never more than max_bytes + 1: one byte beyond the limit proves the file is too large */
        size_t want = cap - n - 1, room = max_bytes + 1 - n;
        size_t got = fread(buf + n, 1, want < room ? want : room, f);
        n += got;
        if (n > max_bytes) {
            fclose(f);
            free(buf);
            errno = EFBIG;
            return NULL;
        }
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

int fs_input_kind(const char *path, int want_dir, int *is_dir, char *why, size_t why_len) {
    struct stat st;
    if (is_dir) *is_dir = 0;
    if (stat(path, &st) != 0) {
        snprintf(why, why_len, "%s", errno == ENOENT || errno == ENOTDIR ? "no such file" : strerror(errno));
        return 0;
    }
    if (S_ISREG(st.st_mode)) return 1;
    if (S_ISDIR(st.st_mode) && want_dir) {
        if (is_dir) *is_dir = 1;
        return 1;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(why, why_len, "a directory, not a file");
        return 0;
    }
    const char *kind = S_ISFIFO(st.st_mode)   ? "a FIFO (named pipe)"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                       : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                                                                    : "something";
    snprintf(why, why_len, "%s, not a regular file: reading it could block forever or never end", kind);
    return 0;
}

void fs_write_failed(const char *what, const char *path, int err) {
    const char *hint = err == ENOSPC || err == EDQUOT ? "free disk space or choose another --out"
                       : err == EACCES || err == EPERM || err == EROFS
                           ? "make the run directory writable or choose another --out"
                       : err == EISDIR || err == ENOTDIR || err == EEXIST
                           ? "something else is in the way at that path: move it away or choose another --out"
                       : err == EFBIG ? "the file is larger than this process may write (ulimit -f) or the file system "
                                        "holds: raise the limit or choose another --out"
                                      : "check the run directory and the disk";
    vx_exit_error(VX_EXIT_STORAGE, "cannot %s %s: %s; %s", what, path, strerror(err), hint);
}

/* splitmix64: spreads a counter and the clock over the bits a temporary name is drawn from */
static uint64_t mix(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* A temporary file beside path that can be no one else's: path.<6 letters>.tmp, created with O_EXCL (another name
 * is drawn while one exists), so a file of the user's named path.tmp, or anything else there, is never opened,
 * truncated or removed: a fixed name removed a user's x_sample.nii.gz.tmp. Returns its descriptor, or -1 (errno). */
static int create_temp(const char *path, char *tmp, size_t tmp_len) {
    static const char LETTERS[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    static uint64_t counter;
    for (int attempt = 0; attempt < 64; attempt++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = mix((uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^ (uint64_t)getpid() << 40 ^
                         __atomic_add_fetch(&counter, 0x9E3779B97F4A7C15ull, __ATOMIC_RELAXED));
        char name[7];
        for (int i = 0; i < 6; i++, x /= 62) name[i] = LETTERS[x % 62];
        name[6] = 0;
        snprintf(tmp, tmp_len, "%s.%s.tmp", path, name);
        const int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0 || errno != EEXIST) return fd;
    }
    errno = EEXIST;
    return -1;
}

/* Moves tmp to path without replacing anything there: renameat2's RENAME_NOREPLACE, or where the file system lacks
 * it a hard link (which fails on an existing name too) and the temporary's removal; where neither exists (a file
 * system without links), a look first and a rename. 0, or -1 with errno (EEXIST: something is at path). */
static int publish_new(const char *tmp, const char *path) {
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE) == 0) return 0;
    if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) return -1;
    if (link(tmp, path) == 0) return unlink(tmp) == 0 || errno == ENOENT ? 0 : -1;
    if (errno != EPERM && errno != EOPNOTSUPP && errno != ENOSYS) return -1;
    struct stat st;
    if (lstat(path, &st) == 0) {
        errno = EEXIST;
        return -1;
    }
    return rename(tmp, path);
}

#define FS_PROGRESS_CHUNK ((size_t)4 << 20)

/* The temporary written, fsynced and moved to path (replacing what is there, or never: `replace`); 0, EEXIST when
 * !replace and something is at path, or the run ends through fs_write_failed. */
static int write_via_temp(const char *path, const void *data, size_t len, int replace) {
    size_t plen = strlen(path) + 16;
    char *tmp = vx_malloc(plen);
    const char *what = "write";
    int fd = create_temp(path, tmp, plen);
    if (fd < 0) {
        int err = errno;
        free(tmp);
        fs_write_failed("create", path, err);
    }
    const char *p = data;
    int err = 0;
    /* a file of more than one chunk (a checkpoint: 400 MB took 50 s under load) is written and synced chunk by chunk,
     * so its progress line reports what is on disk, not what the page cache took in a second */
    const int chunked = len > FS_PROGRESS_CHUNK;
    Progress prog;
    if (chunked) {
        char what[96], shown[64];
        const char *base = strrchr(path, '/');
        snprintf(what, sizeof what, "writing %s", vx_escape(base ? base + 1 : path, shown, sizeof shown));
        progress_begin(&prog, what, len / 1048576.0, "MiB");
    }
    while (len > 0 && !err) {
        const size_t piece = chunked && len > FS_PROGRESS_CHUNK ? FS_PROGRESS_CHUNK : len;
        ssize_t w = write(fd, p, piece);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) err = w < 0 ? errno : ENOSPC;
        else {
            p += w;
            len -= (size_t)w;
            if (chunked && fdatasync(fd) != 0) err = errno;
            if (chunked) progress_add(&prog, w / 1048576.0);
        }
    }
    if (chunked) progress_end(&prog);
    if (!err && fsync(fd) != 0) err = errno;
    if (close(fd) != 0 && !err) err = errno;
    if (!err && (replace ? rename(tmp, path) : publish_new(tmp, path)) != 0) {
        err = errno;
        what = replace ? "replace" : "create";
    }
    if (err) {
        unlink(tmp); /* only the temporary this call created; the previous file at path is untouched */
        free(tmp);
        if (err == EEXIST && !replace) return EEXIST;
        fs_write_failed(what, path, err);
    }
    /* The rename itself is durable only once the directory entry is on disk. */
    (void)fs_fsync_parent(path);
    free(tmp);
    return 0;
}

void fs_write_atomic(const char *path, const void *data, size_t len) { (void)write_via_temp(path, data, len, 1); }

int fs_write_new(const char *path, const void *data, size_t len) { return write_via_temp(path, data, len, 0); }

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
    if (fs_mkdir_p(path) != 0) fs_write_failed("create the directory", path, errno);
}
