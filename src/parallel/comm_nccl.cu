/* comm_nccl.cu: the communicator of GPU ranks (see comm.h), NCCL on a communication stream of its own.
 *
 * Ordering, without host synchronisation (llm.c's multi_gpu_async_reduce_gradient does the same): a collective
 * records an event on the compute stream (backend event_record), the communication stream waits for it, NCCL runs
 * there, and an event recorded after it is what comm_test queries and what comm_wait makes the compute stream wait
 * for (backend event_wait). So a gradient bucket is reduced while backward goes on with earlier layers, and the
 * optimizer's kernels start only after the last bucket. The stream has the highest priority: a bucket's kernels are
 * scheduled before compute kernels that are ready at the same time.
 *
 * The device: the caller's. comm_nccl_open needs backend_cuda_init to have run on this thread (it chose the GPU from
 * the local rank and made it current); NCCL binds the communicator to the current device, and the watchdog thread
 * selects the same one.
 *
 * Failures and deadlines. The communicator is non-blocking (ncclConfig_t.blocking = 0): no NCCL call can hang the
 * host; a call that returns ncclInProgress is polled with ncclCommGetAsyncError until it settles, against the
 * deadline. The host never waits for a collective in comm_wait (it only orders the streams), so "within the
 * deadline" cannot be checked by the caller: a collective's deadline is its issue time plus dist.timeout_s, and it
 * covers everything until its completion event fires (waiting for the compute work before it, and for the peers).
 * A watchdog thread per communicator (ProcessGroupNCCL's design) keeps every collective in flight, waited for or
 * not, until its event has fired, and checks them against their deadlines and NCCL's asynchronous error every
 * WATCHDOG_PERIOD_MS; the few host waits here (allreduce_host, close) poll against the deadline themselves. A
 * failure anywhere goes through comm_fail: its line (rank, operation, `what`, why), then abort_all here, which
 * aborts the communicator (its kernels end, so nothing on this GPU waits for it any more, and peers reached over
 * the network see the connection fail); comm_fail then ends the process at once with 3 (vx_exit_now: stdio and the
 * event files flushed, no atexit handlers: the backend's would synchronise the compute stream, which the work
 * queued before the failed collective may hold for good); a reaper thread _exits with 3 after ABORT_GRACE_S should
 * the abort itself hang (NCCL's abort has hung in some versions). The mutex serialises every use
 * of the ncclComm_t between the caller's thread and the watchdog (NCCL allows one thread at a time), and a failing
 * thread keeps it: the other blocks there instead of racing it to exit.
 *
 * CUDA Graph capture (--compile with ranks: the stepper captures each micro-batch with its bucket all-reduces, and
 * the optimizer with the losses' all-reduce). Legal inside a captured region, and all that a collective does
 * there: the enqueue (NCCL >= 2.9 captures its kernels; every rank captures the same collectives, as every rank
 * runs the same step), the event record and stream wait pairs (they fork the communication stream into the
 * capture and join it back; the backend captures with cudaStreamCaptureModeThreadLocal, so the watchdog thread's
 * own calls are not refused meanwhile), creating the work's event, and the settle polling, which is host-only.
 * Not legal there: querying an event recorded during the capture (it records nothing; CUDA refuses the query). So
 * between capture_begin and capture_end a work is never put on the watchdog's list, comm_test answers 0 and
 * comm_wait only joins the streams; the works are freed at capture_end. Each replay is watched instead:
 * `replayed` records an event on the compute stream after the launch and puts it on the list with a deadline, so a
 * replay whose collectives hang ends the run as an eager collective would. allreduce_host and close never run
 * inside a capture. */
#include "parallel/comm.h"

#ifdef VX_NCCL
#include <nccl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "common/cuda_check.h"

extern "C" {
#include "core/util.h"
#include "parallel/bootstrap.h"
#include "parallel/launch.h"
}

#define WATCHDOG_PERIOD_MS 100
#define ABORT_GRACE_S 10   /* the most the abort may take before _exit(3) */
#define STAGING_FLOATS 4096 /* the most allreduce_host stages (losses and flags: a few floats) */

struct CommWork {
    cudaEvent_t done; /* recorded on the communication stream after the collective */
    const char *kind;
    char what[160];
    double deadline;
    int refs;              /* under the mutex: the caller's (until comm_wait) and the watchdog's (until done) */
    struct CommWork *next; /* the watchdog's list */
};

