/* test_trace.c: unit tests of the Chrome trace writer: nested ranges from several threads written, gunzipped
 * and parsed back with cJSON; the PyTorch-profiler top-level keys; per-thread nesting; naming and atomic
 * writing of the file; and that ranges outside a trace are ignored and cost next to nothing. The GPU side:
 * args, flows and track names; synthetic CUPTI-like records (kernels, copies, memsets, runtime and driver calls)
 * turned into Kineto-style events and flows; per-window kernel time; and that without a GPU (or in a CPU build)
 * trace_gpu_begin declines with a reason and the trace keeps its CPU side. */
#include <dirent.h>
#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include <cJSON.h>
#include <cmocka.h>

#include "require_gpu.h"
#include "tmpdir.h"

#ifdef VX_CUDA
#include <cuda_runtime_api.h>
#include <cupti.h>

#include "trace/cupti_load.h"
#endif

#include "trace/gpu_activity.h"
#include "trace/trace.h"

/* Gunzips and parses a trace file. */
static cJSON *load_trace(const char *path) {
    gzFile gz = gzopen(path, "rb");
    assert_non_null(gz);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    int n;
    while ((n = gzread(gz, buf + len, (unsigned)(cap - len - 1))) > 0) {
        len += (size_t)n;
        if (cap - len < 2) buf = realloc(buf, cap *= 2);
    }
    assert_true(n == 0);
    gzclose(gz);
    buf[len] = '\0';
    cJSON *root = cJSON_Parse(buf);
    assert_non_null(root);
    free(buf);
    return root;
}

static double num(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    assert_true(cJSON_IsNumber(v));
    return v->valuedouble;
}

static const char *str(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    assert_true(cJSON_IsString(v));
    return v->valuestring;
}

typedef struct {
    double ts, end;
    double pid, tid;
    const char *name;
} Span;

static int span_cmp(const void *a, const void *b) {
    const Span *x = a, *y = b;
    if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
    if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    return x->end > y->end ? -1 : x->end < y->end; /* the enclosing one first */
}

/* Checks that the X events of each (pid, tid) form a proper nesting: any two are disjoint or one holds the
 * other. Returns the number of X events. */
static size_t check_x_events_nest(const cJSON *events) {
    size_t n = 0, k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, events) if (strcmp(str(e, "ph"), "X") == 0) n++;
    Span *s = calloc(n ? n : 1, sizeof *s);
    cJSON_ArrayForEach(e, events) {
        if (strcmp(str(e, "ph"), "X") != 0) continue;
        str(e, "cat");
        assert_true(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(e, "args")));
        s[k] = (Span){num(e, "ts"), num(e, "ts") + num(e, "dur"), num(e, "pid"), num(e, "tid"), str(e, "name")};
        assert_true(num(e, "dur") >= 0);
        k++;
    }
    qsort(s, n, sizeof *s, span_cmp);
    const double eps = 1.5e-3; /* ts and dur are printed to the nanosecond, each rounded */
    Span *stack[128];
    int depth = 0;
    for (size_t i = 0; i < n; i++) {
        if (i && (s[i].pid != s[i - 1].pid || s[i].tid != s[i - 1].tid)) depth = 0;
        while (depth && stack[depth - 1]->end <= s[i].ts + eps) depth--;
        if (depth) assert_true(s[i].end <= stack[depth - 1]->end + eps);
        assert_true(depth < 128);
        stack[depth++] = &s[i];
    }
    free(s);
    return n;
}

static size_t count_named(const cJSON *events, const char *name, double tid) {
    size_t c = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, events) {
        if (strcmp(str(e, "ph"), "X") == 0 && strcmp(str(e, "name"), name) == 0 && (tid < 0 || num(e, "tid") == tid))
            c++;
    }
    return c;
}

static void *worker(void *arg) {
    trace_set_thread_name((const char *)arg);
    for (int i = 0; i < 50; i++) {
        trace_range_push("load_batch", "data");
        trace_range_push("decode", "data");
        trace_range_pop();
        trace_range_push("augment", "data");
        trace_range_push("flip", "data");
        trace_range_pop();
        trace_range_pop();
        trace_range_pop();
    }
    return NULL;
}

