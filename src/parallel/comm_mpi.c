/* comm_mpi.c: the communicator of CPU ranks under mpirun or srun (comm.h): MPI's non-blocking collectives on host
 * memory, progressed by comm_test and comm_wait, waited on against the deadline; and bootstrap_broadcast_mpi.
 *
 * MPI is initialised here only, by the first comm_mpi_open or bootstrap_broadcast_mpi (MPI_THREAD_FUNNELED: every
 * MPI call comes from the thread that initialised it), and finalised when the last of them is done with it, so a
 * single-process run never starts MPI.
 *
 * All-reduce is a ring of point-to-point messages (MPI_Isend/MPI_Irecv on a communicator of its own, one step
 * posted as the previous one finishes, in comm_test and comm_wait): world-1 steps of reduce-scatter, after which
 * each rank holds one block's finished sum, then world-1 steps of all-gather that copy the blocks around. Each sum
 * is formed on one rank and copied, so the result is bit-identical on every rank by construction, which MPI does
 * not promise of MPI_Allreduce (Open MPI 4.1's algorithms happen to give it here; a cluster's collective component
 * need not). The reduce-scatter to owners (sharded data parallelism's gradient buckets) runs the same ring's first
 * world-1 steps, so every sum is the all-reduce's to the bit, and then sends each finished block's parts to the
 * ranks that own them (at most one block per rank: about what a reduce-scatter moves). The ring is also faster than Open MPI 4.1's non-blocking MPI_Iallreduce (libnbc) for 1-64 MiB on one
 * node, 1.6-2x (figures in docs/architecture.md). Every other collective is MPI's own non-blocking one, posted when
 * issued on a second communicator. Handles complete in issue order: comm_test(w) is 1 only when w and every
 * collective issued before it are done.
 *
 * Failures (a deadline passed, an MPI call failed) print comm_fail's line first and then MPI_Abort the job with
 * code 3, so mpirun or srun end the other ranks too instead of leaving them to their own watchdogs.
 *
 * Compiled only with MPI=1 (mk/mpi.mk defines VX_MPI); without it comm_stubs.c says to rebuild. */
#ifdef VX_MPI
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"
#include "parallel/bootstrap.h"
#include "parallel/comm.h"
#include "parallel/comm_host.h"
#include "trace/trace.h"

enum { PIECE_MAX = 1 << 28 }; /* floats per MPI call: MPI counts are int */

typedef struct {
    MPI_Comm issue;   /* MPI's collectives, posted when issued */
    MPI_Comm ring;    /* the all-reduces' point-to-point messages, tagged by collective and step */
    int tag_span;     /* all-reduces whose tags differ: far more than can be in flight at once */
    uint64_t seq;     /* all-reduces issued */
    CommWork *head;   /* handles not yet waited for, in issue order */
} MpiComm;

struct CommWork {
    CommWork *next;
    CommKind kind;
    CommOp op;
    char opname[COMM_OPNAME_LEN], what[COMM_WHAT_LEN];
    float *buf;         /* all-reduce, broadcast, reduce-scatter to owners: the buffer; reduce-scatter: recv */
    size_t count;       /* floats in buf */
    float *send_copy;   /* an overlapping send buffer, copied (comm_host_send_copy) */
    int npieces;        /* MPI collectives posted at issue: req[0, npieces); all-reduce: pieces of the ring */
    MPI_Request *req;   /* MPI_REQUEST_NULL once finished */
    /* all-reduce: the ring's position */
    int piece, step, posted; /* the piece and step in progress; posted: its two messages are out */
    int tag0;                /* this all-reduce's first tag */
    float *tmp;              /* one block received, before it is added */
    MPI_Request msg[2];      /* the step's receive and send */
    /* reduce-scatter to owners: the owners' blocks (offsets in buf, world + 1), and the last step's messages */
    size_t *off;
    MPI_Request *redis;
    int nredis;
    double deadline;    /* vx_now() seconds */
    int64_t start_ns, end_ns;
    int done;
};