typedef struct {
    ncclComm_t comm;
    cudaStream_t stream;
    int device;
    const Backend *be;
    void *compute_event; /* recorded on the compute stream before each collective */
    float *staging;      /* device, STAGING_FLOATS + 1: allreduce_host's floats, then the barrier's zero */
    float *staging_host; /* pinned, so the copies back are asynchronous and the host wait can be bounded */
    pthread_mutex_t mu; /* recursive: comm_fail may be reached with it held, and abort_all takes it again */
    pthread_t watchdog;
    int watchdog_running, stop;
    struct CommWork *inflight;
    int capturing;               /* between capture_begin and capture_end (the caller's thread only) */
    struct CommWork *in_capture; /* the works of the collectives issued in it, freed (and counted) at capture_end */
} Nccl;

static Nccl *impl(Comm *c) { return (Nccl *)c->impl; }

/* ---- errors ----------------------------------------------------------------------------------------------- */

static const char *nccl_hint(ncclResult_t r) {
    switch (r) {
    case ncclUnhandledCudaError:
        return "a CUDA call inside NCCL failed: check the GPU (nvidia-smi) and rerun with NCCL_DEBUG=WARN";
    case ncclSystemError:
        return "a system call or the network failed (sockets, /dev/shm too small in a container: --shm-size=1g): "
               "rerun with NCCL_DEBUG=WARN";
    case ncclInternalError: return "NCCL failed internally: rerun with NCCL_DEBUG=INFO and report it";
    case ncclInvalidArgument:
        return "NCCL refused an argument (a host pointer, a bad count or root): a bug in voxscale's caller";
    case ncclInvalidUsage:
        return "NCCL was used wrongly: ranks that issue different collectives, or two ranks on one GPU without "
               "NCCL_MULTI_RANK_GPU_ENABLE=1 (NCCL 2.30 or newer)";
    case ncclRemoteError: return "another rank failed or vanished: its own output says why";
    default: return "rerun with NCCL_DEBUG=WARN for NCCL's own account";
    }
}

/* A call returned an error: the library's words with file:line and a hint, then exit 3 (comm_fail). */
[[noreturn]] static void nccl_check_failed(const char *file, int line, const char *call, ncclResult_t r, Comm *c,
                                           const char *op, const char *what) {
    Nccl *n = impl(c);
    char why[1024];
    snprintf(why, sizeof why, "failed at %s:%d: %s returned %s (%s); %s", file, line, call, ncclGetErrorString(r),
             ncclGetLastError(n ? n->comm : NULL), nccl_hint(r));
    comm_fail(c, op, what, why);
}
/* ncclInProgress: a non-blocking call was accepted and goes on; settle() waits for it. */
static inline bool nccl_accepted(ncclResult_t r) { return r == ncclSuccess || r == ncclInProgress; }

#define NCCL_CHECK(c, call, op, what) VX_CHECK_GEN(ncclResult_t, call, nccl_accepted, nccl_check_failed, c, op, what)

/* Polls the communicator until the call before has settled (ncclInProgress -> ncclSuccess), within deadline. */
static void settle(Comm *c, const char *file, int line, const char *call, const char *op, const char *what,
                   double deadline) {
    Nccl *n = impl(c);
    for (;;) {
        ncclResult_t state = ncclInProgress;
        NCCL_CHECK(c, ncclCommGetAsyncError(n->comm, &state), op, what);
        if (state == ncclSuccess) return;
        if (state != ncclInProgress) nccl_check_failed(file, line, call, state, c, op, what);
        if (vx_now() > deadline)
            comm_fail(c, op, what, "did not finish within the deadline: NCCL stayed in progress (a rank is stopped, "
                                   "hung or gone, or never reached it)");
        usleep(50);
    }
}