static void test_trace_nested_ranges_round_trip(void **state) {
    const char *dir = *state;
    assert_int_equal(trace_begin(dir, 3), TRACE_OK);
    assert_int_equal(trace_begin(dir, 3), TRACE_ERR_STATE);
    assert_int_equal(trace_set_distributed(8, "nccl"), TRACE_OK);
    pthread_t th[2];
    pthread_create(&th[0], NULL, worker, "loader-0");
    pthread_create(&th[1], NULL, worker, "loader-1");
    for (int step = 0; step < 20; step++) {
        trace_range_push("step", "train");
        trace_range_push("forward", "cpu_op");
        trace_range_push("conv3d \"enc0\"\n", "cpu_op"); /* needs escaping */
        trace_range_pop();
        trace_range_pop();
        trace_range_push("backward", "cpu_op");
        trace_range_pop();
        trace_range_pop();
    }
    double t = trace_now_us();
    assert_true(t > 0);
    assert_int_equal(trace_add_complete("kernel_a", "kernel", t, 3.25, 0, 7, 42), TRACE_OK);
    assert_int_equal(trace_add_complete("kernel_b", "kernel", t + 4, 1.0, 0, 7, -1), TRACE_OK);
    assert_int_equal(trace_add_complete(NULL, "kernel", t, 1.0, 0, 7, -1), TRACE_ERR_ARG);
    pthread_join(th[0], NULL);
    pthread_join(th[1], NULL);
    trace_range_push("left_open", "train"); /* still open at the end: dropped */
    assert_int_equal(trace_end(), TRACE_OK);
    trace_range_pop();

    /* <host>_<pid>.<ms>.pt.trace.json.gz under <run>/traces, and no temporary file left. */
    const char *path = trace_last_file();
    char host[256], prefix[4096];
    gethostname(host, sizeof host);
    snprintf(prefix, sizeof prefix, "%s/traces/%s_%ld.", dir, host, (long)getpid());
    assert_int_equal(strncmp(path, prefix, strlen(prefix)), 0);
    const char *suffix = ".pt.trace.json.gz";
    assert_string_equal(path + strlen(path) - strlen(suffix), suffix);
    char traces[4096];
    snprintf(traces, sizeof traces, "%s/traces", dir);
    DIR *d = opendir(traces);
    struct dirent *de;
    int files = 0;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        assert_null(strstr(de->d_name, ".tmp"));
        files++;
    }
    closedir(d);
    assert_int_equal(files, 1);

    cJSON *root = load_trace(path);
    assert_int_equal((int)num(root, "schemaVersion"), 1);
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(root, "deviceProperties");
    assert_true(cJSON_IsArray(props));
    assert_int_equal(cJSON_GetArraySize(props), 0); /* CPU run */
    const cJSON *dist = cJSON_GetObjectItemCaseSensitive(root, "distributedInfo");
    assert_int_equal((int)num(dist, "rank"), 3);
    assert_int_equal((int)num(dist, "world_size"), 8);
    assert_string_equal(str(dist, "backend"), "nccl");
    assert_true(num(root, "baseTimeNanoseconds") > 1.5e18);
    const cJSON *events = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    assert_true(cJSON_IsArray(events));

    size_t n_x = check_x_events_nest(events);
    assert_int_equal(n_x, 20 * 4 + 2 * 50 * 4 + 2);
    double me = (double)getpid();
    assert_int_equal(count_named(events, "step", me), 20);
    assert_int_equal(count_named(events, "conv3d \"enc0\"\n", me), 20);
    assert_int_equal(count_named(events, "flip", -1), 100);
    assert_int_equal(count_named(events, "left_open", -1), 0);

    /* Metadata: the process and every thread that recorded, with the names given. */
    int thread_names = 0, process_names = 0, loader_names = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, events) {
        if (strcmp(str(e, "ph"), "M") != 0) {
            if (strcmp(str(e, "name"), "kernel_a") == 0) {
                assert_true(num(e, "dur") == 3.25);
                assert_int_equal((int)num(e, "pid"), 0);
                assert_int_equal((int)num(e, "tid"), 7);
                assert_int_equal((int)num(cJSON_GetObjectItemCaseSensitive(e, "args"), "correlation"), 42);
            }
            continue;
        }
        assert_true(num(e, "pid") == me);
        const char *what = str(e, "name");
        const char *label = str(cJSON_GetObjectItemCaseSensitive(e, "args"), "name");
        if (strcmp(what, "process_name") == 0) process_names++;
        if (strcmp(what, "thread_name") == 0) {
            thread_names++;
            if (strncmp(label, "loader-", 7) == 0) loader_names++;
        }
    }
    assert_int_equal(process_names, 1);
    assert_int_equal(thread_names, 3);
    assert_int_equal(loader_names, 2);
    cJSON_Delete(root);
}

static void test_trace_inactive_is_ignored(void **state) {
    /* Without a trace: pushes and pops do nothing, end and add report the state. */
    trace_range_push("nothing", "x");
    trace_range_pop();
    trace_range_pop();
    assert_int_equal(trace_end(), TRACE_ERR_STATE);
    assert_int_equal(trace_add_complete("k", "kernel", 0, 1, 0, 0, -1), TRACE_ERR_STATE);
    assert_true(trace_now_us() == 0.0);

    /* A range opened before begin and closed inside the trace is not recorded, nor is a pop without a push. */
    trace_range_push("before", "x");
    assert_int_equal(trace_begin(*state, 0), TRACE_OK);
    trace_range_pop();
    trace_range_push("inside", "x");
    trace_range_pop();
    assert_int_equal(trace_end(), TRACE_OK);
    cJSON *root = load_trace(trace_last_file());
    const cJSON *events = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    assert_int_equal(count_named(events, "before", -1), 0);
    assert_int_equal(count_named(events, "inside", -1), 1);
    assert_int_equal(count_named(events, "step", -1), 0); /* nothing from an earlier trace */
    cJSON_Delete(root);

    /* The inactive fast path is a flag test: ten million push/pop pairs take well under a second. */
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < 10000000; i++) {
        trace_range_push("hot", "x");
        trace_range_pop();
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double secs = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    assert_true(secs < 1.0);
}

static void test_trace_device_properties(void **state) {
    assert_int_equal(trace_begin(*state, 0), TRACE_OK);
    TraceDevice dev = {.id = 0, .name = "NVIDIA H100", .total_global_mem = 85899345920ull, .compute_major = 9,
                       .num_sms = 132, .warp_size = 32, .max_threads_per_block = 1024,
                       .shared_mem_per_block = 49152};
    assert_int_equal(trace_add_device(&dev), TRACE_OK);
    assert_int_equal(trace_end(), TRACE_OK);
    cJSON *root = load_trace(trace_last_file());
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(root, "deviceProperties");
    assert_int_equal(cJSON_GetArraySize(props), 1);
    const cJSON *p = cJSON_GetArrayItem(props, 0);
    assert_string_equal(str(p, "name"), "NVIDIA H100");
    assert_true(num(p, "totalGlobalMem") == 85899345920.0);
    assert_int_equal((int)num(p, "computeMajor"), 9);
    const cJSON *dist = cJSON_GetObjectItemCaseSensitive(root, "distributedInfo");
    assert_int_equal((int)num(dist, "world_size"), 1);
    cJSON_Delete(root);
}

/* ---- events of the GPU side ------------------------------------------------------------------------------------------- */

static const cJSON *args_of(const cJSON *e) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(e, "args");
    assert_true(cJSON_IsObject(a));
    return a;
}

