/* groupnorm_cuda.cu: GroupNorm (groupnorm.h) on the GPU over NDHWC activations, forward and backward, with the
 * math of groupnorm_cpu.c: statistics and gradient sums in double, biased variance E[x^2] - mean^2 clamped at 0,
 * the same float expressions for y and dx.
 *   x, y, dy, dx [n][S][c]    S = spatial; channel j belongs to group j / cg, cg = c / groups; storage type T =
 *                             shape.dtype (dtype_cuda.cuh), every value computed in float and every sum in double
 *   gamma, beta, dgamma, dbeta [c];  mean, rstd [n][groups]
 *
 * Every reduction is deterministic (no atomics; a fixed partition that depends on the shape only):
 *   partial pass: grid (nblk, n): block (blk, b) sums rows [blk*SB, (blk+1)*SB) of sample b per channel, into
 *                 the scratch part[n][nblk][2][c] (forward: x and x^2; backward: dy and dy*xhat)
 *   forward:      one block per (b, g) adds its channels' partials over the blocks -> mean, rstd; then an
 *                 elementwise pass writes y
 *   backward:     one thread per (b, channel) adds the partials over the blocks in order -> tot[n][2][c]; then
 *                 one thread per channel adds tot over the samples in order -> dgamma, dbeta (beta_dparam), and
 *                 one per (b, g) forms the coefficients a1 = rstd*mean(dy*gamma), a2 = rstd^2*mean(dy*gamma*xhat)
 *                 -> coef[n][G][2]; an elementwise pass writes dx = rstd*gamma*dy - a1 - a2*(x - mean) (beta_dx)
 * Thread layout of the row passes: the c channels of a position are `lanes` vectors of V floats (V = 4 when
 * c % 4 == 0 and the big tensors are 16-byte aligned); thread (tx, ty) = (threadIdx % CW, threadIdx / CW) owns
 * lane tx (+ CW, + 2CW, ... when lanes > 256) and rows ty, ty + RY, ...: a warp reads consecutive memory.
 * Element indices are size_t throughout (n*S*c passes 2^31 at 128^3 x 64 channels x batch 16).
 * Fused SiLU (shape.silu, the SILU template flag): the normalize pass writes silu(y); the backward's partial and dx
 * passes turn the incoming gradient into the normalised value's, dz * silu'(pre), recomputing
 * pre = (x - mean)*(rstd*gamma) + beta in registers, so no pre-activation tensor is read or written. */
#include "common/cuda_check.h"
#include "groupnorm/groupnorm.h"
#include "silu/silu_device.cuh"

#define GN_TARGET_BLOCKS 1024 /* partial-pass blocks over all samples (several per SM on an A100/H100) */
#define GN_MIN_ROWS 32        /* spatial positions per partial-pass block, at least */
#define GN_ROWS_PER_THREAD 8  /* elementwise passes: each thread handles this many rows of its block */
#define GN_MAX_ROW_BLOCKS (1u << 20) /* elementwise passes: grid-stride beyond this many row blocks */

typedef struct {
    int V, lanes, CW, RY; /* vector width, vectors per position, threads across lanes, rows per block step */
    int nblk;             /* partial-pass blocks per sample */
    size_t SB;            /* rows per partial-pass block */
    size_t part_doubles, tot_doubles;
} GnGeom;

static void check_shape(const GroupNormShape *s) {
    if (s->groups < 1 || s->c < 1 || s->c % s->groups != 0)
        vx_fatal("groupnorm: %d channels do not split into %d groups", s->c, s->groups);
}

