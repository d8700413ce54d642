/* comm.c: the single-process communicator and what every implementation shares: the failure line with exit code
 * 3, the deadline, the host all-reduce of a few floats (see comm.h). Choosing one is comm_open.c's: the
 * implementations call this file, and it calls none of them. */
#include "parallel/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

struct CommWork {
    int unused; /* single: every collective is already finished */
};

const char *comm_op_name(CommOp op) { return op == COMM_AVG ? "average" : "sum"; }

double comm_deadline(const Comm *c) { return vx_now() + c->timeout_s; }

void comm_fail(const Comm *c, const char *op, const char *what, const char *why) {
    /* the rank is the line's prefix (vx_set_error_prefix), set when the run's ranks are known */
    static const char *const FMT = "%s of %s %s (%s communicator); the run ends on every rank (dist.timeout_s is %g s)";
    if (c->ops && c->ops->abort_all) {
        vx_error_line(FMT, op, what, why, c->name, c->timeout_s);
        c->ops->abort_all((Comm *)c, VX_EXIT_DIST);
        /* aborted: leave now. The exit handlers would wait: the CUDA backend's synchronises the compute stream,
         * which the failed collective (or the work queued before it) may hold for good. */
        vx_exit_now(VX_EXIT_DIST);
    }
    vx_exit_error(VX_EXIT_DIST, FMT, op, what, why, c->name, c->timeout_s);
}

void comm_allreduce_host(Comm *c, float *vals, size_t count, CommOp op, const char *what) {
    if (c->ops->allreduce_host) {
        c->ops->allreduce_host(c, vals, count, op, what);
        return;
    }
    comm_wait(c, comm_allreduce(c, vals, count, op, what), NULL);
}

/* ---- single: one rank, nothing to exchange ----------------------------------------------------------------- */

static CommWork single_work; /* a finished collective; never freed */

static CommWork *single_allreduce(Comm *c, float *buf, size_t count, CommOp op, const char *what) {
    (void)c, (void)buf, (void)count, (void)op, (void)what;
    return &single_work;
}
static CommWork *single_broadcast(Comm *c, float *buf, size_t count, int root, const char *what) {
    (void)c, (void)buf, (void)count, (void)root, (void)what;
    return &single_work;
}
static CommWork *single_reduce_scatter(Comm *c, const float *send, float *recv, size_t recv_count, CommOp op,
                                       const char *what) {
    (void)c, (void)op, (void)what;
    if (send != recv) memmove(recv, send, recv_count * sizeof(float)); /* host memory: single runs on the CPU too */
    return &single_work;
}
static CommWork *single_all_gather(Comm *c, const float *send, float *recv, size_t send_count, const char *what) {
    (void)c, (void)what;
    if (send != recv) memmove(recv, send, send_count * sizeof(float));
    return &single_work;
}
static CommWork *single_barrier(Comm *c, const char *what) {
    (void)c, (void)what;
    return &single_work;
}
static int single_test(Comm *c, CommWork *w) {
    (void)c, (void)w;
    return 1;
}
static void single_wait(Comm *c, CommWork *w, CommTimes *times) {
    (void)c, (void)w;
    if (times) *times = (CommTimes){0, 0};
}
static void single_close(Comm *c) { free(c); }

static CommWork *single_reduce_scatter_v(Comm *c, float *buf, const size_t *counts, CommOp op, const char *what) {
    (void)c, (void)buf, (void)counts, (void)op, (void)what; /* one rank: its block already holds the sum */
    return &single_work;
}

static const CommOps SINGLE_OPS = {.allreduce = single_allreduce, .broadcast = single_broadcast,
                                   .reduce_scatter = single_reduce_scatter, .all_gather = single_all_gather,
                                   .barrier = single_barrier, .reduce_scatter_v = single_reduce_scatter_v,
                                   .test = single_test, .wait = single_wait, .close = single_close};
/* (no allreduce_host, abort_all or capture: never in a captured step) */

Comm *comm_single_open(void) {
    Comm *c = vx_calloc(1, sizeof *c);
    *c = (Comm){.name = "single", .rank = 0, .world = 1, .local_rank = 0, .local_world = 1, .timeout_s = 0,
                .device_buffers = 0, .ops = &SINGLE_OPS};
    return c;
}

void comm_close(Comm *c) {
    if (c) c->ops->close(c);
}
