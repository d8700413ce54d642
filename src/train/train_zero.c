/* train_zero.c: the run's side of sharded data parallelism (zero.h): the model allocated for it (its buffers shaped
 * first), the shard state opened, and what each rank's allocator counted, against the plan (zero_plan.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "train/trainer.h"
#include "train/zero_plan.h"

/* Test hook: VX_TEST_NUDGE_INIT=1 moves every nonzero initial parameter one float up (nextafterf toward +inf), before
 * anything reads them. Tests that compare runs whose float32 sums differ in order measure with it how far this
 * network's own rounding carries a one-ulp difference over their steps, and bound the compared runs by that rather
 * than by a figure typed in from one machine (issue 41). */
static void test_nudge_params(Model *m) {
    if (!vx_env_flag("VX_TEST_NUDGE_INIT")) return;
    const size_t bytes = (size_t)m->param_floats * sizeof(float);
    float *host = vx_malloc(bytes);
    m->be->copy_to_host(host, m->param, bytes);
    for (long i = 0; i < m->param_floats; i++)
        if (host[i] != 0.0f) host[i] = nextafterf(host[i], INFINITY);
    m->be->copy_to_device(m->param, host, bytes);
    model_sync_lp(m);
    free(host);
    vx_log("VX_TEST_NUDGE_INIT: every nonzero initial parameter one float up\n");
}

void trainer_zero_check(const DistConfig *d) {
    if (strcmp(d->offload_optimizer, "cpu") == 0 && zero_stage(d) == 0)
        vx_usage_error("dist.offload_optimizer cpu offloads a ZeRO shard's optimizer: set dist.zero 1 or 2 (--zero 2) "
                       "too");
}

void trainer_zero_open(Trainer *t, Model *m) {
    const DistConfig *d = &t->cfg->dist;
    const int stage = zero_stage(d), cpu = strcmp(t->be->name, "cpu") == 0;
    t->offload = strcmp(d->offload_optimizer, "cpu") == 0;
    trainer_zero_check(d); /* (open_run checked it before the run directory was taken) */
    if (t->offload && cpu && !getenv("VX_TEST_OFFLOAD_ON_CPU")) {
        vx_log("offload: on CPU ranks AdamW's state is in host memory already: dist.offload_optimizer cpu changes "
               "nothing here\n");
        t->offload = 0;
    }
    if (stage <= 0) {
        model_allocate(m);
        model_init_params(m, (uint64_t)t->cfg->train.seed);
        test_nudge_params(m);
        return;
    }
    t->buckets = buckets_plan_model(m, t->comm, d->bucket_mb, d->first_bucket_mb);
    t->zl = zero_layout(m->param_floats, t->comm->world, stage);
    zero_shape_model(m, &t->zl, t->buckets, t->offload);
    model_allocate(m);
    t->buckets->grad = m->grad;
    model_init_params(m, (uint64_t)t->cfg->train.seed);
    test_nudge_params(m);
    t->zero = zero_open(m, &t->zl, t->comm, t->buckets, t->offload);
    if (t->offload && !cpu) { /* AdamW on the cores this rank owns */
        const int share = t->rt.hw.cores / (t->env.local_world > 0 ? t->env.local_world : 1);
        backend_cpu_set_threads(share > 1 ? share : 1);
    }
    vx_log("zero: ZeRO-%d over %d rank(s): shards of %ld floats (%.2f MiB, the flat layout's %ld padded to %ld), "
           "AdamW's state%s%s sharded%s\n", stage, t->comm->world, t->zl.shard, t->zl.shard * 4 / 1048576.0,
           t->zl.flat, t->zl.padded, m->dtype != DT_F32 ? " and float32 master weights" : "",
           stage >= 2 ? " and the gradients" : "",
           t->offload ? (cpu ? ", the optimizer run as offloaded (VX_TEST_OFFLOAD_ON_CPU: host copies)"
                             : ", the optimizer in pinned host memory (offload)") : "");
}

void trainer_zero_report(Trainer *t) {
    const Model *m = t->m;
    const int stage = t->zero ? t->zl.stage : 0, offload = t->zero && t->offload;
    const ZeroBytes p = zero_plan_bytes_at(t->m, stage, offload, t->comm->world, &t->cfg->dist);
    const ModelMemory *a = &m->mem;
    /* every rank of a data-parallel run says its own (the allocator's counts are per process), not only rank 0; one
     * process keeps it for the full plan (plan.txt, -v) */
    char line[400];
    snprintf(line, sizeof line, "memory: rank %d/%d (%s), allocator: parameters %zu, gradients %zu, optimizer state "
             "%zu, activations %zu bytes; plan: %zu, %zu, %zu, %zu\n", t->comm->rank, t->comm->world,
             zero_run_name(stage, offload), a->params, a->grads, a->optimizer, a->activations, p.params, p.grads, p.optimizer,
             p.activations);
    if (t->comm->world == 1 && !t->zero) {
        vx_detail("%s", line);
        return;
    }
    fputs(line, stdout);
    fflush(stdout);
}
