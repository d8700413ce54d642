/* trace.c: recording of trace ranges and events (see trace.h). Each thread keeps its open ranges in a
 * thread-local stack, so push takes no lock; a closed range is appended to the process-wide event list under a
 * mutex. A generation number, bumped by every begin and end, tells a thread that its stack belongs to a trace
 * that is over, so ranges never leak from one trace into the next. */
#include "trace/trace.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/fsutil.h"
#include "core/util.h"
#include "trace/trace_file.h"

#define TRACE_MAX_DEPTH 64

int trace_active_flag;

typedef struct {
    const char *name, *cat;
    int64_t start_ns;
} RangeFrame;

/* Per-thread open ranges. Frames past TRACE_MAX_DEPTH are counted, not stored, so pops stay matched. */
static _Thread_local struct {
    uint64_t gen;
    int depth;
    int64_t tid;
    RangeFrame stack[TRACE_MAX_DEPTH];
} tl;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t generation; /* written under mu, read with __atomic loads */

/* Everything below is guarded by mu. */
static TraceEvent *events;
static size_t n_events, cap_events;
static char *args_pool; /* args texts of events, each NUL-terminated; events hold offsets since it grows */
static size_t args_len, args_cap;
static TraceThread *threads;
static size_t n_threads, cap_threads;
static TraceProcess *processes;
static size_t n_processes, cap_processes;
static TraceDevice *devices;
static size_t n_devices;
static char **strings; /* interned names, open addressing */
static size_t cap_strings, n_strings;
static char run_dir[PATH_MAX];
static int rank_, world_size_ = 1;
static char backend_[64];
static int64_t base_mono_ns, base_epoch_ns;
static int64_t pid_;
static char last_file[PATH_MAX];

