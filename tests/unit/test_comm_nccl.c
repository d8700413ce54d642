/* test_comm_nccl.c: the NCCL communicator (src/parallel/comm_nccl.cu) on a GPU.
 * In this process, one rank (world 1, as VX_COMM=nccl runs it): every collective on device buffers against a host
 * reference (with one rank an all-reduce or broadcast leaves the buffer as it was and reduce-scatter/all-gather
 * copy send to recv; exact comparisons), counts of 0, the order against the compute stream in both directions (a
 * kernel writes the buffer just before the collective, another rewrites it just after; each direction made to fail
 * visibly if broken), comm_wait not blocking the host while the collective cannot run, a collective seen finished
 * by comm_test and by the watchdog long before comm_wait, allreduce_host, and close.
 * In child processes (this binary re-run with --child): the watchdog ending a rank whose collective never completes
 * (exit 3 with its line, long before the collective could have run); and where two ranks can run (two GPUs, or
 * NCCL 2.30 or newer sharing one with NCCL_MULTI_RANK_GPU_ENABLE=1), two ranks whose sums, averages, broadcast,
 * reduce-scatter blocks and all-gather order are checked exactly (what one rank cannot check), and a peer that
 * never joins a collective (the real hang, ended by the watchdog).
 * CUDA Graph capture (--compile with ranks): a collective captured between two kernels and replayed back to back,
 * then with new data (one rank here, two in children where they fit: averages exact), nothing queried inside the
 * capture, and a replay held behind the compute stream ended by the watchdog (exit 3, "graph replay of ...").
 * The captured collective is an average: with one rank NCCL enqueues nothing for an in-place sum (the buffer already
 * holds it) but does launch its kernel for an average (a pre-multiplied sum), so one rank captures a real NCCL
 * launch; the trainer's one-rank runs (in-place sums) capture only the stream forks, joins and the watchdog's part.
 * Without a usable GPU it prints one line, "skipped: no CUDA device (<reason>)", and exits 0 (a CUDA build without
 * NCCL: "skipped: this build has no NCCL"); VX_REQUIRE_GPU=1 makes either a failure. `--list` names the tests;
 * `test_comm_nccl PATTERN...` runs the matching ones. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "elementwise/elementwise.h"
#include "parallel/comm.h"
#include "require_gpu.h"
#include "test_select.h"

#ifdef VX_NCCL
#include <cuda_runtime.h>
#include <fcntl.h>
#include <nccl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"
#include "parallel/launch.h"

extern char **environ;

static const Backend *gpu;
static Comm *comm; /* the one-rank communicator of this process */

/* ---- helpers ---------------------------------------------------------------------------------------------- */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Values exact in float, so sums and halves of two of them are exact too: multiples of 1/2 in [-256, 256). */
static float value(long i, int rank) { return (float)((i * 7 + rank * 3) % 1024 - 512) * 0.5f; }
static float *pattern(long n, int rank) {
    float *h = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (long i = 0; i < n; i++) h[i] = value(i, rank);
    return h;
}
static float *dalloc(long n) {
    float *d = gpu->alloc(sizeof(float) * (size_t)(n ? n : 1));
    gpu->zero(d, sizeof(float) * (size_t)n);
    return d;
}
static float *dput(const float *h, long n) {
    float *d = dalloc(n);
    gpu->copy_to_device(d, h, sizeof(float) * (size_t)n);
    return d;
}
/* 1 when device buffer d holds exactly want[0..n); prints the first difference otherwise. */
static int same(const char *what, const float *d, const float *want, long n) {
    float *h = malloc(sizeof(float) * (size_t)(n ? n : 1));
    gpu->copy_to_host(h, d, sizeof(float) * (size_t)n);
    long bad = -1;
    for (long i = 0; i < n && bad < 0; i++)
        if (memcmp(&h[i], &want[i], sizeof(float)) != 0) bad = i;
    if (bad >= 0) fprintf(stderr, "%s: element %ld is %g, expected %g\n", what, bad, h[bad], want[bad]);
    free(h);
    return bad < 0;
}

