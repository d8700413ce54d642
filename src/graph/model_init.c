/* model_init.c: the parameters' deterministic initialization from the seed, per family as its PyTorch/MONAI reference
 * initializes them (each parameter's values a pure function of the seed, its index and the element: no draw order),
 * then the buffers, AdamW's moments, the low-precision copy and the moving average reset to match. */
#include <math.h>
#include <string.h>

#include "common/rng.h"
#include "core/util.h"
#include "graph/model.h"

#define RNG_STREAM_INIT 0x1A17ull        /* parameter init: stream = this + parameter index */
#define RNG_STREAM_INIT_NORMAL 0x1A18ull /* resnet3d's and densenet's conv weights (Kaiming normal): this + index */

/* resnet3d as MONAI initialises it: conv weights Kaiming normal (fan_out, relu: std sqrt(2 / (c_out k^3))), the
 * shortcut conv's bias and the Linear weight U(-1/sqrt(fan_in), +) (PyTorch's defaults), BatchNorm weight 1 and
 * bias 0, the Linear's bias 0. Every value a pure function of (seed, parameter index, element). */
static void init_resnet(const Model *m, uint64_t seed, float *host) {
    for (int i = 0; i < m->n_params; i++) {
        const ParamView *p = &m->params[i];
        float *dst = host + p->offset;
        const char *kind = strrchr(p->name, '.') + 1;
        const int is_bn = strstr(p->name, ".bn") || strncmp(p->name, "bn", 2) == 0 || strstr(p->name, "downsample.1");
        const int is_fc = strncmp(p->name, "fc.", 3) == 0, is_bias = strcmp(kind, "bias") == 0;
        if (is_bn || (is_fc && is_bias)) {
            for (long j = 0; j < p->count; j++) dst[j] = is_bn && !is_bias ? 1.0f : 0.0f;
        } else if (p->ndim == 5 && !is_bias) { /* conv weight [out][kd][kh][kw][in] */
            const double std = sqrt(2.0 / ((double)p->count / p->shape[4]));
            for (long j = 0; j < p->count; j++)
                dst[j] = (float)(std * vx_normal(seed, RNG_STREAM_INIT_NORMAL + (uint64_t)i, (uint64_t)j));
        } else { /* the shortcut's conv bias (fan_in from its weight just before) and fc.weight */
            const ParamView *w = is_bias ? &m->params[i - 1] : p;
            const float bound = 1.0f / sqrtf((float)(w->count / w->shape[0]));
            for (long j = 0; j < p->count; j++)
                dst[j] = bound * (2.0f * vx_uniform01(vx_hash3(seed, RNG_STREAM_INIT + (uint64_t)i, (uint64_t)j)) - 1.0f);
        }
    }
}

/* densenet as MONAI initialises it: conv weights Kaiming normal with PyTorch's default fan_in (std sqrt(2 / (c_in
 * k^3))), BatchNorm weight 1 and bias 0, the Linear's bias 0 and its weight PyTorch's default U(-1/sqrt(fan_in), +). */
static void init_densenet(const Model *m, uint64_t seed, float *host) {
    for (int i = 0; i < m->n_params; i++) {
        const ParamView *p = &m->params[i];
        float *dst = host + p->offset;
        const int is_bias = strcmp(strrchr(p->name, '.') + 1, "bias") == 0, is_norm = strstr(p->name, ".norm") != NULL;
        if (is_norm || is_bias) {
            for (long j = 0; j < p->count; j++) dst[j] = is_norm && !is_bias ? 1.0f : 0.0f;
        } else if (p->ndim == 5) { /* conv weight [out][kd][kh][kw][in]: fan_in = everything but out */
            const double std = sqrt(2.0 / ((double)p->count / p->shape[0]));
            for (long j = 0; j < p->count; j++)
                dst[j] = (float)(std * vx_normal(seed, RNG_STREAM_INIT_NORMAL + (uint64_t)i, (uint64_t)j));
        } else { /* class_layers.out.weight */
            const float bound = 1.0f / sqrtf((float)(p->count / p->shape[0]));
            for (long j = 0; j < p->count; j++)
                dst[j] = bound * (2.0f * vx_uniform01(vx_hash3(seed, RNG_STREAM_INIT + (uint64_t)i, (uint64_t)j)) - 1.0f);
        }
    }
}

void model_init_params(Model *m, uint64_t seed) {
    float *host = vx_calloc((size_t)m->param_floats, sizeof(float)); /* the padding stays 0 */
    /* ae3d and vit3d: PyTorch's defaults; the positions N(0, 0.02) as timm's (trunc_normal_ std .02) */
    const int vit = m->family == FAMILY_VIT3D || m->family == FAMILY_VIT3D_DIFFUSION;
    for (int i = 0; (m->family == FAMILY_AE3D || vit) && i < m->n_params; i++) {
        const ParamView *p = &m->params[i];
        float *dst = host + p->offset;
        const char *kind = strrchr(p->name, '.') + 1;
        int is_norm = strstr(p->name, "norm") != NULL;
        /* DiT's "Zero": every adaLN modulation and the final Linear start at 0, so each block starts as the
         * identity and the first prediction is 0 */
        if (strstr(p->name, "adaLN_modulation") || strncmp(p->name, "final_layer.linear", 18) == 0) continue;
        if (is_norm) { /* GroupNorm, LayerNorm: gamma 1, beta 0 */
            for (long j = 0; j < p->count; j++) dst[j] = strcmp(kind, "weight") == 0 ? 1.0f : 0.0f;
            continue;
        }
        if (strncmp(p->name, "pos_embed", 9) == 0 || strncmp(p->name, "view_pos_embed", 14) == 0) {
            for (long j = 0; j < p->count; j++)
                dst[j] = (float)(0.02 * vx_normal(seed, RNG_STREAM_INIT_NORMAL + (uint64_t)i, (uint64_t)j));
            continue;
        }
        /* Conv weight and bias: U(-b, b), b = 1/sqrt(fan_in), fan_in = k^3 * c_in (PyTorch's default). The bias
         * takes its fan_in from the weight created just before it. */
        const ParamView *w = strcmp(kind, "bias") == 0 ? &m->params[i - 1] : p;
        long fan_in = w->count / w->shape[0];
        float bound = 1.0f / sqrtf((float)fan_in);
        for (long j = 0; j < p->count; j++)
            dst[j] = bound * (2.0f * vx_uniform01(vx_hash3(seed, RNG_STREAM_INIT + (uint64_t)i, (uint64_t)j)) - 1.0f);
    }
    if (m->family == FAMILY_RESNET3D) init_resnet(m, seed, host);
    if (m->family == FAMILY_DENSENET) init_densenet(m, seed, host);
    model_reset_buffers(m);
    size_t bytes = (size_t)m->param_floats * sizeof(float);
    m->be->copy_to_device(m->param, host, bytes); /* (padding past param_floats: zero since model_allocate) */
    if (m->state_floats) {
        m->be->zero(m->adam_m, (size_t)m->state_floats * sizeof(float));
        m->be->zero(m->adam_v, (size_t)m->state_floats * sizeof(float));
    }
    model_sync_lp(m);
    model_ema_reset(m); /* (reset_buffers zeroed it: the average starts at the weights) */
    free(host);
}