/* Every NCCL call that may go on in the background: checked, then settled. */
#define NCCL_CALL(c, call, op, what)                                                                           \
    do {                                                                                                       \
        NCCL_CHECK(c, call, op, what);                                                                         \
        settle(c, __FILE__, __LINE__, #call, op, what, comm_deadline(c));                                      \
    } while (0)

static void *reaper(void *arg) {
    sleep(ABORT_GRACE_S);
    _exit((int)(intptr_t)arg); /* the abort hung: leave without it */
}

/* comm_fail's second half (CommOps.abort_all): the line is out; abort the communicator, bounded by the reaper, and
 * return to comm_fail, which ends the process at once. The mutex is kept: the other thread, reaching a collective or
 * the watchdog's next sweep, blocks there, and never touches the aborted communicator or races the exit. (An exit
 * handler that longjmps, as fuzz targets install, would leave the reaper armed: NCCL failures are tested in child
 * processes.) */
static void nccl_abort_all(Comm *c, int code) {
    Nccl *n = impl(c);
    pthread_t t;
    if (pthread_create(&t, NULL, reaper, (void *)(intptr_t)code) == 0) pthread_detach(t);
    if (n) {
        pthread_mutex_lock(&n->mu);
        if (n->comm) ncclCommAbort(n->comm); /* the run ends either way: its result adds nothing to the line */
        n->comm = NULL;
    }
}

/* ---- works and the watchdog ------------------------------------------------------------------------------- */

/* Drops one of w's two references (under the mutex); the last one frees it. */
static void work_release(struct CommWork *w) {
    if (--w->refs > 0) return;
    cudaEventDestroy(w->done); /* a stream already made to wait for it keeps that wait */
    free(w);
}

/* One sweep (under the mutex): forgets the finished works, and says why the run must end, if it must. */
static int sweep(Comm *c, const char **kind, char *what, size_t what_len, char *why, size_t why_len) {
    Nccl *n = impl(c);
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(n->comm, &state);
    if (r != ncclSuccess) state = r;
    const double now = vx_now();
    struct CommWork *late = NULL, *oldest = NULL; /* the list is newest first: the last ones found */
    for (struct CommWork **link = &n->inflight; *link;) {
        struct CommWork *w = *link;
        const cudaError_t q = cudaEventQuery(w->done);
        if (q == cudaSuccess) {
            *link = w->next;
            work_release(w);
            continue;
        }
        if (q != cudaErrorNotReady) vx_cuda_check_failed(__FILE__, __LINE__, "cudaEventQuery (watchdog)", q);
        if (now > w->deadline) late = w;
        oldest = w;
        link = &w->next;
    }
    if (state != ncclSuccess && state != ncclInProgress) {
        *kind = oldest ? oldest->kind : "collective";
        snprintf(what, what_len, "%s", oldest ? oldest->what : "the communicator (no collective in flight)");
        snprintf(why, why_len, "failed: NCCL reports %s (%s); %s", ncclGetErrorString(state),
                 ncclGetLastError(n->comm), nccl_hint(state));
        return 1;
    }
    if (late) {
        *kind = late->kind;
        snprintf(what, what_len, "%s", late->what);
        snprintf(why, why_len, "did not finish within the deadline (the watchdog): a rank is stopped, hung or gone, "
                               "or issued other collectives");
        return 1;
    }
    return 0;
}

/* The open communicator, for quiet_at_exit (one per process: every rank has one). */
static Nccl *g_open;
static int g_atexit_registered;

/* An exit for another reason (a diverged run's 4, a stopped run's 130, an input error) runs with the communicator
 * still open: the watchdog must stop before the backend's exit handler tears the streams and the context down under
 * it, or its next event query would fail and exit again from its thread. Registered after the backend's, so it
 * runs first; the mutex waits out a sweep in progress. */
static void quiet_at_exit(void) {
    Nccl *n = g_open;
    if (!n) return;
    pthread_mutex_lock(&n->mu);
    n->stop = 1;
    pthread_mutex_unlock(&n->mu);
}

static void *watchdog(void *arg) {
    Comm *c = (Comm *)arg;
    Nccl *n = impl(c);
    CUDA_CHECK(cudaSetDevice(n->device)); /* the events belong to this rank's GPU */
    for (;;) {
        usleep(WATCHDOG_PERIOD_MS * 1000);
        pthread_mutex_lock(&n->mu);
        if (n->stop) break;
        const char *kind = NULL;
        char what[160], why[512];
        if (sweep(c, &kind, what, sizeof what, why, sizeof why)) comm_fail(c, kind, what, why); /* keeps the lock */
        pthread_mutex_unlock(&n->mu);
    }
    pthread_mutex_unlock(&n->mu);
    return NULL;
}

/* ---- collectives ------------------------------------------------------------------------------------------ */

/* Before the NCCL call (under the mutex): the communication stream waits for the compute work enqueued so far. */
static void before(Nccl *n) {
    n->be->event_record(n->compute_event);
    CUDA_CHECK(cudaStreamWaitEvent(n->stream, (cudaEvent_t)n->compute_event, 0));
}

/* A work for event `done`, with two references: the caller's and that of the list it goes on. */
static struct CommWork *work_new(cudaEvent_t done, const char *kind, const char *what) {
    struct CommWork *w = (struct CommWork *)vx_calloc(1, sizeof *w);
    w->done = done;
    w->kind = kind;
    snprintf(w->what, sizeof w->what, "%s", what);
    w->refs = 2;
    return w;
}

/* A work for event `done` (under the mutex) on the watchdog's list, with its deadline. */
static CommWork *watch(Comm *c, cudaEvent_t done, const char *kind, const char *what) {
    Nccl *n = impl(c);
    struct CommWork *w = work_new(done, kind, what);
    w->deadline = comm_deadline(c);
    w->next = n->inflight;
    n->inflight = w;
    return w;
}

/* After it (under the mutex): the completion event, and the work on the watchdog's list, or, inside a capture, on
 * the capture's list (its event records nothing until a replay: nothing may query it). */
static CommWork *after(Comm *c, const char *kind, const char *what) {
    Nccl *n = impl(c);
    cudaEvent_t done;
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(done, n->stream));
    if (!n->capturing) return watch(c, done, kind, what);
    struct CommWork *w = work_new(done, kind, what);
    w->next = n->in_capture;
    n->in_capture = w;
    return w;
}