/* The only X event with this name (fails on none or several). */
static const cJSON *find_x(const cJSON *events, const char *name) {
    const cJSON *e, *found = NULL;
    cJSON_ArrayForEach(e, events) {
        if (strcmp(str(e, "ph"), "X") != 0 || strcmp(str(e, "name"), name) != 0) continue;
        assert_null(found);
        found = e;
    }
    assert_non_null(found);
    return found;
}

/* The label of a process_name (tid < 0) or thread_name metadata event; NULL if there is none, fails on two. */
static const char *meta_label(const cJSON *events, double pid, double tid) {
    const cJSON *e;
    const char *label = NULL;
    cJSON_ArrayForEach(e, events) {
        if (strcmp(str(e, "ph"), "M") != 0 || num(e, "pid") != pid) continue;
        if (strcmp(str(e, "name"), tid < 0 ? "process_name" : "thread_name") != 0) continue;
        if (tid >= 0 && num(e, "tid") != tid) continue;
        assert_null(label);
        label = str(args_of(e), "name");
    }
    return label;
}

static size_t count_cat(const cJSON *events, const char *cat) {
    size_t c = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, events) if (strcmp(str(e, "ph"), "X") == 0 && strcmp(str(e, "cat"), cat) == 0) c++;
    return c;
}

static void assert_int_array(const cJSON *arr, int a, int b, int c) {
    assert_true(cJSON_IsArray(arr));
    assert_int_equal(cJSON_GetArraySize(arr), 3);
    assert_int_equal(cJSON_GetArrayItem(arr, 0)->valueint, a);
    assert_int_equal(cJSON_GetArrayItem(arr, 1)->valueint, b);
    assert_int_equal(cJSON_GetArrayItem(arr, 2)->valueint, c);
}

static void test_trace_args_flows_and_track_names(void **state) {
    assert_int_equal(trace_add_flow("ac2g", 1, 0, 0, 0, 1, 0, 0), TRACE_ERR_STATE);
    assert_int_equal(trace_set_track_name(0, 7, "stream 7"), TRACE_ERR_STATE);
    assert_int_equal(trace_is_active(), 0);
    assert_int_equal(trace_begin(*state, 0), TRACE_OK);
    assert_int_equal(trace_is_active(), 1);
    int64_t c = trace_clock_ns();
    double now = trace_now_us();
    assert_true(fabs(trace_us_at(c) - now) < 1000.0); /* the same clock: read microseconds apart */
    assert_true(trace_us_at(c + 5000) - trace_us_at(c) == 5.0);

    assert_int_equal(trace_add_complete_args("k1", "kernel", 10.0, 2.0, 0, 7, 5, "\"stream\": 7, \"grid\": [4, 2, 1]"),
                     TRACE_OK);
    assert_int_equal(trace_add_complete_args("k2", "kernel", 13.0, 1.0, 0, 7, -1, "\"stream\": 7"), TRACE_OK);
    assert_int_equal(trace_add_complete_args("launch", "cuda_runtime", 9.0, 0.5, 1234, 99, 5, ""), TRACE_OK);
    assert_int_equal(trace_add_complete_args("k3", "kernel", 1.0, NAN, 0, 7, -1, NULL), TRACE_ERR_ARG);
    assert_int_equal(trace_add_flow("ac2g", 5, 9.0, 1234, 99, 10.0, 0, 7), TRACE_OK);
    assert_int_equal(trace_add_flow("ac2g", -1, 9.0, 1234, 99, 10.0, 0, 7), TRACE_ERR_ARG);
    assert_int_equal(trace_add_flow("", 6, 9.0, 1234, 99, 10.0, 0, 7), TRACE_ERR_ARG);
    assert_int_equal(trace_set_process_name(0, "GPU 0"), TRACE_OK);
    assert_int_equal(trace_set_process_name(0, "GPU zero"), TRACE_OK); /* renames, no second entry */
    assert_int_equal(trace_set_process_name(0, ""), TRACE_ERR_ARG);
    assert_int_equal(trace_set_track_name(0, 7, "stream 7"), TRACE_OK);
    assert_int_equal(trace_set_track_name(0, 7, NULL), TRACE_OK); /* keeps "stream 7" */
    assert_int_equal(trace_set_track_name(1234, 99, NULL), TRACE_OK);
    assert_int_equal(trace_set_track_name(1234, 99, ""), TRACE_ERR_ARG);
    assert_int_equal(trace_set_thread_name("main"), TRACE_OK);
    assert_int_equal(trace_set_track_name(getpid(), (int64_t)syscall(SYS_gettid), NULL), TRACE_OK);
    assert_int_equal(trace_end(), TRACE_OK);
    assert_int_equal(trace_is_active(), 0);

    cJSON *root = load_trace(trace_last_file());
    const cJSON *events = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    const cJSON *k1 = find_x(events, "k1");
    assert_int_equal((int)num(args_of(k1), "correlation"), 5);
    assert_int_equal((int)num(args_of(k1), "stream"), 7);
    assert_int_array(cJSON_GetObjectItemCaseSensitive(args_of(k1), "grid"), 4, 2, 1);
    const cJSON *k2 = find_x(events, "k2");
    assert_null(cJSON_GetObjectItemCaseSensitive(args_of(k2), "correlation"));
    assert_int_equal((int)num(args_of(k2), "stream"), 7);
    assert_int_equal(cJSON_GetArraySize(args_of(find_x(events, "launch"))), 1);
    assert_int_equal(count_named(events, "k3", -1), 0);

    int starts = 0, ends = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, events) {
        const char *ph = str(e, "ph");
        if (strcmp(ph, "s") != 0 && strcmp(ph, "f") != 0) continue;
        assert_string_equal(str(e, "cat"), "ac2g");
        assert_string_equal(str(e, "name"), "ac2g");
        assert_int_equal((int)num(e, "id"), 5);
        if (ph[0] == 's') {
            starts++;
            assert_true(num(e, "ts") == 9.0 && num(e, "pid") == 1234 && num(e, "tid") == 99);
            assert_null(cJSON_GetObjectItemCaseSensitive(e, "bp"));
        } else {
            ends++;
            assert_true(num(e, "ts") == 10.0 && num(e, "pid") == 0 && num(e, "tid") == 7);
            assert_string_equal(str(e, "bp"), "e");
        }
    }
    assert_int_equal(starts, 1);
    assert_int_equal(ends, 1);

    assert_string_equal(meta_label(events, 0, -1), "GPU zero");
    assert_string_equal(meta_label(events, getpid(), -1), "voxscale rank 0");
    assert_string_equal(meta_label(events, 0, 7), "stream 7");
    assert_string_equal(meta_label(events, 1234, 99), "thread 99");
    assert_string_equal(meta_label(events, getpid(), (double)syscall(SYS_gettid)), "main");
    cJSON_Delete(root);
}

