/* comm_tcp.c: the communicator of CPU ranks started without MPI (by `train --gpus N --device cpu` or torchrun; see
 * comm.h). A star over TCP: every rank holds one socket to rank 0, which forms each result once and sends it back,
 * so results are identical on every rank by construction (sums are taken in rank order 0, 1, 2, ...). Collectives
 * are queued and run in order by a background thread per rank, so they proceed while the caller computes (the
 * gradient buckets overlap backward); comm_wait blocks on a condition variable. Every message starts with a small
 * header (sequence number, kind, count) that rank 0 checks against its own: ranks that issue different collectives
 * are told so instead of exchanging garbage. A socket that closes (a rank died) or stays silent past the deadline
 * fails the collective, and the rank that waits for it ends with comm_fail's line and exit 3. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"
#include "parallel/bootstrap.h"
#include "parallel/comm.h"
#include "parallel/comm_host.h"
#include "parallel/tcp_link.h"
#include "trace/trace.h"


struct CommWork {
    int kind, root;
    CommOp op;
    float *buf;        /* allreduce, broadcast: in place */
    const float *send; /* reduce-scatter, all-gather */
    float *recv;
    size_t count;      /* allreduce/broadcast: of buf; reduce-scatter: recv_count; all-gather: send_count;
                          reduce-scatter to owners: of buf, the sum of the counts */
    size_t *off;       /* reduce-scatter to owners: the blocks' offsets in buf, world + 1 of them */
    char what[160];
    uint32_t seq;
    double deadline;
    int64_t start_ns, end_ns;
    int done;        /* under the mutex */
    char why[256];   /* set with done when the collective failed */
    struct CommWork *next;
};

typedef struct {
    int rank, world;
    int *fd;             /* rank 0: fd[r] for r = 1..world-1; others: fd[0], the socket to rank 0 */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct CommWork *head, *tail;
    int stop;
    uint32_t seq;
    float *scratch;      /* rank 0: what a peer sent */
    size_t scratch_cap;
} Tcp;

typedef struct {
    uint32_t seq, kind;
    uint64_t count;
} Header;

/* "all-reduce (sum)", "broadcast from rank 2", ...: the names failure lines print, shared with mpi */
static const char *opname(const struct CommWork *w, char *out) {
    comm_host_opname(out, (CommKind)w->kind, w->op, w->root);
    return out;
}

/* A peer's header names only the kind (no operator): for the line that says the ranks issued different ones. */
static const char *kind_name(uint32_t kind) {
    static const char *const NAME[] = {"all-reduce",    "broadcast", "reduce-scatter", "all-gather", "barrier",
                                       "reduce-scatter to owners"};
    return kind <= CK_REDUCE_SCATTER_V ? NAME[kind] : "an unknown collective";
}

static void *scratch(Tcp *t, size_t floats) {
    if (floats > t->scratch_cap) {
        t->scratch = vx_realloc(t->scratch, floats * sizeof(float));
        t->scratch_cap = floats;
    }
    return t->scratch;
}

/* Floats a peer sends rank 0 for work w (its whole contribution), and what rank 0 sends each peer back. */
static size_t sent_to_root(const struct CommWork *w, int world) {
    switch (w->kind) {
    case CK_ALLREDUCE:
    case CK_REDUCE_SCATTER_V: return w->count;
    case CK_REDUCE_SCATTER: return w->count * (size_t)world;
    case CK_ALL_GATHER: return w->count;
    default: return 0; /* broadcast from a root other than 0 is handled apart; barrier carries nothing */
    }
}