static ncclRedOp_t red(CommOp op) { return op == COMM_AVG ? ncclAvg : ncclSum; }

/* A count of 0 enqueues no NCCL call (every rank has the same count, by the contract) but still yields a work. */
static CommWork *nccl_allreduce(Comm *c, float *buf, size_t count, CommOp op, const char *what) {
    Nccl *n = impl(c);
    pthread_mutex_lock(&n->mu);
    before(n);
    if (count)
        NCCL_CALL(c, ncclAllReduce(buf, buf, count, ncclFloat, red(op), n->comm, n->stream), "allreduce", what);
    CommWork *w = after(c, "allreduce", what);
    pthread_mutex_unlock(&n->mu);
    return w;
}

static CommWork *nccl_broadcast(Comm *c, float *buf, size_t count, int root, const char *what) {
    Nccl *n = impl(c);
    pthread_mutex_lock(&n->mu);
    before(n);
    if (count) NCCL_CALL(c, ncclBroadcast(buf, buf, count, ncclFloat, root, n->comm, n->stream), "broadcast", what);
    CommWork *w = after(c, "broadcast", what);
    pthread_mutex_unlock(&n->mu);
    return w;
}

static CommWork *nccl_reduce_scatter(Comm *c, const float *send, float *recv, size_t recv_count, CommOp op,
                                     const char *what) {
    Nccl *n = impl(c);
    pthread_mutex_lock(&n->mu);
    before(n);
    if (recv_count)
        NCCL_CALL(c, ncclReduceScatter(send, recv, recv_count, ncclFloat, red(op), n->comm, n->stream),
                  "reduce-scatter", what);
    CommWork *w = after(c, "reduce-scatter", what);
    pthread_mutex_unlock(&n->mu);
    return w;
}

static CommWork *nccl_all_gather(Comm *c, const float *send, float *recv, size_t send_count, const char *what) {
    Nccl *n = impl(c);
    pthread_mutex_lock(&n->mu);
    before(n);
    if (send_count)
        NCCL_CALL(c, ncclAllGather(send, recv, send_count, ncclFloat, n->comm, n->stream), "all-gather", what);
    CommWork *w = after(c, "all-gather", what);
    pthread_mutex_unlock(&n->mu);
    return w;
}

