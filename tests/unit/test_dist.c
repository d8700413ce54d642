/* test_dist.c: the parts of data parallelism that need no second process: the bucket plan over the real model's
 * gradients and the order in which the backward hook launches the buckets (against a communicator that records
 * its calls), the launch environment (dist_detect) of each launcher, and the loader's share of a global batch. The
 * multi-rank runs themselves are tests/integration/test_distributed.py. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/config.h"
#include "core/util.h"
#include "model_of.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/phantom.h"
#include "parallel/buckets.h"
#include "parallel/launch.h"
#include "graph/model.h"
#include "train/step.h"
#include "train/train.h"

/* ---- a communicator that records what it is asked ---------------------------------------------------------- */

typedef struct {
    long begin[256], count[256];
    int n_launched, last_done_step[256];
    int done_step; /* what the test's backward has finished when the call comes */
    const float *base;
} Record;
static Record rec;

struct CommWork {
    int id;
};
static struct CommWork works[256];

static CommWork *rec_allreduce(Comm *c, float *buf, size_t count, CommOp op, const char *what) {
    (void)c, (void)op;
    assert_non_null(strstr(what, "bucket"));
    const int i = rec.n_launched++;
    rec.begin[i] = buf - rec.base;
    rec.count[i] = (long)count;
    rec.last_done_step[i] = rec.done_step;
    works[i].id = i;
    return &works[i];
}
static int rec_test(Comm *c, CommWork *w) {
    (void)c, (void)w;
    return 1;
}
static void rec_wait(Comm *c, CommWork *w, CommTimes *t) {
    (void)c, (void)w;
    if (t) *t = (CommTimes){1, 2};
}
static const CommOps REC_OPS = {.allreduce = rec_allreduce, .test = rec_test, .wait = rec_wait};

static void test_buckets_cover_the_gradients_in_backward_order(void **state) {
    (void)state;
    Config cfg;
    config_defaults(&cfg);
    Model *m = model_of(&cfg, 1, backend_cpu());
    GradSpan *spans = malloc((size_t)m->n_params * sizeof *spans);
    for (int i = 0; i < m->n_params; i++) spans[i] = (GradSpan){m->params[i].offset, m->params[i].count, -1};
    for (int i = 0; i < m->n_nodes; i++)
        for (int k = 0; k < 2; k++) {
            const int p = k == 0 ? m->nodes[i].weight : m->nodes[i].bias;
            if (p >= 0) spans[p].step = i;
        }
    float grad[1]; /* only its address is used */
    Comm comm = {.name = "record", .rank = 0, .world = 2, .ops = &REC_OPS};
    const double cap_mb = 0.1, first_mb = 0.02; /* the default model holds 0.7 MB of gradients: several buckets */
    Buckets *bk = buckets_plan(spans, m->n_params, grad, &comm, cap_mb, first_mb);
    assert_true(bk->n >= 4);
    /* in order from 0 to the end of the last view, apart only by alignment padding (zero on every rank: it needs no
     * reduction), each within its cap unless one view alone is larger */
    assert_int_equal(bk->b[0].begin, 0);
    assert_int_equal(bk->b[bk->n - 1].end, m->params[0].offset + m->params[0].count);
    for (int i = 0; i < bk->n; i++) {
        if (i > 0) assert_true(bk->b[i].begin >= bk->b[i - 1].end && bk->b[i].begin - bk->b[i - 1].end < MODEL_PARAM_ALIGN);
        const double cap = (i == 0 ? first_mb : cap_mb) * 1048576.0 / sizeof(float);
        int views = 0;
        for (int p = 0; p < m->n_params; p++) views += spans[p].offset >= bk->b[i].begin && spans[p].offset < bk->b[i].end;
        assert_true(views >= 1);
        if (views > 1) assert_true((double)(bk->b[i].end - bk->b[i].begin) <= cap);
        if (i > 0) assert_true(bk->b[i].ready_step <= bk->b[i - 1].ready_step); /* backward fills them in order */
    }
    /* a backward: the hook launches each bucket once, in order, right after its last gradient was written */
    memset(&rec, 0, sizeof rec);
    rec.base = grad;
    buckets_begin(bk, 7);
    for (int node = m->n_nodes - 1; node >= 0; node--) {
        rec.done_step = node;
        buckets_backward_hook(bk, node);
    }
    buckets_wait(bk);
    assert_int_equal(rec.n_launched, bk->n);
    for (int i = 0; i < bk->n; i++) {
        assert_int_equal(rec.begin[i], bk->b[i].begin);
        assert_int_equal(rec.count[i], bk->b[i].end - bk->b[i].begin);
        assert_int_equal(rec.last_done_step[i], bk->b[i].ready_step); /* not later than needed, not earlier */
    }
    /* another step launches them again; outside a step the hook does nothing */
    buckets_backward_hook(bk, 0);
    assert_int_equal(rec.n_launched, bk->n);
    buckets_free(bk);
    free(spans);
    model_free(m);
}