/* ---- GPU activity (gpu_activity.h) ------------------------------------------------------------------------ */

static void test_trace_gpu_begin_declines_without_gpu(void **state) {
    char reason[256] = "";
    /* Without a trace: no. */
    assert_int_equal(trace_gpu_begin(0, reason, sizeof reason), 0);
    assert_true(strlen(reason) > 0);
    assert_int_equal(trace_gpu_begin(0, NULL, 0), 0);

    assert_int_equal(trace_begin(*state, 0), TRACE_OK);
    reason[0] = '\0';
    int rc = trace_gpu_begin(0, reason, sizeof reason);
#ifndef VX_CUDA
    assert_int_equal(rc, 0);
    assert_non_null(strstr(reason, "CUDA"));
#endif
    if (rc == 0) {
        assert_true(strlen(reason) > 0); /* this machine has no GPU (or the build has no CUDA) */
        printf("trace_gpu_begin declined: %s\n", reason);
        assert_int_equal(trace_gpu_begin(0, reason, sizeof reason), 0); /* and keeps declining cleanly */
    } else {
        reason[0] = '\0';
        assert_int_equal(trace_gpu_begin(0, reason, sizeof reason), 0); /* one recording at a time */
        assert_true(strlen(reason) > 0);
    }
    trace_range_push("cpu work", "cpu_op");
    trace_range_pop();
    trace_gpu_flush();
    trace_gpu_end(); /* a no-op when begin declined */
    trace_gpu_end();
    assert_int_equal(trace_end(), TRACE_OK);
    if (rc == 0) assert_true(trace_gpu_kernel_ns(0, 1e12) == 0);

    cJSON *root = load_trace(trace_last_file());
    const cJSON *events = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    assert_int_equal(count_named(events, "cpu work", (double)syscall(SYS_gettid)), 1);
    if (rc == 0) assert_null(meta_label(events, 0, -1)); /* no GPU row without GPU activity */
    check_x_events_nest(events);
    cJSON_Delete(root);
}

/* Synthetic CUPTI-like records of one training step: CUPTI's clock runs offset_ns ahead of the trace's (as
 * CLOCK_REALTIME would), runtime calls happen inside a CPU range on this thread, kernels on two streams. */
#define OFFSET_NS ((int64_t)1700000000000000000)

static TraceGpuRecord api(TraceGpuKind kind, const char *name, int64_t clock_ns, int64_t dur_ns, uint32_t corr,
                          uint32_t tid) {
    return (TraceGpuRecord){.kind = kind, .name = name, .start_ns = (uint64_t)(clock_ns + OFFSET_NS),
                            .end_ns = (uint64_t)(clock_ns + OFFSET_NS + dur_ns), .correlation = corr,
                            .pid = (uint32_t)getpid(), .tid = tid};
}

static TraceGpuRecord gpu(TraceGpuKind kind, const char *name, int64_t clock_ns, int64_t dur_ns, uint32_t corr,
                          uint32_t device, uint32_t stream) {
    return (TraceGpuRecord){.kind = kind, .name = name, .start_ns = (uint64_t)(clock_ns + OFFSET_NS),
                            .end_ns = (uint64_t)(clock_ns + OFFSET_NS + dur_ns), .correlation = corr,
                            .device = device, .context = 1, .stream = stream, .grid = {128, 2, 1},
                            .block = {256, 1, 1}, .registers = 40, .static_shared = 1024, .dynamic_shared = 2048};
}

static double at_us(int64_t clock_ns) { return trace_us_at(clock_ns); }

