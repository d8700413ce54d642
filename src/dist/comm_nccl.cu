/* comm_nccl.cu: the communicator of GPU ranks (see comm.h), NCCL on a communication stream of its own.
 *
 * Ordering, without host synchronisation (llm.c's multi_gpu_async_reduce_gradient does the same): a collective
 * records an event on the compute stream (backend event_record), the communication stream waits for it, NCCL runs
 * there, and an event recorded after it is what comm_test queries and what comm_wait makes the compute stream wait
 * for (backend event_wait). So a gradient bucket is reduced while backward goes on with earlier layers, and the
 * optimizer's kernels start only after the last bucket.
 *
 * Failures: the communicator is non-blocking (ncclConfig_t.blocking = 0), so no NCCL call can hang the host;
 * calls that return ncclInProgress are polled with ncclCommGetAsyncError against the deadline. The host never
 * waits for a collective itself (comm_wait only orders streams), so a hung collective would show only later, as a
 * host wait on the compute stream that never returns: a watchdog thread (ProcessGroupNCCL's design) checks every
 * collective in flight against its deadline and NCCL's asynchronous error, and on either aborts the communicator
 * (ncclCommAbort: its kernels end, the other ranks' collectives fail in turn) and ends the process with
 * comm_fail's line, exit 3.
 *
 * CUDA Graph capture (the mixed-precision issue will capture the whole step): NCCL collectives on a captured stream
 * are legal (NCCL >= 2.9), and so are the event record/wait pairs; the watchdog's event queries and the host
 * staging of allreduce_host are not, and must stay outside a captured region. */
#include "dist/comm.h"

#ifdef VX_NCCL
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_check.h"

extern "C" {
#include "core/util.h"
#include "dist/bootstrap.h"
#include "dist/launch.h"
}

#define WATCHDOG_PERIOD_MS 100

struct CommWork {
    cudaEvent_t done; /* recorded on the communication stream after the collective */
    const char *kind;
    char what[160];
    double deadline;
    struct CommWork *next; /* the watchdog's list of collectives in flight */
};

typedef struct {
    ncclComm_t comm;
    cudaStream_t stream;
    int device;
    const Backend *be;
    void *compute_event; /* recorded on the compute stream before each collective */
    float *staging;      /* allreduce_host's floats on the device */
    size_t staging_cap;
    pthread_t watchdog;
    pthread_mutex_t mu;
    int stop, failed;
    struct CommWork *inflight;
} Nccl;

/* A failed NCCL call: the library's own words, then exit 3 (after aborting the communicator, when there is one). */
static void nccl_fail(Comm *c, ncclResult_t r, const char *call, const char *op, const char *what) {
    Nccl *n = (Nccl *)c->impl;
    char why[512];
    snprintf(why, sizeof why, "failed: %s returned %s (%s)", call, ncclGetErrorString(r),
             n && n->comm ? ncclGetLastError(n->comm) : ncclGetLastError(NULL));
    if (n && n->comm) ncclCommAbort(n->comm);
    comm_fail(c, op, what, why);
}

/* Polls a non-blocking communicator until its last call is done (ncclInProgress -> ncclSuccess), within deadline. */
static void settle(Comm *c, const char *op, const char *what, double deadline) {
    Nccl *n = (Nccl *)c->impl;
    ncclResult_t state = ncclInProgress;
    while (state == ncclInProgress) {
        const ncclResult_t r = ncclCommGetAsyncError(n->comm, &state);
        if (r != ncclSuccess) nccl_fail(c, r, "ncclCommGetAsyncError", op, what);
        if (state == ncclInProgress) {
            if (vx_now() > deadline) {
                ncclCommAbort(n->comm);
                comm_fail(c, op, what, "did not finish within the deadline: NCCL never left ncclInProgress");
            }
            usleep(100);
        }
    }
    if (state != ncclSuccess) nccl_fail(c, state, "the NCCL call", op, what);
}

