/* config_stage.c: a stage of train.stages resolved against the sections it inherits from: config_stage (its input
 * size, batch and lr), and its whole model section (config.h's config_stage_model): train.stages[i]'s input size and
 * its own network (train.stages[i].model: vit3d_diffusion's hidden_size, blocks, heads, patch_size, mlp_ratio over
 * the model section's), and the cascade below it. A stage whose network is the one before's carries its weights
 * (train_stages.c); one whose network differs is a new network, conditioned on the stage before's (its x0
 * prediction in training, its sample in predict: model_exec.c), so its cascade is the one before's plus
 * the network of the stage before. */
#include <string.h>

#include "core/config.h"

Stage config_stage(const TrainConfig *train, const int model_input_size[3], int i) {
    Stage st = train->stages[i];
    if (st.input_size[0] == 0) memcpy(st.input_size, model_input_size, sizeof st.input_size);
    if (st.batch_size < 0) st.batch_size = train->batch_size;
    if (st.lr < 0) st.lr = train->lr;
    return st;
}

/* stage i's network: its overrides over the model section's (-1 inherits) */
static ViTConfig stage_vit(const ModelConfig *model, const TrainConfig *train, int i) {
    ViTConfig v = model->vit;
    if (i >= train->n_stages) return v;
    const StageModel *o = &train->stages[i].model;
    if (o->hidden_size >= 0) v.hidden_size = o->hidden_size;
    if (o->blocks >= 0) v.blocks = o->blocks;
    if (o->heads >= 0) v.heads = o->heads;
    if (o->mlp_ratio >= 0) v.mlp_ratio = o->mlp_ratio;
    for (int a = 0; a < 3; a++)
        if (o->patch_size[a] >= 0) v.patch_size[a] = o->patch_size[a];
    return v;
}

int config_same_network(const ViTConfig *a, const ViTConfig *b) {
    return a->hidden_size == b->hidden_size && a->blocks == b->blocks && a->heads == b->heads &&
           a->mlp_ratio == b->mlp_ratio && memcmp(a->patch_size, b->patch_size, sizeof a->patch_size) == 0;
}

int config_stage_new_network(const ModelConfig *model, const TrainConfig *train, int i) {
    if (i <= 0 || i >= train->n_stages) return 0;
    const ViTConfig a = stage_vit(model, train, i - 1), b = stage_vit(model, train, i);
    return !config_same_network(&a, &b);
}

void config_stage_model(const ModelConfig *model, const TrainConfig *train, int i, ModelConfig *out) {
    *out = *model;
    out->cascade_n = 0;
    if (train->n_stages == 0) return;
    for (int k = 0; k <= i; k++) {
        if (config_stage_new_network(model, train, k) && out->cascade_n < CONFIG_MAX_CASCADE) {
            const Stage before = config_stage(train, model->input_size, k - 1);
            const ViTConfig v = stage_vit(model, train, k - 1);
            CascadeLevel *c = &out->cascade[out->cascade_n++];
            memcpy(c->input_size, before.input_size, sizeof c->input_size);
            c->hidden_size = v.hidden_size;
            c->blocks = v.blocks;
            c->heads = v.heads;
            c->mlp_ratio = v.mlp_ratio;
            memcpy(c->patch_size, v.patch_size, sizeof c->patch_size);
        }
    }
    const Stage st = config_stage(train, model->input_size, i);
    memcpy(out->input_size, st.input_size, sizeof out->input_size);
    out->vit = stage_vit(model, train, i);
}