/* ---- the stepper's CUDA Graphs with ranks (--compile): which collectives are captured, and when -------------- */

/* The order of calls, one letter each, as a backend with graphs and a communicator that captures would see them:
 * g/G graph capture begin/end, L graph launch, b/e the communicator's capture begin/end, A an all-reduce (a if
 * issued inside a capture), W a wait, R a replay handed to the watchdog. The CPU runs the ops themselves eagerly and
 * during "captures"; a launch runs nothing, so the numbers are not the point here: the order is. */
static char seq[4096];
static int seq_n, seq_capturing, seq_captured, seq_fail_capture;
static void put(char ch) {
    assert_true(seq_n < (int)sizeof seq - 1);
    seq[seq_n++] = ch;
    seq[seq_n] = 0;
}
static void seq_clear(void) {
    seq_n = 0;
    seq[0] = 0;
}

static void seq_graph_capture_begin(void) { put('g'); }
static void *seq_graph_capture_end(char *why, size_t why_len) {
    put('G');
    if (seq_fail_capture) {
        snprintf(why, why_len, "CUDA graph capture failed: planted");
        return NULL;
    }
    return (void *)&seq_n; /* any non-NULL handle */
}
static void seq_graph_launch(void *g) {
    (void)g;
    put('L');
}
static void seq_graph_destroy(void *g) { (void)g; }
/* N: a write into the gradient (the test hook's NaN); other writes (learning rate, flags) copy unrecorded */
static const float *seq_grad;
static void seq_write_async(void *dst, const void *src, size_t bytes) {
    if (dst == (const void *)seq_grad) put('N');
    memcpy(dst, src, bytes);
}

static CommWork *seq_allreduce(Comm *c, float *buf, size_t count, CommOp op, const char *what) {
    (void)c, (void)buf, (void)count, (void)op, (void)what;
    put(seq_capturing ? 'a' : 'A');
    seq_captured += seq_capturing;
    return &works[0];
}
static int seq_test(Comm *c, CommWork *w) {
    (void)c, (void)w;
    return !seq_capturing;
}
static void seq_wait(Comm *c, CommWork *w, CommTimes *t) {
    (void)c, (void)w;
    put('W');
    if (t) *t = (CommTimes){0, 0};
}
static void seq_capture_begin(Comm *c) {
    (void)c;
    put('b');
    seq_capturing = 1;
    seq_captured = 0;
}
static int seq_capture_end(Comm *c) {
    (void)c;
    put('e');
    seq_capturing = 0;
    return seq_captured;
}
static void seq_replayed(Comm *c, const char *what) {
    (void)c;
    assert_non_null(strstr(what, "collectives of the"));
    put('R');
}
static const CommOps SEQ_OPS = {.allreduce = seq_allreduce, .test = seq_test, .wait = seq_wait,
                                .capture_begin = seq_capture_begin, .capture_end = seq_capture_end,
                                .replayed = seq_replayed};
static const CommOps SEQ_HOST_OPS = {.allreduce = seq_allreduce, .test = seq_test, .wait = seq_wait};

/* A small model on the CPU backend with the recording graph functions; steps 1..steps of `accum` micro-batches,
 * the call letters of each step in out[step - 1]. */
