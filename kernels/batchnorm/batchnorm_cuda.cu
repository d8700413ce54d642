/* batchnorm_cuda.cu: BatchNorm (batchnorm.h) on the GPU in SyncBatchNorm's pieces, with the math of batchnorm_cpu.c:
 * sums in double, per-channel float coefficients, the same float expressions for y and dx.
 *   x, y, dy, dx [rows][c]   rows = n*spatial; storage type T (dtype_cuda.cuh), computed in float
 *   everything per channel   float32 (gamma, beta, mean, invstd, the sums, the running statistics)
 * Every sum is deterministic (no atomics; a fixed partition that depends on the shape only):
 *   partial pass: block blk sums rows [blk*SB, (blk+1)*SB) per channel into the scratch part[blk][1 or 2][c];
 *                 thread (tx, ty) = (threadIdx % CW, threadIdx / CW) owns vector lane tx (+ CW, ...) of rows ty,
 *                 ty + RY, ...; a block's threads are added in ty order (groupnorm_cuda.cu's layout)
 *   final pass:   one thread per channel adds the partials over the blocks in order -> float
 * Vectors of V = 4 channels when c and ldx are multiples of 4 and the big tensors are 16-byte aligned (the partition
 * does not depend on V). x and dx rows are xl vectors apart (shape.ldx / V: a channel prefix, batchnorm.h).
 * finalize is one thread per channel; forward and backward are elementwise over [rows][c]. */
#include "batchnorm/batchnorm.h"
#include "common/cuda_check.h"

#define BN_TARGET_BLOCKS 1024 /* partial-pass blocks, at most */
#define BN_MIN_ROWS 32        /* rows per partial-pass block, at least */

enum { BN_SUM = 0, BN_SQ = 1, BN_GRAD = 2, BN_GRAD_RELU = 3 }; /* what the partial pass sums */

/* batchnorm.h's batchnorm_pre on the device: each step rounded on its own (__fmul_rn, __fadd_rn are never contracted
 * into an FMA), so the forward's y and the backward's mask come from the same bits, and those of the CPU's float
 * expression */
__device__ __forceinline__ float bn_pre(float x, float mean, float scale, float beta) {
    return __fadd_rn(__fmul_rn(x - mean, scale), beta);
}

typedef struct {
    int V, lanes, CW, RY;
    int nblk;
    size_t SB;
} BnGeom;

static void check(const BatchNormShape *s) {
    if (s->n < 0 || s->spatial < 1 || s->c < 1 || batchnorm_ldx(s) < s->c)
        vx_fatal("batchnorm: invalid shape n=%d spatial=%ld c=%d ldx=%ld", s->n, s->spatial, s->c, s->ldx);
}

static BnGeom bn_geometry(const BatchNormShape *s, int vec, int sums) {
    BnGeom g;
    g.V = vec ? 4 : 1;
    g.lanes = s->c / g.V;
    g.CW = g.lanes < VX_THREADS ? g.lanes : VX_THREADS;
    g.RY = VX_THREADS / g.CW;
    const size_t rows = (size_t)s->n * s->spatial, cap = VX_SCRATCH_BYTES / sizeof(double);
    const size_t per = (size_t)sums * s->c; /* doubles per block */
    if (per > cap) vx_fatal("batchnorm: %d channels do not fit the reduction scratch", s->c);
    size_t nb = (rows + BN_MIN_ROWS - 1) / BN_MIN_ROWS;
    if (nb > BN_TARGET_BLOCKS) nb = BN_TARGET_BLOCKS;
    if (nb > cap / per) nb = cap / per;
    if (nb < 1) nb = 1;
    g.SB = (rows + nb - 1) / nb;
    g.nblk = (int)((rows + g.SB - 1) / g.SB);
    return g;
}

/* BN_SUM: part[blk][0][j] = sum x; BN_SQ: sum (x - m)^2 with m = center[j]/count in double; BN_GRAD: part[blk][0][j]
 * = sum dy, part[blk][1][j] = sum dy*xhat, xhat = (x - mean)*invstd in float as the CPU; BN_GRAD_RELU: the same with
 * dy taken where the fused ReLU's pre-activation bn_pre(x) > 0, else 0 (relu_cuda.cu's backward, from x) */