/* One ncclReduce per owner with a block, grouped: each block's sum lands on its owner, in place. */
static CommWork *nccl_reduce_scatter_v(Comm *c, float *buf, const size_t *counts, CommOp op, const char *what) {
    Nccl *n = impl(c);
    pthread_mutex_lock(&n->mu);
    before(n);
    NCCL_CHECK(c, ncclGroupStart(), "reduce-scatter to owners", what); /* (inside a group: queued, not settled) */
    size_t off = 0;
    for (int r = 0; r < c->world; off += counts[r++])
        if (counts[r])
            NCCL_CHECK(c, ncclReduce(buf + off, buf + off, counts[r], ncclFloat, red(op), r, n->comm, n->stream),
                       "reduce-scatter to owners", what);
    NCCL_CALL(c, ncclGroupEnd(), "reduce-scatter to owners", what);
    CommWork *w = after(c, "reduce-scatter to owners", what);
    pthread_mutex_unlock(&n->mu);
    return w;
}

/* A 1-float all-reduce: it completes on a rank only once every rank has reached it. */
static CommWork *nccl_barrier(Comm *c, const char *what) {
    Nccl *n = impl(c);
    pthread_mutex_lock(&n->mu);
    before(n);
    float *zero = n->staging + STAGING_FLOATS; /* zero on every rank, so it stays zero */
    NCCL_CALL(c, ncclAllReduce(zero, zero, 1, ncclFloat, ncclSum, n->comm, n->stream), "barrier", what);
    CommWork *w = after(c, "barrier", what);
    pthread_mutex_unlock(&n->mu);
    return w;
}

/* w is the caller's until comm_wait, whatever the watchdog has seen: no lock needed to query it. Inside a capture
 * nothing has run: not finished. */
static int nccl_test(Comm *c, CommWork *w) {
    if (impl(c)->capturing) return 0;
    const cudaError_t q = cudaEventQuery(w->done);
    if (q == cudaErrorNotReady) return 0;
    CUDA_CHECK(q);
    return 1;
}

/* The compute stream waits for the collective; the host does not. What can be known now is checked first: NCCL's
 * asynchronous error, and a work already past its deadline (the watchdog would end the run within its period
 * anyway). The work stays on the watchdog's list until its event fires. */
static void nccl_wait(Comm *c, CommWork *w, CommTimes *times) {
    Nccl *n = impl(c);
    pthread_mutex_lock(&n->mu);
    if (!n->capturing) { /* in a capture there is nothing to check yet: the replays are watched */
        settle(c, __FILE__, __LINE__, "ncclCommGetAsyncError (NCCL's state at comm_wait)", w->kind, w->what,
               w->deadline);
        const cudaError_t q = cudaEventQuery(w->done);
        if (q != cudaSuccess && q != cudaErrorNotReady) CUDA_CHECK(q);
        if (q == cudaErrorNotReady && vx_now() > w->deadline)
            comm_fail(c, w->kind, w->what, "did not finish within the deadline: a rank is stopped, hung or gone");
    }
    n->be->event_wait((void *)w->done);
    work_release(w);
    pthread_mutex_unlock(&n->mu);
    if (times) *times = (CommTimes){0, 0}; /* NCCL's kernels reach the trace through CUPTI */
}

/* A blocking all-reduce of host floats, through the pinned and the device buffer on the communication stream
 * (host memory, so no order against the compute stream is needed). Pinned memory matters: a copy back to pageable
 * memory would block inside cudaMemcpyAsync until the all-reduce finished, out of reach of any deadline. The buffers
 * are allocated once at open: freeing and growing them would wait for the device with the mutex held. */
static void nccl_allreduce_host(Comm *c, float *vals, size_t count, CommOp op, const char *what) {
    Nccl *n = impl(c);
    if (!count) return;
    if (count > STAGING_FLOATS)
        vx_fatal("allreduce_host of %zu floats (%s): it is for a few floats, at most %d; reduce device memory with "
                 "comm_allreduce", count, what, STAGING_FLOATS);
    if (n->capturing) vx_fatal("allreduce_host (%s) inside a CUDA Graph capture: it waits on the host", what);
    const size_t bytes = count * sizeof(float);
    pthread_mutex_lock(&n->mu);
    memcpy(n->staging_host, vals, bytes);
    CUDA_CHECK(cudaMemcpyAsync(n->staging, n->staging_host, bytes, cudaMemcpyHostToDevice, n->stream));
    NCCL_CALL(c, ncclAllReduce(n->staging, n->staging, count, ncclFloat, red(op), n->comm, n->stream), "allreduce",
              what);
    CUDA_CHECK(cudaMemcpyAsync(n->staging_host, n->staging, bytes, cudaMemcpyDeviceToHost, n->stream));
    CommWork *w = after(c, "allreduce", what);
    pthread_mutex_unlock(&n->mu);
    cudaError_t q;
    while ((q = cudaEventQuery(w->done)) == cudaErrorNotReady) {
        if (vx_now() > w->deadline) {
            pthread_mutex_lock(&n->mu);
            comm_fail(c, "allreduce", what, "did not finish within the deadline: a rank is stopped, hung or gone");
        }
        usleep(20);
    }
    CUDA_CHECK(q);
    memcpy(vals, n->staging_host, bytes);
    pthread_mutex_lock(&n->mu);
    work_release(w);
    pthread_mutex_unlock(&n->mu);
}

