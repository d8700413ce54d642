/* head_loss_cuda.cu: the head losses of head_loss.h on the GPU, everything in double with the per-element math of
 * head_loss_math.h (the CPU's), every sum in a fixed order (no atomics), the scratch holding what passes share.
 *   z, dz [n][k] of storage type T (dtype_cuda.cuh); target, weight, loss_out float32; loss_scale[0] read on the
 *   device (NULL: 1), so a captured step follows it. g = grad_scale * loss_scale[0].
 *   CE   ce_rows_kernel: block per sample (grid-stride): the row's max (a block max), sum exp (a fixed-order block
 *        sum), -> part[i] = {w_i*(lse_i - z_i,t), w_i, lse_i}; ce_total_kernel (one block): W and the loss, each
 *        thread adding samples t, t+256, ... in order and the threads added by a fixed tree -> loss_out, part[n] = W;
 *        ce_grad_kernel: dz = g*w_i/W * (exp(z - lse_i) - [j == t_i]). A target that is not a class index makes
 *        the sample's weight NaN (as the CPU).
 *   BCE  bce_kernel: element per thread, the gradient g/(n*k) * d loss/dz written, the losses summed per block
 *        (vx_red_blocks(n*k) blocks: a function of the count) -> vx_reduce_finalize divides by n*k.
 *   COX  cox_kernel, one block (the global batch is small): zmax (block max) and the number of events E; e_j =
 *        exp(z_j - zmax) and, per sample, S_i = sum over j in index order of e_j [t_j >= t_i] (Breslow: ties are at
 *        risk) in the scratch; the loss -(1/E) sum_events (z_i - zmax - log S_i) (fixed tree); per sample
 *        C_m = sum over i in index order of [event_i, t_i <= t_m] / S_i and dz_m = g/E (e_m C_m - event_m). O(n^2)
 *        in the batch, which is at most a few thousand. No event: loss 0 and dz 0. */
#include "common/cuda_check.h"
#include "head_loss/head_loss.h"
#include "head_loss/head_loss_math.h"

/* v over the block combined by a fixed tree (OP 0: sum, 1: max), the result in every thread. sh: VX_THREADS
 * doubles of shared memory, reusable after the call. */
template <int OP> __device__ double hl_block_all(double v, double *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = VX_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) {
            const double a = sh[threadIdx.x], b = sh[threadIdx.x + s];
            sh[threadIdx.x] = OP == 0 ? a + b : (a > b || a != a ? a : b);
        }
        __syncthreads();
    }
    const double r = sh[0];
    __syncthreads();
    return r;
}

static __device__ double hl_scale(float grad_scale, const float *loss_scale) {
    return (double)(grad_scale * (loss_scale ? loss_scale[0] : 1.0f));
}

/* ---- CE -------------------------------------------------------------------------------------------------------- */

template <typename T>
__global__ void ce_rows_kernel(int n, int k, const T *__restrict__ z, const float *__restrict__ target,
                               const float *__restrict__ weight, double *__restrict__ part) {
    __shared__ double sh[VX_THREADS];
    for (int i = blockIdx.x; i < n; i += gridDim.x) {
        const T *zr = z + (size_t)i * k;
        double m = -INFINITY;
        for (int j = threadIdx.x; j < k; j += VX_THREADS) {
            const double v = vx_f32(zr[j]);
            m = v > m || v != v ? v : m;
        }
        m = hl_block_all<1>(m, sh);
        double se = 0.0;
        for (int j = threadIdx.x; j < k; j += VX_THREADS) se += exp((double)vx_f32(zr[j]) - m);
        se = hl_block_all<0>(se, sh);
        if (threadIdx.x == 0) {
            const int t = head_class(target[i], k);
            const double lse = m + log(se), w = t < 0 ? NAN : weight ? (double)weight[t] : 1.0;
            part[3 * (size_t)i] = t < 0 ? NAN : w * (lse - (double)vx_f32(zr[t]));
            part[3 * (size_t)i + 1] = w;
            part[3 * (size_t)i + 2] = lse;
        }
    }
}