/* Holds the compute stream until *release is set (or limit_s passes): a host function on a side stream that the
 * compute stream is made to wait for, through the backend's own event entries. */
typedef struct {
    volatile int release;
    double limit_s;
} Hold;
static void CUDART_CB hold_fn(void *arg) {
    Hold *h = arg;
    const double end = now_s() + h->limit_s;
    while (!h->release && now_s() < end) usleep(1000);
}
static cudaStream_t hold_compute(Hold *h) {
    cudaStream_t side = NULL;
    void *ev = gpu->event_create();
    if (cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) != cudaSuccess ||
        cudaLaunchHostFunc(side, hold_fn, h) != cudaSuccess || cudaEventRecord((cudaEvent_t)ev, side) != cudaSuccess) {
        fprintf(stderr, "cannot hold the compute stream: %s\n", cudaGetErrorString(cudaGetLastError()));
        exit(70); /* a child has no cmocka to report to; in the test process this fails the binary */
    }
    gpu->event_wait(ev);
    gpu->event_destroy(ev);
    return side;
}

static int child_fail(int rank, const char *what, const float *got, const float *want, long n);

/* ---- one rank, in this process ---------------------------------------------------------------------------- */

static void test_collectives(void **state) {
    (void)state;
    const long n = 1000003, m = 4099;
    float *h = pattern(n, 0), *D = dput(h, n), *R = dalloc(n), *G = dalloc(m);
    comm_wait(comm, comm_allreduce(comm, D, (size_t)n, COMM_SUM, "test sum"), NULL);
    assert_true(same("allreduce sum", D, h, n));
    comm_wait(comm, comm_allreduce(comm, D, (size_t)n, COMM_AVG, "test average"), NULL);
    assert_true(same("allreduce average", D, h, n));
    comm_wait(comm, comm_broadcast(comm, D, (size_t)n, 0, "test broadcast"), NULL);
    assert_true(same("broadcast", D, h, n));
    comm_wait(comm, comm_reduce_scatter(comm, D, R, (size_t)n, COMM_SUM, "test reduce-scatter"), NULL);
    assert_true(same("reduce-scatter", R, h, n));
    comm_wait(comm, comm_all_gather(comm, D, G, (size_t)m, "test all-gather"), NULL);
    assert_true(same("all-gather", G, h, m));
    comm_wait(comm, comm_barrier(comm, "test barrier"), NULL);
    /* nothing to move still yields a work to wait for */
    comm_wait(comm, comm_allreduce(comm, D, 0, COMM_SUM, "empty"), NULL);
    comm_wait(comm, comm_reduce_scatter(comm, D, R, 0, COMM_SUM, "empty"), NULL);
    CommTimes t = {1, 1};
    comm_wait(comm, comm_all_gather(comm, D, G, 0, "empty"), &t);
    assert_true(t.start_ns == 0 && t.end_ns == 0); /* nccl: the kernels reach the trace through CUPTI */
    assert_true(same("untouched by empty collectives", D, h, n));
    free(h);
    gpu->release(D), gpu->release(R), gpu->release(G);
}

/* Before: the compute stream is kept busy, then doubles S; the collective (out of place, S -> E) must copy the
 * doubled values. A long collective A goes first on the communication stream, so that a collective that did not
 * wait for compute would still start well before the doubling ends. After: right after comm_wait the compute
 * stream halves E; had it not waited, it would halve E (zeros) while A is still running, and the copy would then
 * overwrite it with the doubled values. Either break gives E != the pattern. */
