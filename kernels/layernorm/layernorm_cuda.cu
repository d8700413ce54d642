/* layernorm_cuda.cu: LayerNorm (layernorm.h) on the GPU, the math of layernorm_cpu.c (sums in double, the same
 * float expressions for y and dx):
 *   forward, backward's dx   one warp per row (8 rows per block): lane l takes columns l, l + 32, ...; the row's sums
 *                            per lane in double, then a butterfly over the warp (__shfl_xor_sync: every lane ends with
 *                            the same bits, since each step adds the same two values on both sides)
 *   dgamma, dbeta            a fixed partition: block blk sums rows [blk*SB, (blk+1)*SB) per column (thread t: columns
 *                            t, t + 256, ..., rows in order) into the scratch part[blk][2][c]; then one thread per
 *                            column adds the blocks' partials in order (batchnorm_cuda.cu's scheme). No atomics.
 *   x, y, dy, dx of storage type T, computed in float; gamma, beta, mean, rstd and the gradients float32. */
#include "common/cuda_check.h"
#include "layernorm/layernorm.h"

#define LN_ROWS_PER_BLOCK (VX_THREADS / 32)
#define LN_TARGET_BLOCKS 1024 /* partial-pass blocks, at most */
#define LN_MIN_ROWS 32        /* rows per partial-pass block, at least */

