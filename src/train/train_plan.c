/* train_plan.c: what a run decides before it starts: the per-rank batch and lr factor for its ranks, its stages, and
 * its host memory plan (see train_plan.h). */
#include "train/train_plan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "core/config.h"
#include "core/util.h"

double train_plan_ranks(TrainConfig *cfg, int world) {
    if (cfg->global_batch > 0) {
        if (cfg->batch_size == 0) return 1.0; /* the hardware plan chooses batch and accumulation (hw_plan.h) */
        const long per = (long)world * cfg->grad_accum;
        if (cfg->global_batch % per != 0)
            vx_usage_error("train.global_batch = %d cannot be split into %d rank(s) x %d micro-batches "
                           "(train.grad_accum); choose a multiple of %ld", cfg->global_batch, world, cfg->grad_accum,
                           per);
        cfg->batch_size = (int)(cfg->global_batch / per);
        return 1.0;
    }
    if (strcmp(cfg->lr_scaling, "linear") == 0) return world;
    if (strcmp(cfg->lr_scaling, "sqrt") == 0) return sqrt((double)world);
    return 1.0;
}

int train_stages(const ModelConfig *model, const TrainConfig *cfg, int64_t epoch_samples, int world,
                 StagePlan *out) {
    const int n = cfg->n_stages ? cfg->n_stages : 1;
    int64_t first = 0;
    for (int k = 0; k < n; k++) {
        StagePlan *sp = &out[k];
        sp->index = k;
        sp->train = *cfg;
        config_stage_model(model, cfg, k, &sp->model); /* its input size, network and cascade */
        if (cfg->n_stages) {
            const Stage st = config_stage(cfg, model->input_size, k);
            sp->train.batch_size = st.batch_size;
            sp->train.lr = st.lr;
            if (st.steps > 0) {
                sp->train.steps = st.steps;
            } else { /* epochs over the training set, at this stage's global batch */
                if (epoch_samples <= 0)
                    vx_usage_error("train.stages[%d] counts epochs, which the phantoms do not have; give steps, or read "
                                   "volumes from files (data.source csv or dir)", k);
                const double global = (double)(sp->train.batch_size ? sp->train.batch_size : 1) * world * cfg->grad_accum;
                const double steps = ceil(st.epochs * (double)epoch_samples / global);
                if (steps > CONFIG_MAX_STEPS)
                    vx_usage_error("train.stages[%d]: %g epochs of %lld samples at %g per step are %.0f steps, more "
                                   "than a run has (%d); give fewer epochs", k, st.epochs, (long long)epoch_samples,
                                   global, steps, CONFIG_MAX_STEPS);
                sp->train.steps = (int)steps;
            }
        }
        sp->first_step = first;
        first += sp->train.steps; /* int64: each stage is at most CONFIG_MAX_STEPS, so the sum cannot overflow */
        if (first > CONFIG_MAX_STEPS)
            vx_usage_error("train.stages[0..%d] sum to %lld steps, more than a run has (%d, train.steps' bound); "
                           "shorten the stages or give fewer epochs", k, (long long)first, CONFIG_MAX_STEPS);
    }
    return n;
}

typedef struct {
    const char *what, *lower; /* the buffer, and the config keys that shrink it */
    double bytes;
} HostItem;

/* Every large host buffer of a run, so that a run that cannot fit is refused before it starts, not OOM-killed. */
static int host_plan(const Runtime *rt, const Model *m, int n_held, int prefetch, double cache_bytes,
                     HostItem *items) {
    const double vol = (double)(m->tensors[m->t_input].count / m->batch) * sizeof(float);
    const double ckpt = (double)ckpt_file_bytes((uint64_t)m->param_count, (uint64_t)m->buffer_floats);
    const double hist = 3.0 * (double)m->param_floats * sizeof(float);
    int n = 0;
    if (strcmp(rt->be->name, "cpu") == 0)
        items[n++] = (HostItem){"model (activations, parameters, gradients, AdamW state)",
                                "train.batch_size or model.input_size", (double)model_device_bytes(m)};
    /* the volumes, their reconstructions, and one batch in and out */
    items[n++] = (HostItem){"held-out volumes", "train.val_samples",
                            2.0 * n_held * vol + 2.0 * m->batch * vol};
    items[n++] = (HostItem){"data loader", "data.prefetch or train.batch_size", (double)prefetch * m->batch * vol};
    items[n++] = (HostItem){"checkpoint and histogram copies", "model.channels", ckpt > hist ? ckpt : hist};
    if (cache_bytes > 0) items[n++] = (HostItem){"data cache", "data.cache_rate", cache_bytes};
    return n;
}

double train_host_other_bytes(const Runtime *rt, const Model *m, int held, int prefetch, double cache_bytes) {
    HostItem items[5];
    const int n = host_plan(rt, m, held, prefetch, cache_bytes, items);
    double total = 0;
    for (int i = strcmp(rt->be->name, "cpu") == 0; i < n; i++) total += items[i].bytes; /* (the model's: item 0) */
    return total;
}

void train_check_memory(const Runtime *rt, const Model *m, int held, int prefetch, double cache_bytes, int ranks_here,
                        int verbose) {
    HostItem items[5];
    const int n = host_plan(rt, m, held, prefetch, cache_bytes, items);
    double total = 0;
    int largest = 0;
    char parts[512] = "";
    for (int i = 0; i < n; i++) {
        items[i].bytes *= ranks_here; /* every rank of this machine holds its own */
        total += items[i].bytes;
        if (items[i].bytes > items[largest].bytes) largest = i;
        const size_t used = strlen(parts);
        snprintf(parts + used, sizeof parts - used, "%s%s %.1f MiB", i ? ", " : "", items[i].what,
                 items[i].bytes / 1048576.0);
    }
    const double have = HW_MEMORY_SHARE * (double)rt->hw.ram_available;
    if (verbose)
        vx_detail("host memory: %.1f MiB planned (%s)%s\n", total / 1048576.0, parts,
               ranks_here > 1 ? ", for all ranks of this machine" : "");
    if (total > have)
        vx_exit_error(VX_EXIT_MEMORY, "the run plans %.2f GiB of host memory (%s), more than %.0f%% of the %.2f GiB "
                      "available (%.2f GiB); lower %s", total / 1073741824.0, parts, 100 * HW_MEMORY_SHARE,
                      rt->hw.ram_available / 1073741824.0, have / 1073741824.0, items[largest].lower);
}

