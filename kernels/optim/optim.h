/* optim.h: the optimizer ops over the flat parameter buffer, and the per-step state they share.
 *   p, g, m, v [count]   parameters, gradients, first and second moments (float32)
 * AdamW with decoupled weight decay (Loshchilov & Hutter), as torch.optim.AdamW:
 *   g' = g * gs                           (gs = clip / loss_scale: clipping and unscaling folded into the update)
 *   p -= lr * weight_decay * p
 *   m = b1*m + (1-b1)*g' ;  v = b2*v + (1-b2)*g'^2
 *   p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
 * sumsq writes sum(x^2) to out[0], reduced in double in a fixed order, so it does not depend on thread count.
 * Sharded (ZeRO): sumsq_part writes a shard's sum(x^2) in double, unrounded, and sumsq_join adds n such parts in
 * order and rounds once to float: with every rank's part (gathered in rank order) the squared global norm equals the
 * unsharded sumsq's float but for a double rounding that would have to straddle a float's (2^-29 relative).
 *
 * One optimizer step on a backend is three ops, none of which needs the host in between (so a captured CUDA Graph
 * replays a whole step, and the host reads the outcome afterwards, or one step late):
 *   sumsq(grad) -> out                          the squared global norm of the (loss-scaled) gradient
 *   optim_prepare(config, out, state)           one thread: the norm, the clip factor, whether the step is skipped
 *                                               (a non-finite norm), AdamW's constants for step t, the dynamic loss
 *                                               scale's update (torch.amp.GradScaler's rule)
 *   adamw(state, ...)                           the update, or nothing when state.skip; with a low-precision copy
 *                                               of the parameters (mixed precision) it writes that too, same pass
 * OptimState lives in backend memory; the host writes lr before the step and reads the rest after it. */
#pragma once
#include <math.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/op.h"
#include "common/vx_hd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The hyperparameters, constant over a run. Doubles, as torch's are Python floats: every scalar constant (1 - beta,
 * the bias corrections, 1 - lr*weight_decay, lr / bias correction) is computed in double from them and rounded to
 * float once. Rounding beta to float first would put 1 - beta2 1.3e-5 off (0.999f is 0.99899999). */
typedef struct {
    double beta1, beta2, eps, weight_decay;
    double grad_clip;    /* clip the global gradient norm to this; 0 = off */
    int dynamic_scale;   /* 1: dynamic loss scaling (float16): a non-finite gradient skips the step and halves the
                            scale, growth_interval finite steps in a row double it */
    int growth_interval; /* 2000, as torch.amp.GradScaler */
    double growth, backoff; /* 2 and 0.5, as torch.amp.GradScaler */
} OptimConfig;

/* AdamW's per-step scalars, rounded to float once. */
typedef struct {
    float decay, neg_step, bc2_sqrt, w1, w2, b2, eps, gs;
} AdamWConsts;

typedef struct {
    /* the host's input: this step's learning rate */
    double lr;
    /* carried from step to step (checkpointed) */
    float loss_scale;       /* multiplies the loss gradient (recon_loss and latent_backward read it); 1 without
                               loss scaling; a power of two, so scaling and unscaling are exact */
    int64_t adam_step;      /* t: the updates made so far (a skipped step makes none, as in PyTorch) */
    int64_t skipped_steps;  /* steps skipped so far for a non-finite gradient */
    int64_t growth_tracker; /* finite steps since the scale last changed */
    /* this step's outcome (optim_prepare) */
    double grad_norm; /* of the unscaled gradient; not finite when the step is skipped */
    float clip;       /* the clip factor applied (1 when under grad_clip) */
    int32_t skip;     /* 1: the gradient was not finite, nothing was updated */
    AdamWConsts c;
} OptimState;

/* The part of OptimState that carries from step to step, what a checkpoint stores. loss_scale 0 in a checkpoint of
 * an earlier format: unknown, the run's train.loss_scale_init applies. */
typedef struct {
    double loss_scale;
    int64_t adam_step, skipped_steps, growth_tracker;
} OptimCarry;

/* AdamW's constants for update t (1-based) at learning rate lr, gradient multiplier gs. */
VX_HD AdamWConsts adamw_consts(const OptimConfig *cfg, double lr, int64_t t, float gs) {
    const double bc1 = 1.0 - pow(cfg->beta1, (double)t), bc2 = 1.0 - pow(cfg->beta2, (double)t);
    AdamWConsts c;
    c.decay = (float)(1.0 - lr * cfg->weight_decay);
    c.neg_step = (float)(-lr / bc1);
    c.bc2_sqrt = (float)sqrt(bc2);
    c.w1 = (float)(1.0 - cfg->beta1);
    c.w2 = (float)(1.0 - cfg->beta2);
    c.b2 = (float)cfg->beta2;
    c.eps = (float)cfg->eps;
    c.gs = gs;
    return c;
}