/* The partition: a function of the shape only (vec only changes the thread layout, not the block rows). */
static GnGeom gn_geometry(const GroupNormShape *s, int vec) {
    GnGeom g;
    const size_t n = (size_t)s->n, S = (size_t)s->spatial, c = (size_t)s->c;
    g.V = vec ? 4 : 1;
    g.lanes = s->c / g.V;
    g.CW = g.lanes < VX_THREADS ? g.lanes : VX_THREADS;
    g.RY = VX_THREADS / g.CW;
    /* scratch: part [n][nblk][2][c] doubles, then tot [n][2][c] doubles, then coef [n][G][2] floats */
    const size_t cap = VX_SCRATCH_BYTES / sizeof(double);
    g.tot_doubles = n * 2 * c;
    const size_t coef_doubles = (n * (size_t)s->groups * 2 + 1) / 2;
    size_t nb = (S + GN_MIN_ROWS - 1) / GN_MIN_ROWS;
    const size_t target = GN_TARGET_BLOCKS / n > 0 ? GN_TARGET_BLOCKS / n : 1;
    if (nb > target) nb = target;
    if (nb < 1) nb = 1;
    if (g.tot_doubles + coef_doubles >= cap || (cap - g.tot_doubles - coef_doubles) / (n * 2 * c) < 1)
        vx_fatal("groupnorm: %d samples x %d channels do not fit the %lu-byte reduction scratch", s->n, s->c,
                 (unsigned long)VX_SCRATCH_BYTES);
    const size_t fit = (cap - g.tot_doubles - coef_doubles) / (n * 2 * c);
    if (nb > fit) nb = fit;
    g.SB = (S + nb - 1) / nb;
    g.nblk = (int)((S + g.SB - 1) / g.SB); /* no empty block */
    g.part_doubles = n * (size_t)g.nblk * 2 * c;
    return g;
}

static dim3 partial_grid(const GnGeom *g, int n) {
    return dim3((unsigned)g->nblk, (unsigned)(n < (int)VX_GRID_Y_MAX ? n : (int)VX_GRID_Y_MAX), 1);
}

static dim3 rows_grid(const GnGeom *g, const GroupNormShape *s, size_t *rows_per_block, size_t *row_blocks) {
    *rows_per_block = (size_t)g->RY * GN_ROWS_PER_THREAD;
    *row_blocks = ((size_t)s->spatial + *rows_per_block - 1) / *rows_per_block;
    const size_t gx = *row_blocks < GN_MAX_ROW_BLOCKS ? *row_blocks : GN_MAX_ROW_BLOCKS;
    return dim3((unsigned)gx, (unsigned)(s->n < (int)VX_GRID_Y_MAX ? s->n : (int)VX_GRID_Y_MAX), 1);
}

/* ---- partial sums ----------------------------------------------------------------------------------------- */

/* part[b][blk][0][j] = sum over the block's rows of x (BWD: dy), part[b][blk][1][j] = of x^2 (BWD: dy*xhat with
 * xhat = (x - mean)*rstd in float, as the CPU) */
template <typename T, int V, bool BWD, bool SILU>
__global__ void gn_partial_kernel(int n, size_t S, int c, int cg, int G, int lanes, int CW, int RY, size_t SB, int nblk,
                                  const T *__restrict__ x, const T *__restrict__ dy,
                                  const float *__restrict__ mean, const float *__restrict__ rstd,
                                  const float *__restrict__ gamma, const float *__restrict__ beta,
                                  double *__restrict__ part) {
    __shared__ double sh[2][VX_THREADS * 4];
    const int tx = threadIdx.x % CW, ty = threadIdx.x / CW;
    const size_t blk = blockIdx.x;
    const size_t p0 = blk * SB, p1 = p0 + SB < S ? p0 + SB : S;
    for (int b = blockIdx.y; b < n; b += gridDim.y) {
        for (int l0 = 0; l0 < lanes; l0 += CW) {
            const int lane = l0 + tx;
            double s1[V], s2[V];
#pragma unroll
            for (int k = 0; k < V; k++) s1[k] = s2[k] = 0.0;
            if (ty < RY && lane < lanes) {
                float m[V], rs[V], rg[V], bt[V];
#pragma unroll
                for (int k = 0; k < V; k++) {
                    const int j = lane * V + k, g = j / cg;
                    m[k] = BWD ? mean[b * G + g] : 0.0f;
                    rs[k] = BWD ? rstd[b * G + g] : 0.0f;
                    rg[k] = SILU ? rstd[b * G + g] * gamma[j] : 0.0f;
                    bt[k] = SILU ? beta[j] : 0.0f;
                }
                for (size_t p = p0 + ty; p < p1; p += RY) {
                    const size_t vi = ((size_t)b * S + p) * lanes + lane;
                    float xv[V];
                    vx_load<V>(x, vi, xv);
                    if constexpr (BWD) {
                        float dv[V];
                        vx_load<V>(dy, vi, dv);
#pragma unroll
                        for (int k = 0; k < V; k++) {
                            if constexpr (SILU) dv[k] *= silu_grad_dev((xv[k] - m[k]) * rg[k] + bt[k]);
                            const double d = dv[k];
                            s1[k] += d;
                            s2[k] += d * (double)((xv[k] - m[k]) * rs[k]);
                        }
                    } else {
#pragma unroll
                        for (int k = 0; k < V; k++) {
                            const double v = xv[k];
                            s1[k] += v;
                            s2[k] += v * v;
                        }
                    }
                }
            }
            /* thread (tx, ty) at threadIdx.x = ty*CW + tx; the threads of one lane are added in ty order */
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
                    const size_t o = (((size_t)b * nblk + blk) * 2) * c + (size_t)lane * V + k;
                    part[o] = a;
                    part[o + c] = q;
                }
            }
            __syncthreads();
        }
    }
}