template <typename T, int V, int MODE>
__global__ void bn_partial_kernel(size_t rows, int c, int lanes, size_t xl, int CW, int RY, size_t SB,
                                  const T *__restrict__ x,
                                  const T *__restrict__ dy, const float *__restrict__ gamma,
                                  const float *__restrict__ beta, const float *__restrict__ center, double count,
                                  const float *__restrict__ mean, const float *__restrict__ invstd,
                                  double *__restrict__ part) {
    __shared__ double sh[2][VX_THREADS * 4];
    constexpr int NS = MODE >= BN_GRAD ? 2 : 1;
    const int tx = threadIdx.x % CW, ty = threadIdx.x / CW;
    const size_t blk = blockIdx.x, p0 = blk * SB, p1 = p0 + SB < rows ? p0 + SB : rows;
    for (int l0 = 0; l0 < lanes; l0 += CW) {
        const int lane = l0 + tx;
        double s1[V], s2[V];
#pragma unroll
        for (int k = 0; k < V; k++) s1[k] = s2[k] = 0.0;
        if (ty < RY && lane < lanes) {
            double m[V];
            float mf[V], is[V], sc[V], bt[V];
#pragma unroll
            for (int k = 0; k < V; k++) {
                const int j = lane * V + k;
                m[k] = MODE == BN_SQ ? (double)center[j] / count : 0.0;
                mf[k] = MODE >= BN_GRAD ? mean[j] : 0.0f;
                is[k] = MODE >= BN_GRAD ? invstd[j] : 0.0f;
                sc[k] = MODE == BN_GRAD_RELU ? invstd[j] * gamma[j] : 0.0f; /* the forward's scale */
                bt[k] = MODE == BN_GRAD_RELU ? beta[j] : 0.0f;
            }
            for (size_t p = p0 + ty; p < p1; p += RY) {
                const size_t vi = p * lanes + lane;
                float xv[V];
                vx_load<V>(x, p * xl + lane, xv);
                if constexpr (MODE >= BN_GRAD) {
                    float dv[V];
                    vx_load<V>(dy, vi, dv);
#pragma unroll
                    for (int k = 0; k < V; k++) {
                        const bool on = MODE != BN_GRAD_RELU || bn_pre(xv[k], mf[k], sc[k], bt[k]) > 0.0f;
                        const double g = on ? dv[k] : 0.0f;
                        s1[k] += g;
                        s2[k] += g * (double)((xv[k] - mf[k]) * is[k]);
                    }
                } else if constexpr (MODE == BN_SQ) {
#pragma unroll
                    for (int k = 0; k < V; k++) {
                        const double d = (double)xv[k] - m[k];
                        s1[k] += d * d;
                    }
                } else {
#pragma unroll
                    for (int k = 0; k < V; k++) s1[k] += (double)xv[k];
                }
            }
        }
#pragma unroll
        for (int k = 0; k < V; k++) {
            sh[0][threadIdx.x * V + k] = s1[k];
            sh[1][threadIdx.x * V + k] = s2[k];
        }
        __syncthreads();
        if (ty == 0 && lane < lanes) {
#pragma unroll
            for (int k = 0; k < V; k++) {
                double a = 0.0, q = 0.0;
                for (int r = 0; r < RY; r++) {
                    a += sh[0][(r * CW + tx) * V + k];
                    q += sh[1][(r * CW + tx) * V + k];
                }
                const size_t o = blk * NS * (size_t)c + (size_t)lane * V + k;
                part[o] = a;
                if (NS == 2) part[o + c] = q;
            }
        }
        __syncthreads();
    }
}

/* out0[j] (out1[j]) = the blocks' partials added in order */
__global__ void bn_final_kernel(int c, int nblk, int ns, const double *__restrict__ part, float *__restrict__ out0,
                                float *__restrict__ out1) {
    const size_t j = vx_global_thread();
    if (j >= (size_t)c) return;
    double a = 0.0, q = 0.0;
    for (int blk = 0; blk < nblk; blk++) {
        a += part[(size_t)blk * ns * c + j];
        if (ns == 2) q += part[(size_t)blk * ns * c + c + j];
    }
    out0[j] = (float)a;
    if (ns == 2) out1[j] = (float)q;
}

