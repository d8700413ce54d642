/* train_stages.c: the stages of a run (train_plan.h: one, or train.stages' progressive input sizes), as the
 * training loop (train.c) enters them: each stage's batch (its own, or the hardware plan's), every stage's memory
 * plan checked before anything is written, and entering a stage: the model rebuilt at its size with the parameters
 * (and moments) carried over, or a cascade's new network started with the stage before's frozen inside it
 * (cascade_begin), its buckets, held-out volumes, the GPU's staging buffers and the loader. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "elementwise/elementwise.h"
#include "train/conv_agree.h"
#include "train/trainer.h"
#include "train/zero_plan.h"

/* The batch of a stage: its own, or the largest that fits (0), by the hardware plan (the run's accumulation). */
static int stage_batch(Trainer *t, StagePlan *sp) {
    TrainConfig *sc = &sp->train;
    if (sc->batch_size > 0) return sc->batch_size;
    TrainConfig c = *sc;
    c.global_batch = 0; /* the accumulation is the run's: the stage only sizes its batch */
    HwPlan p;
    char why[400];
    const int *size = sp->model.input_size;
    if (!hw_plan(&sp->model, &c, t->be, &t->rt.dev, t->comm ? t->comm->world : t->env.world, &p, why, sizeof why))
        vx_usage_error("stage at input %dx%dx%d: no batch size fits: %s", size[0], size[1], size[2], why);
    sc->batch_size = p.batch;
    sc->checkpoint_activations = p.checkpoint_activations;
    return sc->batch_size;
}

/* Stage sp's model at its batch (which stage_batch decides first when automatic): built, not allocated. */
static Model *stage_model(Trainer *t, StagePlan *sp) {
    const int batch = stage_batch(t, sp);
    ModelOptions opt = hw_model_options(&sp->train);
    opt.world = t->env.world;
    return model_build(&sp->model, &opt, batch, t->be);
}

/* SyncBatchNorm's statistics and the Cox loss's scores, exchanged inside the step: stream-ordered on NCCL, blocking
 * on the host communicators (whose backend, the CPU, runs everything in program order anyway). */
static void allreduce_in_step(void *ctx, float *buf, long count, const char *what) {
    Comm *c = ctx;
    comm_wait(c, comm_allreduce(c, buf, (size_t)count, COMM_SUM, what), NULL);
}
static void gather_in_step(void *ctx, const float *send, float *recv, long count, const char *what) {
    Comm *c = ctx;
    comm_wait(c, comm_all_gather(c, send, recv, (size_t)count, what), NULL);
}

void trainer_attach_model(Trainer *t, Model *m) {
    m->world = t->comm->world;
    m->rank = t->comm->rank;
    if (m->world > 1) {
        m->allreduce_hook = allreduce_in_step;
        m->gather_hook = gather_in_step;
        m->dist_hook_ctx = t->comm;
    }
    for (const Model *c = m; c; c = c->cascade_prev) /* (a cascade's earlier networks run on every rank too) */
        conv_agree(t->comm, t->be, c); /* before its first step: every rank convolves with rank 0's kernels */
}

/* Held-out volumes a run pictures (output.image_samples when images are on) and keeps in all (train.val_samples
 * validated, or more when more are pictured). */
static int images_shown(const OutputConfig *output) { return output->image_every > 0 ? output->image_samples : 0; }
static int held_volumes(int val_samples, int shown) { return val_samples > shown ? val_samples : shown; }

void trainer_zero_choose(Trainer *t) {
    for (int k = 1; k < t->n_stages && strcmp(t->cfg->dist.zero, "auto") == 0; k++)
        if (t->stages[k].model.cascade_n > t->stages[k - 1].model.cascade_n) { /* (config_validate refuses 1 and 2) */
            vx_log("zero: auto: stage %d starts a new network of the cascade, which sharded runs do not carry: every "
                   "rank holds everything (dist.zero 0)\n", k);
            snprintf(t->cfg->dist.zero, sizeof t->cfg->dist.zero, "0");
        }
    const int held = held_volumes(t->cfg->train.val_samples, images_shown(&t->cfg->output));
    const double other = train_host_other_bytes(&t->rt, t->m, held, t->cfg->data.prefetch, dataset_cache_bytes(t->ds));
    zero_plan_choose(&t->rt, &t->cfg->dist, t->env.world, t->env.local_world, other, 1);
}