typedef struct {
    Backend be;
    Config cfg;
    Model *m;
    Comm comm;
    Buckets *bk;
    Stepper *st;
} SeqRun;

static void seq_open(SeqRun *r, int accum, const CommOps *ops) {
    memset(r, 0, sizeof *r);
    r->be = *backend_cpu();
    r->be.graph_capture_begin = seq_graph_capture_begin;
    r->be.graph_capture_end = seq_graph_capture_end;
    r->be.graph_launch = seq_graph_launch;
    r->be.graph_destroy = seq_graph_destroy;
    r->be.write_async = seq_write_async;
    config_defaults(&r->cfg);
    r->cfg.model.input_size[0] = r->cfg.model.input_size[1] = r->cfg.model.input_size[2] = 16;
    r->cfg.train.grad_accum = accum;
    r->cfg.train.compile = 1;
    r->m = model_of(&r->cfg, 1, &r->be);
    model_allocate(r->m);
    model_init_params(r->m, 1);
    r->comm = (Comm){.name = "record", .rank = 0, .world = 2, .ops = ops};
    r->bk = buckets_plan_model(r->m, &r->comm, 0.1, 0.02);
    r->st = stepper_create(r->m, &r->cfg.train, &r->comm, r->bk);
    seq_grad = r->m->grad;
    seq_clear();
    seq_fail_capture = 0;
}

static void seq_step(SeqRun *r, int64_t step1, char *out, size_t out_len) {
    seq_clear();
    stepper_begin(r->st, step1);
    const int accum = r->cfg.train.grad_accum;
    for (int k = 0; k < accum; k++) stepper_micro(r->st, k, (step1 - 1) * accum + k);
    stepper_end(r->st, 1e-4, 0);
    StepOutcome o;
    stepper_collect(r->st, &o);
    if (r->st && stepper_graphs(r->st)) assert_true(isnan(o.comm_wait_ms)); /* the wait is inside the replay */
    snprintf(out, out_len, "%s", seq);
}

static void seq_close(SeqRun *r) {
    stepper_free(r->st);
    buckets_free(r->bk);
    model_free(r->m);
}

/* "X" n times */
static const char *times(char ch, int n) {
    static char buf[8][256];
    static int k;
    char *b = buf[k++ % 8];
    memset(b, ch, (size_t)n);
    b[n] = 0;
    return b;
}

static void check_graph_steps(int accum) {
    SeqRun r;
    seq_open(&r, accum, &SEQ_OPS);
    assert_int_equal(stepper_graphs(r.st), 1);
    const int nb = r.bk->n;
    char got[3][4096], want[4096];
    for (int s = 1; s <= 3; s++) seq_step(&r, s, got[s - 1], sizeof got[s - 1]);
    /* step 1, eager: the buckets go out during the last micro-batch's backward and are waited for at its end (as
     * its capture will have to), then the losses' all-reduce */
    snprintf(want, sizeof want, "%s%sAW", times('A', nb), times('W', nb));
    assert_string_equal(got[0], want);
    /* step 2, the captures: each micro-batch kind (only the last holds collectives: its buckets, issued and joined
     * inside the capture, then a watched replay), then the optimizer with the losses' all-reduce */
    char micro[1024] = "";
    for (int k = 0; k < accum - 1; k++) strcat(micro, "bgGeL"); /* the micro-batches without buckets */
    snprintf(want, sizeof want, "%sbg%s%sGeLRbgaWGeLR", micro, times('a', nb), times('W', nb));
    assert_string_equal(got[1], want);
    /* step 3: replays only, no collective issued by the host; each replay with collectives watched */
    snprintf(want, sizeof want, "%sLRLR", times('L', accum - 1));
    assert_string_equal(got[2], want);
    seq_close(&r);
}

static void test_compile_with_ranks_captures_the_collectives(void **state) {
    (void)state;
    check_graph_steps(1);
    check_graph_steps(3); /* three micro-batches: beta 0, beta 1, beta 1 with the buckets: three kinds */
}

