/* config_validate.c: the cross-key checks of a loaded config (config_validate, see config.h): each family's keys
 * against each other (the head families', the transformer's, the X-ray views'), the training keys, and the values
 * they derive that the checks and the trainer share (a stage resolved against the train section: config_stage.c), the
 * profiler's window, which validation figure best.ckpt keeps (config_best_metric). Every refusal is one line naming
 * the keys, exit 2. */
#include "core/config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/util.h"

int config_profile_window(const OutputConfig *output, int *start, int *end) {
    char tail;
    if (sscanf(output->profile, "%d:%d%c", start, end, &tail) != 2) return 0;
    return *start >= 1 && *end >= *start;
}

int config_densenet_blocks(const ModelConfig *m, int layers[CONFIG_MAX_LIST]) {
    const ConfigList *b = &m->densenet.block_config;
    if (b->n) {
        for (int i = 0; i < b->n; i++) layers[i] = (int)b->v[i];
        return b->n;
    }
    const int d = m->resnet.depth;
    if (d != 121 && d != 169 && d != 201) return 0;
    const int preset[4] = {6, 12, d == 121 ? 24 : d == 169 ? 32 : 48, d == 121 ? 16 : 32};
    memcpy(layers, preset, sizeof preset);
    return 4;
}

/* DenseNet's side after its stem and its transitions: conv0 7/2/3, pool0 3/2/1, then 2x2 windows (floor) */
static int densenet_final_side(int side, int transitions) {
    side = (side + 6 - 7) / 2 + 1;
    side = (side + 2 - 3) / 2 + 1;
    for (int t = 0; t < transitions; t++) side /= 2;
    return side;
}

/* densenet's own keys: the blocks (a preset depth or block_config) and the input large enough for the transitions */
static void validate_densenet(const ModelConfig *m, const char *origin) {
    const ConfigList *b = &m->densenet.block_config;
    if (!b->n && m->resnet.depth != 121 && m->resnet.depth != 169 && m->resnet.depth != 201)
        vx_usage_error("%s: model.depth = %d: densenet is built at depth 121, 169 or 201 (MONAI's DenseNet121 ... "
                       "DenseNet201), or from model.block_config", origin, m->resnet.depth);
    if (b->n > 8)
        vx_usage_error("%s: model.block_config has %d blocks: at most 8", origin, b->n);
    for (int i = 0; i < b->n; i++)
        if (b->v[i] != (int)b->v[i])
            vx_usage_error("%s: model.block_config[%d] = %g: a block's layers are a whole number (1 to 63)", origin, i,
                           b->v[i]);
    int layers[CONFIG_MAX_LIST];
    const int transitions = config_densenet_blocks(m, layers) - 1;
    for (int a = m->resnet.spatial_dims == 2 ? 1 : 0; a < 3; a++)
        if (densenet_final_side(m->input_size[a], transitions) < 1) {
            int least = m->input_size[a];
            while (densenet_final_side(least, transitions) < 1) least++;
            vx_usage_error("%s: model.input_size[%d] = %d is too small for densenet: its stem and %d transition(s) "
                           "halve each side %d times (at least %d voxels a side)", origin, a, m->input_size[a],
                           transitions, transitions + 2, least);
        }
}