/* Runs w on rank 0: gather from every peer in rank order, form the result once, send it back. 0 or a reason. */
static int run_root(Tcp *t, struct CommWork *w, char *why, size_t why_len) {
    const int W = t->world;
    const Header mine = {w->seq, (uint32_t)w->kind, (uint64_t)w->count};
    /* headers first: a peer that issued another collective is named before any data moves */
    for (int r = 1; r < W; r++) {
        Header h;
        if (!tcp_recv_all(t->fd[r], &h, sizeof h, w->deadline, r, why, why_len)) return 0;
        if (h.seq != mine.seq || h.kind != mine.kind || h.count != mine.count) {
            snprintf(why, why_len, "does not match rank %d's collective number %u (%s of %llu floats): the ranks "
                     "issued different collectives (a bug: every rank must issue the same ones in the same order)",
                     r, h.seq, kind_name(h.kind), (unsigned long long)h.count);
            return 0;
        }
    }
    const size_t n = w->count;
    if (w->kind == CK_ALLREDUCE || w->kind == CK_REDUCE_SCATTER || w->kind == CK_REDUCE_SCATTER_V) {
        const int in_buf = w->kind != CK_REDUCE_SCATTER; /* the all-reduce's way: the sum formed in buf */
        float *acc = in_buf ? w->buf : (float *)w->send;
        const size_t total = in_buf ? n : n * (size_t)W;
        float *sum = in_buf ? acc : scratch(t, 2 * total); /* never writes send */
        if (sum != acc) memcpy(sum, acc, total * sizeof(float));
        float *in = in_buf ? scratch(t, total) : sum + total;
        for (int r = 1; r < W; r++) { /* rank order: the same sum whatever the timing */
            if (!tcp_recv_all(t->fd[r], in, total * sizeof(float), w->deadline, r, why, why_len)) return 0;
            comm_host_add(sum, in, total);
        }
        if (w->op == COMM_AVG) comm_host_divide(sum, total, W); /* x / W: one rounding, as on mpi */
        if (w->kind == CK_ALLREDUCE) {
            for (int r = 1; r < W; r++)
                if (!tcp_send_all(t->fd[r], sum, n * sizeof(float), w->deadline, r, why, why_len)) return 0;
        } else if (w->kind == CK_REDUCE_SCATTER_V) { /* each owner its block; rank 0's is in place */
            for (int r = 1; r < W; r++)
                if (!tcp_send_all(t->fd[r], sum + w->off[r], (w->off[r + 1] - w->off[r]) * sizeof(float),
                                  w->deadline, r, why, why_len))
                    return 0;
        } else {
            for (int r = 1; r < W; r++)
                if (!tcp_send_all(t->fd[r], sum + (size_t)r * n, n * sizeof(float), w->deadline, r, why, why_len))
                    return 0;
            memcpy(w->recv, sum, n * sizeof(float));
        }
    } else if (w->kind == CK_ALL_GATHER) {
        memmove(w->recv, w->send, n * sizeof(float));
        for (int r = 1; r < W; r++)
            if (!tcp_recv_all(t->fd[r], w->recv + (size_t)r * n, n * sizeof(float), w->deadline, r, why, why_len))
                return 0;
        for (int r = 1; r < W; r++)
            if (!tcp_send_all(t->fd[r], w->recv, (size_t)W * n * sizeof(float), w->deadline, r, why, why_len))
                return 0;
    } else if (w->kind == CK_BROADCAST) {
        if (w->root != 0 && !tcp_recv_all(t->fd[w->root], w->buf, n * sizeof(float), w->deadline, w->root, why,
                                          why_len))
            return 0;
        for (int r = 1; r < W; r++)
            if (r != w->root && !tcp_send_all(t->fd[r], w->buf, n * sizeof(float), w->deadline, r, why, why_len))
                return 0;
    } else { /* barrier: every header has arrived; release them */
        for (int r = 1; r < W; r++)
            if (!tcp_send_all(t->fd[r], &mine, sizeof mine, w->deadline, r, why, why_len)) return 0;
    }
    return 1;
}

/* Runs w on a rank other than 0: send the header and this rank's part to rank 0, receive the result. */
static int run_peer(Tcp *t, struct CommWork *w, char *why, size_t why_len) {
    const int fd = t->fd[0];
    const Header mine = {w->seq, (uint32_t)w->kind, (uint64_t)w->count};
    if (!tcp_send_all(fd, &mine, sizeof mine, w->deadline, 0, why, why_len)) return 0;
    const size_t n = w->count, up = sent_to_root(w, t->world);
    const float *part = w->kind == CK_ALLREDUCE || w->kind == CK_REDUCE_SCATTER_V ? w->buf : w->send;
    if (up && !tcp_send_all(fd, part, up * sizeof(float), w->deadline, 0, why, why_len)) return 0;
    switch (w->kind) {
    case CK_ALLREDUCE: return tcp_recv_all(fd, w->buf, n * sizeof(float), w->deadline, 0, why, why_len);
    case CK_REDUCE_SCATTER: return tcp_recv_all(fd, w->recv, n * sizeof(float), w->deadline, 0, why, why_len);
    case CK_REDUCE_SCATTER_V:
        return tcp_recv_all(fd, w->buf + w->off[t->rank], (w->off[t->rank + 1] - w->off[t->rank]) * sizeof(float),
                            w->deadline, 0, why, why_len);
    case CK_ALL_GATHER:
        return tcp_recv_all(fd, w->recv, (size_t)t->world * n * sizeof(float), w->deadline, 0, why, why_len);
    case CK_BROADCAST:
        if (w->root == t->rank) return tcp_send_all(fd, w->buf, n * sizeof(float), w->deadline, 0, why, why_len);
        return tcp_recv_all(fd, w->buf, n * sizeof(float), w->deadline, 0, why, why_len);
    default: {
        Header back;
        return tcp_recv_all(fd, &back, sizeof back, w->deadline, 0, why, why_len);
    }
    }
}