static int64_t clock_ns(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t thread_id(void) {
    if (!tl.tid) tl.tid = (int64_t)syscall(SYS_gettid);
    return tl.tid;
}

static bool active(void) { return __atomic_load_n(&trace_active_flag, __ATOMIC_ACQUIRE) != 0; }

/* ---- string interning: names repeat every step, so each distinct one is stored once ----------------------- */
static uint64_t str_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static size_t str_slot(char **tab, size_t cap, const char *s) {
    size_t i = (size_t)str_hash(s) & (cap - 1);
    while (tab[i] && strcmp(tab[i], s) != 0) i = (i + 1) & (cap - 1);
    return i;
}

static const char *intern(const char *s) {
    if (2 * (n_strings + 1) > cap_strings) {
        size_t cap = cap_strings ? 2 * cap_strings : 64;
        char **tab = vx_calloc(cap, sizeof *tab);
        for (size_t i = 0; i < cap_strings; i++)
            if (strings[i]) tab[str_slot(tab, cap, strings[i])] = strings[i];
        free(strings);
        strings = tab;
        cap_strings = cap;
    }
    size_t i = str_slot(strings, cap_strings, s);
    if (!strings[i]) {
        size_t len = strlen(s) + 1;
        strings[i] = vx_malloc(len);
        memcpy(strings[i], s, len);
        n_strings++;
    }
    return strings[i];
}

/* Frees everything a trace held; called under mu. */
static void reset_locked(void) {
    for (size_t i = 0; i < cap_strings; i++) free(strings[i]);
    free(strings);
    free(events);
    free(args_pool);
    free(threads);
    free(processes);
    free(devices);
    strings = NULL;
    events = NULL;
    args_pool = NULL;
    threads = NULL;
    processes = NULL;
    devices = NULL;
    cap_strings = n_strings = n_events = cap_events = n_threads = cap_threads = n_devices = 0;
    args_len = args_cap = n_processes = cap_processes = 0;
}

/* Copies an args text into the pool; returns its offset, or -1 for none. */
static int64_t add_args_locked(const char *args) {
    if (!args || !args[0]) return -1;
    size_t len = strlen(args) + 1;
    if (args_len + len > args_cap) {
        size_t cap = args_cap ? args_cap : 1 << 16;
        while (args_len + len > cap) cap *= 2;
        char *p = realloc(args_pool, cap);
        if (!p) vx_fatal("out of host memory growing the trace's event arguments to %zu bytes", cap);
        args_pool = p;
        args_cap = cap;
    }
    memcpy(args_pool + args_len, args, len);
    int64_t off = (int64_t)args_len;
    args_len += len;
    return off;
}

static void append_event_locked(char ph, const char *name, const char *cat, double ts_us, double dur_us, int64_t pid,
                                int64_t tid, int64_t correlation, const char *args) {
    if (n_events == cap_events) {
        cap_events = cap_events ? 2 * cap_events : 4096;
        TraceEvent *e = realloc(events, cap_events * sizeof *e);
        if (!e) vx_fatal("out of host memory growing the trace to %zu events; trace fewer steps", cap_events);
        events = e;
    }
    events[n_events++] =
        (TraceEvent){intern(name), intern(cat), ts_us, dur_us, pid, tid, correlation, add_args_locked(args), ph};
}

/* Registers a track (for its thread_name entry), e.g. the calling thread the first time it records into this
 * trace; a name replaces the one it had, NULL keeps it. */
static void note_thread_locked(int64_t pid, int64_t tid, const char *name) {
    for (size_t i = 0; i < n_threads; i++) {
        if (threads[i].tid != tid || threads[i].pid != pid) continue;
        if (name) threads[i].name = intern(name);
        return;
    }
    if (n_threads == cap_threads) {
        cap_threads = cap_threads ? 2 * cap_threads : 16;
        TraceThread *t = realloc(threads, cap_threads * sizeof *t);
        if (!t) vx_fatal("out of host memory growing the trace's thread list");
        threads = t;
    }
    threads[n_threads++] = (TraceThread){pid, tid, name ? intern(name) : NULL};
}

int trace_begin(const char *dir, int rank) {
    if (!dir || !dir[0] || strlen(dir) >= sizeof run_dir) return TRACE_ERR_ARG;
    pthread_mutex_lock(&mu);
    if (active()) {
        pthread_mutex_unlock(&mu);
        return TRACE_ERR_STATE;
    }
    reset_locked();
    snprintf(run_dir, sizeof run_dir, "%s", dir);
    rank_ = rank;
    world_size_ = 1;
    backend_[0] = '\0';
    /* Read the two clocks back to back: ts 0 on the monotonic clock is base_epoch_ns on the wall clock. */
    __atomic_store_n(&base_mono_ns, clock_ns(CLOCK_MONOTONIC), __ATOMIC_RELEASE);
    base_epoch_ns = clock_ns(CLOCK_REALTIME);
    pid_ = (int64_t)getpid();
    __atomic_add_fetch(&generation, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&trace_active_flag, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&mu);
    return TRACE_OK;
}

int trace_set_distributed(int world_size, const char *backend) {
    if (world_size < 1 || !backend) return TRACE_ERR_ARG;
    pthread_mutex_lock(&mu);
    int rc = active() ? TRACE_OK : TRACE_ERR_STATE;
    if (rc == TRACE_OK) {
        world_size_ = world_size;
        snprintf(backend_, sizeof backend_, "%s", backend);
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

int trace_add_device(const TraceDevice *dev) {
    if (!dev || !dev->name) return TRACE_ERR_ARG;
    pthread_mutex_lock(&mu);
    int rc = active() ? TRACE_OK : TRACE_ERR_STATE;
    if (rc == TRACE_OK) {
        TraceDevice *d = realloc(devices, (n_devices + 1) * sizeof *d);
        if (!d) vx_fatal("out of host memory adding a trace device");
        devices = d;
        devices[n_devices] = *dev;
        devices[n_devices].name = intern(dev->name);
        n_devices++;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

int trace_set_thread_name(const char *name) {
    if (!name || !name[0]) return TRACE_ERR_ARG;
    pthread_mutex_lock(&mu);
    int rc = active() ? TRACE_OK : TRACE_ERR_STATE;
    if (rc == TRACE_OK) note_thread_locked(pid_, thread_id(), name);
    pthread_mutex_unlock(&mu);
    return rc;
}

int trace_set_track_name(int64_t pid, int64_t tid, const char *name) {
    if (name && !name[0]) return TRACE_ERR_ARG;
    pthread_mutex_lock(&mu);
    int rc = active() ? TRACE_OK : TRACE_ERR_STATE;
    if (rc == TRACE_OK) note_thread_locked(pid, tid, name);
    pthread_mutex_unlock(&mu);
    return rc;
}

int trace_set_process_name(int64_t pid, const char *name) {
    if (!name || !name[0]) return TRACE_ERR_ARG;
    pthread_mutex_lock(&mu);
    int rc = active() ? TRACE_OK : TRACE_ERR_STATE;
    if (rc == TRACE_OK) {
        size_t i = 0;
        while (i < n_processes && processes[i].pid != pid) i++;
        if (i == n_processes) {
            if (n_processes == cap_processes) {
                cap_processes = cap_processes ? 2 * cap_processes : 8;
                TraceProcess *p = realloc(processes, cap_processes * sizeof *p);
                if (!p) vx_fatal("out of host memory growing the trace's process list");
                processes = p;
            }
            n_processes++;
        }
        processes[i] = (TraceProcess){pid, intern(name)};
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

int trace_is_active(void) { return active() ? 1 : 0; }

double trace_now_us(void) {
    if (!active()) return 0.0;
    return trace_us_at(clock_ns(CLOCK_MONOTONIC));
}

int64_t trace_clock_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

double trace_us_at(int64_t ns) { return (double)(ns - __atomic_load_n(&base_mono_ns, __ATOMIC_ACQUIRE)) / 1e3; }

void trace_range_push_slow(const char *name, const char *cat) {
    uint64_t gen = __atomic_load_n(&generation, __ATOMIC_ACQUIRE);
    if (tl.gen != gen) { /* first range of this thread in this trace: drop frames left from an older one */
        tl.gen = gen;
        tl.depth = 0;
    }
    if (tl.depth < TRACE_MAX_DEPTH)
        tl.stack[tl.depth] = (RangeFrame){name ? name : "?", cat ? cat : "", clock_ns(CLOCK_MONOTONIC)};
    tl.depth++;
}

void trace_range_pop_slow(void) {
    int64_t end_ns = clock_ns(CLOCK_MONOTONIC);
    uint64_t gen = __atomic_load_n(&generation, __ATOMIC_ACQUIRE);
    if (tl.gen != gen || tl.depth == 0) return; /* pushed before this trace began, or never pushed */
    tl.depth--;
    if (tl.depth >= TRACE_MAX_DEPTH) return;
    RangeFrame fr = tl.stack[tl.depth];
    int64_t tid = thread_id();
    pthread_mutex_lock(&mu);
    /* The trace may have ended (or a new one begun) since the checks above; only record into our own. */
    if (active() && generation == gen) {
        note_thread_locked(pid_, tid, NULL);
        append_event_locked('X', fr.name, fr.cat, (double)(fr.start_ns - base_mono_ns) / 1e3,
                            (double)(end_ns - fr.start_ns) / 1e3, pid_, tid, -1, NULL);
    }
    pthread_mutex_unlock(&mu);
}

int trace_add_complete(const char *name, const char *cat, double ts_us, double dur_us, int64_t pid, int64_t tid,
                       int64_t correlation) {
    return trace_add_complete_args(name, cat, ts_us, dur_us, pid, tid, correlation, NULL);
}

int trace_add_complete_args(const char *name, const char *cat, double ts_us, double dur_us, int64_t pid, int64_t tid,
                            int64_t correlation, const char *args_json) {
    if (!name || !name[0] || !cat || !(dur_us >= 0) || !isfinite(ts_us)) return TRACE_ERR_ARG;
    pthread_mutex_lock(&mu);
    int rc = active() ? TRACE_OK : TRACE_ERR_STATE;
    if (rc == TRACE_OK)
        append_event_locked('X', name, cat, ts_us, dur_us, pid, tid, correlation < 0 ? -1 : correlation, args_json);
    pthread_mutex_unlock(&mu);
    return rc;
}

int trace_add_flow(const char *cat, int64_t id, double start_ts_us, int64_t start_pid, int64_t start_tid,
                   double end_ts_us, int64_t end_pid, int64_t end_tid) {
    if (!cat || !cat[0] || id < 0 || !isfinite(start_ts_us) || !isfinite(end_ts_us)) return TRACE_ERR_ARG;
    pthread_mutex_lock(&mu);
    int rc = active() ? TRACE_OK : TRACE_ERR_STATE;
    if (rc == TRACE_OK) {
        append_event_locked('s', cat, cat, start_ts_us, 0, start_pid, start_tid, id, NULL);
        append_event_locked('f', cat, cat, end_ts_us, 0, end_pid, end_tid, id, NULL);
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

int trace_end(void) {
    pthread_mutex_lock(&mu);
    if (!active()) {
        pthread_mutex_unlock(&mu);
        return TRACE_ERR_STATE;
    }
    __atomic_store_n(&trace_active_flag, 0, __ATOMIC_RELEASE);
    __atomic_add_fetch(&generation, 1, __ATOMIC_RELEASE);

    char dir[PATH_MAX + 8], host[256];
    snprintf(dir, sizeof dir, "%s/traces", run_dir);
    if (fs_mkdir_p(dir) != 0) vx_fatal("cannot create trace directory %s; check the run directory", dir);
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    /* <host>_<pid>.<ms>.pt.trace.json.gz, as torch.profiler.tensorboard_trace_handler names its files. */
    long long ms = (long long)(clock_ns(CLOCK_REALTIME) / 1000000);
    int len = snprintf(last_file, sizeof last_file, "%s/%s_%ld.%lld.pt.trace.json.gz", dir, host, (long)getpid(), ms);
    if (len < 0 || (size_t)len >= sizeof last_file) vx_fatal("trace file path under %s is too long", dir);

    /* Our own process always gets its thread list entry, even if it recorded no range. */
    note_thread_locked(pid_, thread_id(), NULL);
    TraceContents t = {
        .rank = rank_,
        .world_size = world_size_,
        .backend = backend_,
        .pid = pid_,
        .base_time_ns = base_epoch_ns,
        .events = events,
        .n_events = n_events,
        .args_pool = args_pool,
        .threads = threads,
        .n_threads = n_threads,
        .processes = processes,
        .n_processes = n_processes,
        .devices = devices,
        .n_devices = n_devices,
    };
    trace_file_write(last_file, &t);
    reset_locked();
    pthread_mutex_unlock(&mu);
    return TRACE_OK;
}

const char *trace_last_file(void) { return last_file; }