/* The head families' keys against each other (config_validate): resnet3d's and densenet's network, then the head. */
static void validate_resnet(const ModelConfig *m, const char *origin) {
    const ResNetConfig *r = &m->resnet;
    const HeadConfig *h = &m->head;
    const int dense = strcmp(m->family, "densenet") == 0;
    if (dense) validate_densenet(m, origin);
    if (!dense && r->depth != 10 && r->depth != 18 && r->depth != 34 && r->depth != 50 && r->depth != 101)
        vx_usage_error("%s: model.depth = %d: resnet3d is built at depth 10, 18, 34, 50 or 101 (MONAI's resnet10 ... "
                       "resnet101)", origin, r->depth);
    if (r->spatial_dims == 2 && m->input_size[0] != 1)
        vx_usage_error("%s: model.spatial_dims 2 needs a volume of depth 1 (model.input_size [1, H, W]), got depth %d",
                       origin, m->input_size[0]);
    const int survival = strcmp(h->task, "survival") == 0;
    if (survival && h->num_classes != 1)
        vx_usage_error("%s: model.task survival predicts one risk score: set model.num_classes to 1 (got %d)", origin,
                       h->num_classes);
    if (strcmp(h->task, "classification") == 0 && h->num_classes < 2)
        vx_usage_error("%s: model.task classification needs model.num_classes >= 2 (got %d)", origin, h->num_classes);
    if (h->class_weights.n && (h->class_weights.n != h->num_classes || strcmp(h->task, "classification") != 0))
        vx_usage_error("%s: model.class_weights has %d entries: it needs one per class (%d) and model.task "
                       "classification", origin, h->class_weights.n, h->num_classes);
    if (h->pos_weight_auto && strcmp(h->task, "multilabel") != 0)
        vx_usage_error("%s: model.pos_weight_auto weighs a multilabel head's positives: it needs model.task multilabel "
                       "(got %s)", origin, h->task);
    if (h->pos_weight.n && (h->pos_weight.n != h->num_classes || strcmp(h->task, "multilabel") != 0))
        vx_usage_error("%s: model.pos_weight has %d entries: it needs one per label (%d) and model.task multilabel",
                       origin, h->pos_weight.n, h->num_classes);
}

/* The vit3d family's keys against each other and the volume (config_validate). Its positions are one per patch, so
 * every stage's volume must divide into patches; a stage that changes the volume resamples them to its grid
 * (train_stages.c, model_carry.c), from coarse to fine only: a list whose sizes go down is out of order. */
static void validate_vit(const Config *cfg, const char *origin) {
    const ModelConfig *m = &cfg->model;
    const ViTConfig *v = &m->vit;
    if (v->hidden_size % v->heads)
        vx_usage_error("%s: model.hidden_size %d is not divisible by model.heads %d", origin, v->hidden_size, v->heads);
    for (int a = 0; a < 3; a++)
        if (m->input_size[a] % v->patch_size[a])
            vx_usage_error("%s: model.input_size[%d] = %d is not divisible by model.patch_size[%d] = %d", origin, a,
                           m->input_size[a], a, v->patch_size[a]);
    for (int i = 0; i < cfg->train.n_stages; i++) {
        const Stage st = config_stage(&cfg->train, m->input_size, i);
        ModelConfig sm; /* the stage's network (train.stages[i].model over the model section's) */
        config_stage_model(m, &cfg->train, i, &sm);
        const ViTConfig *sv = &sm.vit;
        if (sv->hidden_size % sv->heads)
            vx_usage_error("%s: train.stages[%d]'s hidden_size %d is not divisible by its heads %d", origin, i,
                           sv->hidden_size, sv->heads);
        for (int a = 0; a < 3; a++)
            if (st.input_size[a] % sv->patch_size[a])
                vx_usage_error("%s: train.stages[%d].input_size[%d] = %d is not divisible by %s.patch_size[%d] = %d",
                               origin, i, a, st.input_size[a], st.model.patch_size[a] >= 0 ? "its model" : "model", a,
                               sv->patch_size[a]);
        if (i == 0) continue;
        const Stage prev = config_stage(&cfg->train, m->input_size, i - 1);
        for (int a = 0; a < 3; a++)
            if (st.input_size[a] < prev.input_size[a])
                vx_usage_error("%s: train.stages are out of order: stage %d's volume %dx%dx%d is smaller than stage "
                               "%d's %dx%dx%d; %s's stages go from coarse to fine (its positions are resampled up to "
                               "each new patch grid)", origin, i, st.input_size[0], st.input_size[1], st.input_size[2],
                               i - 1, prev.input_size[0], prev.input_size[1], prev.input_size[2], m->family);
    }
    const DiffusionConfig *df = &m->diff;
    if (strcmp(m->family, "vit3d_diffusion") != 0) return;
    if (df->img_size % df->patch_size)
        vx_usage_error("%s: xray.img_size %d is not divisible by xray.patch_size %d", origin, df->img_size,
                       df->patch_size);
    if (df->sample_steps > df->timesteps) /* DDIM visits sample_steps distinct timesteps of the schedule's */
        vx_usage_error("%s: diffusion.sample_steps %d exceeds diffusion.timesteps %d", origin, df->sample_steps,
                       df->timesteps);
    if (strcmp(df->prediction, "epsilon") == 0 && df->physics_weight > 0) /* x0 = (x_t - sigma eps) / alpha */
        vx_usage_error("%s: loss.physics_weight %g with diffusion.prediction epsilon: its clean volume divides by "
                       "alpha, which goes to 0 at high noise and makes the projection loss overflow; use prediction v "
                       "(the seed's) or loss.physics_weight 0", origin, df->physics_weight);
}