static void test_order_against_compute(void **state) {
    (void)state;
    const long n = 1L << 22, big = 1L << 26;
    float *h = pattern(n, 0), *S = dput(h, n), *E = dalloc(n), *A = dalloc(big), *AR = dalloc(big);
    for (int round = 0; round < 3; round++) {
        gpu->zero(E, sizeof(float) * (size_t)n);
        gpu->copy_to_device(S, h, sizeof(float) * (size_t)n);
        for (int i = 0; i < 100; i++) gpu->elementwise->scale(n, S, 1.0f); /* a millisecond or so of compute */
        gpu->elementwise->scale(n, S, 2.0f);
        CommWork *a = comm_all_gather(comm, A, AR, (size_t)big, "the long collective");
        CommWork *b = comm_reduce_scatter(comm, S, E, (size_t)n, COMM_SUM, "the ordered collective");
        comm_wait(comm, b, NULL);
        gpu->elementwise->scale(n, E, 0.5f);
        comm_wait(comm, a, NULL);
        assert_true(same("collective ordered between two kernels", E, h, n));
    }
    free(h);
    gpu->release(S), gpu->release(E), gpu->release(A), gpu->release(AR);
}

/* comm_wait orders streams and returns: with the compute stream held, the collective cannot start, and the host
 * still goes on; comm_test says 0 until the hold ends. */
static void test_wait_does_not_block(void **state) {
    (void)state;
    const long n = 1 << 20;
    float *h = pattern(n, 0), *D = dput(h, n);
    Hold hold = {0, 30.0};
    cudaStream_t side = hold_compute(&hold);
    const double t0 = now_s();
    CommWork *w = comm_allreduce(comm, D, (size_t)n, COMM_SUM, "held");
    assert_int_equal(comm_test(comm, w), 0);
    usleep(300 * 1000);
    assert_int_equal(comm_test(comm, w), 0);
    comm_wait(comm, w, NULL);
    assert_true(now_s() - t0 < 5.0); /* returned while the collective could not have run */
    hold.release = 1;
    gpu->synchronize();
    assert_true(same("after the hold", D, h, n));
    cudaStreamSynchronize(side);
    cudaStreamDestroy(side);
    free(h);
    gpu->release(D);
}

/* A collective seen finished (comm_test), then left for half a second, so the watchdog's sweeps (every 100 ms) have
 * seen its event fire too, is still the caller's to wait for: the watchdog may not free it first. */
static void test_finished_long_before_wait(void **state) {
    (void)state;
    const long n = 4096;
    float *h = pattern(n, 0), *D = dput(h, n);
    for (int i = 0; i < 3; i++) {
        CommWork *w = comm_broadcast(comm, D, (size_t)n, 0, "finished early");
        const double end = now_s() + 10.0;
        while (!comm_test(comm, w)) {
            assert_true(now_s() < end);
            usleep(1000);
        }
        usleep(500 * 1000);
        assert_int_equal(comm_test(comm, w), 1);
        comm_wait(comm, w, NULL);
    }
    gpu->synchronize();
    assert_true(same("after late waits", D, h, n));
    free(h);
    gpu->release(D);
}

static void test_allreduce_host(void **state) {
    (void)state;
    float v[5] = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f};
    const float want[5] = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f};
    for (int i = 0; i < 200; i++) {
        comm_allreduce_host(comm, v, 5, i % 2 ? COMM_AVG : COMM_SUM, "the step's losses");
        assert_memory_equal(v, want, sizeof v);
    }
    comm_allreduce_host(comm, v, 0, COMM_SUM, "nothing");
    float *many = pattern(4096, 0), *ref = pattern(4096, 0);
    comm_allreduce_host(comm, many, 4096, COMM_SUM, "the most it stages");
    assert_memory_equal(many, ref, 4096 * sizeof(float));
    free(many), free(ref);
}

/* ---- CUDA Graph capture ----------------------------------------------------------------------------------- */

/* Captures, on the compute stream: D = X, D *= 2 (compute before), the all-reduce of D (average), OUT += D (compute
 * after). Checks what holds inside a capture: the collective is not seen finished, and the capture counts it. */
