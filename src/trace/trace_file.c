/* trace_file.c: writes a finished trace as gzipped Chrome trace JSON with the top-level keys PyTorch's profiler
 * (Kineto) writes: schemaVersion, deviceProperties, distributedInfo, baseTimeNanoseconds, traceEvents.
 * The file appears atomically: it is written as <path>.tmp, fsynced and renamed, so TensorBoard's profiler
 * plugin or a copy job never sees half a file. */
#include "trace/trace_file.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "core/fsutil.h"
#include "core/util.h"

#define CHUNK (64 * 1024)

/* JSON text is built in a buffer and handed to zlib in large pieces. */
typedef struct {
    gzFile gz;
    const char *path;
    char *buf;
    size_t len, cap;
} Out;

static void out_drain(Out *o) {
    if (o->len && gzwrite(o->gz, o->buf, (unsigned)o->len) != (int)o->len) {
        int zerr;
        const char *msg = gzerror(o->gz, &zerr);
        vx_fatal("cannot write trace file %s (zlib: %s); is the disk full?", o->path, msg);
    }
    o->len = 0;
}

static void out_reserve(Out *o, size_t n) {
    if (o->len + n <= o->cap) return;
    out_drain(o);
    if (n > o->cap) {
        o->cap = n;
        o->buf = realloc(o->buf, o->cap);
        if (!o->buf) vx_fatal("out of host memory writing the trace");
    }
}

static void out_raw(Out *o, const char *s, size_t n) {
    out_reserve(o, n);
    memcpy(o->buf + o->len, s, n);
    o->len += n;
}
#define OUT_LIT(o, lit) out_raw((o), (lit), sizeof(lit) - 1)

__attribute__((format(printf, 2, 3))) static void out_fmt(Out *o, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) vx_fatal("trace JSON fragment too long");
    out_raw(o, tmp, (size_t)n);
}

/* A JSON string literal: quotes, backslashes and control characters escaped; other bytes (UTF-8) as they are. */
static void out_str(Out *o, const char *s) {
    OUT_LIT(o, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            out_raw(o, esc, 2);
        } else if (c < 0x20) {
            out_fmt(o, "\\u%04x", c);
        } else {
            out_raw(o, (const char *)&c, 1);
        }
    }
    OUT_LIT(o, "\"");
}

static void write_metadata_event(Out *o, const char *what, int64_t pid, int64_t tid, const char *name, bool *first) {
    if (*first) OUT_LIT(o, "\n  ");
    else OUT_LIT(o, ",\n  ");
    *first = false;
    out_fmt(o, "{\"ph\": \"M\", \"name\": \"%s\", \"pid\": %" PRId64 ", \"tid\": %" PRId64 ", \"args\": {\"name\": ",
            what, pid, tid);
    out_str(o, name);
    OUT_LIT(o, "}}");
}