/* ---- MPI's lifetime and failures ----------------------------------------------------------------------------- */

static int mpi_users;        /* open communicators and bootstraps in progress */
static int mpi_started_here; /* we initialised MPI, so we finalise it */
static pthread_t mpi_thread;

static const CommOps MPI_OPS;

/* comm_fail's abort_all once its line is printed: end every rank of the job, not only this one. */
static void abort_job(int code) {
    int inited = 0, finalized = 0;
    if (MPI_Initialized(&inited) == MPI_SUCCESS && inited && MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized)
        MPI_Abort(MPI_COMM_WORLD, code);
    _exit(code); /* MPI_Abort does not return; if it did, this rank still ends */
}

static void mpi_abort_all(Comm *c, int code) {
    (void)c;
    fflush(stderr);
    abort_job(code);
}

/* comm_fail through MPI's ops, whatever communicator (or bootstrap's stand-in) reports it: MPI_Abort follows. */
__attribute__((noreturn)) static void mpi_fail(const Comm *c, const char *op, const char *what, const char *why) {
    Comm with_abort = *c;
    with_abort.ops = &MPI_OPS;
    comm_fail(&with_abort, op, what, why);
}

static void mpi_check(const Comm *c, int rc, const char *call, const char *op, const char *what) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING], why[MPI_MAX_ERROR_STRING + 64];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", rc);
    snprintf(why, sizeof why, "failed in %s: %s", call, msg);
    mpi_fail(c, op, what, why);
}