static void *capture_sum(Comm *c, const float *X, float *D, float *OUT, long n, int *bad) {
    comm_capture_begin(c);
    gpu->graph_capture_begin();
    gpu->elementwise->accumulate(DT_F32, n, X, D, 0.0f);
    gpu->elementwise->scale(n, D, 2.0f);
    CommWork *w = comm_allreduce(c, D, (size_t)n, COMM_AVG, "the captured average");
    if (comm_test(c, w) != 0) fprintf(stderr, "comm_test said finished inside a capture\n"), *bad = 1;
    comm_wait(c, w, NULL);
    gpu->elementwise->accumulate(DT_F32, n, D, OUT, 1.0f);
    char why[256] = "";
    void *graph = gpu->graph_capture_end(why, sizeof why);
    const int captured = comm_capture_end(c);
    if (!graph) fprintf(stderr, "capture failed: %s\n", why), *bad = 1;
    if (captured != 1) fprintf(stderr, "the capture counted %d collectives, not 1\n", captured), *bad = 1;
    return graph;
}

/* Replays the captured average in `rounds` rounds of 3 back-to-back launches (the host does not wait between them),
 * X refilled with pattern(n, world x k + rank) before round k; OUT then holds the sum over the launches of 2 x the
 * ranks' average (exact: multiples of 1/4, small). */
static int replay_sums(Comm *c, int r, int world, int rounds) {
    const long n = 65537;
    float *X = dalloc(n), *D = dalloc(n), *OUT = dalloc(n), *want = calloc((size_t)n, sizeof(float));
    int bad = 0;
    void *graph = capture_sum(c, X, D, OUT, n, &bad);
    if (!graph) return 1;
    for (int k = 0; k < rounds; k++) {
        float *h = pattern(n, world * k + r);
        gpu->copy_to_device(X, h, sizeof(float) * (size_t)n); /* waits for the launches before: X is theirs */
        free(h);
        for (int j = 0; j < 3; j++) {
            gpu->graph_launch(graph);
            comm_replayed(c, "the test's captured average");
        }
        for (int q = 0; q < world; q++) {
            float *hq = pattern(n, world * k + q);
            for (long i = 0; i < n; i++) want[i] += 3.0f * (2.0f * hq[i] / (float)world);
            free(hq);
        }
    }
    gpu->synchronize();
    float *got = malloc(sizeof(float) * (size_t)n);
    gpu->copy_to_host(got, OUT, sizeof(float) * (size_t)n);
    bad |= child_fail(r, "captured all-reduce replayed", got, want, n);
    gpu->graph_destroy(graph);
    free(want), free(got);
    gpu->release(X), gpu->release(D), gpu->release(OUT);
    return bad;
}

static void test_captured_collective_replays(void **state) {
    (void)state;
    assert_true(comm_can_capture(comm));
    assert_int_equal(replay_sums(comm, 0, 1, 3), 0);
    /* an eager collective after the replays is watched and waited for as usual */
    test_finished_long_before_wait(state);
}

/* ---- child processes -------------------------------------------------------------------------------------- */

static DistEnv env_of(int rank, int world, const char *hex) {
    DistEnv e;
    memset(&e, 0, sizeof e);
    e.rank = rank, e.world = world, e.local_rank = rank, e.local_world = world;
    snprintf(e.launcher, sizeof e.launcher, "%s", world > 1 ? "spawn" : "single");
    if (hex) snprintf(e.nccl_id, sizeof e.nccl_id, "%s", hex);
    return e;
}

static int child_fail(int rank, const char *what, const float *got, const float *want, long n) {
    for (long i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0) {
            fprintf(stderr, "rank %d: %s: element %ld is %g, expected %g\n", rank, what, i, got[i], want[i]);
            return 1;
        }
    return 0;
}