/* bwd: dy is the output's gradient (through the fused SiLU when s->silu); forward passes NULL for what it lacks */
static void launch_partial(const GnGeom *g, const GroupNormShape *s, bool bwd, const void *x, const void *dy,
                           const float *mean, const float *rstd, const float *gamma, const float *beta,
                           double *part) {
    const dim3 grid = partial_grid(g, s->n);
    const int cg = s->c / s->groups;
    cudaStream_t st = vx_cuda_stream();
#define GN_PARTIAL_ARGS                                                                                        \
    s->n, (size_t)s->spatial, s->c, cg, s->groups, g->lanes, g->CW, g->RY, g->SB, g->nblk, tx, tdy, mean, rstd,  \
        gamma, beta, part
    const bool silu = bwd && s->silu;
    VX_DTYPE_SWITCH(s->dtype, T, {
        const T *tx = (const T *)x, *tdy = (const T *)dy;
        if (g->V == 4) {
            if (silu) gn_partial_kernel<T, 4, true, true><<<grid, VX_THREADS, 0, st>>>(GN_PARTIAL_ARGS);
            else if (bwd) gn_partial_kernel<T, 4, true, false><<<grid, VX_THREADS, 0, st>>>(GN_PARTIAL_ARGS);
            else gn_partial_kernel<T, 4, false, false><<<grid, VX_THREADS, 0, st>>>(GN_PARTIAL_ARGS);
        } else {
            if (silu) gn_partial_kernel<T, 1, true, true><<<grid, VX_THREADS, 0, st>>>(GN_PARTIAL_ARGS);
            else if (bwd) gn_partial_kernel<T, 1, true, false><<<grid, VX_THREADS, 0, st>>>(GN_PARTIAL_ARGS);
            else gn_partial_kernel<T, 1, false, false><<<grid, VX_THREADS, 0, st>>>(GN_PARTIAL_ARGS);
        }
    });
#undef GN_PARTIAL_ARGS
    LAUNCH_CHECK("gn_partial_kernel");
}

/* ---- forward ---------------------------------------------------------------------------------------------- */

/* one block per (b, g): thread t adds blocks t, t + 256, ... (its channels in order), then the block sum */
__global__ void gn_stats_kernel(int G, int cg, int c, int nblk, double count, float eps,
                                const double *__restrict__ part, float *__restrict__ mean, float *__restrict__ rstd) {
    __shared__ double sh[VX_THREADS / 32];
    const size_t bg = blockIdx.x;
    const size_t b = bg / G;
    const int g = (int)(bg % G);
    double s1 = 0.0, s2 = 0.0;
    for (int blk = threadIdx.x; blk < nblk; blk += VX_THREADS) {
        const double *src = part + ((b * nblk + blk) * 2) * c;
        for (int j = g * cg; j < (g + 1) * cg; j++) {
            s1 += src[j];
            s2 += src[c + j];
        }
    }
    s1 = vx_block_sum(s1, sh);
    s2 = vx_block_sum(s2, sh);
    if (threadIdx.x == 0) {
        const double m = s1 / count;
        double var = s2 / count - m * m;
        if (var < 0.0) var = 0.0; /* rounding when the group is (nearly) constant */
        mean[bg] = (float)m;
        rstd[bg] = (float)(1.0 / sqrt(var + (double)eps));
    }
}