/* Starts MPI if nobody has, checks that it sees the ranks the launch described, and counts one more user. */
static void mpi_acquire(const Comm *c, const char *op, const char *what) {
    int inited = 0, finalized = 0, provided = MPI_THREAD_SINGLE, rank = -1, world = -1;
    if (MPI_Initialized(&inited) != MPI_SUCCESS || MPI_Finalized(&finalized) != MPI_SUCCESS)
        comm_fail(c, op, what, "failed: MPI_Initialized or MPI_Finalized failed; check the Open MPI installation");
    if (finalized)
        comm_fail(c, op, what, "cannot start MPI: this process finalised it already (bootstrap_broadcast_mpi does when "
                  "no MPI communicator is open; open the communicator first)");
    if (!inited) {
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            comm_fail(c, op, what, "failed: MPI_Init_thread failed; start the ranks with mpirun or srun");
        mpi_started_here = 1;
        mpi_thread = pthread_self();
    } else if (!mpi_started_here && mpi_users == 0) {
        mpi_thread = pthread_self(); /* initialised by the program itself: its calling thread is ours */
    }
    mpi_check(c, MPI_Query_thread(&provided), "MPI_Query_thread", op, what);
    if (provided < MPI_THREAD_FUNNELED)
        mpi_fail(c, op, what, "failed: MPI gives less than MPI_THREAD_FUNNELED; use an MPI built with thread support");
    mpi_check(c, MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank", op, what);
    mpi_check(c, MPI_Comm_size(MPI_COMM_WORLD, &world), "MPI_Comm_size", op, what);
    if (rank != c->rank || world != c->world) {
        char why[256];
        snprintf(why, sizeof why, "failed: MPI says this is rank %d of %d, the launch environment says rank %d of %d; "
                 "start every rank with mpirun or srun and nothing that sets RANK/WORLD_SIZE", rank, world, c->rank,
                 c->world);
        mpi_fail(c, op, what, why);
    }
    mpi_users++;
}

static void mpi_release(const Comm *c) {
    if (--mpi_users > 0 || !mpi_started_here) return;
    mpi_check(c, MPI_Finalize(), "MPI_Finalize", "close", "the MPI communicator");
}

static void check_thread(void) {
    if (!pthread_equal(pthread_self(), mpi_thread))
        vx_fatal("the MPI communicator was called from a thread other than the one that initialised MPI "
                 "(MPI_THREAD_FUNNELED): make every comm_* call from that thread");
}

/* Between polls: yields first (a collective or ring step often finishes within microseconds), then 50 us sleeps,
 * which leave the core to the other ranks when several share it (oversubscribed runs). */
static void pause_poll(int *polls) {
    if ((*polls)++ < 64) {
        sched_yield();
        return;
    }
    const struct timespec ts = {0, 50 * 1000};
    nanosleep(&ts, NULL);
}

/* Waits for one request (open, bootstrap) within deadline. */
static void wait_request(const Comm *c, MPI_Request *r, double deadline, const char *op, const char *what) {
    for (int done = 0, polls = 0;;) {
        mpi_check(c, MPI_Test(r, &done, MPI_STATUS_IGNORE), "MPI_Test", op, what);
        if (done) return;
        if (vx_now() > deadline) {
            char why[96];
            snprintf(why, sizeof why, "did not finish within %g s (a rank did not reach it)", c->timeout_s);
            mpi_fail(c, op, what, why);
        }
        pause_poll(&polls);
    }
}

/* ---- issuing ------------------------------------------------------------------------------------------------- */

static CommWork *work_new(Comm *c, CommKind kind, CommOp op, int root, const char *what, int npieces) {
    check_thread();
    CommWork *w = vx_calloc(1, sizeof *w);
    w->kind = kind;
    w->op = op;
    comm_host_opname(w->opname, kind, op, root);
    comm_host_what(w->what, what);
    w->npieces = npieces;
    const int nreq = kind == CK_ALLREDUCE || kind == CK_REDUCE_SCATTER_V ? 0 : npieces; /* (rings: none) */
    w->req = vx_malloc((size_t)(nreq ? nreq : 1) * sizeof *w->req);
    for (int i = 0; i < nreq; i++) w->req[i] = MPI_REQUEST_NULL;
    w->msg[0] = w->msg[1] = MPI_REQUEST_NULL;
    w->deadline = comm_deadline(c);
    w->start_ns = trace_clock_ns();
    MpiComm *m = c->impl;
    CommWork **tail = &m->head;
    while (*tail) tail = &(*tail)->next;
    *tail = w;
    return w;
}

static int pieces_of(size_t count) { return (int)((count + PIECE_MAX - 1) / PIECE_MAX); }

static void check_int_count(const Comm *c, const CommWork *w, size_t total) {
    if (total > (size_t)INT_MAX)
        vx_fatal("%s of %s: %zu floats in one call, more than MPI's int counts hold (%d); split it into smaller "
                 "collectives", w->opname, w->what, total, INT_MAX);
    (void)c;
}

/* A ring collective (all-reduce, or reduce-scatter to owners) on buf[count]. */
static CommWork *ring_new(Comm *c, CommKind kind, float *buf, size_t count, CommOp op, const char *what) {
    MpiComm *m = c->impl;
    CommWork *w = work_new(c, kind, op, 0, what, pieces_of(count));
    w->buf = buf;
    w->count = count;
    w->tag0 = (int)(m->seq++ % (uint64_t)m->tag_span) * 2 * c->world;
    const size_t piece = count < PIECE_MAX ? count : PIECE_MAX;
    w->tmp = vx_malloc((piece / (size_t)c->world + 1) * sizeof(float));
    return w;
}

static CommWork *mpi_allreduce(Comm *c, float *buf, size_t count, CommOp op, const char *what) {
    return ring_new(c, CK_ALLREDUCE, buf, count, op, what);
}

static CommWork *mpi_reduce_scatter_v(Comm *c, float *buf, const size_t *counts, CommOp op, const char *what) {
    size_t *off = vx_malloc(((size_t)c->world + 1) * sizeof *off);
    comm_host_offsets(counts, c->world, off);
    CommWork *w = ring_new(c, CK_REDUCE_SCATTER_V, buf, off[c->world], op, what);
    w->off = off;
    w->redis = vx_malloc(2 * (size_t)c->world * sizeof *w->redis);
    return w;
}

static CommWork *mpi_broadcast(Comm *c, float *buf, size_t count, int root, const char *what) {
    MpiComm *m = c->impl;
    CommWork *w = work_new(c, CK_BROADCAST, COMM_SUM, root, what, pieces_of(count));
    if (root < 0 || root >= c->world)
        vx_fatal("%s of %s: root %d is not a rank of this world of %d", w->opname, w->what, root, c->world);
    w->buf = buf;
    w->count = count;
    for (int p = 0; p < w->npieces; p++) {
        const size_t off = (size_t)p * PIECE_MAX, len = count - off < PIECE_MAX ? count - off : PIECE_MAX;
        mpi_check(c, MPI_Ibcast(buf + off, (int)len, MPI_FLOAT, root, m->issue, &w->req[p]), "MPI_Ibcast",
                  w->opname, w->what);
    }
    return w;
}

static CommWork *mpi_reduce_scatter(Comm *c, const float *send, float *recv, size_t recv_count, CommOp op,
                                    const char *what) {
    MpiComm *m = c->impl;
    CommWork *w = work_new(c, CK_REDUCE_SCATTER, op, 0, what, recv_count ? 1 : 0);
    check_int_count(c, w, recv_count * (size_t)c->world);
    w->buf = recv;
    w->count = recv_count;
    if (!recv_count) return w;
    /* MPI allows no overlap between send and recv (its in-place form would write into send): copy send if so */
    w->send_copy = comm_host_send_copy(CK_REDUCE_SCATTER, send, recv, recv_count, c->rank, c->world, 0);
    mpi_check(c, MPI_Ireduce_scatter_block(w->send_copy ? w->send_copy : send, recv, (int)recv_count, MPI_FLOAT,
                                           MPI_SUM, m->issue, &w->req[0]),
              "MPI_Ireduce_scatter_block", w->opname, w->what);
    return w;
}

static CommWork *mpi_all_gather(Comm *c, const float *send, float *recv, size_t send_count, const char *what) {
    MpiComm *m = c->impl;
    CommWork *w = work_new(c, CK_ALL_GATHER, COMM_SUM, 0, what, send_count ? 1 : 0);
    check_int_count(c, w, send_count * (size_t)c->world);
    w->buf = recv;
    w->count = send_count * (size_t)c->world;
    if (!send_count) return w;
    const int in_place = send == recv + (size_t)c->rank * send_count; /* MPI_IN_PLACE means exactly this */
    if (!in_place) w->send_copy = comm_host_send_copy(CK_ALL_GATHER, send, recv, send_count, c->rank, c->world, 1);
    const void *src = in_place ? MPI_IN_PLACE : w->send_copy ? w->send_copy : send;
    mpi_check(c, MPI_Iallgather(src, (int)send_count, MPI_FLOAT, recv, (int)send_count, MPI_FLOAT, m->issue,
                                &w->req[0]),
              "MPI_Iallgather", w->opname, w->what);
    return w;
}

static CommWork *mpi_barrier(Comm *c, const char *what) {
    MpiComm *m = c->impl;
    CommWork *w = work_new(c, CK_BARRIER, COMM_SUM, 0, what, 1);
    mpi_check(c, MPI_Ibarrier(m->issue, &w->req[0]), "MPI_Ibarrier", w->opname, w->what);
    return w;
}

/* ---- progress ------------------------------------------------------------------------------------------------ */

/* Block b of a piece of len floats cut into world blocks of blk (the last ones shorter or empty). */
static float *block(float *piece, size_t len, size_t blk, int b, int *n) {
    const size_t off = (size_t)b * blk < len ? (size_t)b * blk : len;
    *n = (int)(len - off < blk ? len - off : blk);
    return piece + off;
}

/* Posts step s of the ring on the current piece. Steps 0..W-2 reduce-scatter: send block me-s, receive block
 * me-s-1 into tmp and add it; after them this rank holds block me+1's finished sum. Steps W-1..2W-3 all-gather:
 * send block me+1-t, receive block me-t in place (t = s-(W-1)). */
static void ring_post(Comm *c, CommWork *w, float *piece, size_t len, size_t blk) {
    MpiComm *m = c->impl;
    const int W = c->world, me = c->rank, s = w->step, right = (me + 1) % W, left = (me + W - 1) % W;
    const int reduce = s < W - 1, t = reduce ? s : s - (W - 1);
    int ns, nr;
    float *sb = block(piece, len, blk, ((reduce ? me - t : me + 1 - t) % W + W) % W, &ns);
    float *rb = block(piece, len, blk, ((reduce ? me - t - 1 : me - t) % W + W) % W, &nr);
    const int tag = w->tag0 + s;
    mpi_check(c, MPI_Irecv(reduce ? w->tmp : rb, nr, MPI_FLOAT, left, tag, m->ring, &w->msg[0]), "MPI_Irecv",
              w->opname, w->what);
    mpi_check(c, MPI_Isend(sb, ns, MPI_FLOAT, right, tag, m->ring, &w->msg[1]), "MPI_Isend", w->opname, w->what);
    w->posted = 1;
}

/* The last step of a reduce-scatter to owners on the piece at po: after the ring's world-1 steps rank q holds the
 * finished sum of block q+1; it sends each owner r the part of it in r's block, and receives its own block's parts
 * from the ranks that hold them. */
static void redistribute_post(Comm *c, CommWork *w, size_t po, size_t len, size_t blk) {
    MpiComm *m = c->impl;
    const int W = c->world, me = c->rank, tag = w->tag0 + W - 1;
    w->nredis = 0;
    for (int q = 0; q < W; q++) {
        const size_t b = (size_t)((q + 1) % W), f0 = po + (b * blk < len ? b * blk : len),
                     f1 = po + ((b + 1) * blk < len ? (b + 1) * blk : len);
        for (int r = 0; r < W; r++) {
            if ((q == me) == (r == me)) continue; /* this rank sends what it holds, and receives what it owns */
            const size_t a = f0 > w->off[r] ? f0 : w->off[r], e = f1 < w->off[r + 1] ? f1 : w->off[r + 1];
            if (a >= e) continue;
            MPI_Request *rq = &w->redis[w->nredis++];
            if (q == me)
                mpi_check(c, MPI_Isend(w->buf + a, (int)(e - a), MPI_FLOAT, r, tag, m->ring, rq), "MPI_Isend",
                          w->opname, w->what);
            else
                mpi_check(c, MPI_Irecv(w->buf + a, (int)(e - a), MPI_FLOAT, q, tag, m->ring, rq), "MPI_Irecv",
                          w->opname, w->what);
        }
    }
    w->posted = 1;
}

/* Moves a ring collective as far as the messages allow. Returns 1 when something moved. The all-reduce takes
 * 2(world-1) steps per piece, the reduce-scatter to owners world-1 and its redistribution. */
static int ring_progress(Comm *c, CommWork *w) {
    const int W = c->world, me = c->rank, steps = w->kind == CK_ALLREDUCE ? 2 * (W - 1) : W;
    int moved = 0;
    while (w->piece < w->npieces) {
        float *piece = w->buf + (size_t)w->piece * PIECE_MAX;
        const size_t rest = w->count - (size_t)w->piece * PIECE_MAX, len = rest < PIECE_MAX ? rest : PIECE_MAX;
        const size_t blk = (len + (size_t)W - 1) / (size_t)W;
        if (w->posted) {
            int flag = 0;
            const int redis = w->kind == CK_REDUCE_SCATTER_V && w->step == W - 1;
            mpi_check(c, redis ? MPI_Testall(w->nredis, w->redis, &flag, MPI_STATUSES_IGNORE)
                               : MPI_Testall(2, w->msg, &flag, MPI_STATUSES_IGNORE),
                      "MPI_Testall", w->opname, w->what);
            if (!flag) return moved;
            w->posted = 0, moved = 1;
            int n;
            if (w->step < W - 1) { /* add the received block: the sum grows in ring order */
                float *rb = block(piece, len, blk, ((me - w->step - 1) % W + W) % W, &n);
                comm_host_add(rb, w->tmp, (size_t)n);
            }
            if (w->step == W - 2 && w->op == COMM_AVG) { /* this rank's block is finished: average it once */
                float *mine = block(piece, len, blk, (me + 1) % W, &n);
                comm_host_divide(mine, (size_t)n, W);
            }
            w->step++;
        }
        if (w->step == steps) {
            w->piece++, w->step = 0;
            continue;
        }
        if (w->kind == CK_REDUCE_SCATTER_V && w->step == W - 1)
            redistribute_post(c, w, (size_t)w->piece * PIECE_MAX, len, blk);
        else ring_post(c, w, piece, len, blk);
    }
    return moved;
}

static void finish(CommWork *w, int world) {
    if (w->kind == CK_REDUCE_SCATTER && w->op == COMM_AVG) comm_host_divide(w->buf, w->count, world);
    free(w->send_copy);
    w->send_copy = NULL;
    w->done = 1;
    w->end_ns = trace_clock_ns();
}

/* Tests every pending request and moves the rings on; marks finished handles. Returns 1 when something moved. */
static int progress(Comm *c) {
    MpiComm *m = c->impl;
    int moved = 0;
    for (CommWork *w = m->head; w; w = w->next) {
        if (w->done) continue;
        int finished = 1;
        const int ring = w->kind == CK_ALLREDUCE || w->kind == CK_REDUCE_SCATTER_V;
        for (int i = 0; i < (ring ? 0 : w->npieces); i++) {
            if (w->req[i] == MPI_REQUEST_NULL) continue;
            int flag = 0;
            mpi_check(c, MPI_Test(&w->req[i], &flag, MPI_STATUS_IGNORE), "MPI_Test", w->opname, w->what);
            finished &= flag;
        }
        if (ring) {
            moved |= ring_progress(c, w);
            finished = w->piece == w->npieces;
        }
        if (finished) finish(w, c->world), moved = 1;
    }
    return moved;
}

/* The first handle up to and including w that has not finished, or NULL. */
static CommWork *first_pending(MpiComm *m, CommWork *w) {
    for (CommWork *v = m->head; v; v = v->next) {
        if (!v->done) return v;
        if (v == w) break;
    }
    return NULL;
}

__attribute__((noreturn)) static void fail_late(const Comm *c, const CommWork *late) {
    char why[96];
    snprintf(why, sizeof why, "did not finish within %g s (a rank did not reach it or stalled)", c->timeout_s);
    mpi_fail(c, late->opname, late->what, why);
}

static int mpi_test(Comm *c, CommWork *w) {
    check_thread();
    progress(c);
    const CommWork *late = first_pending(c->impl, w);
    if (late && vx_now() > late->deadline) fail_late(c, late);
    return late == NULL;
}

static void mpi_wait(Comm *c, CommWork *w, CommTimes *times) {
    check_thread();
    MpiComm *m = c->impl;
    for (int polls = 0;;) {
        if (progress(c)) polls = 0; /* a ring moved: its next step is likely ready soon */
        CommWork *late = first_pending(m, w);
        if (!late) break;
        if (vx_now() > late->deadline) fail_late(c, late);
        pause_poll(&polls);
    }
    if (times) *times = (CommTimes){w->start_ns, w->end_ns};
    CommWork **link = &m->head;
    while (*link != w) link = &(*link)->next;
    *link = w->next;
    free(w->req);
    free(w->tmp);
    free(w->off);
    free(w->redis);
    free(w);
}

static void mpi_close(Comm *c) {
    MpiComm *m = c->impl;
    if (m->head) {
        /* on the way out of a failure: requests still in flight; MPI may neither free them nor finalise */
        free(m);
        free(c);
        return;
    }
    check_thread();
    mpi_check(c, MPI_Comm_free(&m->issue), "MPI_Comm_free", "close", "the MPI communicator");
    mpi_check(c, MPI_Comm_free(&m->ring), "MPI_Comm_free", "close", "the MPI communicator");
    mpi_release(c);
    free(m);
    free(c);
}

static const CommOps MPI_OPS = {.allreduce = mpi_allreduce, .broadcast = mpi_broadcast,
                                .reduce_scatter = mpi_reduce_scatter, .all_gather = mpi_all_gather,
                                .barrier = mpi_barrier, .reduce_scatter_v = mpi_reduce_scatter_v, .test = mpi_test,
                                .wait = mpi_wait, .close = mpi_close, .abort_all = mpi_abort_all};
/* (host collectives: nothing to capture) */

int comm_mpi_built(void) { return 1; }

/* Duplicates MPI_COMM_WORLD without blocking past the deadline; errors on it are returned, not fatal. */
static MPI_Comm dup_world(const Comm *c, double deadline, const char *op, const char *what) {
    MPI_Comm d;
    MPI_Request r;
    mpi_check(c, MPI_Comm_idup(MPI_COMM_WORLD, &d, &r), "MPI_Comm_idup", op, what);
    wait_request(c, &r, deadline, op, what);
    mpi_check(c, MPI_Comm_set_errhandler(d, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", op, what);
    return d;
}

Comm *comm_mpi_open(const DistEnv *env, double timeout_s) {
    Comm *c = vx_calloc(1, sizeof *c);
    MpiComm *m = vx_calloc(1, sizeof *m);
    *c = (Comm){.name = "mpi", .rank = env->rank, .world = env->world, .local_rank = env->local_rank,
                .local_world = env->local_world, .timeout_s = timeout_s, .device_buffers = 0, .ops = &MPI_OPS,
                .impl = m};
    const double deadline = comm_deadline(c);
    mpi_acquire(c, "open", "the MPI communicator");
    check_thread();
    m->issue = dup_world(c, deadline, "open", "the MPI communicator");
    m->ring = dup_world(c, deadline, "open", "the MPI communicator");
    int *tag_ub = NULL, found = 0;
    mpi_check(c, MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found), "MPI_Comm_get_attr", "open",
              "the MPI communicator");
    m->tag_span = (found ? *tag_ub : 32767) / (2 * c->world); /* MPI guarantees tags up to 32767 */
    if (m->tag_span < 64) mpi_fail(c, "open", "the MPI communicator", "failed: MPI's tags are too few for the ring");
    return c;
}

void bootstrap_broadcast_mpi(const DistEnv *env, void *blob, size_t len, double timeout_s) {
    const Comm c = {.name = "mpi", .rank = env->rank, .world = env->world, .local_rank = env->local_rank,
                    .local_world = env->local_world, .timeout_s = timeout_s};
    const char *op = "bootstrap broadcast from rank 0", *what = "the bootstrap blob";
    const double deadline = comm_deadline(&c);
    if (len > (size_t)INT_MAX) vx_fatal("bootstrap blob of %zu bytes: more than MPI's int counts hold", len);
    mpi_acquire(&c, op, what);
    check_thread();
    MPI_Comm d = dup_world(&c, deadline, op, what);
    MPI_Request r;
    mpi_check(&c, MPI_Ibcast(blob, (int)len, MPI_BYTE, 0, d, &r), "MPI_Ibcast", op, what);
    wait_request(&c, &r, deadline, op, what);
    mpi_check(&c, MPI_Comm_free(&d), "MPI_Comm_free", op, what);
    mpi_release(&c);
}

#endif /* VX_MPI */