/* Two ranks, checked exactly: sum, average, broadcast from rank 1, the reduce-scatter blocks, the all-gather
 * order, a barrier, allreduce_host. */
static int child_sums(Comm *c, int r) {
    const long n = 65537, m = 1000;
    float *x0 = pattern(2 * n, 0), *x1 = pattern(2 * n, 1), *mine = r ? x1 : x0, *want = malloc(sizeof(float) * 2 * n);
    float *got = malloc(sizeof(float) * 2 * n), *D = dput(mine, n), *R = dalloc(m), *G = dalloc(2 * m);
    int bad = 0;
    for (long i = 0; i < n; i++) want[i] = x0[i] + x1[i];
    comm_wait(c, comm_allreduce(c, D, (size_t)n, COMM_SUM, "sum"), NULL);
    gpu->copy_to_host(got, D, sizeof(float) * n);
    bad |= child_fail(r, "allreduce sum", got, want, n);
    gpu->copy_to_device(D, mine, sizeof(float) * n);
    for (long i = 0; i < n; i++) want[i] = (x0[i] + x1[i]) * 0.5f;
    comm_wait(c, comm_allreduce(c, D, (size_t)n, COMM_AVG, "average"), NULL);
    gpu->copy_to_host(got, D, sizeof(float) * n);
    bad |= child_fail(r, "allreduce average", got, want, n);
    gpu->copy_to_device(D, mine, sizeof(float) * n);
    comm_wait(c, comm_broadcast(c, D, (size_t)n, 1, "broadcast from rank 1"), NULL);
    gpu->copy_to_host(got, D, sizeof(float) * n);
    bad |= child_fail(r, "broadcast", got, x1, n);
    gpu->copy_to_device(D, mine, sizeof(float) * 2 * m); /* send: 2 blocks of m */
    for (long i = 0; i < m; i++) want[i] = x0[r * m + i] + x1[r * m + i];
    comm_wait(c, comm_reduce_scatter(c, D, R, (size_t)m, COMM_SUM, "reduce-scatter"), NULL);
    gpu->copy_to_host(got, R, sizeof(float) * m);
    bad |= child_fail(r, "reduce-scatter block", got, want, m);
    for (long i = 0; i < m; i++) want[i] = x0[i], want[m + i] = x1[i];
    comm_wait(c, comm_all_gather(c, D, G, (size_t)m, "all-gather"), NULL);
    gpu->copy_to_host(got, G, sizeof(float) * 2 * m);
    bad |= child_fail(r, "all-gather", got, want, 2 * m);
    comm_wait(c, comm_barrier(c, "barrier"), NULL);
    float v[2] = {r + 1.0f, 2.0f * r}, vs[2] = {3.0f, 2.0f}, va[2] = {1.5f, 1.0f};
    comm_allreduce_host(c, v, 2, COMM_SUM, "host sum");
    bad |= child_fail(r, "allreduce_host sum", v, vs, 2);
    v[0] = r + 1.0f, v[1] = 2.0f * r;
    comm_allreduce_host(c, v, 2, COMM_AVG, "host average");
    bad |= child_fail(r, "allreduce_host average", v, va, 2);
    free(x0), free(x1), free(want), free(got);
    gpu->release(D), gpu->release(R), gpu->release(G);
    return bad;
}

/* The collective that never completes: held behind the compute stream (one rank), or never joined by rank 1. */
static int child_hang(Comm *c, int r, int world) {
    const long n = 1 << 20;
    float *h = pattern(n, r), *D = dput(h, n);
    if (world == 1) {
        static Hold hold = {0, 60.0};
        hold_compute(&hold);
    } else if (r == 1) {
        sleep(60); /* alive but silent: rank 0's kernel waits for it */
        return 0;
    }
    comm_wait(c, comm_allreduce(c, D, (size_t)n, COMM_SUM, "the collective that never completes"), NULL);
    gpu->synchronize(); /* blocks: only the watchdog can end this */
    fprintf(stderr, "rank %d: the collective completed; the watchdog should have ended the rank first\n", r);
    return 1;
}