static void test_trace_gpu_events_from_records(void **state) {
    const uint32_t me = (uint32_t)syscall(SYS_gettid);
    TraceGpuRecord none[1] = {{0}};
    assert_int_equal(trace_gpu_add_events(none, 1, 0, 0), TRACE_ERR_STATE);

    assert_int_equal(trace_begin(*state, 0), TRACE_OK);
    assert_int_equal(trace_set_thread_name("main"), TRACE_OK);
    trace_range_push("step", "user_annotation");
    int64_t t = trace_clock_ns() + 1000; /* inside the range: the records below take 60 us, the range 2 ms */
    struct timespec pause = {0, 2000000};
    nanosleep(&pause, NULL);
    trace_range_pop();

    TraceGpuRecord r[] = {
        /* 0-4: launches and what they launched */
        api(TRACE_GPU_RUNTIME, "cudaLaunchKernel", t, 3000, 11, me),
        api(TRACE_GPU_RUNTIME, "cudaLaunchKernel", t + 4000, 3000, 12, me),
        api(TRACE_GPU_RUNTIME, "cudaLaunchKernel", t + 8000, 3000, 13, me),
        api(TRACE_GPU_RUNTIME, "cudaMemcpyAsync", t + 12000, 3000, 14, me),
        api(TRACE_GPU_RUNTIME, "cudaMemsetAsync", t + 16000, 2000, 15, me),
        /* 5: a library's driver-API launch */
        api(TRACE_GPU_DRIVER, "cuLaunchKernel", t + 19000, 2000, 16, me),
        /* 6: a CUDA graph: one launch, two kernels */
        api(TRACE_GPU_RUNTIME, "cudaGraphLaunch", t + 22000, 4000, 17, me),
        /* 7: a call that launches nothing */
        api(TRACE_GPU_RUNTIME, "cudaStreamSynchronize", t + 27000, 30000, 18, me),
        /* 8: a launch whose kernel CUPTI could not time */
        api(TRACE_GPU_RUNTIME, "cudaLaunchKernel", t + 58000, 1000, 19, me),
        /* 9, 10: the same correlation id from the runtime and (inside it) the driver: the runtime call starts
         * the flow */
        api(TRACE_GPU_RUNTIME, "cudaLaunchKernelExC", t + 60000, 3000, 20, me),
        api(TRACE_GPU_DRIVER, "cuLaunchKernelEx", t + 61000, 1000, 20, me),
        /* 11: another thread */
        api(TRACE_GPU_RUNTIME, "cudaMalloc", t + 1000, 5000, 22, 424242),
        /* 12-: device work. Stream 7: k11, memcpy, memset, graph kernels, k20; stream 13: k12 (escaping), k13,
         * the driver-launched kernel; device 1: a kernel with no launch on record */
        gpu(TRACE_GPU_KERNEL, "void gemm<float, 3>(float const*, int)", t + 5000, 10000, 11, 0, 7),
        gpu(TRACE_GPU_KERNEL, "k\"quoted\"\\name", t + 6000, 2000, 12, 0, 13),
        gpu(TRACE_GPU_KERNEL, "k13", t + 10000, 2000, 13, 0, 13),
        gpu(TRACE_GPU_MEMCPY, NULL, t + 16000, 1000, 14, 0, 7),
        gpu(TRACE_GPU_MEMSET, NULL, t + 18000, 500, 15, 0, 7),
        gpu(TRACE_GPU_KERNEL, "_Z6cudnnKernelPf", t + 21000, 1000, 16, 0, 13),
        gpu(TRACE_GPU_KERNEL, "graph_b", t + 30000, 1000, 17, 0, 7), /* listed first, runs second */
        gpu(TRACE_GPU_KERNEL, "graph_a", t + 27000, 2000, 17, 0, 7),
        gpu(TRACE_GPU_KERNEL, "untimed", 0, 0, 19, 0, 7),
        gpu(TRACE_GPU_KERNEL, "k20", t + 64000, 1000, 20, 0, 7),
        gpu(TRACE_GPU_KERNEL, "other_device", t + 3000, 1000, 0, 1, 3),
    };
    size_t n = sizeof r / sizeof r[0];
    r[15].bytes = 1 << 20;
    r[15].copy_kind = 1; /* HtoD */
    r[15].src_kind = 1;  /* Pageable */
    r[15].dst_kind = 3;  /* Device */
    r[16].bytes = 4096;
    r[16].memory_kind = 3;
    r[20].start_ns = r[20].end_ns = 0; /* untimed: CUPTI reports 0 for both */
    assert_int_equal(trace_gpu_add_events(r, n, OFFSET_NS, 0), (int)n - 1);
    assert_int_equal(trace_end(), TRACE_OK);

    cJSON *root = load_trace(trace_last_file());
    const cJSON *events = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    check_x_events_nest(events); /* launches inside the CPU range, kernels of one stream in sequence */
    assert_int_equal(count_cat(events, "kernel"), 8);
    assert_int_equal(count_cat(events, "gpu_memcpy"), 1);
    assert_int_equal(count_cat(events, "gpu_memset"), 1);
    assert_int_equal(count_cat(events, "cuda_runtime"), 10);
    assert_int_equal(count_cat(events, "cuda_driver"), 2);
    assert_int_equal(count_named(events, "untimed", -1), 0);
    const double eps = 1.5e-3, pid = getpid();

    /* Kernels: name as given, pid = device, tid = stream, on the trace's clock, with Kineto's args. */
    const cJSON *k = find_x(events, "void gemm<float, 3>(float const*, int)");
    assert_string_equal(str(k, "cat"), "kernel");
    assert_true(num(k, "pid") == 0 && num(k, "tid") == 7);
    assert_true(fabs(num(k, "ts") - at_us(t + 5000)) < eps);
    assert_true(fabs(num(k, "dur") - 10.0) < eps);
    const cJSON *a = args_of(k);
    assert_int_equal((int)num(a, "correlation"), 11);
    assert_int_equal((int)num(a, "stream"), 7);
    assert_int_equal((int)num(a, "device"), 0);
    assert_int_equal((int)num(a, "context"), 1);
    assert_int_equal((int)num(a, "registers per thread"), 40);
    assert_int_equal((int)num(a, "shared memory"), 3072);
    assert_int_array(cJSON_GetObjectItemCaseSensitive(a, "grid"), 128, 2, 1);
    assert_int_array(cJSON_GetObjectItemCaseSensitive(a, "block"), 256, 1, 1);
    assert_true(num(find_x(events, "k\"quoted\"\\name"), "tid") == 13);
    assert_true(num(find_x(events, "other_device"), "pid") == 1);
    assert_null(cJSON_GetObjectItemCaseSensitive(args_of(find_x(events, "other_device")), "correlation"));

    const cJSON *m = find_x(events, "Memcpy HtoD (Pageable -> Device)");
    assert_string_equal(str(m, "cat"), "gpu_memcpy");
    assert_true(num(m, "pid") == 0 && num(m, "tid") == 7);
    assert_string_equal(str(args_of(m), "kind"), "HtoD");
    assert_true(num(args_of(m), "bytes") == 1048576);
    assert_true(fabs(num(args_of(m), "memory bandwidth (GB/s)") - 1048576 / 1000.0) < 1e-3);
    assert_int_equal((int)num(args_of(m), "correlation"), 14);
    const cJSON *ms = find_x(events, "Memset (Device)");
    assert_string_equal(str(ms, "cat"), "gpu_memset");
    assert_true(num(args_of(ms), "bytes") == 4096);

    /* Runtime calls on the launching thread, with their correlation id. */
    const cJSON *sync = find_x(events, "cudaStreamSynchronize");
    assert_string_equal(str(sync, "cat"), "cuda_runtime");
    assert_true(num(sync, "pid") == pid && num(sync, "tid") == me);
    assert_int_equal((int)num(args_of(sync), "correlation"), 18);
    assert_true(fabs(num(sync, "ts") - at_us(t + 27000)) < eps);
    assert_true(num(find_x(events, "cudaMalloc"), "tid") == 424242);
    assert_string_equal(str(find_x(events, "cuLaunchKernel"), "cat"), "cuda_driver");

    /* Flows: one s/f pair per launch that launched something timed, s on the launch, f (bp "e") on the earliest
     * of its GPU records. */
    struct {
        int id;
        double s_ts, f_ts, f_tid;
        int s, f;
    } want[] = {
        {11, at_us(t), at_us(t + 5000), 7, 0, 0},           {12, at_us(t + 4000), at_us(t + 6000), 13, 0, 0},
        {13, at_us(t + 8000), at_us(t + 10000), 13, 0, 0},  {14, at_us(t + 12000), at_us(t + 16000), 7, 0, 0},
        {15, at_us(t + 16000), at_us(t + 18000), 7, 0, 0},  {16, at_us(t + 19000), at_us(t + 21000), 13, 0, 0},
        {17, at_us(t + 22000), at_us(t + 27000), 7, 0, 0},  {20, at_us(t + 60000), at_us(t + 64000), 7, 0, 0},
    };
    size_t n_want = sizeof want / sizeof want[0];
    const cJSON *e;
    cJSON_ArrayForEach(e, events) {
        const char *ph = str(e, "ph");
        if (strcmp(ph, "s") != 0 && strcmp(ph, "f") != 0) continue;
        assert_string_equal(str(e, "cat"), "ac2g");
        int id = (int)num(e, "id");
        size_t i = 0;
        while (i < n_want && want[i].id != id) i++;
        assert_true(i < n_want); /* no flow for 18 (launches nothing), 19 (untimed) or device 1's kernel */
        if (ph[0] == 's') {
            want[i].s++;
            assert_true(num(e, "pid") == pid && num(e, "tid") == me);
            assert_true(fabs(num(e, "ts") - want[i].s_ts) < eps);
        } else {
            want[i].f++;
            assert_string_equal(str(e, "bp"), "e");
            assert_true(num(e, "pid") == 0 && num(e, "tid") == want[i].f_tid);
            assert_true(fabs(num(e, "ts") - want[i].f_ts) < eps);
        }
        /* Each end binds to an X event on its track that holds its ts and carries its correlation id. */
        const cJSON *x;
        int holders = 0;
        cJSON_ArrayForEach(x, events) {
            if (strcmp(str(x, "ph"), "X") != 0 || num(x, "pid") != num(e, "pid") || num(x, "tid") != num(e, "tid"))
                continue;
            const cJSON *corr = cJSON_GetObjectItemCaseSensitive(args_of(x), "correlation");
            if (corr && corr->valueint == id && num(x, "ts") <= num(e, "ts") + eps &&
                num(e, "ts") <= num(x, "ts") + num(x, "dur") + eps)
                holders++;
        }
        assert_int_equal(holders, 1);
    }
    for (size_t i = 0; i < n_want; i++) {
        assert_int_equal(want[i].s, 1);
        assert_int_equal(want[i].f, 1);
    }

    /* Rows and tracks: GPU rows by device, a track per stream, host threads listed, names a thread gave kept. */
    assert_string_equal(meta_label(events, 0, -1), "GPU 0");
    assert_string_equal(meta_label(events, 1, -1), "GPU 1");
    assert_string_equal(meta_label(events, 0, 7), "stream 7");
    assert_string_equal(meta_label(events, 0, 13), "stream 13");
    assert_string_equal(meta_label(events, 1, 3), "stream 3");
    assert_string_equal(meta_label(events, pid, me), "main");
    assert_string_equal(meta_label(events, pid, 424242), "thread 424242");
    assert_null(meta_label(events, 0, 3));
    cJSON_Delete(root);
}