/* A communicator whose collectives run on the host cannot be captured: the step runs eagerly, every step the same. */
static void test_compile_with_host_collectives_steps_eagerly(void **state) {
    (void)state;
    SeqRun r;
    seq_open(&r, 1, &SEQ_HOST_OPS);
    assert_int_equal(stepper_graphs(r.st), 0);
    const int nb = r.bk->n;
    char got[4096], want[4096];
    snprintf(want, sizeof want, "%s%sAW", times('A', nb), times('W', nb));
    for (int s = 1; s <= 3; s++) {
        seq_step(&r, s, got, sizeof got);
        assert_string_equal(got, want);
    }
    seq_close(&r);
}

/* The test hook's NaN goes into the gradient after the buckets' all-reduces are waited for (eager) or replayed (graphs),
 * never while one is in flight: a reduce that landed after it would overwrite it on some ranks only, and they would
 * then decide differently about the same step (seen on 2 CPU ranks: rank 0 diverged, rank 1 went on alone). */
static void test_nonfinite_grad_hook_writes_the_reduced_gradient(void **state) {
    (void)state;
    for (int graphs = 0; graphs < 2; graphs++) {
        SeqRun r;
        seq_open(&r, 1, graphs ? &SEQ_OPS : &SEQ_HOST_OPS);
        const int nb = r.bk->n;
        char got[4096], want[4096];
        for (int s = 1; s <= 2; s++) seq_step(&r, s, got, sizeof got); /* graphs: step 2 captures */
        seq_clear();
        stepper_begin(r.st, 3);
        stepper_micro(r.st, 0, 2);
        stepper_test_nonfinite_grad(r.st);
        stepper_end(r.st, 1e-4, 0);
        StepOutcome o;
        stepper_collect(r.st, &o);
        if (graphs) {
            assert_string_equal(seq, "LRNLR"); /* after the replay that joined the buckets, before the optimizer's */
        } else {
            snprintf(want, sizeof want, "%s%sNAW", times('A', nb), times('W', nb));
            assert_string_equal(seq, want);
            assert_int_equal(o.skipped, 1); /* the CPU ran the step: the optimizer saw the NaN */
            assert_true(isnan(o.grad_norm));
        }
        seq_step(&r, 4, got, sizeof got); /* the hook is for one step only */
        assert_null(strchr(got, 'N'));
        seq_close(&r);
    }
}

static jmp_buf capture_jmp;
static void capture_exit(int code) { longjmp(capture_jmp, code); }

/* With ranks a failed capture ends the run with the communicator's exit code (3), even of a graph without
 * collectives (the first micro-batch of three here): this rank's later collectives would run eagerly while the
 * other ranks replay their captured ones, which NCCL does not allow. */
static void test_failed_capture_with_ranks_ends_the_run(void **state) {
    (void)state;
    SeqRun r;
    seq_open(&r, 3, &SEQ_OPS);
    char got[4096];
    seq_step(&r, 1, got, sizeof got);
    seq_fail_capture = 1;
    vx_set_exit_handler(capture_exit);
    const int code = setjmp(capture_jmp);
    if (code == 0) {
        seq_step(&r, 2, got, sizeof got);
        fail_msg("the run went on after a failed capture of collectives");
    }
    vx_set_exit_handler(NULL);
    assert_int_equal(code, VX_EXIT_DIST);
    /* the stepper is left mid-step: only its memory is freed, which the test process does at exit */
}

/* ---- the launch environment -------------------------------------------------------------------------------- */

static const char *const VARS[] = {"VX_RANK", "VX_WORLD_SIZE", "VX_LOCAL_RANK", "VX_LOCAL_WORLD_SIZE", "VX_MASTER_ADDR",
                                   "VX_MASTER_PORT", "VX_NCCL_ID", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                   "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE",
                                   "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                   "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_STEP_ID", "SLURM_STEPID",
                                   "SLURM_STEP_TASKS_PER_NODE", "VX_RENDEZVOUS_PORT"};
static void clear_env(void) {
    for (size_t i = 0; i < sizeof VARS / sizeof VARS[0]; i++) unsetenv(VARS[i]);
}