/* A replay whose collective never runs: the compute stream is held before the launch (one rank). Only the watchdog,
 * watching the replay, can end this. */
static int child_graph_hang(Comm *c, int r) {
    const long n = 1 << 16;
    float *X = dalloc(n), *D = dalloc(n), *OUT = dalloc(n);
    int bad = 0;
    void *graph = capture_sum(c, X, D, OUT, n, &bad);
    if (!graph) return 1;
    static Hold hold = {0, 60.0};
    hold_compute(&hold);
    gpu->graph_launch(graph);
    comm_replayed(c, "the replay that never completes");
    gpu->synchronize(); /* blocks */
    fprintf(stderr, "rank %d: the replay completed; the watchdog should have ended the rank first\n", r);
    return 1;
}

/* --child MODE RANK WORLD DEVICE TIMEOUT [HEX]: one rank of a test in a process of its own; exit 0 passes. */
static int child_main(int argc, char **argv) {
    if (argc < 7) return 64;
    const char *mode = argv[2];
    const int r = atoi(argv[3]), world = atoi(argv[4]), device = atoi(argv[5]);
    char reason[256];
    if (!backend_cuda_init(device, reason, sizeof reason)) {
        fprintf(stderr, "rank %d: no GPU %d: %s\n", r, device, reason);
        return 65;
    }
    gpu = backend_cuda();
    const DistEnv e = env_of(r, world, argc > 7 ? argv[7] : NULL);
    Comm *c = comm_nccl_open(&e, atof(argv[6]));
    const int rc = strcmp(mode, "sums") == 0        ? child_sums(c, r)
                   : strcmp(mode, "graph") == 0     ? replay_sums(c, r, world, 2)
                   : strcmp(mode, "graph_hang") == 0 ? child_graph_hang(c, r)
                                                     : child_hang(c, r, world);
    comm_close(c);
    return rc;
}

/* Starts this binary as a child rank with its output in log; returns its pid. */
static pid_t spawn_child(const char *mode, int r, int world, int device, double timeout_s, const char *hex,
                         const char *log, int share_gpu) {
    char rs[16], ws[16], ds[16], ts[32];
    snprintf(rs, sizeof rs, "%d", r), snprintf(ws, sizeof ws, "%d", world), snprintf(ds, sizeof ds, "%d", device);
    snprintf(ts, sizeof ts, "%g", timeout_s);
    char *args[] = {"test_comm_nccl", "--child", (char *)mode, rs, ws, ds, ts, (char *)hex, NULL};
    if (share_gpu) setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 1), setenv("NCCL_NVLS_ENABLE", "0", 1); /* for it */
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid = -1;
    const int err = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, args, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (share_gpu) unsetenv("NCCL_MULTI_RANK_GPU_ENABLE"), unsetenv("NCCL_NVLS_ENABLE");
    assert_int_equal(err, 0);
    return pid;
}

/* The child's exit code, or -1 (after SIGKILL) when it has not ended within limit_s; *took: its seconds. */
static int reap(pid_t pid, double limit_s, double *took) {
    const double t0 = now_s();
    int status = 0;
    for (;;) {
        const pid_t got = waitpid(pid, &status, WNOHANG);
        if (got == pid) break;
        if (now_s() - t0 > limit_s) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            if (took) *took = now_s() - t0;
            return -1;
        }
        usleep(20 * 1000);
    }
    if (took) *took = now_s() - t0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* 1 when the log holds text (NULL: never; either way the log is shown when it does not). */
static int log_has(const char *log, const char *text) {
    static char buf[1 << 16];
    FILE *f = fopen(log, "r");
    const size_t len = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[len] = '\0';
    const int found = text && strstr(buf, text) != NULL;
    if (!found && text) fprintf(stderr, "--- %s lacks \"%s\":\n%s\n", log, text, buf);
    if (!found && !text) fprintf(stderr, "--- %s:\n%s\n", log, buf);
    return found;
}