/* The background thread: runs the queued collectives in order. After a failure every later one fails too (the
 * sockets are in an unknown state), with the first reason. */
static void *worker(void *arg) {
    Tcp *t = arg;
    char failed[256] = "";
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->head && !t->stop) pthread_cond_wait(&t->cv, &t->mu);
        if (!t->head) break;
        struct CommWork *w = t->head;
        pthread_mutex_unlock(&t->mu);
        char why[256] = "";
        if (failed[0]) snprintf(why, sizeof why, "%s", failed);
        else if (!(t->rank == 0 ? run_root(t, w, why, sizeof why) : run_peer(t, w, why, sizeof why)))
            snprintf(failed, sizeof failed, "%s", why);
        pthread_mutex_lock(&t->mu);
        w->end_ns = trace_clock_ns();
        snprintf(w->why, sizeof w->why, "%s", why);
        w->done = 1;
        t->head = w->next;
        if (!t->head) t->tail = NULL;
        pthread_cond_broadcast(&t->cv);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

static struct CommWork *enqueue(Comm *c, struct CommWork proto) {
    Tcp *t = c->impl;
    struct CommWork *w = vx_malloc(sizeof *w);
    *w = proto;
    w->next = NULL;
    w->done = 0;
    w->why[0] = 0;
    w->deadline = comm_deadline(c);
    w->start_ns = trace_clock_ns();
    pthread_mutex_lock(&t->mu);
    w->seq = t->seq++;
    if (t->tail) t->tail->next = w;
    else t->head = w;
    t->tail = w;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    return w;
}

static struct CommWork proto(int kind, const char *what) {
    struct CommWork w;
    memset(&w, 0, sizeof w);
    w.kind = kind;
    snprintf(w.what, sizeof w.what, "%s", what);
    return w;
}

static CommWork *tcp_allreduce(Comm *c, float *buf, size_t count, CommOp op, const char *what) {
    struct CommWork w = proto(CK_ALLREDUCE, what);
    w.buf = buf, w.count = count, w.op = op;
    return enqueue(c, w);
}
static CommWork *tcp_broadcast(Comm *c, float *buf, size_t count, int root, const char *what) {
    if (root < 0 || root >= c->world) vx_fatal("broadcast from rank %d of %d", root, c->world);
    struct CommWork w = proto(CK_BROADCAST, what);
    w.buf = buf, w.count = count, w.root = root;
    return enqueue(c, w);
}
static CommWork *tcp_reduce_scatter(Comm *c, const float *send, float *recv, size_t recv_count, CommOp op,
                                    const char *what) {
    struct CommWork w = proto(CK_REDUCE_SCATTER, what);
    w.send = send, w.recv = recv, w.count = recv_count, w.op = op;
    return enqueue(c, w);
}
static CommWork *tcp_all_gather(Comm *c, const float *send, float *recv, size_t send_count, const char *what) {
    struct CommWork w = proto(CK_ALL_GATHER, what);
    w.send = send, w.recv = recv, w.count = send_count;
    return enqueue(c, w);
}
static CommWork *tcp_barrier(Comm *c, const char *what) { return enqueue(c, proto(CK_BARRIER, what)); }
static CommWork *tcp_reduce_scatter_v(Comm *c, float *buf, const size_t *counts, CommOp op, const char *what) {
    struct CommWork w = proto(CK_REDUCE_SCATTER_V, what);
    w.off = vx_malloc(((size_t)c->world + 1) * sizeof *w.off);
    comm_host_offsets(counts, c->world, w.off);
    w.buf = buf, w.count = w.off[c->world], w.op = op;
    return enqueue(c, w);
}