static void test_trace_gpu_kernel_time(void **state) {
    assert_int_equal(trace_begin(*state, 0), TRACE_OK);
    int64_t t = trace_clock_ns();
    TraceGpuRecord r[] = {
        gpu(TRACE_GPU_KERNEL, "a", t + 100000, 200000, 1, 0, 7), /* [100, 300) us after t */
        gpu(TRACE_GPU_KERNEL, "b", t + 250000, 150000, 2, 0, 8), /* [250, 400), concurrent with a */
        gpu(TRACE_GPU_MEMCPY, NULL, t + 200000, 100000, 3, 0, 7), /* not a kernel */
        gpu(TRACE_GPU_KERNEL, "untimed", 0, 0, 4, 0, 7),
        api(TRACE_GPU_RUNTIME, "cudaLaunchKernel", t, 50000, 1, 1),
    };
    r[3].start_ns = r[3].end_ns = 0;
    double t_us = at_us(t);
    assert_true(trace_gpu_kernel_ns_of(r, 5, OFFSET_NS, t_us + 200, t_us + 350) == 200000); /* 100 + 100 us */
    assert_true(trace_gpu_kernel_ns_of(r, 5, OFFSET_NS, t_us, t_us + 1000) == 350000);
    assert_true(trace_gpu_kernel_ns_of(r, 5, OFFSET_NS, t_us + 400, t_us + 1000) == 0);
    assert_true(trace_gpu_kernel_ns_of(r, 5, OFFSET_NS, t_us + 300, t_us + 200) == 0);
    assert_true(trace_gpu_kernel_ns_of(r, 5, 0, t_us, t_us + 1000) == 0); /* wrong offset: nowhere near */
    assert_int_equal(trace_end(), TRACE_OK);
    /* After the trace, on its time base still. */
    assert_true(trace_gpu_kernel_ns_of(r, 5, OFFSET_NS, t_us + 200, t_us + 350) == 200000);
}

