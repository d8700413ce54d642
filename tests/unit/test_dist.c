/* test_dist.c: the parts of data parallelism that need no second process: the bucket plan over the real model's
 * gradients and the order in which the backward hook launches the buckets (against a communicator that records
 * its calls), the launch environment (dist_detect) of each launcher, and the loader's share of a global batch. The
 * multi-rank runs themselves are tests/integration/test_distributed.py. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/config.h"
#include "core/util.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/phantom.h"
#include "dist/buckets.h"
#include "dist/launch.h"
#include "model/model.h"

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
    Model *m = model_build(&cfg, 1, backend_cpu());
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
    cfg.input_size[0] = cfg.input_size[1] = cfg.input_size[2] = 8;
    const int batch = 2, world = 3, rank = 1, position = 12;
    const long vol = 8 * 8 * 8;
    float *want = malloc(vol * sizeof(float));
    Loader l;
    Dataset *ds = dataset_open(&cfg, cfg.input_size, 0);
    loader_start(&l, ds, batch, vol, position + rank * batch, (int64_t)world * batch, 2, 2, 1, backend_cpu());
    for (int k = 0; k < 4; k++) {
        const float *got = loader_next(&l);
        for (int b = 0; b < batch; b++) {
            const uint64_t sample = (uint64_t)(position + k * world * batch + rank * batch + b);
            phantom_generate((uint64_t)cfg.seed, sample, 8, 8, 8, 1, (float)cfg.data_noise, want);
            assert_memory_equal(got + b * vol, want, vol * sizeof(float));
        }
        loader_release(&l);
    }
    loader_stop(&l);
    dataset_close(ds);
    free(want);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buckets_cover_the_gradients_in_backward_order),
        cmocka_unit_test(test_dist_detect_reads_each_launcher),
        cmocka_unit_test(test_loader_reads_a_ranks_share),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