static int tcp_test(Comm *c, CommWork *w) {
    Tcp *t = c->impl;
    pthread_mutex_lock(&t->mu);
    const int done = w->done;
    pthread_mutex_unlock(&t->mu);
    return done;
}

static void tcp_wait(Comm *c, CommWork *w, CommTimes *times) {
    Tcp *t = c->impl;
    char name[COMM_OPNAME_LEN];
    pthread_mutex_lock(&t->mu);
    /* the worker gives up at the work's deadline itself; a little more here covers a worker stuck elsewhere */
    const double give_up = w->deadline + 5.0;
    while (!w->done) {
        const double left = give_up - vx_now();
        if (left <= 0) {
            pthread_mutex_unlock(&t->mu);
            comm_fail(c, opname(w, name), w->what, "did not finish within the deadline");
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        const double at = ts.tv_sec + ts.tv_nsec * 1e-9 + (left < 0.5 ? left : 0.5);
        ts.tv_sec = (time_t)at;
        ts.tv_nsec = (long)((at - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&t->cv, &t->mu, &ts);
    }
    pthread_mutex_unlock(&t->mu);
    if (w->why[0]) comm_fail(c, opname(w, name), w->what, w->why);
    if (times) *times = (CommTimes){w->start_ns, w->end_ns};
    free(w->off);
    free(w);
}

static void tcp_close(Comm *c) {
    Tcp *t = c->impl;
    pthread_mutex_lock(&t->mu);
    t->stop = 1;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->thread, NULL);
    for (int r = 0; r < (t->rank == 0 ? t->world : 1); r++)
        if (t->fd[r] >= 0) close(t->fd[r]);
    free(t->fd);
    free(t->scratch);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
    free(c);
}

static const CommOps TCP_OPS = {.allreduce = tcp_allreduce, .broadcast = tcp_broadcast,
                                .reduce_scatter = tcp_reduce_scatter, .all_gather = tcp_all_gather,
                                .barrier = tcp_barrier, .reduce_scatter_v = tcp_reduce_scatter_v, .test = tcp_test,
                                .wait = tcp_wait, .close = tcp_close}; /* host collectives: nothing to capture */

Comm *comm_tcp_open(const DistEnv *env, double timeout_s) {
    Comm *c = vx_calloc(1, sizeof *c);
    *c = (Comm){.name = "tcp", .rank = env->rank, .world = env->world, .local_rank = env->local_rank,
                .local_world = env->local_world, .timeout_s = timeout_s, .device_buffers = 0, .ops = &TCP_OPS};
    if (env->world > 1 && (!env->master_addr[0] || env->master_port <= 0))
        vx_usage_error("%d CPU ranks without MPI need a rendezvous address: start them with `train --gpus N` or "
                       "torchrun (MASTER_ADDR, MASTER_PORT), or under mpirun", env->world);
    Tcp *t = vx_calloc(1, sizeof *t);
    t->rank = env->rank;
    t->world = env->world;
    t->fd = tcp_rendezvous(env, timeout_s, c);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    c->impl = t;
    if (pthread_create(&t->thread, NULL, worker, t) != 0) vx_fatal("cannot start the tcp communicator's thread");
    return c;
}

void bootstrap_broadcast_tcp(const DistEnv *env, void *blob, size_t len, double timeout_s) {
    Comm who = {.name = "tcp bootstrap", .rank = env->rank, .world = env->world, .timeout_s = timeout_s};
    int *fd = tcp_rendezvous(env, timeout_s, &who);
    const double deadline = vx_now() + timeout_s;
    char why[256];
    if (env->rank == 0) {
        for (int r = 1; r < env->world; r++)
            if (!tcp_send_all(fd[r], blob, len, deadline, r, why, sizeof why))
                comm_fail(&who, "broadcast", "the bootstrap id", why);
    } else if (!tcp_recv_all(fd[0], blob, len, deadline, 0, why, sizeof why)) {
        comm_fail(&who, "broadcast", "the bootstrap id", why);
    }
    for (int r = 0; r < (env->rank == 0 ? env->world : 1); r++)
        if (fd[r] >= 0) close(fd[r]);
    free(fd);
}