/* ---- close and open --------------------------------------------------------------------------------------- */

/* Whether every work on the watchdog's list has finished (under the mutex): the replays' collectives ran on the
 * compute stream, so the communication stream's being idle does not cover them. */
static int all_fired(Nccl *n) {
    for (struct CommWork *w = n->inflight; w; w = w->next) {
        const cudaError_t q = cudaEventQuery(w->done);
        if (q == cudaErrorNotReady) return 0;
        CUDA_CHECK(q);
    }
    return 1;
}

/* Waits (bounded, the watchdog still running) for what is left on the communication stream and for the graph
 * replays still watched, stops the watchdog, finalizes the communicator (it settles once every rank has
 * finalized) and frees everything. */
static void nccl_close(Comm *c) {
    Nccl *n = impl(c);
    if (n->capturing) vx_fatal("comm close inside a CUDA Graph capture");
    const double deadline = comm_deadline(c);
    for (;;) {
        const cudaError_t q = cudaStreamQuery(n->stream);
        if (q != cudaErrorNotReady) CUDA_CHECK(q);
        pthread_mutex_lock(&n->mu);
        const int done = q == cudaSuccess && all_fired(n);
        pthread_mutex_unlock(&n->mu);
        if (done) break;
        if (vx_now() > deadline) {
            pthread_mutex_lock(&n->mu);
            comm_fail(c, "close", "the collectives still in flight", "did not finish within the deadline");
        }
        usleep(200);
    }
    pthread_mutex_lock(&n->mu);
    n->stop = 1;
    pthread_mutex_unlock(&n->mu);
    if (n->watchdog_running) pthread_join(n->watchdog, NULL);
    n->watchdog_running = 0;
    g_open = NULL;
    for (struct CommWork *w = n->inflight, *next; w; w = next) { /* all done: all_fired */
        next = w->next;
        w->refs = 1; /* the caller's reference too: comm.h's contract has every work waited for before close */
        work_release(w);
    }
    n->inflight = NULL;
    NCCL_CALL(c, ncclCommFinalize(n->comm), "close", "the communicator (every rank must close it)");
    NCCL_CHECK(c, ncclCommDestroy(n->comm), "close", "the communicator");
    n->comm = NULL;
    n->be->event_destroy(n->compute_event);
    CUDA_CHECK(cudaFree(n->staging));
    CUDA_CHECK(cudaFreeHost(n->staging_host));
    CUDA_CHECK(cudaStreamDestroy(n->stream));
    pthread_mutex_destroy(&n->mu);
    free(n);
    free(c);
}

/* ---- CUDA Graph capture ----------------------------------------------------------------------------------- */

static void nccl_capture_begin(Comm *c) {
    Nccl *n = impl(c);
    pthread_mutex_lock(&n->mu);
    if (n->capturing) vx_fatal("comm capture_begin inside a capture");
    n->capturing = 1;
    pthread_mutex_unlock(&n->mu);
}

/* The capture has ended (the graph was instantiated, or the capture failed): its works' events belong to no
 * stream work any more and are destroyed with them. */
static int nccl_capture_end(Comm *c) {
    Nccl *n = impl(c);
    pthread_mutex_lock(&n->mu);
    int count = 0;
    for (struct CommWork *w = n->in_capture, *next; w; w = next, count++) {
        next = w->next;
        w->refs = 1; /* the caller's was dropped by comm_wait, or the work was never waited for in a failed capture */
        work_release(w);
    }
    n->in_capture = NULL;
    n->capturing = 0;
    pthread_mutex_unlock(&n->mu);
    return count;
}