static jmp_buf exit_jmp;
static void exit_to_test(int code) { longjmp(exit_jmp, code); }

static int detect_code(DistEnv *e) {
    vx_set_exit_handler(exit_to_test);
    int code = setjmp(exit_jmp);
    if (code == 0) dist_detect(e);
    vx_set_exit_handler(NULL);
    return code;
}

static void test_dist_detect_reads_each_launcher(void **state) {
    (void)state;
    DistEnv e;
    clear_env();
    assert_int_equal(detect_code(&e), 0);
    assert_string_equal(e.launcher, "single");
    assert_int_equal(e.world, 1);

    setenv("OMPI_COMM_WORLD_RANK", "3", 1), setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1), setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
    assert_int_equal(detect_code(&e), 0);
    assert_string_equal(e.launcher, "mpirun");
    assert_true(e.rank == 3 && e.world == 4 && e.local_rank == 1 && e.local_world == 2);

    clear_env();
    setenv("RANK", "1", 1), setenv("WORLD_SIZE", "2", 1), setenv("LOCAL_RANK", "1", 1);
    setenv("MASTER_ADDR", "node7", 1), setenv("MASTER_PORT", "29500", 1);
    assert_int_equal(detect_code(&e), 0);
    assert_string_equal(e.launcher, "torchrun");
    assert_true(e.rank == 1 && e.world == 2 && e.local_rank == 1);
    assert_string_equal(e.master_addr, "node7");
    assert_int_equal(e.master_port, 29501); /* torchrun's store may hold MASTER_PORT itself */
    setenv("VX_RENDEZVOUS_PORT", "4000", 1);
    assert_int_equal(detect_code(&e), 0);
    assert_int_equal(e.master_port, 4000);

    clear_env(); /* a batch script's own shell is no rank of a job step */
    setenv("SLURM_PROCID", "0", 1), setenv("SLURM_NTASKS", "8", 1);
    assert_int_equal(detect_code(&e), 0);
    assert_int_equal(e.world, 1);
    setenv("SLURM_STEP_ID", "0", 1), setenv("SLURM_LOCALID", "2", 1), setenv("SLURM_STEP_TASKS_PER_NODE", "4(x2)", 1);
    setenv("SLURM_PROCID", "6", 1);
    assert_int_equal(detect_code(&e), 0);
    assert_string_equal(e.launcher, "srun");
    assert_true(e.rank == 6 && e.world == 8 && e.local_rank == 2 && e.local_world == 4);

    clear_env();
    setenv("VX_RANK", "1", 1), setenv("VX_WORLD_SIZE", "2", 1), setenv("VX_LOCAL_RANK", "1", 1);
    setenv("VX_LOCAL_WORLD_SIZE", "2", 1), setenv("VX_NCCL_ID", "00ff", 1);
    setenv("RANK", "0", 1), setenv("WORLD_SIZE", "9", 1); /* the spawn variables win */
    assert_int_equal(detect_code(&e), 0);
    assert_string_equal(e.launcher, "spawn");
    assert_true(e.rank == 1 && e.world == 2);
    assert_string_equal(e.nccl_id, "00ff");

    /* malformed or inconsistent: exit 2 naming the variable */
    clear_env();
    setenv("RANK", "one", 1), setenv("WORLD_SIZE", "2", 1);
    assert_int_equal(detect_code(&e), 2);
    setenv("RANK", "2", 1), setenv("LOCAL_RANK", "0", 1), setenv("MASTER_ADDR", "h", 1), setenv("MASTER_PORT", "1", 1);
    assert_int_equal(detect_code(&e), 2); /* rank 2 of 2 */
    setenv("RANK", "1", 1);
    unsetenv("MASTER_ADDR");
    assert_int_equal(detect_code(&e), 2);
    clear_env();
}

