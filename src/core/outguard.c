/* outguard.c: output directories' locks, the command's inputs, and outputs never written over (see outguard.h). */
#include "core/outguard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fsutil.h"
#include "core/util.h"

/* ---- the lock ------------------------------------------------------------------------------------------------ */

void out_lock(const char *dir, const char *what, OutLock *l) {
    memset(l, 0, sizeof *l);
    snprintf(l->dir, sizeof l->dir, "%s", dir);
    snprintf(l->path, sizeof l->path, "%s/" OUT_LOCK_NAME, dir);
    for (int attempt = 0;; attempt++) {
        /* made here (O_EXCL says so), or opened as another command left it */
        int created = 1, fd = open(l->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno == EEXIST) {
            created = 0;
            fd = open(l->path, O_RDWR | O_CLOEXEC);
            if (fd < 0 && errno == ENOENT && attempt < 100) continue; /* removed in between: make it again */
        }
        if (fd < 0) fs_write_failed("create the lock file", l->path, errno);
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            if (errno == EWOULDBLOCK) {
                char pid[32] = "", p[600];
                ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
                pid[n > 0 ? n : 0] = 0;
                pid[strcspn(pid, "\n")] = 0;
                vx_usage_error("%s %s is in use by another voxscale run (pid %s); wait for it to end or choose "
                               "another --out", what, vx_escape(dir, p, sizeof p), pid[0] ? pid : "unknown");
            }
            /* some network file systems cannot lock: go on, as TensorBoard's own writer does there */
            if (errno != ENOLCK && errno != EOPNOTSUPP) fs_write_failed("lock", l->path, errno);
        }
        /* the file locked must be the one at the path: a refused command removes the lock file it made, and one
         * that opened it just before then holds the lock of a file no longer there */
        struct stat held, there, d;
        if (fstat(fd, &held) == 0 && stat(l->path, &there) == 0 && held.st_dev == there.st_dev &&
            held.st_ino == there.st_ino && stat(dir, &d) == 0) {
            l->fd = fd, l->created = created;
            l->dev = held.st_dev, l->ino = held.st_ino, l->dir_dev = d.st_dev, l->dir_ino = d.st_ino;
            return;
        }
        close(fd);
        if (attempt >= 100) fs_write_failed("lock", l->path, EAGAIN);
    }
}

void out_lock_claim(OutLock *l) {
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(l->fd, 0) != 0 || pwrite(l->fd, pid, (size_t)n, 0) != n)
        fs_write_failed("write the lock file", l->path, errno);
}

void out_lock_refused(OutLock *l) {
    if (l->fd < 0) return;
    if (l->created) unlink(l->path); /* (while still locked: no one else can have taken it) */
    close(l->fd);
    l->fd = -1;
}

int out_lock_still_ours(const OutLock *l, char *why, size_t why_len) {
    struct stat d, k;
    if (stat(l->dir, &d) != 0 || d.st_dev != l->dir_dev || d.st_ino != l->dir_ino) {
        snprintf(why, why_len, "the directory was %s since this run locked it",
                 errno == ENOENT ? "deleted" : "deleted or replaced");
        return 0;
    }
    if (stat(l->path, &k) != 0 || k.st_dev != l->dev || k.st_ino != l->ino) {
        snprintf(why, why_len, "its lock file %s is no longer the one this run holds (removed, or another run's)",
                 OUT_LOCK_NAME);
        return 0;
    }
    return 1;
}

/* ---- inputs and outputs -------------------------------------------------------------------------------------- */

typedef struct {
    dev_t dev;
    ino_t ino;
    const char *what;
} Input;
static Input *inputs;
static int n_inputs;

void out_input(const char *path, const char *what) {
    struct stat st;
    if (!path || stat(path, &st) != 0) return;
    inputs = vx_realloc(inputs, (size_t)(n_inputs + 1) * sizeof *inputs);
    inputs[n_inputs++] = (Input){st.st_dev, st.st_ino, what};
}

const char *out_input_of(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return NULL;
    for (int i = 0; i < n_inputs; i++)
        if (inputs[i].dev == st.st_dev && inputs[i].ino == st.st_ino) return inputs[i].what;
    return NULL;
}

int out_exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

void out_claim(const char *path, int overwrite, const char *who) {
    struct stat st;
    char p[600];
    if (lstat(path, &st) != 0) return;
    if (!overwrite)
        vx_usage_error("%s %s already exists: nothing is overwritten; choose another name, move it away, or pass "
                       "--overwrite to replace it", who, vx_escape(path, p, sizeof p));
    if (S_ISDIR(st.st_mode))
        vx_usage_error("%s %s is a directory: name a file (--overwrite replaces files only)", who,
                       vx_escape(path, p, sizeof p));
    const char *input = out_input_of(path); /* (links followed: a link to an input is the input) */
    if (input)
        vx_usage_error("%s %s is this command's input (%s): it is never overwritten, --overwrite or not; choose "
                       "another name", who, vx_escape(path, p, sizeof p), input);
}

/* ---- what a failed command takes back ------------------------------------------------------------------------ */

static char **created;
static int n_created, tracking, registered;

static void remove_created(void) {
    for (int i = 0; i < n_created; i++) unlink(created[i]);
    n_created = 0;
}

void out_track(void) {
    if (!registered) {
        atexit(remove_created);
        at_quick_exit(remove_created);
        registered = 1;
    }
    tracking = 1;
}

void out_done(void) {
    for (int i = 0; i < n_created; i++) free(created[i]);
    n_created = 0;
    tracking = 0;
}

void out_write(const char *path, const void *data, size_t len, int overwrite, const char *who) {
    if (overwrite) {
        fs_write_atomic(path, data, len);
        return;
    }
    if (fs_write_new(path, data, len) == EEXIST) {
        char p[600];
        vx_usage_error("%s %s appeared while this command ran: nothing is overwritten; choose another name, move it "
                       "away, or pass --overwrite to replace it", who, vx_escape(path, p, sizeof p));
    }
    if (tracking) {
        created = vx_realloc(created, (size_t)(n_created + 1) * sizeof *created);
        const size_t n = strlen(path) + 1;
        created[n_created] = memcpy(vx_malloc(n), path, n);
        n_created++;
    }
}
