/* batchnorm.h: BatchNorm over NDHWC activations, as PyTorch's BatchNorm3d and SyncBatchNorm compute it, in the
 * pieces torch.nn.SyncBatchNorm runs (batch_norm_stats, the gather, batch_norm_elemt, batch_norm_backward_reduce,
 * batch_norm_backward_elemt), so that the statistics of a synchronised layer are summed across ranks between them
 * by the caller (an all-reduce of c or 2c floats), and a plain layer simply skips that sum.
 *   x, y, dy, dx   [n][spatial][c]      spatial = d*h*w, of shape.dtype
 *   gamma, beta    [c]                  float32 (parameters), dgamma, dbeta their float32 gradients
 *   mean, invstd   [c]                  float32, saved by the forward for the backward
 *   running_mean, running_var [c]       float32 buffers (checkpointed, not trained)
 * Training forward, with `count` the number of values per channel over every rank (n*spatial*ranks):
 *   stats(x, NULL) -> sum[c] = sum x;  [ranks: all-reduce sum]
 *   stats(x, sum, count) -> sq[c] = sum (x - sum/count)^2 (two passes: no cancellation in float32);
 *                                                                   [ranks: all-reduce sq]
 *   finalize(train=1): mean = sum/count, invstd = 1/sqrt(sq/count + eps) (biased variance, as PyTorch normalises);
 *                      running_mean += momentum*(mean - running_mean), running_var likewise with the unbiased
 *                      variance sq/(count-1) (PyTorch's update; count 1, a batch PyTorch refuses in training, has
 *                      none: the biased sq/count, 0, is used)
 *   forward(x, mean, invstd, gamma, beta) -> y = (x - mean)*invstd*gamma + beta
 * Eval forward: finalize(train=0): mean = running_mean, invstd = 1/sqrt(running_var + eps); then forward.
 * Backward (training statistics):
 *   backward_reduce(dy, x, mean, invstd[, gamma, beta]) -> sum_dy[c] = sum dy, sum_dy_xhat[c] = sum dy*xhat,
 *                                                          xhat = (x-mean)*invstd
 *     (these local sums are also dbeta and dgamma: the caller adds them into the parameter gradients before any
 *     all-reduce, since data parallelism all-reduces the parameter gradients itself)  [ranks: all-reduce both]
 *   backward(dy, x, mean, invstd, gamma[, beta], sum_dy, sum_dy_xhat, count) ->
 *     dx = gamma*invstd*(dy - sum_dy/count - xhat*sum_dy_xhat/count)   (beta_dx: 0 overwrite, 1 accumulate)
 * Every sum is a fixed-order reduction (double accumulation), so results are bit-identical run to run.
 * With shape.relu (train.fuse's BatchNorm+ReLU node), forward writes y = max(0, bn(x)) as relu.h's forward does
 * (x < 0 ? 0 : x), and both backward pieces take dy where the pre-activation bn(x) > 0, else 0, in place of dy: the
 * bits of the separate ReLU's backward (y > 0) followed by these pieces, without its pass over memory. Why:
 * DenseNet-121 runs a BatchNorm and a ReLU over each layer's whole concatenation, and the separate ReLU passes took 10%
 * of its CPU step (cxr-densenet121, 2-core Xeon, per the layer table). The backward pieces recompute bn(x) from x,
 * mean, invstd, gamma and beta (batchnorm_pre: the forward's own float expression, not contracted into an FMA, so it is
 * above 0 exactly where the stored float32 y is) rather than read y: x is read anyway, and the y stream was a quarter
 * of the backward's memory traffic (cxr-densenet121's layer table). In half precision a positive bn(x) below the
 * smallest half rounds to a stored 0, where the separate ReLU would not take dy: the only difference from the pair.
 * Strided input (shape.ldx > c): x and dx are the first c channels of rows ldx apart (a channel prefix of a wider
 * tensor); y and dy stay [rows][c]. Why: a dense block keeps its features in one buffer, and each dense layer's norm
 * reads the channels written so far in place, where MONAI concatenates them into a new tensor per layer
 * (build_densenet.c); its dx adds (beta_dx 1) into the same prefix of the buffer's gradient.
 * Storage: the CPU version is the float32 reference; CUDA stores x, y, dy, dx as shape.dtype. */
#pragma once
#include "common/dtype.h"
#include "common/op.h"

#ifdef __cplusplus
extern "C" {
#endif
#include "core/util.h" /* vx_fatal, with C linkage in the CUDA files too */

typedef struct {
    int n;
    long spatial;
    int c;
    DType dtype; /* storage of x, y, dy, dx */
    int relu;    /* 1: y = max(0, bn(x)), and the backward masks dy by y > 0 (above) */
    long ldx;    /* elements between rows of x and dx: c, or more for a channel prefix of a wider tensor; 0 means c */
} BatchNormShape;

/* the row stride of x and dx */
static inline long batchnorm_ldx(const BatchNormShape *s) { return s->ldx > 0 ? s->ldx : s->c; }

/* The op's sub-table (kernels/backend/ops.def): be->batchnorm->... */
enum { BN_STATS, BN_FINALIZE, BN_FORWARD, BN_BACKWARD_REDUCE, BN_BACKWARD }; /* its functions, for supports() */
typedef struct BatchNormOps {
    OpHead head;
    /* center NULL: out[c] = sum of x over n and spatial; else out[c] = sum of (x - center[c]/count)^2 */
    void (*stats)(const BatchNormShape *s, const void *x, const float *center, double count, float *out);
    /* per channel (see above); train 0 ignores sum, sq and momentum and leaves the running statistics alone */
    void (*finalize)(int c, double count, float eps, float momentum, int train, const float *sum, const float *sq,
                     float *mean, float *invstd, float *running_mean, float *running_var);
    void (*forward)(const BatchNormShape *s, const void *x, const float *mean, const float *invstd, const float *gamma,
                    const float *beta, void *y);
    /* gamma and beta: the forward's, read only where s->relu (dy counts only where bn(x) > 0; may be NULL else) */
    void (*backward_reduce)(const BatchNormShape *s, const void *dy, const void *x, const float *mean,
                            const float *invstd, const float *gamma, const float *beta, float *sum_dy,
                            float *sum_dy_xhat);
    /* beta: read only where s->relu (may be NULL else) */
    void (*backward)(const BatchNormShape *s, const void *dy, const void *x, const float *mean, const float *invstd,
                     const float *gamma, const float *beta, const float *sum_dy, const float *sum_dy_xhat,
                     double count, void *dx, float beta_dx);
} BatchNormOps;

/* bn(x) before the fused ReLU, as the forward forms it: scale = invstd*gamma per channel. One expression for the CPU's
 * forward, its backward's mask and the op spec's reference, so the mask is y > 0 bit for bit (the Makefile's -std=c11
 * keeps GCC from contracting it into an FMA; batchnorm_cuda.cu rounds each step explicitly to the same effect). */
static inline float batchnorm_pre(float x, float mean, float scale, float beta) { return (x - mean) * scale + beta; }

/* The fused ReLU's backward needs the forward's gamma and beta (each backend's backward pieces call this) */
static inline void batchnorm_need_affine(const BatchNormShape *s, const float *gamma, const float *beta) {
    if (s->relu && (!gamma || !beta))
        vx_fatal("batchnorm: the fused ReLU's backward needs the forward's gamma and beta");
}

extern const BatchNormOps batchnorm_ops_cpu;
extern const BatchNormOps batchnorm_ops_cuda; /* CUDA builds only */

#ifdef __cplusplus
}
#endif