__global__ void ce_total_kernel(int n, double *__restrict__ part, float *__restrict__ loss_out) {
    __shared__ double sh[VX_THREADS];
    double l = 0.0, w = 0.0;
    for (int i = threadIdx.x; i < n; i += VX_THREADS) l += part[3 * (size_t)i], w += part[3 * (size_t)i + 1];
    l = hl_block_all<0>(l, sh);
    w = hl_block_all<0>(w, sh);
    if (threadIdx.x == 0) {
        loss_out[0] = (float)(l / w);
        part[3 * (size_t)n] = w;
    }
}

template <typename T>
__global__ void ce_grad_kernel(size_t items, int k, const T *__restrict__ z, const float *__restrict__ target,
                               const double *__restrict__ part, float grad_scale, const float *__restrict__ loss_scale,
                               int n, T *__restrict__ dz) {
    const double g = hl_scale(grad_scale, loss_scale), W = part[3 * (size_t)n];
    for (size_t e = vx_global_thread(); e < items; e += vx_grid_threads()) {
        const size_t i = e / (size_t)k;
        const int j = (int)(e % (size_t)k), t = head_class(target[i], k);
        const double a = g * part[3 * i + 1] / W;
        dz[e] = vx_to<T>((float)(a * (exp((double)vx_f32(z[e]) - part[3 * i + 2]) - (j == t))));
    }
}

/* ---- BCE ------------------------------------------------------------------------------------------------------- */

