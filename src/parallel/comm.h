/* comm.h: the communication interface of data parallelism, separate from the op table: collectives over flat
 * float buffers between the ranks of a run, every one asynchronous with a handle to wait on.
 *
 * Implementations (comm_open picks one from the launch, parallel/launch.h, and the device):
 *   single  one process: every collective is a no-op (the buffer already holds the result). A single-process run
 *           never initialises MPI or NCCL.
 *   nccl    GPU ranks (parallel/comm_nccl.cu): NCCL on a communication stream of its own. A collective starts after
 *           the compute work enqueued before it (an event on the compute stream); comm_wait makes the compute
 *           stream wait for it, without blocking the host. Buffers are device memory. Non-blocking communicator:
 *           the watchdog polls ncclCommGetAsyncError and aborts the communicator.
 *   mpi     CPU ranks under mpirun/srun (parallel/comm_mpi.c): MPI's non-blocking collectives on host memory,
 *           progressed by comm_test, waited on against a deadline.
 *   tcp     CPU ranks started by `train --gpus N` or torchrun (parallel/comm_tcp.c): a socket from every rank to rank
 *           0, which sums in rank order and sends the result back, on a background thread per rank; host memory.
 *
 * The contract, as PyTorch's reducer keeps it: every rank issues the same collectives in the same order with the
 * same sizes. Results are identical on every rank, bit for bit (a sum is formed once and copied, or in an order
 * that is the same on every rank), so replicas never drift apart. COMM_AVG divides by the world size after the
 * sum. A collective that does not finish within timeout_s (dist.timeout_s), or a peer that vanished, ends this
 * rank with one line naming the rank, the operation and what it carried (`what`, e.g. "bucket 3/5 of step 12"),
 * and exit code 3 (VX_EXIT_DIST); the implementation makes the other ranks end too where it can (MPI_Abort,
 * ncclCommAbort, closing the sockets). */
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { COMM_SUM = 0, COMM_AVG = 1 } CommOp;

/* Who this process is among the ranks and how they meet: filled by dist_detect (launch.h). */
typedef struct {
    int rank, world;             /* 0..world-1 */
    int local_rank, local_world; /* among the ranks of this node: local_rank picks the GPU */
    char launcher[16];           /* "single", "spawn" (train --gpus), "mpirun", "srun", "torchrun" */
    char master_addr[256];       /* spawn, torchrun: the host rank 0 listens on for the rendezvous */
    int master_port;             /* our rendezvous port (torchrun: MASTER_PORT + 1; its store may hold MASTER_PORT) */
    char nccl_id[260];           /* spawn on GPUs: the NCCL unique id the parent made, hex; "" otherwise */
} DistEnv;

/* One collective in flight: started by comm_allreduce & co., finished by comm_wait. */
typedef struct CommWork CommWork;

/* When a collective was issued and when it was seen finished, on the trace's clock (trace_clock_ns); 0 when the
 * implementation cannot tell (nccl: its kernels are on the trace through CUPTI instead). */
typedef struct {
    int64_t start_ns, end_ns;
} CommTimes;

typedef struct Comm Comm;

typedef struct {
    /* Each starts a collective and returns its handle (never NULL); `what` is copied. Counts are floats. */
    CommWork *(*allreduce)(Comm *c, float *buf, size_t count, CommOp op, const char *what);
    CommWork *(*broadcast)(Comm *c, float *buf, size_t count, int root, const char *what);
    /* send [world * recv_count] -> recv [recv_count]: rank r receives the reduction of block r */
    CommWork *(*reduce_scatter)(Comm *c, const float *send, float *recv, size_t recv_count, CommOp op,
                                const char *what);
    /* send [send_count] -> recv [world * send_count]: block r is rank r's send */
    CommWork *(*all_gather)(Comm *c, const float *send, float *recv, size_t send_count, const char *what);
    CommWork *(*barrier)(Comm *c, const char *what);
    /* In place over buf [counts[0] + ... + counts[world-1]]: rank r's block (at counts[0] + ... + counts[r-1])
     * receives the reduction of that block over the ranks; the rest of buf is left unspecified. counts (copied) are
     * the same on every rank; a block may be empty. Sharded data parallelism (ZeRO-2) reduces each gradient bucket so
     * to the ranks owning its parts. Host implementations form each sum exactly as their all-reduce of the same buf
     * would (tcp: rank order on rank 0; mpi: the all-reduce's ring, then each finished sum sent to its owner), so a
     * sharded run's gradients are the replicated run's bit for bit; nccl: one ncclReduce per owner, in a group. */
    CommWork *(*reduce_scatter_v)(Comm *c, float *buf, const size_t *counts, CommOp op, const char *what);
    /* 1 when w has finished (progressing the implementation, as MPI needs), else 0; never blocks, never frees. */
    int (*test)(Comm *c, CommWork *w);
    /* Waits for w within the deadline, fills times (may be NULL) and frees w. Host implementations return when
     * the result is in the buffer; nccl returns once the compute stream has been made to wait for it. */
    void (*wait)(Comm *c, CommWork *w, CommTimes *times);
    /* Blocking all-reduce of a few floats in host memory (losses, flags): nccl stages them through the device.
     * NULL: comm_allreduce_host uses allreduce and wait directly (host-memory implementations). */
    void (*allreduce_host)(Comm *c, float *vals, size_t count, CommOp op, const char *what);
    /* Frees everything; called once every collective has been waited for (or on the way out of a failure). */
    void (*close)(Comm *c);
    /* Optional: ends every rank at once after this one failed (MPI_Abort), so none waits out its own deadline.
     * comm_fail calls it after printing its line, and when it returns ends the process at once (vx_exit_now: no
     * exit handlers, which could wait for device work the failed collective holds). mpi: MPI_Abort, does not
     * return. nccl: aborts its communicator (this rank's NCCL kernels end; peers reached over the network see
     * their connection fail, others may learn of it only from their own watchdog), bounded by a grace period
     * after which a reaper _exits, and returns. NULL: this rank exits and the others find out from the closed
     * sockets (tcp). */
    void (*abort_all)(Comm *c, int code);
    /* CUDA Graph capture of collectives (--compile with data parallelism); NULL where the collectives run on the
     * host (mpi, tcp, single: a CPU backend has no graphs). Between capture_begin and capture_end the caller
     * captures its compute stream: the collectives issued meanwhile are ordered against it as always (the event and
     * wait pairs fork the communication stream into the capture and join it back), but they do not run, so nothing
     * queries or watches them: test returns 0 and wait only orders the streams. capture_end returns how many were
     * captured. replayed: a graph holding collectives was just launched on the compute stream; the watchdog keeps
     * it, named by `what`, until the compute stream passes this point, against the deadline of one collective. */
    void (*capture_begin)(Comm *c);
    int (*capture_end)(Comm *c);
    void (*replayed)(Comm *c, const char *what);
} CommOps;

