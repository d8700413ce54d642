/* weights.h: a model's parameters and buffers as PyTorch holds them, in safetensors files (core/safetensors.h):
 * the state_dict keys of MONAI's ResNet (resnet3d) and of bench/reference/ae3d.py's AE3D (ae3d), which are our
 * parameter and buffer names already; convolution weights in PyTorch's layout [out][in][kd][kh][kw] (ours is
 * [out][kd][kh][kw][in]; a 2-D ResNet's [out][in][kh][kw]); BatchNorm's running statistics as buffers, with the int64
 * num_batches_tracked PyTorch keeps beside them (exported so that load_state_dict(strict=True) finds every key; not
 * used when read: BatchNorm follows model.bn_momentum, as MONAI's does). So
 * model.load_state_dict(safetensors.torch.load_file(F)) loads an export unchanged, and weights saved from such a
 * model initialise ours (train.init_from, predict --weights). */
#pragma once
#include <stdint.h>

#include "core/safetensors.h"
#include "graph/model.h"

/* Adds model m's parameters (packed, host memory), buffers (host) and, per BatchNorm, num_batches_tracked = bn_batches
 * to w, in PyTorch's names and layouts. */
void weights_export(const Model *m, const float *packed, const float *buffers, int64_t bn_batches, StWriter *w);

/* The largest magnitude a weight or buffer read from a file may have: no trained network's come near it, and
 * float32 sums of values beyond it overflow (3e38 weights made every prediction NaN). */
#define WEIGHTS_BOUND 1e12

/* A weights file matched against a model by name, verified but not yet applied. */
typedef struct {
    StFile file;
    int *param_src;  /* per parameter of the model: the file's tensor (index into file.t), or -1: keeps its value */
    int *buffer_src; /* per buffer, likewise (the weights' average: -1, it is read per parameter below) */
    int *ema_src;    /* per parameter: the file's "ema.<name>" of the same shape, or -1 (the average starts at the
                        loaded weights); all -1 when the model keeps no average */
    int loaded, total, ema_loaded, ema_ignored;
} WeightsInit;

/* Reads `path` and matches it with model m: each parameter and buffer is loaded (the same name, a float dtype, the
 * same shape), missing, or of another shape or dtype; each tensor of the file the model has no use for is unexpected
 * (num_batches_tracked excepted). `allow` (train.init_allow): comma-separated glob patterns of the keys that may be
 * missing, unexpected or of another shape: those keep their initial values (a new head for another num_classes:
 * "fc.*"). Any other difference, a non-finite value or one beyond +-WEIGHTS_BOUND, a negative BatchNorm running
 * variance, or a file that shares no key with the model (weights of another
 * family) is one line naming the file and the key, exit 2, after the report (`what`: its lines' prefix; printed when
 * verbose). "ema.<parameter>" keys (an export's weight average) load the model's average where it keeps one
 * (train.ema_decay) and are passed over, said, where it does not. Nothing is uploaded: the checks happen before a run writes anything. */
void weights_read(const char *path, const Model *m, const char *allow, const char *what, int verbose,
                  WeightsInit *out);
/* Overwrites the allocated model's matched parameters and buffers (after model_init_params); the rest keep theirs. */
void weights_apply(const WeightsInit *wi, Model *m);
void weights_free(WeightsInit *wi);
/* A parameter's shape as PyTorch holds it (ndim returned): what export writes and init compares. */
int weights_torch_shape(const Model *m, const ParamView *p, int64_t shape[5]);
