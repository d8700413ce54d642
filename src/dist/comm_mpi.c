/* comm_mpi.c: the communicator of CPU ranks under mpirun or srun (see comm.h), on MPI's non-blocking collectives
 * over host memory. MPI is initialised here, on first use, and only for a run of several ranks. Results are the
 * same on every rank: Open MPI's non-blocking all-reduce (libnbc: binomial, ring or reduce-scatter + all-gather)
 * forms each element once and copies it, and tests/integration/test_comm.py compares the bytes of every rank.
 * COMM_AVG divides the sum by the world size afterwards, on every rank alike. Waiting polls MPI_Test (MPI moves a
 * non-blocking collective forward only inside MPI calls) with a growing sleep, so oversubscribed ranks leave each
 * other the cores, against the deadline; a timeout prints the line and MPI_Aborts the job, so every rank ends. */
#include "dist/comm.h"

#ifdef VX_MPI
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/util.h"
#include "dist/bootstrap.h"
#include "trace/trace.h"

struct CommWork {
    MPI_Request req;
    const char *kind;
    CommOp op;
    float *scaled; /* COMM_AVG: the result to divide once it is in */
    size_t count;
    char what[160];
    double deadline;
    int64_t start_ns, end_ns;
    int done;
};

static int initialised_here;

static void ensure_init(void) {
    int flag = 0;
    MPI_Initialized(&flag);
    if (flag) return;
    int provided;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        vx_exit_error(VX_EXIT_DIST, "MPI_Init_thread failed: check the MPI installation and the launcher");
    initialised_here = 1;
    /* failures come back as codes, so that they are reported with the rank and the operation */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

static void mpi_check(Comm *c, int rc, const char *op, const char *what) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING] = "", why[MPI_MAX_ERROR_STRING + 16];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    snprintf(why, sizeof why, "failed: %s", msg);
    comm_fail(c, op, what, why);
}

/* MPI counts are int: larger buffers are refused by name rather than truncated. */
static int icount(Comm *c, size_t n, const char *op, const char *what) {
    if (n > (size_t)0x7fffffff) comm_fail(c, op, what, "failed: more than 2^31-1 floats in one MPI collective");
    return (int)n;
}

static CommWork *start(Comm *c, const char *kind, CommOp op, float *scaled, size_t count, const char *what) {
    CommWork *w = vx_calloc(1, sizeof *w);
    w->kind = kind;
    w->op = op;
    w->scaled = op == COMM_AVG ? scaled : NULL;
    w->count = count;
    snprintf(w->what, sizeof w->what, "%s", what);
    w->deadline = comm_deadline(c);
    w->start_ns = trace_clock_ns();
    return w;
}

static CommWork *mpi_allreduce(Comm *c, float *buf, size_t count, CommOp op, const char *what) {
    CommWork *w = start(c, "allreduce", op, buf, count, what);
    mpi_check(c, MPI_Iallreduce(MPI_IN_PLACE, buf, icount(c, count, w->kind, what), MPI_FLOAT, MPI_SUM,
                                MPI_COMM_WORLD, &w->req), w->kind, what);
    return w;
}

static CommWork *mpi_broadcast(Comm *c, float *buf, size_t count, int root, const char *what) {
    CommWork *w = start(c, "broadcast", COMM_SUM, NULL, count, what);
    mpi_check(c, MPI_Ibcast(buf, icount(c, count, w->kind, what), MPI_FLOAT, root, MPI_COMM_WORLD, &w->req), w->kind,
              what);
    return w;
}

static CommWork *mpi_reduce_scatter(Comm *c, const float *send, float *recv, size_t recv_count, CommOp op,
                                    const char *what) {
    CommWork *w = start(c, "reduce-scatter", op, recv, recv_count, what);
    mpi_check(c, MPI_Ireduce_scatter_block(send, recv, icount(c, recv_count, w->kind, what), MPI_FLOAT, MPI_SUM,
                                           MPI_COMM_WORLD, &w->req), w->kind, what);
    return w;
}