struct Comm {
    const char *name;        /* "single", "nccl", "mpi", "tcp" */
    int rank, world, local_rank, local_world;
    double timeout_s;        /* the watchdog's deadline per collective */
    int device_buffers;      /* 1: buffers are device memory of this rank's GPU (nccl); 0: host memory */
    const CommOps *ops;
    void *impl;
};

/* The communicator of env: single when env->world == 1, else nccl when on_gpu, mpi under mpirun/srun, tcp
 * otherwise. With several ranks every rank first says over the host communicator (mpi or tcp) whether it runs on a
 * GPU: ranks that disagree all exit 2 with one line naming the ranks on the CPU (device_reason, may be NULL: why
 * this rank chose its device) rather than open different communicators and wait for each other. Exits 2 with the
 * reason when the one needed is not built in (MPI=0, CUDA=0) and 3 when the ranks cannot meet within timeout_s. */
Comm *comm_open(const DistEnv *env, int on_gpu, const char *device_reason, double timeout_s);
void comm_close(Comm *c);

static inline CommWork *comm_allreduce(Comm *c, float *buf, size_t count, CommOp op, const char *what) {
    return c->ops->allreduce(c, buf, count, op, what);
}
static inline CommWork *comm_broadcast(Comm *c, float *buf, size_t count, int root, const char *what) {
    return c->ops->broadcast(c, buf, count, root, what);
}
static inline CommWork *comm_reduce_scatter(Comm *c, const float *send, float *recv, size_t recv_count, CommOp op,
                                            const char *what) {
    return c->ops->reduce_scatter(c, send, recv, recv_count, op, what);
}
static inline CommWork *comm_all_gather(Comm *c, const float *send, float *recv, size_t send_count,
                                        const char *what) {
    return c->ops->all_gather(c, send, recv, send_count, what);
}
static inline CommWork *comm_barrier(Comm *c, const char *what) { return c->ops->barrier(c, what); }
static inline CommWork *comm_reduce_scatter_v(Comm *c, float *buf, const size_t *counts, CommOp op,
                                              const char *what) {
    return c->ops->reduce_scatter_v(c, buf, counts, op, what);
}
static inline int comm_test(Comm *c, CommWork *w) { return c->ops->test(c, w); }
static inline void comm_wait(Comm *c, CommWork *w, CommTimes *times) { c->ops->wait(c, w, times); }
/* 1 when this communicator's collectives can be captured in a CUDA Graph (nccl). */
static inline int comm_can_capture(const Comm *c) { return c->ops->capture_begin != NULL; }
static inline void comm_capture_begin(Comm *c) { c->ops->capture_begin(c); }
static inline int comm_capture_end(Comm *c) { return c->ops->capture_end(c); }
static inline void comm_replayed(Comm *c, const char *what) { c->ops->replayed(c, what); }
/* Blocking all-reduce of a few host floats, on every implementation. */
void comm_allreduce_host(Comm *c, float *vals, size_t count, CommOp op, const char *what);

/* ---- what implementations share -------------------------------------------------------------------------- */

/* Ends this rank with exit 3: "[rank R/W: ]<op> of <what> <why> (<name> communicator); ..." (the rank is the
 * error prefix the trainer sets). */
__attribute__((noreturn)) void comm_fail(const Comm *c, const char *op, const char *what, const char *why);
/* The moment (vx_now seconds) a collective issued now must have finished by. */
double comm_deadline(const Comm *c);
const char *comm_op_name(CommOp op);

/* The implementations' constructors (comm_open calls them); each exits as comm_open says on failure. */
Comm *comm_single_open(void);
Comm *comm_mpi_open(const DistEnv *env, double timeout_s);
Comm *comm_tcp_open(const DistEnv *env, double timeout_s);
Comm *comm_nccl_open(const DistEnv *env, double timeout_s);
/* 1 when the build has MPI (MPI=1) / NCCL (CUDA=1): comm_open's error names the build flag otherwise. */
int comm_mpi_built(void);
int comm_nccl_built(void);

#ifdef __cplusplus
}
#endif