#define NCCL_CALL(c, call, op, what)                                                                           \
    do {                                                                                                       \
        const ncclResult_t r_ = (call);                                                                        \
        if (r_ != ncclSuccess && r_ != ncclInProgress) nccl_fail(c, r_, #call, op, what);                      \
        settle(c, op, what, comm_deadline(c));                                                                 \
    } while (0)

/* The watchdog: a collective past its deadline, or an asynchronous NCCL error, ends the run. */
static void *watchdog(void *arg) {
    Comm *c = (Comm *)arg;
    Nccl *n = (Nccl *)c->impl;
    cudaSetDevice(n->device); /* event queries from this thread */
    for (;;) {
        usleep(WATCHDOG_PERIOD_MS * 1000);
        pthread_mutex_lock(&n->mu);
        if (n->stop) {
            pthread_mutex_unlock(&n->mu);
            return NULL;
        }
        ncclResult_t state = ncclSuccess;
        ncclCommGetAsyncError(n->comm, &state);
        struct CommWork **link = &n->inflight, *late = NULL;
        while (*link) {
            struct CommWork *w = *link;
            const cudaError_t q = cudaEventQuery(w->done);
            if (q == cudaSuccess) { /* finished: forget it */
                *link = w->next;
                cudaEventDestroy(w->done);
                free(w);
                continue;
            }
            if (!late && vx_now() > w->deadline) late = w;
            link = &w->next;
        }
        if ((state != ncclSuccess && state != ncclInProgress) || late) {
            n->failed = 1;
            char why[400], what[160];
            snprintf(what, sizeof what, "%s", late ? late->what : "a collective in flight");
            if (late) snprintf(why, sizeof why, "did not finish within the deadline: a rank is stopped, hung or gone");
            else snprintf(why, sizeof why, "failed: NCCL reports %s (%s)", ncclGetErrorString(state),
                          ncclGetLastError(n->comm));
            const char *kind = late ? late->kind : "collective";
            pthread_mutex_unlock(&n->mu);
            ncclCommAbort(n->comm);
            comm_fail(c, kind, what, why);
        }
        pthread_mutex_unlock(&n->mu);
    }
}

/* A collective starts after the compute work enqueued so far: the communication stream waits for it. */
static Nccl *before(Comm *c) {
    Nccl *n = (Nccl *)c->impl;
    n->be->event_record(n->compute_event);
    CUDA_CHECK(cudaStreamWaitEvent(n->stream, (cudaEvent_t)n->compute_event, 0));
    return n;
}

/* After the NCCL call: the event the compute stream may wait for, on the watchdog's list until it has passed. */
static CommWork *after(Comm *c, const char *kind, const char *what) {
    Nccl *n = (Nccl *)c->impl;
    struct CommWork *w = (struct CommWork *)vx_calloc(1, sizeof *w);
    w->kind = kind;
    snprintf(w->what, sizeof w->what, "%s", what);
    w->deadline = comm_deadline(c);
    CUDA_CHECK(cudaEventCreateWithFlags(&w->done, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(w->done, n->stream));
    pthread_mutex_lock(&n->mu);
    w->next = n->inflight;
    n->inflight = w;
    pthread_mutex_unlock(&n->mu);
    return w;
}

static ncclRedOp_t red(CommOp op) { return op == COMM_AVG ? ncclAvg : ncclSum; }

static CommWork *nccl_allreduce(Comm *c, float *buf, size_t count, CommOp op, const char *what) {
    Nccl *n = before(c);
    NCCL_CALL(c, ncclAllReduce(buf, buf, count, ncclFloat, red(op), n->comm, n->stream), "allreduce", what);
    return after(c, "allreduce", what);
}
static CommWork *nccl_broadcast(Comm *c, float *buf, size_t count, int root, const char *what) {
    Nccl *n = before(c);
    NCCL_CALL(c, ncclBroadcast(buf, buf, count, ncclFloat, root, n->comm, n->stream), "broadcast", what);
    return after(c, "broadcast", what);
}
static CommWork *nccl_reduce_scatter(Comm *c, const float *send, float *recv, size_t recv_count, CommOp op,
                                     const char *what) {
    Nccl *n = before(c);
    NCCL_CALL(c, ncclReduceScatter(send, recv, recv_count, ncclFloat, red(op), n->comm, n->stream), "reduce-scatter",
              what);
    return after(c, "reduce-scatter", what);
}
static CommWork *nccl_all_gather(Comm *c, const float *send, float *recv, size_t send_count, const char *what) {
    Nccl *n = before(c);
    NCCL_CALL(c, ncclAllGather(send, recv, send_count, ncclFloat, n->comm, n->stream), "all-gather", what);
    return after(c, "all-gather", what);
}

static void ensure_staging(Nccl *n, size_t count) {
    if (count <= n->staging_cap) return;
    if (n->staging) CUDA_CHECK(cudaFree(n->staging));
    CUDA_CHECK(cudaMalloc(&n->staging, count * sizeof(float)));
    n->staging_cap = count;
}

static CommWork *nccl_barrier(Comm *c, const char *what) {
    ensure_staging((Nccl *)c->impl, 1);
    Nccl *n = before(c);
    NCCL_CALL(c, ncclAllReduce(n->staging, n->staging, 1, ncclFloat, ncclSum, n->comm, n->stream), "barrier", what);
    return after(c, "barrier", what);
}

/* A work belongs to the watchdog's list, which frees it once it has passed: callers touch it under the lock and
 * never after comm_wait. */
static int nccl_test(Comm *c, CommWork *w) {
    Nccl *n = (Nccl *)c->impl;
    pthread_mutex_lock(&n->mu);
    const cudaError_t q = cudaEventQuery(w->done);
    pthread_mutex_unlock(&n->mu);
    if (q == cudaErrorNotReady) return 0;
    CUDA_CHECK(q);
    return 1;
}

/* The compute stream waits for the collective; the host goes on. */
static void nccl_wait(Comm *c, CommWork *w, CommTimes *times) {
    Nccl *n = (Nccl *)c->impl;
    pthread_mutex_lock(&n->mu);
    n->be->event_wait((void *)w->done);
    pthread_mutex_unlock(&n->mu);
    if (times) *times = (CommTimes){0, 0}; /* NCCL's kernels reach the trace through CUPTI */
}

static void nccl_allreduce_host(Comm *c, float *vals, size_t count, CommOp op, const char *what) {
    Nccl *n = (Nccl *)c->impl;
    ensure_staging(n, count);
    CUDA_CHECK(cudaMemcpyAsync(n->staging, vals, count * sizeof(float), cudaMemcpyHostToDevice, n->stream));
    NCCL_CALL(c, ncclAllReduce(n->staging, n->staging, count, ncclFloat, red(op), n->comm, n->stream), "allreduce",
              what);
    CUDA_CHECK(cudaMemcpyAsync(vals, n->staging, count * sizeof(float), cudaMemcpyDeviceToHost, n->stream));
    /* a host wait: the watchdog does not see it, so poll it here against the deadline */
    const double deadline = comm_deadline(c);
    cudaError_t q;
    while ((q = cudaStreamQuery(n->stream)) == cudaErrorNotReady) {
        if (vx_now() > deadline) {
            ncclCommAbort(n->comm);
            comm_fail(c, "allreduce", what, "did not finish within the deadline: a rank is stopped, hung or gone");
        }
        usleep(50);
    }
    CUDA_CHECK(q);
}

static void nccl_close(Comm *c) {
    Nccl *n = (Nccl *)c->impl;
    pthread_mutex_lock(&n->mu);
    n->stop = 1;
    pthread_mutex_unlock(&n->mu);
    pthread_join(n->watchdog, NULL);
    CUDA_CHECK(cudaStreamSynchronize(n->stream));
    for (struct CommWork *w = n->inflight, *next; w; w = next) {
        next = w->next;
        cudaEventDestroy(w->done);
        free(w);
    }
    ncclCommFinalize(n->comm); /* non-blocking: settles like any call */
    settle(c, "close", "the communicator", comm_deadline(c));
    ncclCommDestroy(n->comm);
    n->be->event_destroy(n->compute_event);
    if (n->staging) cudaFree(n->staging);
    cudaStreamDestroy(n->stream);
    pthread_mutex_destroy(&n->mu);
    free(n);
    free(c);
}

static const CommOps NCCL_OPS = {nccl_allreduce, nccl_broadcast, nccl_reduce_scatter, nccl_all_gather,
                                 nccl_barrier,   nccl_test,      nccl_wait,           nccl_allreduce_host,
                                 nccl_close,     NULL};

static int hex_value(char ch) {
    return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
}

/* The unique id every rank meets with: the spawning parent's, or rank 0's sent over MPI or TCP. */
static ncclUniqueId unique_id(const DistEnv *env, double timeout_s) {
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (env->nccl_id[0]) {
        if (strlen(env->nccl_id) != 2 * sizeof id.internal)
            vx_usage_error("VX_NCCL_ID has %zu hex digits, NCCL's id %zu: the ranks were not started by this build's "
                           "train --gpus", strlen(env->nccl_id), 2 * sizeof id.internal);
        for (size_t i = 0; i < sizeof id.internal; i++) {
            const int hi = hex_value(env->nccl_id[2 * i]), lo = hex_value(env->nccl_id[2 * i + 1]);
            if (hi < 0 || lo < 0) vx_usage_error("VX_NCCL_ID is not hexadecimal");
            id.internal[i] = (char)(hi * 16 + lo);
        }
        return id;
    }
    if (env->rank == 0) {
        const ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess)
            vx_exit_error(VX_EXIT_DIST, "ncclGetUniqueId failed: %s (%s)", ncclGetErrorString(r), ncclGetLastError(NULL));
    }
    if (env->world == 1) return id; /* VX_COMM=nccl on one GPU: nobody to tell */
    const int under_mpi = strcmp(env->launcher, "mpirun") == 0 || strcmp(env->launcher, "srun") == 0;
    if (under_mpi) bootstrap_broadcast_mpi(env, &id, sizeof id, timeout_s);
    else bootstrap_broadcast_tcp(env, &id, sizeof id, timeout_s);
    return id;
}

extern "C" int comm_nccl_built(void) { return 1; }

extern "C" Comm *comm_nccl_open(const DistEnv *env, double timeout_s) {
    const Backend *be = backend_cuda();
    if (!be) vx_fatal("comm_nccl_open before the CUDA backend started");
    Comm *c = (Comm *)vx_calloc(1, sizeof *c);
    *c = (Comm){"nccl", env->rank, env->world, env->local_rank, env->local_world, timeout_s, 1, &NCCL_OPS, NULL};
    Nccl *n = (Nccl *)vx_calloc(1, sizeof *n);
    c->impl = n;
    n->be = be;
    CUDA_CHECK(cudaGetDevice(&n->device)); /* the GPU backend_cuda_init chose for this rank (its local rank) */
    int lo, hi;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    CUDA_CHECK(cudaStreamCreateWithPriority(&n->stream, cudaStreamNonBlocking, hi)); /* buckets before compute */
    n->compute_event = be->event_create();
    pthread_mutex_init(&n->mu, NULL);
    const ncclUniqueId id = unique_id(env, timeout_s);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t r = ncclCommInitRankConfig(&n->comm, env->world, id, env->rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) nccl_fail(c, r, "ncclCommInitRankConfig", "init", "the communicator");
    settle(c, "init", "the communicator (all ranks must reach it)", comm_deadline(c));
    if (pthread_create(&n->watchdog, NULL, watchdog, c) != 0) vx_fatal("cannot start the NCCL watchdog thread");
    return c;
}
#endif