/* One rank (child mode `mode`) whose collective, or graph replay, waits behind a compute stream held for 60 s,
 * timeout 1 s: the watchdog must end it with exit 3 and `line` soon after the deadline: the abort path ends the
 * process at once (comm_fail's vx_exit_now), well before the reaper's grace (10 s) would, far from the 60 s. The
 * time includes the child's start (CUDA context, cuDNN, NCCL's init). */
static void watchdog_ends(const char *dir, const char *mode, const char *line) {
    char log[512];
    snprintf(log, sizeof log, "%s/%s.log", dir, mode);
    double took = 0;
    const int rc = reap(spawn_child(mode, 0, 1, 0, 1.0, NULL, log, 0), 40.0, &took);
    fprintf(stderr, "watchdog, one rank (%s): exit %d after %.1f s\n", mode, rc, took);
    assert_int_equal(rc, VX_EXIT_DIST);
    assert_true(took < 9.0); /* the abort path, not the reaper (10 s after the abort began) */
    assert_true(log_has(log, line));
}

static void test_watchdog_one_rank(void **state) {
    watchdog_ends(*state, "hang",
                  "allreduce of the collective that never completes did not finish within the deadline");
}

/* The same for a graph replay: the watchdog watches replays too (comm.h's replayed). */
static void test_watchdog_graph_replay(void **state) {
    watchdog_ends(*state, "graph_hang",
                  "graph replay of the replay that never completes did not finish within the deadline");
}

/* Where two ranks can meet: two GPUs, or one shared by NCCL >= 2.30. Returns 0 (and skips) otherwise. */
static int two_rank_placement(int device[2], int *share) {
    int n_gpus = 0, version = 0;
    cudaGetDeviceCount(&n_gpus);
    ncclGetVersion(&version);
    *share = n_gpus < 2;
    device[0] = 0, device[1] = n_gpus < 2 ? 0 : 1;
    if (n_gpus < 2 && version < 23000) {
        fprintf(stderr, "two ranks need two GPUs or NCCL 2.30 to share one: %d GPU, NCCL %d\n", n_gpus, version);
        return 0;
    }
    return 1;
}

static void run_two_ranks(const char *dir, const char *mode, double timeout_s, int rc_want[2], double limit_s,
                          const char *line0) {
    int device[2], share;
    if (!two_rank_placement(device, &share)) skip();
    char hex[260], why[256], log[2][512];
    assert_true(dist_nccl_unique_id(hex, sizeof hex, why, sizeof why));
    pid_t pid[2];
    for (int r = 0; r < 2; r++) {
        snprintf(log[r], sizeof log[r], "%s/%s.rank%d.log", dir, mode, r);
        pid[r] = spawn_child(mode, r, 2, device[r], timeout_s, hex, log[r], share);
    }
    double took = 0;
    const int rc0 = reap(pid[0], limit_s, &took);
    const int rc1 = reap(pid[1], rc_want[1] < 0 ? 0.0 : limit_s, NULL); /* -1: killed once rank 0 has ended */
    fprintf(stderr, "two ranks (%s): exit %d and %d, rank 0 after %.1f s\n", mode, rc0, rc1, took);
    if (rc0 != rc_want[0] || (rc_want[1] >= 0 && rc1 != rc_want[1])) log_has(log[0], NULL), log_has(log[1], NULL);
    assert_int_equal(rc0, rc_want[0]);
    if (rc_want[1] >= 0) assert_int_equal(rc1, rc_want[1]);
    if (line0) assert_true(log_has(log[0], line0));
}

static void test_two_ranks(void **state) {
    int want[2] = {0, 0};
    run_two_ranks(*state, "sums", 60.0, want, 120.0, NULL);
}

