/* optim.h: the optimizer ops over the flat parameter buffer.
 *   p, g, m, v [count]   parameters, gradients, first and second moments (fp32)
 * AdamW with decoupled weight decay (Loshchilov & Hutter), as torch.optim.AdamW:
 *   g' = g * grad_scale                   (grad_scale folds clipping and loss-scale unscaling into the step)
 *   p -= lr * weight_decay * p
 *   m = b1*m + (1-b1)*g' ;  v = b2*v + (1-b2)*g'^2
 *   p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
 * sumsq writes sum(x^2) to out[0], reduced in double in a fixed order, so it does not depend on thread count. */
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

/* The hyperparameters are doubles, as torch's are Python floats: every scalar constant (1 - beta, the bias
 * corrections, 1 - lr*weight_decay, lr / bias correction) is computed in double from them and rounded to float
 * once. Rounding beta to float first would put 1 - beta2 1.3e-5 off (0.999f is 0.99899999). */
typedef struct {
    double lr, beta1, beta2, eps, weight_decay;
    float grad_scale;
    long step; /* t, 1-based */
} AdamWParams;

void adamw_cpu(long count, float *p, const float *g, float *m, float *v, const AdamWParams *a);
void sumsq_cpu(long count, const float *x, float *out);

/* CUDA (kernels/optim_cuda.cu, CUDA builds only): the same semantics on device pointers,
 * enqueued on the CUDA backend's compute stream (backend.h). */
void adamw_cuda(long count, float *p, const float *g, float *m, float *v, const AdamWParams *a);
void sumsq_cuda(long count, const float *x, float *out);

#ifdef __cplusplus
}
#endif