/* data.view_columns (the DRR PNGs beside each CT, data/views.h): two column names of a CSV manifest, for the
 * denoiser; the views were rendered from the whole volume, so every stage reads it at the one size the files have
 * (a stage at another size would crop or pad the volume under views that no longer match it). */
static void validate_view_columns(const Config *cfg, const char *origin) {
    const DataConfig *d = &cfg->data;
    const char *comma = strchr(d->view_columns, ',');
    if (!comma || comma == d->view_columns || !comma[1] || strchr(comma + 1, ','))
        vx_usage_error("%s: data.view_columns \"%s\" must name two manifest columns, the AP view's and the lateral "
                       "view's, e.g. \"drr_ap,drr_lat\"", origin, d->view_columns);
    if (strcmp(cfg->model.family, "vit3d_diffusion") != 0)
        vx_usage_error("%s: data.view_columns lists X-ray views, which only model.family vit3d_diffusion reads (this "
                       "is %s); remove it", origin, cfg->model.family);
    if (strcmp(d->source, "csv") != 0)
        vx_usage_error("%s: data.view_columns names columns of a CSV manifest: it needs data.source csv (this is %s)",
                       origin, d->source);
    for (int i = 0; i < cfg->train.n_stages; i++) {
        const Stage st = config_stage(&cfg->train, cfg->model.input_size, i);
        for (int a = 0; a < 3; a++)
            if (st.input_size[a] != cfg->model.input_size[a])
                vx_usage_error("%s: train.stages[%d]'s volume %dx%dx%d is not model.input_size %dx%dx%d: with "
                               "data.view_columns the views are of the whole volume, so every stage must read it at "
                               "the size the files have (another size would crop or pad it under views that no "
                               "longer match)", origin, i, st.input_size[0], st.input_size[1], st.input_size[2],
                               cfg->model.input_size[0], cfg->model.input_size[1], cfg->model.input_size[2]);
    }
}

int config_family_has_head(const char *family) {
    return strcmp(family, "resnet3d") == 0 || strcmp(family, "densenet") == 0;
}

const char *config_best_metric(const Config *cfg, const char **logged) {
    const char *f = cfg->model.family, *task = cfg->model.head.task;
    const int head = config_family_has_head(f), cls = head && strcmp(task, "classification") == 0,
              multi = head && strcmp(task, "multilabel") == 0, surv = head && strcmp(task, "survival") == 0;
    if (logged) /* (train_validate.c logs these; the names train.best_metric takes) */
        *logged = cls ? "loss, accuracy, auroc" : multi ? "loss, auroc" : surv ? "loss, cindex"
                  : head || strcmp(f, "vit3d_diffusion") == 0 ? "loss" : "l1";
    if (strcmp(cfg->train.best_metric, "auto") != 0) return cfg->train.best_metric;
    return cls ? "accuracy" : multi ? "auroc" : surv ? "cindex" : head || strcmp(f, "vit3d_diffusion") == 0 ? "loss"
                                                                                                            : "l1";
}