/* Rank r of W reads part r of every global micro-batch: first = position + r*batch, stride W*batch. */
static void test_loader_reads_a_ranks_share(void **state) {
    (void)state;
    Config cfg;
    config_defaults(&cfg);
    cfg.model.input_size[0] = cfg.model.input_size[1] = cfg.model.input_size[2] = 8;
    const int batch = 2, world = 3, rank = 1, position = 12;
    const long vol = 8 * 8 * 8;
    float *want = malloc(vol * sizeof(float));
    Loader l;
    Dataset *ds =
        dataset_open(&cfg.data, cfg.train.seed, cfg.model.in_channels, cfg.model.input_size, cfg.model.input_size, 0);
    loader_start(&l, ds, batch, vol, position + rank * batch, (int64_t)world * batch, 2, 2, 1, backend_cpu());
    for (int k = 0; k < 4; k++) {
        const float *got = loader_next(&l);
        for (int b = 0; b < batch; b++) {
            const uint64_t sample = (uint64_t)(position + k * world * batch + rank * batch + b);
            phantom_generate((uint64_t)cfg.train.seed, sample, 8, 8, 8, 1, (float)cfg.data.noise, want);
            assert_memory_equal(got + b * vol, want, vol * sizeof(float));
        }
        loader_release(&l);
    }
    loader_stop(&l);
    dataset_close(ds);
    free(want);
}

/* ---- comm_fail after an abort: the process ends at once ------------------------------------------------------ */

/* Stands in for the CUDA backend's exit handler, which synchronises the compute stream: after a collective failed,
 * the stream may be held for good (test_comm_nccl's watchdog cases hold it for 60 s with a host function). */
static void held_stream_at_exit(void) { sleep(30); }
static void fake_abort_all(Comm *c, int code) { fprintf(stderr, "fake abort of %s: code %d\n", c->name, code); }

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A communicator with abort_all (nccl's case): comm_fail prints its line, aborts, and ends the process with exit 3
 * at once, without the atexit handlers (here one that would wait 30 s), stdio flushed: what keeps a failed NCCL
 * rank from waiting out the reaper's grace (ci/gpu.sh's nccl-unit step; every real NCCL failure 10 s sooner). */
static void test_comm_fail_after_an_abort_ends_at_once(void **state) {
    (void)state;
    char path[] = "/tmp/vx_abort_exit_XXXXXX";
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    fflush(NULL);
    const double t0 = mono_s();
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fd, 1), dup2(fd, 2);
        atexit(held_stream_at_exit);
        printf("a progress line, still in stdout's buffer\n"); /* a file: fully buffered until the exit flushes */
        static CommOps ops;
        ops.abort_all = fake_abort_all;
        const Comm c = {.name = "fake", .rank = 1, .world = 2, .timeout_s = 1, .ops = &ops};
        comm_fail(&c, "allreduce", "gradient bucket 1/2 of step 3", "did not finish within the deadline");
        _exit(99); /* not reached */
    }
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (mono_s() - t0 > 20) kill(pid, SIGKILL);
        usleep(10000);
    }
    const double took = mono_s() - t0;
    char out[4096] = "";
    const ssize_t n = pread(fd, out, sizeof out - 1, 0);
    close(fd);
    unlink(path);
    out[n > 0 ? n : 0] = '\0';
    print_message("comm_fail after abort_all: exit %d after %.2f s\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                  took);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), VX_EXIT_DIST);
    assert_true(took < 5.0); /* not the 30 s of the exit handler */
    assert_non_null(strstr(out, "a progress line, still in stdout's buffer"));
    assert_non_null(strstr(out, "allreduce of gradient bucket 1/2 of step 3 did not finish within the deadline"));
    assert_non_null(strstr(out, "fake abort of fake: code 3"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buckets_cover_the_gradients_in_backward_order),
        cmocka_unit_test(test_compile_with_ranks_captures_the_collectives),
        cmocka_unit_test(test_compile_with_host_collectives_steps_eagerly),
        cmocka_unit_test(test_failed_capture_with_ranks_ends_the_run),
        cmocka_unit_test(test_nonfinite_grad_hook_writes_the_reduced_gradient),
        cmocka_unit_test(test_dist_detect_reads_each_launcher),
        cmocka_unit_test(test_loader_reads_a_ranks_share),
        cmocka_unit_test(test_comm_fail_after_an_abort_ends_at_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