/* Two ranks capture the same all-reduce and replay it twice with new data: the sums, exactly. */
static void test_two_ranks_graph(void **state) {
    int want[2] = {0, 0};
    run_two_ranks(*state, "graph", 60.0, want, 120.0, NULL);
}

/* Rank 1 opens the communicator and then stays silent: rank 0's all-reduce spins on the GPU until the watchdog
 * aborts it (timeout 2 s). Rank 1 is killed afterwards. */
static void test_two_ranks_missing_peer(void **state) {
    int want[2] = {VX_EXIT_DIST, -1};
    run_two_ranks(*state, "hang", 2.0, want, 40.0, "allreduce of the collective that never completes");
}

/* ---- main ------------------------------------------------------------------------------------------------- */

static int open_comm(void **state) {
    (void)state;
    const DistEnv e = env_of(0, 1, NULL);
    comm = comm_nccl_open(&e, 60.0);
    return !(comm && strcmp(comm->name, "nccl") == 0 && comm->device_buffers == 1 && comm->world == 1);
}
static int close_comm(void **state) {
    (void)state;
    comm_close(comm); /* finalize and destroy: a failure here ends the process */
    comm = NULL;
    const size_t left = gpu->bytes_in_use();
    if (left) fprintf(stderr, "test_comm_nccl: %zu bytes still allocated on the device\n", left);
    return left != 0;
}

#include "tmpdir.h"
#define TMP_TEST(f) cmocka_unit_test_setup_teardown(f, tmpdir_setup, tmpdir_teardown)

static int run_comm_tests(int argc, char **argv) {
    const struct CMUnitTest all[] = {
        cmocka_unit_test(test_collectives),          cmocka_unit_test(test_order_against_compute),
        cmocka_unit_test(test_wait_does_not_block),  cmocka_unit_test(test_finished_long_before_wait),
        cmocka_unit_test(test_allreduce_host),       cmocka_unit_test(test_captured_collective_replays),
        TMP_TEST(test_watchdog_one_rank),            TMP_TEST(test_watchdog_graph_replay),
        TMP_TEST(test_two_ranks),                    TMP_TEST(test_two_ranks_graph),
        TMP_TEST(test_two_ranks_missing_peer),
    };
    const size_t n_all = sizeof all / sizeof all[0];
    struct CMUnitTest chosen[sizeof all / sizeof all[0]];
    size_t n;
    const int done = select_tests("test_comm_nccl", argc, argv, all, n_all, chosen, &n);
    if (done >= 0) return done;
    gpu = backend_cuda();
    const int failed = _cmocka_run_group_tests("test_comm_nccl", chosen, n, open_comm, close_comm);
    backend_cuda_shutdown();
    return failed;
}
#endif /* VX_NCCL */

static int not_here(const char *why) {
    if (vx_require_gpu()) {
        printf("FAILED: %s, and VX_REQUIRE_GPU=1 turns the skip into a failure\n", why);
        return 1;
    }
    printf("skipped: %s\n", why);
    return 0;
}

int main(int argc, char **argv) {
#ifdef VX_NCCL
    if (argc > 1 && strcmp(argv[1], "--child") == 0) return child_main(argc, argv);
    if (argc == 2 && strcmp(argv[1], "--list") == 0) return run_comm_tests(argc, argv);
#endif
    char reason[256], why[300];
    if (!backend_cuda_init(0, reason, sizeof reason)) {
        snprintf(why, sizeof why, "no CUDA device (%s)", reason);
        return not_here(why);
    }
    if (!comm_nccl_built()) {
        backend_cuda_shutdown();
        return not_here("this build has no NCCL (make cuda-info says where it was looked for)");
    }
#ifdef VX_NCCL
    return run_comm_tests(argc, argv);
#else
    return 1; /* comm_nccl_built() is 0 without VX_NCCL */
#endif
}