static void reduce(const BatchNormShape *s, int mode, const void *x, const void *dy, const float *gamma,
                   const float *beta, const float *center, double count, const float *mean, const float *invstd,
                   float *out0, float *out1) {
    const int ns = mode >= BN_GRAD ? 2 : 1;
    const size_t rows = (size_t)s->n * s->spatial;
    cudaStream_t st = vx_cuda_stream();
    if (rows == 0) { /* no values: every sum is 0 */
        CUDA_CHECK(cudaMemsetAsync(out0, 0, sizeof(float) * (size_t)s->c, st));
        if (out1) CUDA_CHECK(cudaMemsetAsync(out1, 0, sizeof(float) * (size_t)s->c, st));
        return;
    }
    const int vec = s->c % 4 == 0 && batchnorm_ldx(s) % 4 == 0 && vx_aligned16(x) && (!dy || vx_aligned16(dy));
    const BnGeom g = bn_geometry(s, vec, ns);
    double *part = (double *)vx_cuda_scratch();
    const size_t xl = (size_t)batchnorm_ldx(s) / g.V;
#define BN_PARTIAL_ARGS rows, s->c, g.lanes, xl, g.CW, g.RY, g.SB, tx, tdy, gamma, beta, center, count, mean, invstd, \
                        part
#define BN_PARTIAL(MODE)                                                                                         \
    do {                                                                                                         \
        if (g.V == 4) bn_partial_kernel<T, 4, MODE><<<g.nblk, VX_THREADS, 0, st>>>(BN_PARTIAL_ARGS);              \
        else bn_partial_kernel<T, 1, MODE><<<g.nblk, VX_THREADS, 0, st>>>(BN_PARTIAL_ARGS);                       \
    } while (0)
    VX_DTYPE_SWITCH(s->dtype, T, {
        const T *tx = (const T *)x, *tdy = (const T *)dy;
        if (mode == BN_SUM) BN_PARTIAL(BN_SUM);
        else if (mode == BN_SQ) BN_PARTIAL(BN_SQ);
        else if (mode == BN_GRAD) BN_PARTIAL(BN_GRAD);
        else BN_PARTIAL(BN_GRAD_RELU);
    });
#undef BN_PARTIAL
#undef BN_PARTIAL_ARGS
    LAUNCH_CHECK("bn_partial_kernel");
    bn_final_kernel<<<(unsigned)((s->c + VX_THREADS - 1) / VX_THREADS), VX_THREADS, 0, st>>>(s->c, g.nblk, ns, part,
                                                                                             out0, out1);
    LAUNCH_CHECK("bn_final_kernel");
}

static void bn_stats_cuda(const BatchNormShape *s, const void *x, const float *center, double count, float *out) {
    check(s);
    reduce(s, center ? BN_SQ : BN_SUM, x, NULL, NULL, NULL, center, count, NULL, NULL, out, NULL);
}

/* batchnorm_cpu.c's finalize, one thread per channel */
__global__ void bn_finalize_kernel(int c, double count, float eps, float momentum, int train, const float *sum,
                                   const float *sq, float *mean, float *invstd, float *running_mean,
                                   float *running_var) {
    const size_t j = vx_global_thread();
    if (j >= (size_t)c) return;
    if (!train) {
        mean[j] = running_mean[j];
        invstd[j] = (float)(1.0 / sqrt((double)running_var[j] + (double)eps));
        return;
    }
    const double m = (double)sum[j] / count, var = (double)sq[j] / count;
    const double unbiased = count > 1.0 ? (double)sq[j] / (count - 1.0) : var;
    mean[j] = (float)m;
    invstd[j] = (float)(1.0 / sqrt(var + (double)eps));
    running_mean[j] = (float)((double)running_mean[j] + (double)momentum * (m - (double)running_mean[j]));
    running_var[j] = (float)((double)running_var[j] + (double)momentum * (unbiased - (double)running_var[j]));
}