static void test_trace_gpu_kind_names(void **state) {
    (void)state;
    assert_string_equal(trace_gpu_memcpy_kind_name(1), "HtoD");
    assert_string_equal(trace_gpu_memcpy_kind_name(2), "DtoH");
    assert_string_equal(trace_gpu_memcpy_kind_name(8), "DtoD");
    assert_string_equal(trace_gpu_memcpy_kind_name(10), "PtoP");
    assert_string_equal(trace_gpu_memcpy_kind_name(11), "Unknown");
    assert_string_equal(trace_gpu_memory_kind_name(1), "Pageable");
    assert_string_equal(trace_gpu_memory_kind_name(2), "Pinned");
    assert_string_equal(trace_gpu_memory_kind_name(3), "Device");
    assert_string_equal(trace_gpu_memory_kind_name(99), "Unknown");
}

/* On a machine with a GPU: real CUPTI records of a memset and a copy, launched inside a CPU range. Skipped
 * where trace_gpu_begin declines (no GPU, CPU build); a failure instead under VX_REQUIRE_GPU=1. */
static void test_trace_gpu_live(void **state) {
    assert_int_equal(trace_begin(*state, 0), TRACE_OK);
    assert_int_equal(trace_set_thread_name("main"), TRACE_OK);
    char reason[256];
    if (!trace_gpu_begin(0, reason, sizeof reason)) {
        assert_int_equal(trace_end(), TRACE_OK);
        if (vx_require_gpu()) fail_msg("trace_gpu_begin declined (%s) and VX_REQUIRE_GPU=1", reason);
        skip();
    }
#ifdef VX_CUDA
    const size_t bytes = 1 << 20;
    void *d = NULL, *h = malloc(bytes);
    trace_range_push("work", "user_annotation");
    assert_int_equal(cudaMalloc(&d, bytes), cudaSuccess);
    assert_int_equal(cudaMemsetAsync(d, 0, bytes, 0), cudaSuccess);
    assert_int_equal(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    trace_range_pop();
    trace_gpu_end();
    assert_int_equal(trace_end(), TRACE_OK);
    cudaFree(d);
    free(h);

    cJSON *root = load_trace(trace_last_file());
    const cJSON *events = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    check_x_events_nest(events); /* the runtime calls inside "work" on this thread */
    const cJSON *work = find_x(events, "work");
    double w0 = num(work, "ts"), w1 = w0 + num(work, "dur"), me = (double)syscall(SYS_gettid);
    const cJSON *memset_call = find_x(events, "cudaMemsetAsync"), *copy_call = find_x(events, "cudaMemcpy");
    assert_true(num(memset_call, "tid") == me && num(copy_call, "tid") == me);
    assert_true(num(memset_call, "pid") == (double)getpid());
    assert_true(num(memset_call, "ts") >= w0 && num(copy_call, "ts") + num(copy_call, "dur") <= w1);
    const cJSON *copy = find_x(events, "Memcpy DtoH (Device -> Pageable)");
    assert_string_equal(str(args_of(copy), "kind"), "DtoH");
    assert_true(num(args_of(copy), "bytes") == (double)bytes);
    assert_true(num(copy, "ts") >= w0 && num(copy, "ts") <= w1); /* the device's clock lines up with ours */
    assert_int_equal(count_cat(events, "gpu_memset"), 1);
    assert_string_equal(meta_label(events, 0, -1), "GPU 0");
    assert_non_null(meta_label(events, num(copy, "pid"), num(copy, "tid")));
    /* A flow from each call to its device work. */
    int flows = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, events) {
        if (strcmp(str(e, "ph"), "s") != 0) continue;
        double id = num(e, "id");
        if (id == num(args_of(memset_call), "correlation") || id == num(args_of(copy_call), "correlation")) flows++;
    }
    assert_int_equal(flows, 2);
    cJSON_Delete(root);
#endif
}


/* The CUPTI version gate: the build's CUDA major, a minor at least the build's and no newer than the last one whose
 * record layouts were checked (13.5: each newer record only appends fields), each refusal one line that says why. */
static void test_cupti_newer_minors_are_accepted(void **state) {
    (void)state;
    char why[600];
    const unsigned built = 130001; /* CUDA 13.0 update 1, this build's headers */
    const unsigned ok[] = {130001, 130000, 130002, 130100, 130202, 130300, 130500, 130599};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) assert_int_equal(trace_cupti_version_ok(built, ok[i], why, sizeof why), 1);
    const struct {
        unsigned loaded;
        const char *says;
    } no[] = {{130600, "newer than the last one whose record layouts were checked"},
              {140000, "another CUDA major version"},
              {120900, "before CUDA 13"},
              {0, "before CUDA 13"}};
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        why[0] = '\0';
        assert_int_equal(trace_cupti_version_ok(built, no[i].loaded, why, sizeof why), 0);
        assert_non_null(strstr(why, no[i].says));
        assert_null(strchr(why, '\n'));
    }
    assert_int_equal(trace_cupti_version_ok(130200, 130100, why, sizeof why), 0); /* an older minor than the build's */
    assert_non_null(strstr(why, "an older CUDA minor version"));
}

#ifdef VX_CUDA
/* The CUPTI side of the conversion, on hand-made activity records (no GPU needed to build them): the fields each
 * kind keeps, demangled kernel names, API names without their version suffix, and what is dropped. */