void config_validate(const Config *cfg, const char *origin) {
    const ModelConfig *m = &cfg->model;
    const TrainConfig *t = &cfg->train;
    const DataConfig *d = &cfg->data;
    const int ae3d = strcmp(m->family, "ae3d") == 0;
    int factor = ae3d ? 1 << (m->levels - 1) : 1; /* resnet3d takes any size: its pooling is global */
    for (int a = 0; a < 3; a++)
        if (m->input_size[a] % factor)
            vx_usage_error("%s: model.input_size[%d] = %d must be divisible by %d (2^(levels-1) for %d channel levels)",
                           origin, a, m->input_size[a], factor, m->levels);
    int64_t stage_steps = 0; /* in 64 bits: three stages of 1e9 overflowed an int into "-1294967296 steps" */
    for (int i = 0; i < t->n_stages; i++) {
        const Stage st = config_stage(t, m->input_size, i);
        stage_steps += st.steps;
        if (stage_steps > CONFIG_MAX_STEPS)
            vx_usage_error("%s: train.stages[0..%d] sum to %lld steps, more than a run has (%d, train.steps' bound); "
                           "shorten the stages", origin, i, (long long)stage_steps, CONFIG_MAX_STEPS);
        for (int a = 0; a < 3; a++)
            if (st.input_size[a] % factor)
                vx_usage_error("%s: train.stages[%d].input_size[%d] = %d must be divisible by %d (2^(levels-1))", origin,
                               i, a, st.input_size[a], factor);
        if (st.lr * t->weight_decay >= 1 || t->min_lr > st.lr)
            vx_usage_error("%s: train.stages[%d].lr = %g must be at least train.min_lr and below 1 / "
                           "train.weight_decay", origin, i, st.lr);
        const StageModel *sm = &st.model;
        if ((sm->hidden_size >= 0 || sm->blocks >= 0 || sm->heads >= 0 || sm->mlp_ratio >= 0 ||
             sm->patch_size[0] >= 0 || sm->patch_size[1] >= 0 || sm->patch_size[2] >= 0) &&
            strcmp(m->family, "vit3d_diffusion") != 0)
            vx_usage_error("%s: train.stages[%d].model: only vit3d_diffusion's stages may have networks of their own "
                           "(a cascade); model.family is %s: remove the stage's model keys", origin, i, m->family);
        if (config_stage_new_network(m, t, i) && strcmp(cfg->dist.zero, "0") != 0 && strcmp(cfg->dist.zero, "auto") != 0)
            vx_usage_error("%s: train.stages[%d] starts a new network of the cascade, which sharded data parallelism "
                           "does not carry (dist.zero %s): set dist.zero 0", origin, i, cfg->dist.zero);
    }
    if (config_family_has_head(m->family)) validate_resnet(m, origin);
    if (strncmp(m->family, "vit3d", 5) == 0) validate_vit(cfg, origin); /* vit3d and vit3d_diffusion */
    if (!config_family_has_head(m->family) && t->backbone_lr_mult != 1) /* param_groups.c: only a head's Linear */
        vx_usage_error("%s: train.backbone_lr_mult = %g: model.family %s has no head apart from its backbone (resnet3d "
                       "has); use train.lr (or train.freeze for the first layers)", origin, t->backbone_lr_mult,
                       m->family);
    const char *logged, *best = config_best_metric(cfg, &logged); /* (a name in a list of names: whole words) */
    const char *at = strstr(logged, best);
    if (!at || (at > logged && at[-1] != ' ') || (at[strlen(best)] && at[strlen(best)] != ','))
        vx_usage_error("%s: train.best_metric %s: the validation of %s%s%s logs %s, no %s; name one of those, or auto",
                       origin, best, m->family, config_family_has_head(m->family) ? " with model.task " : "",
                       config_family_has_head(m->family) ? m->head.task : "", logged, best);
    if (strcmp(d->source, "csv") == 0 && !d->csv[0])
        vx_usage_error("%s: data.source csv needs data.csv, the manifest's path", origin);
    if (strcmp(d->source, "dir") == 0 && !d->dir[0])
        vx_usage_error("%s: data.source dir needs data.dir, the folder of volumes", origin);
    if (strcmp(d->phantom, "chest") == 0 && strcmp(d->source, "phantom") == 0 &&
        (m->input_size[0] != 1 || (config_family_has_head(m->family) && strcmp(m->head.task, "multilabel") != 0)))
        vx_usage_error("%s: data.phantom chest makes 2-D films whose findings are a multilabel head's labels: it needs "
                       "model.input_size [1, H, W]%s (got depth %d, %s)", origin,
                       config_family_has_head(m->family) ? " and model.task multilabel" : "", m->input_size[0],
                       config_family_has_head(m->family) ? m->head.task : m->family);
    if (d->affine.n && (d->affine.n != 3 || m->input_size[0] != 1 || d->affine.v[1] >= 1 || d->affine.v[2] >= 0.5))
        vx_usage_error("%s: data.affine is [degrees, scale, shift] (scale below 1, shift below 0.5) for 2-D films "
                       "(model.input_size [1, H, W]); got %d value(s) at depth %d", origin, d->affine.n,
                       m->input_size[0]);
    if (d->clip_low >= d->clip_high)
        vx_usage_error("%s: data.clip_low must be below data.clip_high", origin);
    if (strcmp(d->resize, "none") != 0 && m->input_size[0] != 1)
        vx_usage_error("%s: data.resize %s resizes 2-D images: it needs model.input_size [1, H, W], got depth %d "
                       "(volumes are cropped or padded, not resized)", origin, d->resize, m->input_size[0]);
    if (d->view_columns[0]) validate_view_columns(cfg, origin);
    for (int l = 0; ae3d && l < m->levels; l++)
        if (m->channels[l] % m->norm_groups)
            vx_usage_error("%s: model.norm_groups = %d must divide every model.channels entry (%d does not)", origin,
                           m->norm_groups, m->channels[l]);
    if (t->min_lr > t->lr)
        vx_usage_error("%s: train.min_lr = %g must not exceed train.lr = %g", origin, t->min_lr, t->lr);
    int p0, p1;
    if (cfg->output.profile[0] && !config_profile_window(&cfg->output, &p0, &p1))
        vx_usage_error("%s: output.profile = \"%s\" must be START:END with 1 <= START <= END, e.g. 10:12", origin,
                       cfg->output.profile);
    if (m->logvar_min >= m->logvar_max)
        vx_usage_error("%s: model.logvar_min must be below model.logvar_max", origin);
    const char *gpus = cfg->dist.gpus;
    if (gpus[0] && strcmp(gpus, "all") != 0) {
        char *end;
        long n = strtol(gpus, &end, 10);
        if (*end || n < 1 || n > 1024)
            vx_usage_error("%s: dist.gpus = \"%s\" must be a number of GPUs 1..1024 or \"all\"", origin, gpus);
    }
    int exp2;
    if (frexp(t->loss_scale_init, &exp2) != 0.5)
        vx_usage_error("%s: train.loss_scale_init = %g must be a power of two (scaling by it must be exact)", origin,
                       t->loss_scale_init);
    if (t->lr * t->weight_decay >= 1)
        vx_usage_error("%s: train.lr * train.weight_decay = %g must be below 1 (decoupled weight decay multiplies the "
                       "weights by 1 - lr * weight_decay every step); lower one of them", origin,
                       t->lr * t->weight_decay);
}