/* After a graph with collectives was launched on the compute stream: an event there, watched until it fires. */
static void nccl_replayed(Comm *c, const char *what) {
    Nccl *n = impl(c);
    cudaEvent_t done;
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    n->be->event_record((void *)done);
    pthread_mutex_lock(&n->mu);
    work_release(watch(c, done, "graph replay", what)); /* the watchdog's reference only */
    pthread_mutex_unlock(&n->mu);
}

static const CommOps NCCL_OPS = {
    .allreduce = nccl_allreduce, .broadcast = nccl_broadcast, .reduce_scatter = nccl_reduce_scatter,
    .all_gather = nccl_all_gather, .barrier = nccl_barrier, .reduce_scatter_v = nccl_reduce_scatter_v,
    .test = nccl_test, .wait = nccl_wait, .allreduce_host = nccl_allreduce_host, .close = nccl_close,
    .abort_all = nccl_abort_all, .capture_begin = nccl_capture_begin, .capture_end = nccl_capture_end,
    .replayed = nccl_replayed};

/* The unique id every rank meets with: the spawning parent's (hex in env->nccl_id), or rank 0's, sent over MPI
 * (mpirun, srun) or TCP (torchrun) by bootstrap.h. */
static ncclUniqueId unique_id(Comm *c, const DistEnv *env, double timeout_s) {
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (env->nccl_id[0]) {
        if (!dist_nccl_id_from_hex(env->nccl_id, id.internal, sizeof id.internal))
            vx_usage_error("VX_NCCL_ID is not %zu hexadecimal digits (NCCL's id): the ranks were not started by this "
                           "build's train --gpus", 2 * sizeof id.internal);
        return id;
    }
    if (env->rank == 0) NCCL_CHECK(c, ncclGetUniqueId(&id), "init", "the NCCL id");
    if (env->world == 1) return id; /* VX_COMM=nccl on one GPU: nobody to tell */
    const int under_mpi = strcmp(env->launcher, "mpirun") == 0 || strcmp(env->launcher, "srun") == 0;
    if (under_mpi) bootstrap_broadcast_mpi(env, &id, sizeof id, timeout_s);
    else bootstrap_broadcast_tcp(env, &id, sizeof id, timeout_s);
    return id;
}

extern "C" int comm_nccl_built(void) { return 1; }

extern "C" Comm *comm_nccl_open(const DistEnv *env, double timeout_s) {
    const Backend *be = backend_cuda();
    if (!be)
        vx_fatal("comm_nccl_open before backend_cuda_init: the backend chooses this rank's GPU and must start first");
    Comm *c = (Comm *)vx_calloc(1, sizeof *c);
    *c = (Comm){"nccl", env->rank, env->world, env->local_rank, env->local_world, timeout_s, 1, &NCCL_OPS, NULL};
    Nccl *n = (Nccl *)vx_calloc(1, sizeof *n);
    c->impl = n;
    n->be = be;
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&n->mu, &attr);
    pthread_mutexattr_destroy(&attr);
    CUDA_CHECK(cudaGetDevice(&n->device)); /* the GPU backend_cuda_init made current on this thread */
    int least, greatest;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    CUDA_CHECK(cudaStreamCreateWithPriority(&n->stream, cudaStreamNonBlocking, greatest));
    n->compute_event = be->event_create();
    CUDA_CHECK(cudaMalloc(&n->staging, (STAGING_FLOATS + 1) * sizeof(float)));
    CUDA_CHECK(cudaMemsetAsync(n->staging, 0, (STAGING_FLOATS + 1) * sizeof(float), n->stream));
    CUDA_CHECK(cudaHostAlloc(&n->staging_host, STAGING_FLOATS * sizeof(float), cudaHostAllocDefault));
    const ncclUniqueId id = unique_id(c, env, timeout_s);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    /* the deadline starts once the id is here: every rank must reach this within timeout_s of the others */
    NCCL_CALL(c, ncclCommInitRankConfig(&n->comm, env->world, id, env->rank, &config), "init",
              "the communicator (every rank must reach it)");
    if (pthread_create(&n->watchdog, NULL, watchdog, c) != 0) vx_fatal("cannot start the NCCL watchdog thread");
    n->watchdog_running = 1;
    g_open = n;
    if (!g_atexit_registered) g_atexit_registered = atexit(quiet_at_exit) == 0;
    return c;
}
#endif
