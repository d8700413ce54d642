/* test_trace.c: unit tests of the Chrome trace writer: nested ranges from several threads written, gunzipped
 * and parsed back with cJSON; the PyTorch-profiler top-level keys; per-thread nesting; naming and atomic
 * writing of the file; and that ranges outside a trace are ignored and cost next to nothing. Events for the
 * GPU side: args, flows and track names. */
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

#include "tmpdir.h"

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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_trace_nested_ranges_round_trip, tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_trace_inactive_is_ignored, tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_trace_device_properties, tmpdir_setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_trace_args_flows_and_track_names, tmpdir_setup, tmpdir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
