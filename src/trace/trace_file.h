/* trace_file.h: what a finished trace holds, and its writer to gzipped Chrome trace JSON (internal to
 * src/trace: trace.c records, trace_file.c writes). */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "trace/trace.h"

typedef struct {
    const char *name, *cat; /* interned for the life of the trace */
    double ts_us, dur_us;   /* dur_us: 'X' only */
    int64_t pid, tid;
    int64_t correlation; /* 'X': args.correlation, -1 none; 's'/'f': the flow id */
    int64_t args;        /* 'X': offset of more args members (JSON text) in TraceContents.args_pool, -1 none */
    char ph;             /* 'X' complete event, 's' flow start, 'f' flow end (bound to the enclosing slice) */
} TraceEvent;

typedef struct {
    int64_t pid, tid;
    const char *name; /* NULL: "thread <tid>" */
} TraceThread;

typedef struct {
    int64_t pid;
    const char *name;
} TraceProcess;

typedef struct {
    int rank, world_size;
    const char *backend;
    int64_t pid;          /* this process; its process_name is "voxscale rank <rank>" unless processes names it */
    int64_t base_time_ns; /* epoch nanoseconds of ts 0 */
    const TraceEvent *events;
    size_t n_events;
    const char *args_pool; /* NUL-separated args texts that events point into */
    const TraceThread *threads;
    size_t n_threads;
    const TraceProcess *processes; /* named processes (GPUs); at most one entry per pid */
    size_t n_processes;
    const TraceDevice *devices;
    size_t n_devices;
} TraceContents;

/* Writes t as gzipped JSON to path via path.tmp + fsync + rename. I/O failures are fatal. */
void trace_file_write(const char *path, const TraceContents *t);
