/* trace_file.h: what a finished trace holds, and its writer to gzipped Chrome trace JSON (internal to
 * src/trace: trace.c records, trace_file.c writes). */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "trace/trace.h"

typedef struct {
    const char *name, *cat; /* interned for the life of the trace */
    double ts_us, dur_us;
    int64_t pid, tid;
    int64_t correlation; /* -1: none */
} TraceEvent;

typedef struct {
    int64_t tid;
    const char *name; /* NULL: "thread <tid>" */
} TraceThread;

typedef struct {
    int rank, world_size;
    const char *backend;
    int64_t pid;
    int64_t base_time_ns; /* epoch nanoseconds of ts 0 */
    const TraceEvent *events;
    size_t n_events;
    const TraceThread *threads;
    size_t n_threads;
    const TraceDevice *devices;
    size_t n_devices;
} TraceContents;

/* Writes t as gzipped JSON to path via path.tmp + fsync + rename. I/O failures are fatal. */
void trace_file_write(const char *path, const TraceContents *t);