static void test_trace_gpu_records_from_cupti(void **state) {
    (void)state;
    TraceGpuRecord r;
    CUpti_ActivityKernel10 k = {.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, .registersPerThread = 32,
                                .start = 1000, .end = 3500, .deviceId = 1, .contextId = 2, .streamId = 7,
                                .gridX = 64, .gridY = 2, .gridZ = 1, .blockX = 128, .blockY = 1, .blockZ = 1,
                                .staticSharedMemory = 512, .dynamicSharedMemory = 4096, .correlationId = 42,
                                .name = "_Z6conv3dPKfPfi"};
    assert_int_equal(trace_gpu_record_from_cupti(&k, &r), 1);
    assert_int_equal(r.kind, TRACE_GPU_KERNEL);
    assert_string_equal(r.name, "conv3d(float const*, float*, int)");
    assert_true(r.start_ns == 1000 && r.end_ns == 3500);
    assert_true(r.device == 1 && r.context == 2 && r.stream == 7 && r.correlation == 42);
    assert_true(r.grid[0] == 64 && r.grid[1] == 2 && r.grid[2] == 1);
    assert_true(r.block[0] == 128 && r.block[1] == 1 && r.block[2] == 1);
    assert_true(r.registers == 32 && r.static_shared == 512 && r.dynamic_shared == 4096);
    k.name = "plain_c_kernel"; /* not mangled: kept as it is */
    assert_int_equal(trace_gpu_record_from_cupti(&k, &r), 1);
    assert_string_equal(r.name, "plain_c_kernel");

    CUpti_ActivityMemcpy6 m = {.kind = CUPTI_ACTIVITY_KIND_MEMCPY, .copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH,
                               .srcKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE,
                               .dstKind = CUPTI_ACTIVITY_MEMORY_KIND_PINNED, .bytes = 1 << 20, .start = 10,
                               .end = 20, .deviceId = 0, .streamId = 13, .correlationId = 7,
                               .runtimeCorrelationId = 0};
    assert_int_equal(trace_gpu_record_from_cupti(&m, &r), 1);
    assert_int_equal(r.kind, TRACE_GPU_MEMCPY);
    assert_true(r.bytes == 1 << 20 && r.stream == 13 && r.correlation == 7);
    assert_string_equal(trace_gpu_memcpy_kind_name(r.copy_kind), "DtoH");
    assert_string_equal(trace_gpu_memory_kind_name(r.src_kind), "Device");
    assert_string_equal(trace_gpu_memory_kind_name(r.dst_kind), "Pinned");
    m.runtimeCorrelationId = 8; /* the runtime call's id, where there was one */
    assert_int_equal(trace_gpu_record_from_cupti(&m, &r), 1);
    assert_int_equal(r.correlation, 8);

    CUpti_ActivityMemset4 ms = {.kind = CUPTI_ACTIVITY_KIND_MEMSET, .bytes = 256, .start = 5, .end = 6,
                                .streamId = 7, .correlationId = 9, .memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE};
    assert_int_equal(trace_gpu_record_from_cupti(&ms, &r), 1);
    assert_int_equal(r.kind, TRACE_GPU_MEMSET);
    assert_true(r.bytes == 256 && r.correlation == 9);
    assert_string_equal(trace_gpu_memory_kind_name(r.memory_kind), "Device");

    CUpti_ActivityAPI api = {.kind = CUPTI_ACTIVITY_KIND_RUNTIME,
                             .cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, .start = 100, .end = 200,
                             .processId = 1234, .threadId = 5678, .correlationId = 42};
    assert_int_equal(trace_gpu_record_from_cupti(&api, &r), 1);
    assert_int_equal(r.kind, TRACE_GPU_RUNTIME);
    assert_string_equal(r.name, "cudaLaunchKernel");
    assert_true(r.pid == 1234 && r.tid == 5678 && r.correlation == 42 && r.start_ns == 100 && r.end_ns == 200);
    api.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020;
    assert_int_equal(trace_gpu_record_from_cupti(&api, &r), 1);
    assert_string_equal(r.name, "cudaMemcpyAsync");

    /* Driver API: kernel launches (a library's own) are kept, other driver calls are not. */
    api.kind = CUPTI_ACTIVITY_KIND_DRIVER;
    api.cbid = CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx;
    assert_int_equal(trace_gpu_record_from_cupti(&api, &r), 1);
    assert_int_equal(r.kind, TRACE_GPU_DRIVER);
    assert_string_equal(r.name, "cuLaunchKernelEx");
    api.cbid = CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize;
    assert_int_equal(trace_gpu_record_from_cupti(&api, &r), 0);

    CUpti_Activity other = {.kind = CUPTI_ACTIVITY_KIND_MARKER};
    assert_int_equal(trace_gpu_record_from_cupti(&other, &r), 0);
}
#endif

#ifdef VX_CUDA
/* libcupti is loaded, not linked (the binary's DT_NEEDED has no libcupti): the first load finds the library the build
 * found (the toolkit's, by its absolute path), ahead of a wheel's on the library path, unless VX_CUPTI_LIB says. */
static void test_cupti_is_loaded_from_the_builds_toolkit(void **state) {
    (void)state;
    char why[700] = "";
    const CuptiFunctions *f = cupti_load(why, sizeof why);
    if (!f) fail_msg("%s", why);
    const char *path = cupti_loaded_path();
    print_message("CUPTI loaded from %s\n", path);
    if (!getenv("VX_CUPTI_LIB")) assert_true(path[0] == '/');
    assert_non_null(strstr(path, "libcupti.so.13"));
    uint32_t v = 0;
    assert_int_equal(f->cuptiGetVersion(&v), CUPTI_SUCCESS);
    assert_int_equal(trace_cupti_version_ok(CUPTI_API_VERSION, v, why, sizeof why), 1);
}
#endif

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_trace_nested_ranges_round_trip, tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_trace_inactive_is_ignored, tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_trace_device_properties, tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_trace_args_flows_and_track_names, tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_trace_gpu_begin_declines_without_gpu, tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_trace_gpu_events_from_records, tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_trace_gpu_kernel_time, tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test(test_trace_gpu_kind_names),
        cmocka_unit_test(test_cupti_newer_minors_are_accepted),
        cmocka_unit_test_setup_teardown(test_trace_gpu_live, tmpdir_setup, tmpdir_teardown),
#ifdef VX_CUDA
        cmocka_unit_test(test_trace_gpu_records_from_cupti),
        cmocka_unit_test(test_cupti_is_loaded_from_the_builds_toolkit),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