/* y = (x - mean) * (rstd*gamma) + beta, then silu(y) when SILU */
template <typename T, int V, bool SILU>
__global__ void gn_normalize_kernel(int n, size_t S, int cg, int G, int lanes, int CW, int RY, size_t rows_per_block,
                                    size_t row_blocks, const T *__restrict__ x, const float *__restrict__ gamma,
                                    const float *__restrict__ beta, const float *__restrict__ mean,
                                    const float *__restrict__ rstd, T *__restrict__ y) {
    const int tx = threadIdx.x % CW, ty = threadIdx.x / CW;
    if (ty >= RY) return; /* no block-wide synchronization below */
    for (int b = blockIdx.y; b < n; b += gridDim.y)
        for (size_t rb = blockIdx.x; rb < row_blocks; rb += gridDim.x) {
            const size_t p0 = rb * rows_per_block, p1 = p0 + rows_per_block < S ? p0 + rows_per_block : S;
            for (int lane = tx; lane < lanes; lane += CW) {
                float m[V], sc[V], bt[V];
#pragma unroll
                for (int k = 0; k < V; k++) {
                    const int j = lane * V + k, g = b * G + j / cg;
                    m[k] = mean[g];
                    sc[k] = rstd[g] * gamma[j];
                    bt[k] = beta[j];
                }
                for (size_t p = p0 + ty; p < p1; p += RY) {
                    const size_t vi = ((size_t)b * S + p) * lanes + lane;
                    float v[V];
                    vx_load<V>(x, vi, v);
#pragma unroll
                    for (int k = 0; k < V; k++) {
                        v[k] = (v[k] - m[k]) * sc[k] + bt[k];
                        if constexpr (SILU) v[k] = silu_dev(v[k]);
                    }
                    vx_store<V>(y, vi, v);
                }
            }
        }
}

extern "C" void groupnorm_forward_cuda(const GroupNormShape *s, const void *x, const float *gamma, const float *beta,
                                       void *y, float *mean, float *rstd) {
    check_shape(s);
    if (s->n <= 0 || s->spatial <= 0) return;
    const int vec = s->c % 4 == 0 && vx_aligned16(x) && vx_aligned16(y);
    const GnGeom g = gn_geometry(s, vec);
    double *part = (double *)vx_cuda_scratch();
    launch_partial(&g, s, false, x, NULL, NULL, NULL, NULL, NULL, part);

    const int cg = s->c / s->groups;
    const size_t nG = (size_t)s->n * s->groups;
    if (nG > 0x7fffffffu) vx_fatal("groupnorm: %d samples x %d groups are too many blocks", s->n, s->groups);
    gn_stats_kernel<<<(unsigned)nG, VX_THREADS, 0, vx_cuda_stream()>>>(
        s->groups, cg, s->c, g.nblk, (double)s->spatial * cg, s->eps, part, mean, rstd);
    LAUNCH_CHECK("gn_stats_kernel");

    size_t rpb, row_blocks;
    const dim3 grid = rows_grid(&g, s, &rpb, &row_blocks);
#define GN_NORM_ARGS                                                                                                   \
    s->n, (size_t)s->spatial, cg, s->groups, g.lanes, g.CW, g.RY, rpb, row_blocks, tx, gamma, beta, mean, rstd, ty
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(s->dtype, T, {
        const T *tx = (const T *)x;
        T *ty = (T *)y;
        if (s->silu) {
            if (g.V == 4) gn_normalize_kernel<T, 4, true><<<grid, VX_THREADS, 0, st>>>(GN_NORM_ARGS);
            else gn_normalize_kernel<T, 1, true><<<grid, VX_THREADS, 0, st>>>(GN_NORM_ARGS);
        } else {
            if (g.V == 4) gn_normalize_kernel<T, 4, false><<<grid, VX_THREADS, 0, st>>>(GN_NORM_ARGS);
            else gn_normalize_kernel<T, 1, false><<<grid, VX_THREADS, 0, st>>>(GN_NORM_ARGS);
        }
    });
#undef GN_NORM_ARGS
    LAUNCH_CHECK("gn_normalize_kernel");
}

/* ---- backward --------------------------------------------------------------------------------------------- */