/* The step's decisions from the squared norm of the loss-scaled gradient (what optim_prepare runs, on the host for
 * the CPU backend and in one GPU thread for CUDA). */
VX_HD void optim_prepare_step(const OptimConfig *cfg, float sumsq, OptimState *st) {
    const double scale = st->loss_scale;
    const int finite = isfinite(sumsq) != 0;
    st->grad_norm = sqrt((double)sumsq) / scale;
    st->skip = !finite;
    st->clip = 1.0f;
    if (finite) {
        if (cfg->grad_clip > 0 && st->grad_norm > cfg->grad_clip)
            st->clip = (float)(cfg->grad_clip / (st->grad_norm + 1e-6));
        st->adam_step++;
        st->c = adamw_consts(cfg, st->lr, st->adam_step, (float)((double)st->clip / scale));
    } else {
        st->skipped_steps++;
    }
    if (!cfg->dynamic_scale) return;
    if (!finite) {
        st->loss_scale = (float)(scale * cfg->backoff);
        st->growth_tracker = 0;
    } else if (++st->growth_tracker >= cfg->growth_interval) {
        const double grown = scale * cfg->growth;
        if (grown <= 3.0e38) st->loss_scale = (float)grown; /* stays a finite float32 */
        st->growth_tracker = 0;
    }
}

/* The least loss scale a float16 run may back off to. The loss gradient is stored in the activation type: each
 * element is grad_scale x loss_scale / count (L1; twice that times the difference for MSE) with count the loss's
 * elements (256^3 x 4 = 2^26), so in float16, whose smallest subnormal is 2^-24, a scale backed off below
 * count x 2^-24 / grad_scale makes the reconstruction gradient exactly zero: the step is not skipped (zeros are
 * finite) and the model silently stops learning the reconstruction. Folding 1/count into the unscale instead would
 * store every gradient count times larger, the same as a count-times-larger loss scale, which the dynamic scale
 * would back off again: the floor is what keeps it. Returns the smallest power of two at or above that bound for
 * float16, and 2^-24 (the trainer's old bound) for the other types, whose exponent range is float32's. */
VX_HD double optim_loss_scale_floor(DType dt, double count, double grad_scale) {
    if (dt != DT_F16 || count <= 0 || grad_scale <= 0) return 0x1p-24;
    const double least = count * 0x1p-24 / grad_scale;
    double s = 0x1p-24;
    while (s < least) s *= 2.0;
    return s;
}

/* The float32 reference (CPU): the update with constants c. */
void adamw_cpu(long count, float *p, const float *g, float *m, float *v, const AdamWConsts *c);
void sumsq_cpu(long count, const float *x, float *out);
void sumsq_part_cpu(long count, const float *x, double *out);
void sumsq_join_cpu(int n, const double *parts, float *out);

/* CUDA (optim_cuda.cu, CUDA builds only), on device pointers, on the compute stream. adamw does nothing when
 * st->skip; p_lp (NULL when none) receives the updated parameters rounded to lp_dt, in the same pass. */
void adamw_cuda(long count, float *p, const float *g, float *m, float *v, const OptimState *st, DType lp_dt,
                void *p_lp);
void sumsq_cuda(long count, const float *x, float *out);
void sumsq_part_cuda(long count, const float *x, double *out);
void sumsq_join_cuda(int n, const double *parts, float *out);
void optim_prepare_cuda(const OptimConfig *cfg, const float *sumsq, OptimState *st);

/* The op's sub-table (kernels/backend/ops.def): be->optim->... */
enum { OPTIM_ADAMW, OPTIM_SUMSQ, OPTIM_PREPARE, OPTIM_SUMSQ_SHARDED }; /* its functions, for supports() */
typedef struct OptimOps {
    OpHead head;
    /* the update from st (backend memory); p_lp (NULL: none) the low-precision copy of type lp_dt */
    void (*adamw)(long count, float *p, const float *g, float *m, float *v, const OptimState *st, DType lp_dt,
                  void *p_lp);
    void (*sumsq)(long count, const float *x, float *out);
    void (*prepare)(const OptimConfig *cfg, const float *sumsq, OptimState *st);
    /* sharded: a shard's sum of squares in double (backend memory), and n of them added in order into out[0] */
    void (*sumsq_part)(long count, const float *x, double *out);
    void (*sumsq_join)(int n, const double *parts, float *out);
} OptimOps;
extern const OptimOps optim_ops_cpu;
extern const OptimOps optim_ops_cuda; /* CUDA builds only */

#ifdef __cplusplus
}
#endif
