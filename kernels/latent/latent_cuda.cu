/* latent_cuda.cu: the variational bottleneck of latent.h on the GPU.
 *   mu, logvar_raw, eps, z, dz, dmu, dlogvar [n][cps]   cps = count_per_sample; eps and dz may be NULL; eps is
 *                                                       float32, the others of storage type T = shape.dtype
 *   kl_out [1]   device float: mean over the n samples of 0.5 * sum(mu^2 + exp(lv) - 1 - lv)
 * Forward: pass 1 runs bps blocks per sample (a function of the shape only), each writing z for its elements
 * and the double sum of its KL terms to the scratch [n][bps]; pass 2 (one block) adds each sample's partials in
 * order, then 0.5 * the samples' sums in a fixed order, and divides by n: deterministic, and the same
 * per-sample-sum-then-mean as latent_forward_cpu. Backward is elementwise with latent_backward_cpu's formulas.
 * The latent tensor is small (a few channels at 1/8 of the input resolution), so these kernels use scalar
 * loads only. */
#include "common/cuda_check.h"
#include "latent/latent.h"

__device__ __forceinline__ float clampf_dev(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

/* grid: n*bps blocks; block (b, part) covers elements part*256 + tid, stepping by bps*256, of sample b */
template <typename T>
__global__ void latent_forward_kernel(int bps, size_t cps, const T *__restrict__ mu, const T *__restrict__ logvar_raw,
                                      const float *__restrict__ eps, T *__restrict__ z, float lv_min, float lv_max,
                                      double *__restrict__ partials) {
    __shared__ double sh[VX_THREADS / 32];
    const size_t b = blockIdx.x / bps, part = blockIdx.x % bps;
    const size_t base = b * cps;
    double kl = 0.0;
    for (size_t j = part * VX_THREADS + threadIdx.x; j < cps; j += (size_t)bps * VX_THREADS) {
        const size_t i = base + j;
        const float lv = clampf_dev(vx_f32(logvar_raw[i]), lv_min, lv_max), mi = vx_f32(mu[i]);
        z[i] = vx_to<T>(eps ? mi + expf(0.5f * lv) * eps[i] : mi);
        const double m = mi;
        kl += m * m + exp((double)lv) - 1.0 - (double)lv;
    }
    kl = vx_block_sum(kl, sh);
    if (threadIdx.x == 0) partials[blockIdx.x] = kl;
}

/* one block: thread t handles samples t, t + 256, ...; kl_out = (sum over samples of 0.5*sample sum) / n */
__global__ void latent_kl_finalize_kernel(int n, int bps, const double *__restrict__ partials,
                                          float *__restrict__ kl_out) {
    __shared__ double sh[VX_THREADS / 32];
    double total = 0.0;
    for (int b = threadIdx.x; b < n; b += VX_THREADS) {
        double sample = 0.0;
        for (int p = 0; p < bps; p++) sample += partials[(size_t)b * bps + p];
        total += 0.5 * sample;
    }
    total = vx_block_sum(total, sh);
    if (threadIdx.x == 0) kl_out[0] = (float)(total / n);
}

extern "C" void latent_forward_cuda(const LatentShape *s, const void *mu, const void *logvar_raw, const float *eps,
                                    void *z, float *kl_out) {
    if (s->n <= 0 || s->count_per_sample <= 0) {
        /* no elements: kl is 0 (as latent_forward_cpu: an empty sum, and 0 when n == 0) */
        CUDA_CHECK(cudaMemsetAsync(kl_out, 0, sizeof(float), vx_cuda_stream()));
        return;
    }
    const size_t cps = (size_t)s->count_per_sample;
    /* blocks per sample: enough for ~4 elements per thread, at most VX_RED_MAX_BLOCKS in all (but 1 per sample
     * at least, so n*bps partials; n is a batch size, far below what the scratch holds) */
    size_t bps = (cps + 4 * VX_THREADS - 1) / (4 * VX_THREADS);
    const size_t cap = (size_t)VX_RED_MAX_BLOCKS / (size_t)s->n;
    if (bps > cap) bps = cap;
    if (bps < 1) bps = 1;
    const size_t blocks = (size_t)s->n * bps;
    if (blocks * sizeof(double) > VX_SCRATCH_BYTES || blocks > (size_t)INT32_MAX)
        vx_fatal("latent: batch %d is too large for the reduction scratch", s->n);
    double *partials = (double *)vx_cuda_scratch();
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(s->dtype, T, {
        latent_forward_kernel<T><<<(unsigned)blocks, VX_THREADS, 0, st>>>(
            (int)bps, cps, (const T *)mu, (const T *)logvar_raw, eps, (T *)z, s->logvar_min, s->logvar_max, partials);
    });
    LAUNCH_CHECK("latent_forward_kernel");
    latent_kl_finalize_kernel<<<1, VX_THREADS, 0, vx_cuda_stream()>>>(s->n, (int)bps, partials, kl_out);
    LAUNCH_CHECK("latent_kl_finalize_kernel");
}

/* dmu = dz + kn*mu; dlv = dz*eps*0.5*exp(0.5*lv) + kn*0.5*(exp(lv) - 1) inside [lv_min, lv_max], else 0;
 * kn = kl_scale * loss_scale[0] / n, formed per thread as latent_backward_cpu forms it (the scale is a power of
 * two: the product is exact) */
template <typename T>
__global__ void latent_backward_kernel(size_t total, int n, const T *__restrict__ mu, const T *__restrict__ logvar_raw,
                                       const float *__restrict__ eps, const T *__restrict__ dz, float kl_scale,
                                       const float *__restrict__ loss_scale, float lv_min, float lv_max,
                                       T *__restrict__ dmu, T *__restrict__ dlogvar) {
    const float kn = (float)((double)(kl_scale * (loss_scale ? loss_scale[0] : 1.0f)) / n);
    for (size_t i = vx_global_thread(); i < total; i += vx_grid_threads()) {
        const float raw = vx_f32(logvar_raw[i]);
        const float g = dz ? vx_f32(dz[i]) : 0.0f;
        dmu[i] = vx_to<T>(g + kn * vx_f32(mu[i]));
        if (raw < lv_min || raw > lv_max) {
            dlogvar[i] = vx_to<T>(0.0f);
            continue;
        }
        const float sd = expf(0.5f * raw);
        const float dz_term = eps ? g * eps[i] * 0.5f * sd : 0.0f;
        dlogvar[i] = vx_to<T>(dz_term + kn * 0.5f * expm1f(raw)); /* expm1: exact near lv = 0, as latent_cpu.c */
    }
}

extern "C" void latent_backward_cuda(const LatentShape *s, const void *mu, const void *logvar_raw, const float *eps,
                                     const void *dz, float kl_scale, const float *loss_scale, void *dmu,
                                     void *dlogvar) {
    if (s->n <= 0 || s->count_per_sample <= 0) return;
    const size_t total = (size_t)s->n * (size_t)s->count_per_sample;
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(s->dtype, T, {
        latent_backward_kernel<T><<<vx_ew_blocks(total), VX_THREADS, 0, st>>>(
            total, s->n, (const T *)mu, (const T *)logvar_raw, eps, (const T *)dz, kl_scale, loss_scale,
            s->logvar_min, s->logvar_max, (T *)dmu, (T *)dlogvar);
    });
    LAUNCH_CHECK("latent_backward_kernel");
}

/* ---- the CUDA backend's table (ops.def) ---------------------------------------------------------------------- */

extern "C" const LatentOps latent_ops_cuda = {{op_supports_all_types}, latent_forward_cuda, latent_backward_cuda};