/* tot[b][r] = sum over blk, in order, of part[b][blk][r], r < 2c: one thread per (b, r) */
__global__ void gn_totals_kernel(size_t n2c, int c, int nblk, const double *__restrict__ part,
                                 double *__restrict__ tot) {
    const size_t i = vx_global_thread();
    if (i >= n2c) return;
    const size_t b = i / (2 * (size_t)c), r = i % (2 * (size_t)c);
    double s = 0.0;
    for (int blk = 0; blk < nblk; blk++) s += part[(b * nblk + blk) * 2 * c + r];
    tot[i] = s;
}

/* threads [0, c): dgamma[j] = bp*dgamma[j] + sum_b tot[b][1][j], dbeta[j] likewise with tot[b][0][j];
 * threads [c, c + n*G): coef[b][g] = {rstd*sum(gamma*dy)/count, rstd^2*sum(gamma*dy*xhat)/count} */
__global__ void gn_coef_kernel(int n, int c, int G, int cg, double count, const double *__restrict__ tot,
                               const float *__restrict__ gamma, const float *__restrict__ rstd,
                               float *__restrict__ dgamma, float *__restrict__ dbeta, float beta_dparam,
                               float *__restrict__ coef) {
    const size_t i = vx_global_thread();
    const size_t c2 = 2 * (size_t)c;
    if (i < (size_t)c) {
        const int j = (int)i;
        double sb = 0.0, sg = 0.0;
        for (int b = 0; b < n; b++) {
            sb += tot[b * c2 + j];
            sg += tot[b * c2 + c + j];
        }
        if (beta_dparam != 0.0f) {
            if (dgamma) dgamma[j] = beta_dparam * dgamma[j] + (float)sg;
            if (dbeta) dbeta[j] = beta_dparam * dbeta[j] + (float)sb;
        } else {
            if (dgamma) dgamma[j] = (float)sg;
            if (dbeta) dbeta[j] = (float)sb;
        }
    } else if (i < (size_t)c + (size_t)n * G) {
        const size_t k = i - c, b = k / G;
        const int g = (int)(k % G);
        double s1 = 0.0, s2 = 0.0;
        for (int j = g * cg; j < (g + 1) * cg; j++) {
            s1 += (double)gamma[j] * tot[b * c2 + j];
            s2 += (double)gamma[j] * tot[b * c2 + c + j];
        }
        const double rs = rstd[k];
        coef[2 * k] = (float)(rs * s1 / count);
        coef[2 * k + 1] = (float)(rs * rs * s2 / count);
    }
}

/* dx = [beta*dx +] rstd*gamma*dy - a1 - a2*(x - mean); dy first through the fused SiLU's derivative when SILU */
template <typename T, int V, bool ACC, bool SILU>
__global__ void gn_dx_kernel(int n, size_t S, int cg, int G, int lanes, int CW, int RY, size_t rows_per_block,
                             size_t row_blocks, const T *__restrict__ dy, const T *__restrict__ x,
                             const float *__restrict__ gamma, const float *__restrict__ beta,
                             const float *__restrict__ mean,
                             const float *__restrict__ rstd, const float *__restrict__ coef, T *__restrict__ dx,
                             float beta_dx) {
    const int tx = threadIdx.x % CW, ty = threadIdx.x / CW;
    if (ty >= RY) return; /* no block-wide synchronization below */
    for (int b = blockIdx.y; b < n; b += gridDim.y)
        for (size_t rb = blockIdx.x; rb < row_blocks; rb += gridDim.x) {
            const size_t p0 = rb * rows_per_block, p1 = p0 + rows_per_block < S ? p0 + rows_per_block : S;
            for (int lane = tx; lane < lanes; lane += CW) {
                float m[V], rg[V], a1[V], a2[V], bt[V];
#pragma unroll
                for (int k = 0; k < V; k++) {
                    const int j = lane * V + k, g = b * G + j / cg;
                    m[k] = mean[g];
                    rg[k] = rstd[g] * gamma[j];
                    bt[k] = SILU ? beta[j] : 0.0f;
                    a1[k] = coef[2 * (size_t)g];
                    a2[k] = coef[2 * (size_t)g + 1];
                }
                for (size_t p = p0 + ty; p < p1; p += RY) {
                    const size_t vi = ((size_t)b * S + p) * lanes + lane;
                    float xv[V], gv[V], o[V];
                    vx_load<V>(x, vi, xv);
                    vx_load<V>(dy, vi, gv);
                    if constexpr (ACC) vx_load<V>(dx, vi, o);
#pragma unroll
                    for (int k = 0; k < V; k++) {
                        if constexpr (SILU) gv[k] *= silu_grad_dev((xv[k] - m[k]) * rg[k] + bt[k]);
                        const float d = rg[k] * gv[k] - a1[k] - a2[k] * (xv[k] - m[k]);
                        if constexpr (ACC) o[k] = beta_dx * o[k] + d;
                        else o[k] = d;
                    }
                    vx_store<V>(dx, vi, o);
                }
            }
        }
}