template <typename T, bool GRAD>
__global__ void bce_kernel(size_t items, int k, const T *__restrict__ z, const float *__restrict__ target,
                           const float *__restrict__ pos_weight, float grad_scale, const float *__restrict__ loss_scale,
                           T *__restrict__ dz, double *__restrict__ partials) {
    __shared__ double sh[VX_THREADS / 32];
    const double gc = hl_scale(grad_scale, loss_scale) / (double)items;
    double acc = 0.0;
    for (size_t e = vx_global_thread(); e < items; e += vx_grid_threads()) {
        const double zv = vx_f32(z[e]), t = target[e], pw = pos_weight ? (double)pos_weight[e % (size_t)k] : 1.0;
        acc += head_bce(zv, t, pw);
        if constexpr (GRAD) dz[e] = vx_to<T>((float)(gc * head_bce_grad(zv, t, pw)));
    }
    acc = vx_block_sum(acc, sh);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

/* ---- COX ------------------------------------------------------------------------------------------------------- */

/* scratch: e [n] then S [n] */
template <typename T>
__global__ void cox_kernel(int n, const T *__restrict__ z, const float *__restrict__ target, float grad_scale,
                           const float *__restrict__ loss_scale, float *__restrict__ loss_out, T *__restrict__ dz,
                           double *__restrict__ scratch) {
    __shared__ double sh[VX_THREADS];
    double *e = scratch, *S = scratch + n;
    double m = -INFINITY, ev = 0.0;
    for (int i = threadIdx.x; i < n; i += VX_THREADS) {
        const double v = vx_f32(z[i]);
        m = v > m || v != v ? v : m;
        ev += target[2 * i + 1] != 0.0f;
    }
    const double zmax = hl_block_all<1>(m, sh), E = hl_block_all<0>(ev, sh);
    if (E == 0.0) { /* every sample censored */
        if (threadIdx.x == 0) loss_out[0] = 0.0f;
        if (dz)
            for (int i = threadIdx.x; i < n; i += VX_THREADS) dz[i] = vx_to<T>(0.0f);
        return;
    }
    for (int i = threadIdx.x; i < n; i += VX_THREADS) e[i] = exp((double)vx_f32(z[i]) - zmax);
    __syncthreads();
    double l = 0.0;
    for (int i = threadIdx.x; i < n; i += VX_THREADS) {
        const float ti = target[2 * i];
        double s = 0.0;
        for (int j = 0; j < n; j++) s += target[2 * j] >= ti ? e[j] : 0.0;
        S[i] = s;
        if (target[2 * i + 1] != 0.0f) l += (double)vx_f32(z[i]) - zmax - log(s);
    }
    l = hl_block_all<0>(l, sh); /* its barriers also publish S to the whole block */
    if (threadIdx.x == 0) loss_out[0] = (float)(-l / E);
    if (!dz) return;
    const double g = hl_scale(grad_scale, loss_scale);
    for (int m2 = threadIdx.x; m2 < n; m2 += VX_THREADS) {
        const float tm = target[2 * m2];
        double C = 0.0;
        for (int i = 0; i < n; i++)
            if (target[2 * i + 1] != 0.0f && target[2 * i] <= tm) C += 1.0 / S[i];
        dz[m2] = vx_to<T>((float)(g / E * (e[m2] * C - (target[2 * m2 + 1] != 0.0f))));
    }
}

/* ---- the entry ------------------------------------------------------------------------------------------------- */

static void head_loss_cuda(const HeadLossShape *s, const void *z, const float *target, const float *weight,
                           float *loss_out, void *dz, float grad_scale, const float *loss_scale) {
    if (s->n < 0 || s->k < 1 || (s->kind == HEAD_LOSS_COX && s->k != 1) || s->kind < HEAD_LOSS_CE ||
        s->kind > HEAD_LOSS_COX)
        vx_fatal("head_loss: invalid shape kind=%d n=%d k=%d (Cox takes k = 1)", (int)s->kind, s->n, s->k);
    cudaStream_t st = vx_cuda_stream();
    if (s->n == 0) {
        CUDA_CHECK(cudaMemsetAsync(loss_out, 0, sizeof(float), st)); /* 0.0f, as the CPU */
        return;
    }
    double *scratch = (double *)vx_cuda_scratch();
    const size_t cap = VX_SCRATCH_BYTES / sizeof(double), items = (size_t)s->n * s->k;
    if (3 * (size_t)s->n + 1 > cap) vx_fatal("head_loss: %d samples do not fit the reduction scratch", s->n);
    VX_DTYPE_SWITCH(s->dtype, T, {
        const T *tz = (const T *)z;
        T *tdz = (T *)dz;
        if (s->kind == HEAD_LOSS_CE) {
            const unsigned rows = (unsigned)(s->n < (int)VX_EW_MAX_BLOCKS ? s->n : (int)VX_EW_MAX_BLOCKS);
            ce_rows_kernel<T><<<rows, VX_THREADS, 0, st>>>(s->n, s->k, tz, target, weight, scratch);
            LAUNCH_CHECK("ce_rows_kernel");
            ce_total_kernel<<<1, VX_THREADS, 0, st>>>(s->n, scratch, loss_out);
            LAUNCH_CHECK("ce_total_kernel");
            if (dz) {
                ce_grad_kernel<T><<<vx_ew_blocks(items), VX_THREADS, 0, st>>>(items, s->k, tz, target, scratch,
                                                                               grad_scale, loss_scale, s->n, tdz);
                LAUNCH_CHECK("ce_grad_kernel");
            }
        } else if (s->kind == HEAD_LOSS_BCE) {
            const int blocks = vx_red_blocks(items);
            if (dz)
                bce_kernel<T, true><<<blocks, VX_THREADS, 0, st>>>(items, s->k, tz, target, weight, grad_scale,
                                                                   loss_scale, tdz, scratch);
            else
                bce_kernel<T, false><<<blocks, VX_THREADS, 0, st>>>(items, s->k, tz, target, weight, grad_scale,
                                                                    loss_scale, tdz, scratch);
            LAUNCH_CHECK("bce_kernel");
            vx_reduce_finalize(scratch, blocks, (double)items, loss_out);
        } else {
            cox_kernel<T><<<1, VX_THREADS, 0, st>>>(s->n, tz, target, grad_scale, loss_scale, loss_out, tdz, scratch);
            LAUNCH_CHECK("cox_kernel");
        }
    });
}

/* ---- the CUDA backend's table (ops.def) ---------------------------------------------------------------------- */

extern "C" const HeadLossOps head_loss_ops_cuda = {{op_supports_all_types}, head_loss_cuda};
