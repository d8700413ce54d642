/* event_file.c: event file creation, record buffering and flushing (see event_file.h).
 *
 * Signal safety: a handler may interrupt this process's own writer in the middle of an append (same thread), or
 * run on another thread while the writer appends. Each file has a "busy" flag taken with an atomic exchange
 * around every change to its buffer; the handler takes it the same way and skips a busy file rather than wait
 * (waiting on its own thread would deadlock). So the handler only ever writes committed whole records, and a
 * record is either written once by the handler or left to the normal path, never both. */
#include "tb/event_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "core/fsutil.h"
#include "core/util.h"
#include "tb/tb_writer.h"
#include "tb/tfrecord.h"

#define FLUSH_BYTES (1u << 20) /* write out sooner than flush_secs once this much is buffered */
#define MAX_NAME_TRIES 10000

struct EventFile {
    int fd;
    int dir_fd; /* holds the flock on the run directory */
    pid_t owner; /* a forked child inherits the buffer; only the opener may write it */
    atomic_int busy;
    uint8_t *buf;
    size_t len;     /* committed bytes: whole records not yet written */
    size_t cap;
    size_t pending; /* data size of the record between begin and end */
    double flush_secs, last_flush;
    int slot;
    char path[PATH_MAX];
};

static _Atomic(EventFile *) open_files[TB_MAX_OPEN_WRITERS];
static atomic_int flushes_running; /* signal/exit flushes in progress: close waits for them before freeing */
static pthread_once_t atexit_once = PTHREAD_ONCE_INIT;

static void file_acquire(EventFile *f) {
    while (atomic_exchange_explicit(&f->busy, 1, memory_order_acquire)) sched_yield();
}
static void file_release(EventFile *f) { atomic_store_explicit(&f->busy, 0, memory_order_release); }