extern "C" void groupnorm_backward_cuda(const GroupNormShape *s, const void *dy, const void *x, const float *gamma,
                                        const float *beta, const float *mean, const float *rstd, void *dx,
                                        float *dgamma, float *dbeta, float beta_dx, float beta_dparam) {
    check_shape(s);
    if (s->n <= 0 || s->spatial <= 0) return;
    const int vec = s->c % 4 == 0 && vx_aligned16(x) && vx_aligned16(dy) && (!dx || vx_aligned16(dx));
    const GnGeom g = gn_geometry(s, vec);
    const int cg = s->c / s->groups;
    const double count = (double)s->spatial * cg;
    double *part = (double *)vx_cuda_scratch();
    double *tot = part + g.part_doubles;               /* [n][2][c] */
    float *coef = (float *)(tot + g.tot_doubles);      /* [n][G][2] */
    cudaStream_t st = vx_cuda_stream();

    launch_partial(&g, s, true, x, dy, mean, rstd, gamma, beta, part);

    gn_totals_kernel<<<(unsigned)((g.tot_doubles + VX_THREADS - 1) / VX_THREADS), VX_THREADS, 0, st>>>(
        g.tot_doubles, s->c, g.nblk, part, tot);
    LAUNCH_CHECK("gn_totals_kernel");

    const size_t coef_threads = (size_t)s->c + (size_t)s->n * s->groups;
    gn_coef_kernel<<<(unsigned)((coef_threads + VX_THREADS - 1) / VX_THREADS), VX_THREADS, 0, st>>>(
        s->n, s->c, s->groups, cg, count, tot, gamma, rstd, dgamma, dbeta, beta_dparam, coef);
    LAUNCH_CHECK("gn_coef_kernel");

    if (!dx) return;
    size_t rpb, row_blocks;
    const dim3 grid = rows_grid(&g, s, &rpb, &row_blocks);
#define GN_DX_ARGS                                                                                             \
    s->n, (size_t)s->spatial, cg, s->groups, g.lanes, g.CW, g.RY, rpb, row_blocks, tdy, tx, gamma, beta, mean, rstd, \
        coef, tdx, beta_dx
#define GN_DX_LAUNCH(ACC, SILU)                                                                                \
    do {                                                                                                       \
        if (g.V == 4) gn_dx_kernel<T, 4, ACC, SILU><<<grid, VX_THREADS, 0, st>>>(GN_DX_ARGS);                   \
        else gn_dx_kernel<T, 1, ACC, SILU><<<grid, VX_THREADS, 0, st>>>(GN_DX_ARGS);                            \
    } while (0)
    const bool acc = beta_dx != 0.0f;
    VX_DTYPE_SWITCH(s->dtype, T, {
        const T *tdy = (const T *)dy, *tx = (const T *)x;
        T *tdx = (T *)dx;
        if (s->silu) {
            if (acc) GN_DX_LAUNCH(true, true);
            else GN_DX_LAUNCH(false, true);
        } else {
            if (acc) GN_DX_LAUNCH(true, false);
            else GN_DX_LAUNCH(false, false);
        }
    });
#undef GN_DX_LAUNCH
#undef GN_DX_ARGS
    LAUNCH_CHECK("gn_dx_kernel");
}

/* ---- the CUDA backend's table (ops.def) ---------------------------------------------------------------------- */

extern "C" const GroupNormOps groupnorm_ops_cuda = {{op_supports_all_types}, groupnorm_forward_cuda, groupnorm_backward_cuda};