/* Every stage's memory plan, before anything is written: host memory always, the GPU's too on a GPU. */
void trainer_check_stages(Trainer *t) {
    const size_t gpu_free = strcmp(t->be->name, "cuda") == 0 ? hw_available_bytes(&t->rt.hw, t->be) : 0;
    for (int k = 0; k < t->n_stages; k++) {
        StagePlan *sp = &t->stages[k];
        const TrainConfig *sc = &sp->train;
        Model *m = stage_model(t, sp);
        long staging; /* sharded: the bytes the run will hold (its shards, ZeRO-2's staging), not DDP's */
        zero_shape_for(m, zero_stage(&t->cfg->dist) > 0 ? zero_stage(&t->cfg->dist) : 0,
                       strcmp(t->cfg->dist.offload_optimizer, "cpu") == 0 && strcmp(t->be->name, "cpu") != 0,
                       t->env.world, &t->cfg->dist, &staging);
        if (gpu_free && (double)model_device_bytes(m) > HW_MEMORY_SHARE * (double)gpu_free)
            vx_exit_error(VX_EXIT_MEMORY, "stage %d (input %dx%dx%d, batch %d) needs %.2f GiB of GPU memory, more than "
                          "%.0f%% of the %.2f GiB free; lower its batch_size or input_size", k, sp->model.input_size[0],
                          sp->model.input_size[1], sp->model.input_size[2], sc->batch_size,
                          model_device_bytes(m) / 1073741824.0,
                          100 * HW_MEMORY_SHARE, gpu_free / 1073741824.0);
        const int held = held_volumes(t->cfg->train.val_samples, images_shown(&t->cfg->output));
        train_check_memory(&t->rt, m, held, t->cfg->data.prefetch, dataset_cache_bytes(t->ds), t->env.local_world,
                           t->n_stages == 1);
        model_free(m);
    }
}

/* The GPU's staging buffers for uploads (upload_batch): made for the current model's input size; none on the CPU. */
void trainer_staging_free(Trainer *t) {
    for (int k = 0; k < 2; k++) {
        if (t->staging[k]) t->be->release(t->staging[k]);
        if (t->staging_read[k]) t->be->event_destroy(t->staging_read[k]);
        t->staging[k] = NULL;
        t->staging_read[k] = NULL;
    }
}
static void staging_make(Trainer *t) {
    trainer_staging_free(t);
    if (strcmp(t->be->name, "cpu") == 0) return;
    for (int k = 0; k < 2; k++) {
        t->staging[k] = t->be->alloc((size_t)t->m->tensors[t->m->t_input].count * sizeof(float));
        t->staging_read[k] = t->be->event_create();
        t->be->event_record(t->staging_read[k]); /* nothing to wait for before the first upload */
    }
}

/* The buffers from the model before: BatchNorm's running statistics as they are (their sizes do not depend on the
 * volume's), the weights' average carried like the weights (model_carry_packed); a buffer the old model lacks keeps
 * its initial value. Without this a stage boundary reset both. */
static void carry_buffers(const Model *old, Model *m) {
    if (!m->buffer_floats || !old->buffer_floats) return;
    float *ob = vx_malloc((size_t)old->buffer_floats * sizeof(float)), *nb = vx_malloc((size_t)m->buffer_floats * sizeof(float));
    model_download_buffers(old, ob);
    model_download_buffers(m, nb);
    const int ema = model_ema_view(m), old_ema = model_ema_view(old);
    for (int i = 0; i < m->n_buffers; i++) {
        const BufferView *v = &m->buffers[i];
        if (i == ema) {
            if (old_ema < 0) continue;
            float *a = vx_malloc((size_t)old->param_count * sizeof(float)), *b = vx_malloc((size_t)m->param_count * sizeof(float));
            model_pack_params(old, ob + old->buffers[old_ema].offset, a);
            model_carry_packed(old, a, m, b);
            model_unpack_params(m, b, nb + v->offset);
            free(a);
            free(b);
            continue;
        }
        for (int j = 0; j < old->n_buffers; j++)
            if (strcmp(old->buffers[j].name, v->name) == 0 && old->buffers[j].count == v->count)
                memcpy(nb + v->offset, ob + old->buffers[j].offset, (size_t)v->count * sizeof(float));
    }
    model_upload_buffers(m, nb);
    free(ob);
    free(nb);
}

