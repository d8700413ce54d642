/* diffusion_cuda.cu: the diffusion pieces (diffusion.h) on the GPU, grid-stride elementwise kernels running
 * diffusion_math.h's expressions; the loss as loss_cuda.cu's: pass 1 has vx_red_blocks(total) blocks (a function of
 * the element count only), each summing w[b]*(pred - target)^2 in double over its fixed share and writing it to the
 * backend's scratch; pass 2 (vx_reduce_finalize) adds those in order and divides by n*count. Deterministic run to
 * run; no atomics. The model's tensors are of storage type T, the rest float32; math in float. */
#include "common/cuda_check.h"
#include "diffusion/diffusion.h"
#include "diffusion/diffusion_math.h"

template <typename T>
__global__ void diff_q_sample_kernel(size_t total, long count, bool v, float k, const float *__restrict__ alpha,
                                     const float *__restrict__ sigma, const float *__restrict__ x0,
                                     const float *__restrict__ eps, T *__restrict__ xt, float *__restrict__ target) {
    for (size_t i = vx_global_thread(); i < total; i += vx_grid_threads()) {
        const float a = alpha[i / count], s = sigma[i / count], x = k * x0[i], e = eps[i];
        xt[i] = vx_to<T>(a * x + s * e);
        target[i] = v ? a * e - s * x : e;
    }
}

template <typename T>
__global__ void diff_predict_x0_kernel(size_t total, long count, int param, float k, const float *__restrict__ alpha,
                                       const float *__restrict__ sigma, const T *__restrict__ xt,
                                       const T *__restrict__ pred, T *__restrict__ x0) {
    for (size_t i = vx_global_thread(); i < total; i += vx_grid_threads())
        x0[i] = vx_to<T>(diffusion_x0(param, alpha[i / count], sigma[i / count], vx_f32(xt[i]), vx_f32(pred[i])) / k);
}

template <typename T, bool ACC>
__global__ void diff_predict_x0_backward_kernel(size_t total, long count, int param, float k, const float *__restrict__ alpha,
                                                const float *__restrict__ sigma, const T *__restrict__ dx0,
                                                T *__restrict__ dpred, float beta) {
    for (size_t i = vx_global_thread(); i < total; i += vx_grid_threads()) {
        const float g = diffusion_dx0_dpred(param, alpha[i / count], sigma[i / count]) / k * vx_f32(dx0[i]);
        dpred[i] = vx_to<T>(ACC ? beta * vx_f32(dpred[i]) + g : g);
    }
}

