/* diffusion.h: the per-sample elementwise pieces of diffusion training and sampling, v- or epsilon-parameterised
 * (v: Salimans & Ho 2022, "Progressive distillation"). Sample b of n has count elements and the coefficients
 *   alpha[b] = sqrt(alphabar_t),  sigma[b] = sqrt(1 - alphabar_t)    (float32 [n], backend memory: the trainer draws
 *                                                                     t per sample on the host and uploads them)
 * and the data scale k (shape.data_scale, diffusion.data_scale; 0 reads as 1): the process runs on k*x0, so that data
 * of small spread meet the unit noise at the schedule's intended signal-to-noise ratios (Chen 2023, "On the
 * importance of noise scheduling"; Stable Diffusion's latent scale factor); x0 and x0_hat are in the data's units,
 * with element i of the flat [n][count] arrays in sample b = i / count:
 *   q_sample        x_t = alpha*k*x0 + sigma*eps;  target = alpha*eps - sigma*k*x0 (v) or eps (epsilon), one pass
 *   predict_x0      x0_hat = (alpha*x_t - sigma*pred) / k (v) or (x_t - sigma*pred)/(alpha k) (epsilon)
 *                   backward: dpred = [beta*dpred +] -(sigma/k)*dx0 (v) or -(sigma/(alpha k))*dx0 (epsilon)
 *                   (x_t is data: no gradient)
 *   loss            the min-SNR-weighted MSE: loss = (1/n) sum_b w[b] * (1/count) sum_i (pred - target)^2,
 *                   w float32 [n] (NULL: all ones); with the gradient in the same pass, as loss.h's recon loss:
 *                   dpred = grad_scale * loss_scale[0] * 2*w[b]*(pred - target)/(n*count), overwritten (NULL:
 *                   the loss only); loss_scale in backend memory (NULL for 1), read when the op runs
 *   ddim_step       deterministic DDIM (eta 0) from t to the next (smaller) timestep, in the process's units (k*x0:
 *                   the sampler divides its result by k), whose coefficients are alpha_next, sigma_next:
 *                   x0 = alpha*x_t - sigma*v, eps = sigma*x_t + alpha*v (v), or eps = pred,
 *                   x0 = (x_t - sigma*eps)/alpha (epsilon);  x_next = alpha_next*x0 + sigma_next*eps
 *                   (x_next may be x_t: in place)
 * Storage: shape.dtype for the model's tensors (x_t of q_sample, pred, x0_hat, dx0, dpred); float32 for x0, eps,
 * target, the coefficients, w, the loss and the sampler's x_t / x_next. Math in float; the loss's sum in double over
 * a fixed partition (the bits do not depend on the thread count or the launch). The CPU float32, CUDA every type. */
#pragma once
#include "common/dtype.h"
#include "common/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DIFFUSION_V = 0, DIFFUSION_EPS = 1 } DiffusionParam;

typedef struct {
    int n;       /* samples */
    long count;  /* elements per sample */
    int param;   /* DiffusionParam: what the model predicts */
    DType dtype; /* storage of the model's tensors (above) */
    float data_scale; /* k above; 0 reads as 1 */
} DiffusionShape;

/* The op's sub-table (kernels/backend/ops.def): be->diffusion->... */
enum { DIFFUSION_Q_SAMPLE, DIFFUSION_PREDICT_X0, DIFFUSION_PREDICT_X0_BACKWARD, DIFFUSION_LOSS, DIFFUSION_DDIM_STEP };
typedef struct DiffusionOps {
    OpHead head;
    void (*q_sample)(const DiffusionShape *s, const float *alpha, const float *sigma, const float *x0,
                     const float *eps, void *x_t, float *target);
    void (*predict_x0)(const DiffusionShape *s, const float *alpha, const float *sigma, const void *x_t,
                       const void *pred, void *x0_hat);
    void (*predict_x0_backward)(const DiffusionShape *s, const float *alpha, const float *sigma, const void *dx0,
                                void *dpred, float beta);
    void (*loss)(const DiffusionShape *s, const void *pred, const float *target, const float *w, float *loss_out,
                 void *dpred, float grad_scale, const float *loss_scale);
    void (*ddim_step)(const DiffusionShape *s, const float *alpha, const float *sigma, const float *alpha_next,
                      const float *sigma_next, const float *x_t, const void *pred, float *x_next);
} DiffusionOps;
extern const DiffusionOps diffusion_ops_cpu;
extern const DiffusionOps diffusion_ops_cuda; /* CUDA builds only */

static inline long diffusion_total(const DiffusionShape *s) { return (long)s->n * s->count; }
static inline float diffusion_data_scale(const DiffusionShape *s) {
    return s->data_scale != 0.0f ? s->data_scale : 1.0f;
}
/* "" when s is valid, else what is wrong (one line) */
static inline const char *diffusion_shape_error(const DiffusionShape *s) {
    if (s->n < 0 || s->count < 0) return "a negative sample or element count";
    if (s->param != DIFFUSION_V && s->param != DIFFUSION_EPS) return "a parameterisation other than v or epsilon";
    if (!(s->data_scale >= 0.0f)) return "a negative or NaN data scale";
    return "";
}

#ifdef __cplusplus
}
#endif