/* A cascade's new network (train.stages[k].model differs from the stage before's): initialized as a run's first
 * model is (the run's seed: a resume that crosses this boundary makes the same one), and the network of the stage
 * that ends handed to it, frozen: its weights' moving average where it keeps one (what validation and predict ran as
 * that stage's model), else its weights, and its own buffers (an earlier level of the cascade) by name, into the
 * buffer of m that holds them (model_build.c). */
static void cascade_begin(Trainer *t, const Model *old, Model *m) {
    model_init_params(m, (uint64_t)t->cfg->train.seed);
    Model *p = m->cascade_prev;
    VX_CHECK(p && p->param_floats == old->param_floats, "stage change: the cascade's earlier network is not the "
             "stage before's (%ld parameter floats, the stage had %ld)", p ? p->param_floats : 0, old->param_floats);
    const float *ema = model_ema(old);
    t->be->elementwise->accumulate(DT_F32, p->param_floats, ema ? ema : old->param, p->param, 0.0f);
    if (p->buffer_floats) {
        float *ob = vx_malloc((size_t)old->buffer_floats * sizeof(float));
        float *pb = vx_calloc((size_t)p->buffer_floats, sizeof(float));
        model_download_buffers(old, ob);
        for (int i = 0; i < p->n_buffers; i++)
            for (int j = 0; j < old->n_buffers; j++)
                if (strcmp(old->buffers[j].name, p->buffers[i].name) == 0 && old->buffers[j].count == p->buffers[i].count)
                    memcpy(pb + p->buffers[i].offset, ob + old->buffers[j].offset,
                           (size_t)p->buffers[i].count * sizeof(float));
        model_upload_buffers(p, pb);
        free(pb);
        free(ob);
    }
    model_sync_lp(p);
    vx_log("cascade: a new network of %ld parameters, from its initialization; the stage before's (%ld parameters%s) "
           "is frozen, its x0 estimate resampled to %dx%dx%d as %d more input channel(s)\n", m->param_count,
           p->param_count, ema ? ", its moving average" : "", m->cfg.input_size[0], m->cfg.input_size[1],
           m->cfg.input_size[2], m->cfg.in_channels);
}

/* The model rebuilt at stage k's size, the parameters (and AdamW's moments: resampled like the parameters where a
 * position table's grid changes; a new stage then zeroes them, fresh_optimizer) carried over from the model before
 * (model_carry_packed: ae3d and resnet3d copy every view, vit3d resamples its positions), with its buckets; the
 * stepper follows. A cascade's new network starts instead (cascade_begin). */
static void stage_rebuild(Trainer *t, int k) {
    StagePlan *sp = &t->stages[k];
    Model *old = t->m, *m = stage_model(t, sp);
    const int new_network = m->cfg.cascade_n > old->cfg.cascade_n;
    Buckets *nb = t->buckets ? buckets_plan_model(m, t->comm, t->cfg->dist.bucket_mb, t->cfg->dist.first_bucket_mb)
                             : NULL;
    VX_CHECK(!t->zero || model_same_layout(old, m), "stage %d: a sharded run's layout cannot change", k);
    if (t->zero) zero_shape_model(m, &t->zl, nb, t->offload); /* the same layout, shards and slots */
    model_allocate(m);
    if (nb) nb->grad = m->grad;
    if (new_network) {
        cascade_begin(t, old, m);
    } else {
        float *a = vx_malloc((size_t)old->param_count * sizeof(float)), *b = vx_malloc((size_t)m->param_count * sizeof(float));
        float *const from[3] = {old->param, old->adam_m, old->adam_v}, *const to[3] = {m->param, m->adam_m, m->adam_v};
        for (int i = 0; i < (t->zero ? 1 : 3); i++) { /* (sharded: the moments' shards move with zero_move_to) */
            model_download_packed(old, from[i], a);
            model_carry_packed(old, a, m, b);
            model_upload_packed(m, b, to[i]);
        }
        free(a);
        free(b);
        if (t->zero) zero_move_to(t->zero, m, nb); /* (mixed precision: the master shard stays as it is) */
        model_sync_lp(m);
        carry_buffers(old, m);
    }
    t->m = t->rt.model = m;
    trainer_attach_model(t, m);
    if (t->buckets) {
        buckets_free(t->buckets);
        t->buckets = nb;
    }
    /* the graphs captured on the old model (and NCCL's plans in them) go before its buffers do */
    stepper_set_model(t->stepper, m, t->buckets);
    model_free(old);
}