static void write_json(Out *o, const TraceContents *t) {
    out_fmt(o, "{\n\"schemaVersion\": 1,\n\"deviceProperties\": [");
    for (size_t i = 0; i < t->n_devices; i++) {
        const TraceDevice *d = &t->devices[i];
        out_fmt(o, "%s\n  {\"id\": %d, \"name\": ", i ? "," : "", d->id);
        out_str(o, d->name);
        out_fmt(o,
                ", \"totalGlobalMem\": %" PRIu64 ", \"computeMajor\": %d, \"computeMinor\": %d, \"numSms\": %d, "
                "\"warpSize\": %d, \"maxThreadsPerBlock\": %d, \"sharedMemPerBlock\": %" PRIu64 "}",
                d->total_global_mem, d->compute_major, d->compute_minor, d->num_sms, d->warp_size,
                d->max_threads_per_block, d->shared_mem_per_block);
    }
    out_fmt(o, "%s],\n\"distributedInfo\": {\"backend\": ", t->n_devices ? "\n" : "");
    out_str(o, t->backend ? t->backend : "");
    out_fmt(o, ", \"rank\": %d, \"world_size\": %d},\n", t->rank, t->world_size);
    out_fmt(o, "\"baseTimeNanoseconds\": %" PRId64 ",\n\"displayTimeUnit\": \"ms\",\n\"traceEvents\": [", t->base_time_ns);

    bool first = true;
    /* process_name: ours (named by the caller or "voxscale rank <r>"), then the other named ones (GPUs). */
    char pname[64];
    snprintf(pname, sizeof pname, "voxscale rank %d", t->rank);
    const char *own = pname;
    for (size_t i = 0; i < t->n_processes; i++)
        if (t->processes[i].pid == t->pid) own = t->processes[i].name;
    write_metadata_event(o, "process_name", t->pid, 0, own, &first);
    for (size_t i = 0; i < t->n_processes; i++)
        if (t->processes[i].pid != t->pid)
            write_metadata_event(o, "process_name", t->processes[i].pid, 0, t->processes[i].name, &first);
    for (size_t i = 0; i < t->n_threads; i++) {
        char tname[64];
        const char *name = t->threads[i].name;
        if (!name) {
            snprintf(tname, sizeof tname, "thread %" PRId64, t->threads[i].tid);
            name = tname;
        }
        write_metadata_event(o, "thread_name", t->threads[i].pid, t->threads[i].tid, name, &first);
    }
    for (size_t i = 0; i < t->n_events; i++) {
        const TraceEvent *e = &t->events[i];
        if (first) OUT_LIT(o, "\n  ");
        else OUT_LIT(o, ",\n  ");
        first = false;
        if (e->ph == 's' || e->ph == 'f') {
            /* Flow events as Kineto writes them; "bp": "e" binds the end to the slice that holds ts. */
            out_fmt(o, "{\"ph\": \"%c\", \"id\": %" PRId64 ", \"pid\": %" PRId64 ", \"tid\": %" PRId64 ", \"ts\": %.3f, ",
                    e->ph, e->correlation, e->pid, e->tid, e->ts_us);
            OUT_LIT(o, "\"cat\": ");
            out_str(o, e->cat);
            OUT_LIT(o, ", \"name\": ");
            out_str(o, e->name);
            if (e->ph == 'f') OUT_LIT(o, ", \"bp\": \"e\"");
            OUT_LIT(o, "}");
            continue;
        }
        OUT_LIT(o, "{\"ph\": \"X\", \"name\": ");
        out_str(o, e->name);
        OUT_LIT(o, ", \"cat\": ");
        out_str(o, e->cat);
        /* Nanosecond resolution: three decimals of a microsecond. */
        out_fmt(o, ", \"ts\": %.3f, \"dur\": %.3f, \"pid\": %" PRId64 ", \"tid\": %" PRId64 ", \"args\": {", e->ts_us,
                e->dur_us, e->pid, e->tid);
        if (e->correlation >= 0) out_fmt(o, "\"correlation\": %" PRId64, e->correlation);
        if (e->args >= 0) {
            const char *args = t->args_pool + e->args;
            if (e->correlation >= 0) OUT_LIT(o, ", ");
            out_raw(o, args, strlen(args));
        }
        OUT_LIT(o, "}}");
    }
    out_fmt(o, "\n]\n}\n");
}

void trace_file_write(const char *path, const TraceContents *t) {
    char tmp[4096 + 8];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp) vx_fatal("trace path too long: %s", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) vx_fatal("cannot create trace file %s; check that the run directory is writable", tmp);
    /* zlib gets its own descriptor, since gzclose closes it and we still need ours for fsync. */
    int gz_fd = dup(fd);
    if (gz_fd < 0) vx_fatal("cannot dup a descriptor for %s", tmp);
    Out o = {.gz = gzdopen(gz_fd, "wb"), .path = tmp, .cap = CHUNK};
    if (!o.gz) vx_fatal("zlib could not open %s for writing", tmp);
    o.buf = vx_malloc(o.cap);
    write_json(&o, t);
    out_drain(&o);
    free(o.buf);
    if (gzclose(o.gz) != Z_OK) vx_fatal("cannot finish trace file %s; is the disk full?", tmp);
    if (fsync(fd) != 0) vx_fatal("cannot fsync trace file %s", tmp);
    if (close(fd) != 0) vx_fatal("cannot close trace file %s", tmp);
    if (rename(tmp, path) != 0) vx_fatal("cannot rename %s to %s", tmp, path);
    (void)fs_fsync_parent(path);
}