static void bn_finalize_cuda(int c, double count, float eps, float momentum, int train, const float *sum,
                             const float *sq, float *mean, float *invstd, float *running_mean, float *running_var) {
    if (c < 1) return;
    bn_finalize_kernel<<<(unsigned)((c + VX_THREADS - 1) / VX_THREADS), VX_THREADS, 0, vx_cuda_stream()>>>(
        c, count, eps, momentum, train, sum, sq, mean, invstd, running_mean, running_var);
    LAUNCH_CHECK("bn_finalize_kernel");
}

/* y = (x - mean) * (invstd*gamma) + beta (bn_pre) over nvec vectors of V channels (V divides c); RELU: then
 * y < 0 ? 0 : y in float, before the store (relu_cuda.cu clamps the stored value: the same but for a zero's sign in
 * half precision) */
template <typename T, int V, bool RELU>
__global__ void bn_forward_kernel(size_t nvec, int lanes, size_t xl, const T *__restrict__ x,
                                  const float *__restrict__ mean,
                                  const float *__restrict__ invstd, const float *__restrict__ gamma,
                                  const float *__restrict__ beta, T *__restrict__ y) {
    for (size_t i = vx_global_thread(); i < nvec; i += vx_grid_threads()) {
        const size_t lane = i % (size_t)lanes;
        const int j0 = (int)lane * V;
        float v[V];
        vx_load<V>(x, i / (size_t)lanes * xl + lane, v);
#pragma unroll
        for (int k = 0; k < V; k++) {
            v[k] = bn_pre(v[k], mean[j0 + k], invstd[j0 + k] * gamma[j0 + k], beta[j0 + k]);
            if constexpr (RELU) v[k] = v[k] < 0.0f ? 0.0f : v[k];
        }
        vx_store<V>(y, i, v);
    }
}

static void bn_forward_cuda(const BatchNormShape *s, const void *x, const float *mean, const float *invstd,
                            const float *gamma, const float *beta, void *y) {
    check(s);
    const size_t count = (size_t)s->n * s->spatial * s->c;
    if (!count) return;
    const bool vec = s->c % 4 == 0 && batchnorm_ldx(s) % 4 == 0 && vx_aligned16(x) && vx_aligned16(y);
    const size_t nvec = vec ? count / 4 : count;
    const int lanes = vec ? s->c / 4 : s->c;
    const size_t xl = (size_t)batchnorm_ldx(s) / (vec ? 4 : 1);
    cudaStream_t st = vx_cuda_stream();
#define BN_FWD(V, RELU)                                                                                          \
    do {                                                                                                         \
        bn_forward_kernel<T, V, RELU><<<vx_ew_blocks(nvec), VX_THREADS, 0, st>>>(nvec, lanes, xl, tx, mean,      \
                                                                                 invstd, gamma, beta, ty);       \
    } while (0)
    VX_DTYPE_SWITCH(s->dtype, T, {
        const T *tx = (const T *)x;
        T *ty = (T *)y;
        if (vec && s->relu) BN_FWD(4, true);
        else if (vec) BN_FWD(4, false);
        else if (s->relu) BN_FWD(1, true);
        else BN_FWD(1, false);
    });
#undef BN_FWD
    LAUNCH_CHECK("bn_forward_kernel");
}

static void bn_backward_reduce_cuda(const BatchNormShape *s, const void *dy, const void *x, const float *mean,
                                    const float *invstd, const float *gamma, const float *beta, float *sum_dy,
                                    float *sum_dy_xhat) {
    check(s);
    batchnorm_need_affine(s, gamma, beta);
    reduce(s, s->relu ? BN_GRAD_RELU : BN_GRAD, x, dy, gamma, beta, NULL, 1.0, mean, invstd, sum_dy, sum_dy_xhat);
}

/* dx = [beta*dx +] (invstd*gamma) * (dy - sum_dy/count - xhat * sum_dy_xhat/count), the mean terms formed in
 * double and rounded to float as the CPU forms them; RELU: dy where bn_pre(x) > 0, else 0 */
