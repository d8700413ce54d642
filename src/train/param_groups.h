/* param_groups.h: the optimizer's parameter groups, as torch.optim's param_groups for fine-tuning: ranges of the flat
 * parameter buffer (model.h: views in reverse layer order) and the learning-rate multiplier of each.
 *   train.freeze            comma-separated name prefixes ("conv1,bn1,layer1"): those parameters are not trained
 *                           (as requires_grad=False: no update, no moments, not in the gradient norm that clipping
 *                           and the progress line use). They must be the network's first layers, so that they are
 *                           one range at the end of the flat buffer; anything else is one line and exit 2.
 *   train.backbone_lr_mult  every trainable parameter but the head's (resnet3d: fc) at lr times this.
 * With neither, one group covers the whole buffer and the step is the one it always was. */
#pragma once
#include "core/config_train.h"
#include "graph/model.h"

typedef struct {
    long begin, end; /* floats of the flat buffers */
    int backbone;    /* 1: at lr x backbone_lr_mult (its own OptimState); 0: at lr */
} ParamGroup;

typedef struct {
    ParamGroup g[2];
    int n;
    long trainable; /* floats from 0 that are trained: the frozen range is [trainable, param_floats) */
    double backbone_lr_mult;
    int frozen_params; /* parameter tensors frozen */
} ParamGroups;

/* The groups of model m under train (exit 2 on a train.freeze that names no parameter, not the first layers, or
 * every parameter); verbose: say what is frozen and slowed. */
void param_groups_plan(const Model *m, const TrainConfig *train, ParamGroups *out, int verbose);