template <typename T>
__global__ void diff_loss_kernel(size_t total, long count, const T *__restrict__ pred, const float *__restrict__ target,
                                 const float *__restrict__ w, T *__restrict__ dpred, float grad_scale,
                                 const float *__restrict__ loss_scale, double *__restrict__ partials) {
    __shared__ double sh[VX_THREADS / 32];
    /* the CPU's constant, formed the same way (loss_scale is a power of two: the product is exact) */
    const float g2 = (float)(2.0 * (double)(grad_scale * (loss_scale ? loss_scale[0] : 1.0f)) / (double)total);
    double acc = 0.0;
    for (size_t i = vx_global_thread(); i < total; i += vx_grid_threads()) {
        const float wb = w ? w[i / count] : 1.0f, d = vx_f32(pred[i]) - target[i];
        acc += (double)wb * ((double)d * d);
        if (dpred) dpred[i] = vx_to<T>(g2 * wb * d);
    }
    acc = vx_block_sum(acc, sh);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

template <typename T>
__global__ void diff_ddim_kernel(size_t total, long count, int param, const float *__restrict__ alpha,
                                 const float *__restrict__ sigma, const float *__restrict__ alpha_next,
                                 const float *__restrict__ sigma_next, const float *xt, const T *__restrict__ pred,
                                 float *x_next) { /* x_next may be xt (in place): no restrict */
    for (size_t i = vx_global_thread(); i < total; i += vx_grid_threads()) {
        const size_t b = i / count;
        const float x = xt[i], p = vx_f32(pred[i]);
        const float x0 = diffusion_x0(param, alpha[b], sigma[b], x, p), e = diffusion_eps(param, alpha[b], sigma[b], x, p);
        x_next[i] = alpha_next[b] * x0 + sigma_next[b] * e;
    }
}

static size_t check(const DiffusionShape *s, const char *fn) {
    const char *e = diffusion_shape_error(s);
    if (*e) vx_fatal("%s: %s (n=%d count=%ld param=%d)", fn, e, s->n, s->count, s->param);
    return (size_t)s->n * (size_t)s->count;
}

static void q_sample_cuda(const DiffusionShape *s, const float *alpha, const float *sigma, const float *x0,
                          const float *eps, void *xt, float *target) {
    const size_t total = check(s, "diffusion_q_sample");
    if (!total) return;
    VX_DTYPE_SWITCH(s->dtype, T, {
        diff_q_sample_kernel<T><<<vx_ew_blocks(total), VX_THREADS, 0, vx_cuda_stream()>>>(total, s->count, s->param == DIFFUSION_V, diffusion_data_scale(s), alpha, sigma, x0, eps, (T *)xt, target);
    });
    LAUNCH_CHECK("diff_q_sample_kernel");
}

static void predict_x0_cuda(const DiffusionShape *s, const float *alpha, const float *sigma, const void *xt,
                            const void *pred, void *x0) {
    const size_t total = check(s, "diffusion_predict_x0");
    if (!total) return;
    VX_DTYPE_SWITCH(s->dtype, T, {
        diff_predict_x0_kernel<T><<<vx_ew_blocks(total), VX_THREADS, 0, vx_cuda_stream()>>>(total, s->count, s->param, diffusion_data_scale(s), alpha, sigma, (const T *)xt, (const T *)pred, (T *)x0);
    });
    LAUNCH_CHECK("diff_predict_x0_kernel");
}

static void predict_x0_backward_cuda(const DiffusionShape *s, const float *alpha, const float *sigma, const void *dx0,
                                     void *dpred, float beta) {
    const size_t total = check(s, "diffusion_predict_x0_backward");
    if (!total) return;
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(s->dtype, T, {
        if (beta != 0.0f)
            diff_predict_x0_backward_kernel<T, true><<<vx_ew_blocks(total), VX_THREADS, 0, st>>>(total, s->count, s->param, diffusion_data_scale(s), alpha, sigma, (const T *)dx0, (T *)dpred, beta);
        else
            diff_predict_x0_backward_kernel<T, false><<<vx_ew_blocks(total), VX_THREADS, 0, st>>>(total, s->count, s->param, diffusion_data_scale(s), alpha, sigma, (const T *)dx0, (T *)dpred, beta);
    });
    LAUNCH_CHECK("diff_predict_x0_backward_kernel");
}

static void loss_cuda(const DiffusionShape *s, const void *pred, const float *target, const float *w, float *loss_out,
                      void *dpred, float grad_scale, const float *loss_scale) {
    const size_t total = check(s, "diffusion_loss");
    if (!total) {
        CUDA_CHECK(cudaMemsetAsync(loss_out, 0, sizeof(float), vx_cuda_stream())); /* 0.0f, as the CPU */
        return;
    }
    double *partials = (double *)vx_cuda_scratch();
    const int blocks = vx_red_blocks(total);
    VX_DTYPE_SWITCH(s->dtype, T, {
        diff_loss_kernel<T><<<blocks, VX_THREADS, 0, vx_cuda_stream()>>>(total, s->count, (const T *)pred, target, w, (T *)dpred, grad_scale, loss_scale, partials);
    });
    LAUNCH_CHECK("diff_loss_kernel");
    vx_reduce_finalize(partials, blocks, (double)total, loss_out);
}

static void ddim_step_cuda(const DiffusionShape *s, const float *alpha, const float *sigma, const float *alpha_next,
                           const float *sigma_next, const float *xt, const void *pred, float *x_next) {
    const size_t total = check(s, "diffusion_ddim_step");
    if (!total) return;
    VX_DTYPE_SWITCH(s->dtype, T, {
        diff_ddim_kernel<T><<<vx_ew_blocks(total), VX_THREADS, 0, vx_cuda_stream()>>>(total, s->count, s->param, alpha, sigma, alpha_next, sigma_next, xt, (const T *)pred, x_next);
    });
    LAUNCH_CHECK("diff_ddim_kernel");
}

/* ---- the CUDA backend's table (ops.def) ---------------------------------------------------------------------- */

extern "C" const DiffusionOps diffusion_ops_cuda = {{op_supports_all_types}, q_sample_cuda, predict_x0_cuda,
                                                    predict_x0_backward_cuda, loss_cuda, ddim_step_cuda};