__device__ __forceinline__ double ln_warp_sum(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <typename T>
__global__ void ln_forward_kernel(long rows, int c, float eps, const T *__restrict__ x, const float *__restrict__ gamma,
                                  const float *__restrict__ beta, T *__restrict__ y, float *__restrict__ mean,
                                  float *__restrict__ rstd) {
    const int lane = threadIdx.x & 31;
    const long r = (long)blockIdx.x * LN_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (r >= rows) return; /* a whole warp leaves together: no shuffle partner is missing */
    const T *xr = x + (size_t)r * c;
    T *yr = y + (size_t)r * c;
    double sum = 0.0;
    for (int j = lane; j < c; j += 32) sum += (double)vx_f32(xr[j]);
    const double m = ln_warp_sum(sum) / c;
    double sq = 0.0;
    for (int j = lane; j < c; j += 32) {
        const double d = (double)vx_f32(xr[j]) - m;
        sq += d * d;
    }
    sq = ln_warp_sum(sq);
    const float mf = (float)m, rs = (float)(1.0 / sqrt(sq / c + (double)eps));
    if (lane == 0) mean[r] = mf, rstd[r] = rs;
    for (int j = lane; j < c; j += 32) {
        float v = (vx_f32(xr[j]) - mf) * rs;
        if (gamma) v = v * gamma[j] + beta[j];
        yr[j] = vx_to<T>(v);
    }
}

template <typename T, bool ACC>
__global__ void ln_backward_kernel(long rows, int c, const T *__restrict__ dy, const T *__restrict__ x,
                                   const float *__restrict__ gamma, const float *__restrict__ mean,
                                   const float *__restrict__ rstd, T *__restrict__ dx, float beta_dx) {
    const int lane = threadIdx.x & 31;
    const long r = (long)blockIdx.x * LN_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (r >= rows) return;
    const size_t o = (size_t)r * c;
    const float mf = mean[r], rs = rstd[r];
    double a = 0.0, b = 0.0;
    for (int j = lane; j < c; j += 32) {
        const float xh = (vx_f32(x[o + j]) - mf) * rs, g = gamma ? vx_f32(dy[o + j]) * gamma[j] : vx_f32(dy[o + j]);
        a += g;
        b += (double)g * xh;
    }
    const float am = (float)(ln_warp_sum(a) / c), bm = (float)(ln_warp_sum(b) / c);
    for (int j = lane; j < c; j += 32) {
        const float xh = (vx_f32(x[o + j]) - mf) * rs, g = gamma ? vx_f32(dy[o + j]) * gamma[j] : vx_f32(dy[o + j]);
        const float v = rs * (g - am - xh * bm);
        dx[o + j] = vx_to<T>(ACC ? beta_dx * vx_f32(dx[o + j]) + v : v);
    }
}

/* part[blk][0][j] = sum over the block's rows of dy*xhat, part[blk][1][j] = sum of dy */
template <typename T>
__global__ void ln_param_partial_kernel(long rows, int c, size_t SB, const T *__restrict__ dy, const T *__restrict__ x,
                                        const float *__restrict__ mean, const float *__restrict__ rstd,
                                        double *__restrict__ part) {
    const size_t blk = blockIdx.x, r0 = blk * SB, r1 = r0 + SB < (size_t)rows ? r0 + SB : (size_t)rows;
    for (int j = threadIdx.x; j < c; j += VX_THREADS) {
        double g = 0.0, b = 0.0;
        for (size_t r = r0; r < r1; r++) {
            const float d = vx_f32(dy[r * c + j]), xh = (vx_f32(x[r * c + j]) - mean[r]) * rstd[r];
            g += (double)d * xh;
            b += d;
        }
        part[blk * 2 * c + j] = g;
        part[blk * 2 * c + c + j] = b;
    }
}

template <bool ACC>
__global__ void ln_param_final_kernel(int c, int nblk, const double *__restrict__ part, float *__restrict__ dgamma,
                                      float *__restrict__ dbeta, float beta_param) {
    const size_t j = vx_global_thread();
    if (j >= (size_t)c) return;
    double g = 0.0, b = 0.0;
    for (int blk = 0; blk < nblk; blk++) g += part[(size_t)blk * 2 * c + j], b += part[(size_t)blk * 2 * c + c + j];
    dgamma[j] = ACC ? beta_param * dgamma[j] + (float)g : (float)g;
    dbeta[j] = ACC ? beta_param * dbeta[j] + (float)b : (float)b;
}

static void check(const LayerNormShape *s) {
    if (s->rows < 0 || s->c < 1 || !(s->eps >= 0.0f))
        vx_fatal("layernorm: invalid shape rows=%ld c=%d eps=%g", s->rows, s->c, (double)s->eps);
}
static unsigned row_blocks(long rows) { return (unsigned)((rows + LN_ROWS_PER_BLOCK - 1) / LN_ROWS_PER_BLOCK); }

static void ln_forward_cuda(const LayerNormShape *s, const void *x, const float *gamma, const float *beta, void *y,
                            float *mean, float *rstd) {
    check(s);
    if (s->rows == 0) return;
    const int aff = s->affine && gamma && beta;
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(s->dtype, T, {
        ln_forward_kernel<T><<<row_blocks(s->rows), VX_THREADS, 0, st>>>(s->rows, s->c, s->eps, (const T *)x,
                                                                         aff ? gamma : NULL, aff ? beta : NULL, (T *)y,
                                                                         mean, rstd);
    });
    LAUNCH_CHECK("ln_forward_kernel");
}

static void ln_backward_cuda(const LayerNormShape *s, const void *dy, const void *x, const float *gamma,
                             const float *mean, const float *rstd, void *dx, float *dgamma, float *dbeta, float beta_dx,
                             float beta_param) {
    check(s);
    const int aff = s->affine && gamma;
    cudaStream_t st = vx_cuda_stream();
    if (s->rows > 0) {
        VX_DTYPE_SWITCH(s->dtype, T, {
            const T *tdy = (const T *)dy, *tx = (const T *)x;
            const float *g = aff ? gamma : NULL;
            if (beta_dx != 0.0f)
                ln_backward_kernel<T, true><<<row_blocks(s->rows), VX_THREADS, 0, st>>>(s->rows, s->c, tdy, tx, g, mean, rstd, (T *)dx, beta_dx);
            else
                ln_backward_kernel<T, false><<<row_blocks(s->rows), VX_THREADS, 0, st>>>(s->rows, s->c, tdy, tx, g, mean, rstd, (T *)dx, beta_dx);
        });
        LAUNCH_CHECK("ln_backward_kernel");
    }
    if (!(aff && dgamma && dbeta)) return;
    /* the parameters' gradients: a fixed partition of the rows over at most LN_TARGET_BLOCKS blocks */
    const size_t cap = VX_SCRATCH_BYTES / sizeof(double), per = 2 * (size_t)s->c;
    if (per > cap) vx_fatal("layernorm: %d channels do not fit the reduction scratch", s->c);
    size_t nb = ((size_t)s->rows + LN_MIN_ROWS - 1) / LN_MIN_ROWS;
    if (nb > LN_TARGET_BLOCKS) nb = LN_TARGET_BLOCKS;
    if (nb > cap / per) nb = cap / per;
    if (nb < 1) nb = 1;
    const size_t SB = ((size_t)s->rows + nb - 1) / nb;
    const int nblk = s->rows > 0 ? (int)(((size_t)s->rows + SB - 1) / SB) : 0;
    double *part = (double *)vx_cuda_scratch();
    if (nblk > 0) {
        VX_DTYPE_SWITCH(s->dtype, T, {
            ln_param_partial_kernel<T><<<nblk, VX_THREADS, 0, st>>>(s->rows, s->c, SB, (const T *)dy, (const T *)x,
                                                                    mean, rstd, part);
        });
        LAUNCH_CHECK("ln_param_partial_kernel");
    }
    const unsigned fb = (unsigned)((s->c + VX_THREADS - 1) / VX_THREADS);
    if (beta_param != 0.0f)
        ln_param_final_kernel<true><<<fb, VX_THREADS, 0, st>>>(s->c, nblk, part, dgamma, dbeta, beta_param);
    else ln_param_final_kernel<false><<<fb, VX_THREADS, 0, st>>>(s->c, nblk, part, dgamma, dbeta, beta_param);
    LAUNCH_CHECK("ln_param_final_kernel");
}

/* ---- the CUDA backend's table (ops.def) ---------------------------------------------------------------------- */

extern "C" const LayerNormOps layernorm_ops_cuda = {{op_supports_all_types}, ln_forward_cuda, ln_backward_cuda};