static CommWork *mpi_all_gather(Comm *c, const float *send, float *recv, size_t send_count, const char *what) {
    CommWork *w = start(c, "all-gather", COMM_SUM, NULL, send_count, what);
    const int n = icount(c, send_count, w->kind, what);
    mpi_check(c, MPI_Iallgather(send, n, MPI_FLOAT, recv, n, MPI_FLOAT, MPI_COMM_WORLD, &w->req), w->kind, what);
    return w;
}

static CommWork *mpi_barrier(Comm *c, const char *what) {
    CommWork *w = start(c, "barrier", COMM_SUM, NULL, 0, what);
    mpi_check(c, MPI_Ibarrier(MPI_COMM_WORLD, &w->req), w->kind, what);
    return w;
}

static int mpi_test(Comm *c, CommWork *w) {
    if (w->done) return 1;
    int flag = 0;
    mpi_check(c, MPI_Test(&w->req, &flag, MPI_STATUS_IGNORE), w->kind, w->what);
    if (flag) {
        w->done = 1;
        w->end_ns = trace_clock_ns();
    }
    return flag;
}

static void mpi_wait(Comm *c, CommWork *w, CommTimes *times) {
    long pause_ns = 2000;
    while (!mpi_test(c, w)) {
        if (vx_now() > w->deadline)
            comm_fail(c, w->kind, w->what, "did not finish within the deadline: a rank is stopped, hung or gone");
        struct timespec ts = {0, pause_ns};
        nanosleep(&ts, NULL);
        if (pause_ns < 1000000) pause_ns *= 2; /* up to 1 ms: quick when it is quick, idle when it is not */
    }
    if (w->scaled) {
        const float inv = 1.0f / (float)c->world;
        for (size_t i = 0; i < w->count; i++) w->scaled[i] *= inv;
    }
    if (times) *times = (CommTimes){w->start_ns, w->end_ns};
    free(w);
}

static void mpi_abort_all(Comm *c, int code) {
    (void)c;
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code); /* MPI_Abort does not return; in case it does */
}

static void mpi_close(Comm *c) {
    if (initialised_here) {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
    }
    free(c);
}

static const CommOps MPI_OPS = {mpi_allreduce, mpi_broadcast, mpi_reduce_scatter, mpi_all_gather, mpi_barrier,
                                mpi_test,      mpi_wait,      NULL,               mpi_close,      mpi_abort_all};

int comm_mpi_built(void) { return 1; }

Comm *comm_mpi_open(const DistEnv *env, double timeout_s) {
    ensure_init();
    int rank = -1, world = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (rank != env->rank || world != env->world)
        vx_usage_error("MPI says rank %d of %d but the launcher's environment says rank %d of %d (%s): start the ranks "
                       "with the same launcher MPI was built for", rank, world, env->rank, env->world, env->launcher);
    Comm *c = vx_calloc(1, sizeof *c);
    *c = (Comm){.name = "mpi", .rank = rank, .world = world, .local_rank = env->local_rank,
                .local_world = env->local_world, .timeout_s = timeout_s, .device_buffers = 0, .ops = &MPI_OPS};
    return c;
}

void bootstrap_broadcast_mpi(const DistEnv *env, void *blob, size_t len, double timeout_s) {
    ensure_init();
    Comm who = {.name = "mpi bootstrap", .rank = env->rank, .world = env->world, .timeout_s = timeout_s,
                .ops = &MPI_OPS};
    CommWork *w = start(&who, "broadcast", COMM_SUM, NULL, 0, "the bootstrap id");
    mpi_check(&who, MPI_Ibcast(blob, icount(&who, len, w->kind, w->what), MPI_BYTE, 0, MPI_COMM_WORLD, &w->req),
              w->kind, w->what);
    mpi_wait(&who, w, NULL);
}
#endif