template <typename T, int V, bool ACC, bool RELU>
__global__ void bn_backward_kernel(size_t nvec, int lanes, size_t xl, double count, const T *__restrict__ dy,
                                   const float *__restrict__ beta, const T *__restrict__ x,
                                   const float *__restrict__ mean,
                                   const float *__restrict__ invstd, const float *__restrict__ gamma,
                                   const float *__restrict__ sum_dy, const float *__restrict__ sum_dy_xhat,
                                   T *__restrict__ dx, float beta_dx) {
    for (size_t i = vx_global_thread(); i < nvec; i += vx_grid_threads()) {
        const size_t lane = i % (size_t)lanes, xi = i / (size_t)lanes * xl + lane; /* x's and dx's vector */
        const int j0 = (int)lane * V;
        float xv[V], gv[V], o[V];
        vx_load<V>(x, xi, xv);
        vx_load<V>(dy, i, gv);
        if constexpr (ACC) vx_load<V>(dx, xi, o);
#pragma unroll
        for (int k = 0; k < V; k++) {
            const int j = j0 + k;
            const float kk = invstd[j] * gamma[j]; /* also the forward's scale, for the fused ReLU's mask */
            if constexpr (RELU) gv[k] = bn_pre(xv[k], mean[j], kk, beta[j]) > 0.0f ? gv[k] : 0.0f;
            const float mdy = (float)((double)sum_dy[j] / count), mdyx = (float)((double)sum_dy_xhat[j] / count);
            const float xhat = (xv[k] - mean[j]) * invstd[j];
            const float v = kk * (gv[k] - mdy - xhat * mdyx);
            if constexpr (ACC) o[k] = beta_dx * o[k] + v;
            else o[k] = v;
        }
        vx_store<V>(dx, xi, o);
    }
}

static void bn_backward_cuda(const BatchNormShape *s, const void *dy, const void *x, const float *mean,
                             const float *invstd, const float *gamma, const float *beta, const float *sum_dy,
                             const float *sum_dy_xhat, double count, void *dx, float beta_dx) {
    check(s);
    const size_t n = (size_t)s->n * s->spatial * s->c;
    if (!n) return;
    batchnorm_need_affine(s, gamma, beta);
    const bool vec = s->c % 4 == 0 && batchnorm_ldx(s) % 4 == 0 && vx_aligned16(x) && vx_aligned16(dy) &&
                     vx_aligned16(dx);
    const size_t nvec = vec ? n / 4 : n;
    const int lanes = vec ? s->c / 4 : s->c;
    const size_t xl = (size_t)batchnorm_ldx(s) / (vec ? 4 : 1);
    const unsigned blocks = vx_ew_blocks(nvec);
    cudaStream_t st = vx_cuda_stream();
#define BN_BWD_ARGS nvec, lanes, xl, count, tdy, beta, tx, mean, invstd, gamma, sum_dy, sum_dy_xhat, tdx, beta_dx
#define BN_BWD(V, ACC)                                                                                           \
    do {                                                                                                         \
        if (s->relu) bn_backward_kernel<T, V, ACC, true><<<blocks, VX_THREADS, 0, st>>>(BN_BWD_ARGS);            \
        else bn_backward_kernel<T, V, ACC, false><<<blocks, VX_THREADS, 0, st>>>(BN_BWD_ARGS);                   \
    } while (0)
    VX_DTYPE_SWITCH(s->dtype, T, {
        const T *tdy = (const T *)dy, *tx = (const T *)x;
        T *tdx = (T *)dx;
        if (vec) {
            if (beta_dx != 0.0f) BN_BWD(4, true);
            else BN_BWD(4, false);
        } else {
            if (beta_dx != 0.0f) BN_BWD(1, true);
            else BN_BWD(1, false);
        }
    });
#undef BN_BWD
#undef BN_BWD_ARGS
    LAUNCH_CHECK("bn_backward_kernel");
}

/* ---- the CUDA backend's table (ops.def): every storage type; finalize has no activation (float32 only) ------- */

static int cuda_supports(int fn, DType dt) { return fn == BN_FINALIZE ? dt == DT_F32 : op_supports_all_types(fn, dt); }
extern "C" const BatchNormOps batchnorm_ops_cuda = {{cuda_supports}, bn_stats_cuda, bn_finalize_cuda, bn_forward_cuda,
                                                    bn_backward_reduce_cuda, bn_backward_cuda};