/* write() until done; returns 0 or -1 (errno set). Only async-signal-safe calls. */
static int write_all(int fd, const uint8_t *p, size_t n) {
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

void event_file_flush_all_signal_safe(void) {
    int saved_errno = errno; /* a handler must not change errno under the code it interrupted */
    pid_t me = getpid();
    atomic_fetch_add(&flushes_running, 1);
    for (int i = 0; i < TB_MAX_OPEN_WRITERS; i++) {
        EventFile *f = atomic_load(&open_files[i]);
        if (!f || f->owner != me) continue;
        if (atomic_exchange_explicit(&f->busy, 1, memory_order_acquire)) continue;
        /* On a write error there is nothing safe to report from here; the records stay buffered. */
        if (f->len && write_all(f->fd, f->buf, f->len) == 0) f->len = 0;
        file_release(f);
    }
    atomic_fetch_sub(&flushes_running, 1);
    errno = saved_errno;
}

static void flush_all_at_exit(void) { event_file_flush_all_signal_safe(); }
/* at_quick_exit too: a run that ends at once after an aborted collective (vx_exit_now) keeps its records */
static void register_atexit(void) {
    atexit(flush_all_at_exit);
    at_quick_exit(flush_all_at_exit);
}

/* events.out.tfevents.<10-digit seconds>.<host>.<pid>.<n>: TensorBoard only needs "tfevents" in the name and
 * orders files by it; the pid and n keep restarts and concurrent writers in one second apart. */
static int create_unique_file(EventFile *f, const char *run_dir) {
    char host[256];
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    for (char *c = host; *c; c++)
        if (*c == '/') *c = '_';
    long long secs = (long long)time(NULL);
    for (int n = 0; n < MAX_NAME_TRIES; n++) {
        int len = snprintf(f->path, sizeof f->path, "%s/events.out.tfevents.%010lld.%s.%ld.%d", run_dir, secs, host,
                           (long)getpid(), n);
        if (len < 0 || (size_t)len >= sizeof f->path) {
            errno = ENAMETOOLONG;
            vx_fatal("event file name in %s is too long; use a shorter run directory", run_dir);
        }
        /* O_EXCL: never append to, or truncate, a file that is already there (say from before a restart). */
        int fd = open(f->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0) return fd;
        if (errno != EEXIST)
            vx_fatal("cannot create event file %s; check that the run directory is writable", f->path);
    }
    errno = EEXIST;
    vx_fatal("no free event file name in %s after %d tries; clean up the run directory", run_dir, MAX_NAME_TRIES);
}

int event_file_open(EventFile **out, const char *run_dir, double flush_secs) {
    pthread_once(&atexit_once, register_atexit);
    if (fs_mkdir_p(run_dir) != 0)
        vx_fatal("cannot create run directory %s; check the path and its permissions", run_dir);
    int dir_fd = open(run_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) vx_fatal("cannot open run directory %s", run_dir);
    /* Some network file systems cannot lock; O_EXCL still keeps writers off each other's files there. */
    if (flock(dir_fd, LOCK_EX | LOCK_NB) != 0 && errno != ENOLCK && errno != EOPNOTSUPP) {
        int e = errno;
        close(dir_fd);
        if (e == EWOULDBLOCK) return TB_ERR_BUSY;
        errno = e;
        vx_fatal("cannot lock run directory %s", run_dir);
    }
    EventFile *f = vx_calloc(1, sizeof *f);
    f->fd = -1; /* registered before the file exists: with nothing buffered, a signal flush skips it */
    f->dir_fd = dir_fd;
    f->owner = getpid();
    f->flush_secs = flush_secs;
    f->last_flush = vx_now();
    f->slot = -1;
    for (int i = 0; i < TB_MAX_OPEN_WRITERS && f->slot < 0; i++) {
        EventFile *expected = NULL;
        if (atomic_compare_exchange_strong(&open_files[i], &expected, f)) f->slot = i;
    }
    if (f->slot < 0) {
        close(dir_fd);
        free(f);
        return TB_ERR_LIMIT;
    }
    f->fd = create_unique_file(f, run_dir);
    /* Make the new file's name durable too: TensorBoard finds files by listing the directory. */
    (void)fs_fsync_parent(f->path);
    *out = f;
    return TB_OK;
}

uint8_t *event_file_begin_record(EventFile *f, size_t n) {
    file_acquire(f);
    size_t need = f->len + n + TFRECORD_OVERHEAD;
    if (need > f->cap) {
        size_t cap = f->cap ? f->cap : 64 * 1024;
        while (cap < need) cap *= 2;
        uint8_t *p = realloc(f->buf, cap);
        if (!p) vx_fatal("out of host memory buffering a %zu-byte TensorBoard record", n);
        f->buf = p;
        f->cap = cap;
    }
    f->pending = n;
    return f->buf + f->len + TFRECORD_HEADER_BYTES;
}

/* Writes out the committed records; the caller holds busy. */
static void flush_locked(EventFile *f) {
    if (f->len && write_all(f->fd, f->buf, f->len) != 0)
        vx_fatal("cannot write TensorBoard event file %s; is the disk full?", f->path);
    f->len = 0;
    f->last_flush = vx_now();
}

void event_file_end_record(EventFile *f) {
    uint8_t *rec = f->buf + f->len;
    size_t n = f->pending;
    tfrecord_write_header(rec, n);
    tfrecord_write_footer(rec + TFRECORD_HEADER_BYTES + n, rec + TFRECORD_HEADER_BYTES, n);
    f->len += n + TFRECORD_OVERHEAD; /* the record becomes visible to the signal flush only now, whole */
    f->pending = 0;
    if (f->len >= FLUSH_BYTES || vx_now() - f->last_flush >= f->flush_secs) flush_locked(f);
    file_release(f);
}

void event_file_flush(EventFile *f) {
    file_acquire(f);
    flush_locked(f);
    file_release(f);
}

void event_file_close(EventFile *f) {
    event_file_flush(f);
    /* Leave the registry, then wait for flushes that may have picked f up before that (on other threads; one
     * on this thread never waits, so it has finished by the time we get here). Both sides use sequentially
     * consistent atomics: a flush either counted itself before we looked, or finds the slot empty. */
    atomic_store(&open_files[f->slot], NULL);
    while (atomic_load(&flushes_running)) sched_yield();
    file_acquire(f);
    if (fsync(f->fd) != 0 && errno != EINVAL)
        vx_fatal("cannot fsync TensorBoard event file %s; is the disk full?", f->path);
    if (close(f->fd) != 0) vx_fatal("cannot close TensorBoard event file %s", f->path);
    close(f->dir_fd); /* releases the directory lock */
    free(f->buf);
    free(f);
}

const char *event_file_path(const EventFile *f) { return f->path; }