int trainer_stage_keeps_layout(const Trainer *t, int k) {
    return config_model_fingerprint(&t->stages[k].model) == config_model_fingerprint(&t->stages[0].model);
}

int trainer_ckpt_stage(const Trainer *t, int64_t step) { return step > 0 ? trainer_stage_of(t, step - 1) : 0; }

Model *trainer_ckpt_model(Trainer *t, int k) {
    return trainer_stage_keeps_layout(t, k) ? t->m : stage_model(t, &t->stages[k]);
}

void trainer_resume_model(Trainer *t, int k, Model *m) {
    if (m == t->m) return;
    model_free(t->m); /* (built, not yet allocated: trainer_zero_open allocates the run's model) */
    t->m = t->rt.model = m;
    t->stage = k;
}

/* Makes stage k the current one: the model at its size (parameters and, unless fresh_optimizer, AdamW's moments
 * carried over from the model before), its buckets, held-out volumes, staging buffers and loader. */
void trainer_enter_stage(Trainer *t, int k, int fresh_optimizer) {
    StagePlan *sp = &t->stages[k];
    if (t->loader_on) loader_stop(&t->loader);
    if (k != t->stage) stage_rebuild(t, k);
    Model *m = t->m;
    if (fresh_optimizer) { /* a new stage: AdamW starts over, its t too (the loss scale carries on) */
        if (t->zero) zero_load_moments(t->zero, NULL, NULL);
        else {
            t->be->zero(m->adam_m, (size_t)m->state_floats * sizeof(float));
            t->be->zero(m->adam_v, (size_t)m->state_floats * sizeof(float));
        }
        OptimCarry c = stepper_carry(t->stepper);
        c.adam_step = 0;
        stepper_set_carry(t->stepper, &c);
    }
    t->stage = k;
    t->cur = sp;
    dataset_set_size(t->ds, sp->model.input_size);
    heldout_free(&t->held);
    if (t->comm->rank == 0)
        heldout_build(&t->held, t->ds, m, t->cfg->train.val_samples, m->t_recon >= 0 ? images_shown(&t->cfg->output) : 0);
    t->best_metric = -INFINITY; /* each stage keeps its own best (train_validate.c) */
    const long vol = m->tensors[m->t_input].count / m->batch;
    staging_make(t); /* a GPU augments after the upload, from these; the CPU path on the loader's workers */
    const int workers = trainer_data_workers(t);
    loader_start(&t->loader, t->ds, m->batch, vol, t->st.next_sample + (int64_t)t->comm->rank * m->batch,
                 (int64_t)m->batch * t->comm->world, t->cfg->data.prefetch, workers, t->staging[0] == NULL, t->be);
    t->loader_on = 1;
    if (t->n_stages > 1) {
        vx_log("stage %d/%d: input %dx%dx%d, batch %d, %d steps from step %lld, lr %g\n", k + 1, t->n_stages,
               sp->model.input_size[0], sp->model.input_size[1], sp->model.input_size[2], m->batch, sp->train.steps,
               (long long)sp->first_step, sp->train.lr);
        train_log_scalar(t->tb, "train/stage", t->st.step, k);
    }
}

/* Decoding threads of this rank: data.workers, or the cores left to each rank of this machine. */
int trainer_data_workers(const Trainer *t) {
    if (t->cfg->data.workers) return t->cfg->data.workers;
    const int share = t->rt.hw.cores / (t->env.local_world > 0 ? t->env.local_world : 1);
    return share > 1 ? share : 1;
}

/* The stage holding step s (a stage's first step belongs to it). */
int trainer_stage_of(const Trainer *t, int64_t s) {
    int k = 0;
    while (k + 1 < t->n_stages && s >= t->stages[k + 1].first_step) k++;
    return k;
}

