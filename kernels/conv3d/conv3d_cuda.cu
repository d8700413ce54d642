/* conv3d_cuda.cu: the 3D convolution of conv3d.h on the GPU through cuDNN's legacy convolution API (still
 * shipped in cuDNN 9), run from the per-shape plans of conv3d_cudnn_plan.cu (descriptors, layouts, algorithms),
 * plus small kernels of our own: the bias (with the fused residual add) and, for 16-bit storage, the float32
 * accumulation of cuDNN's low-precision weight gradient.
 * beta 0/1 is passed to cuDNN as its beta (0: the output is not read, so NaN there is overwritten; 1: added).
 * Should cuDNN refuse a candidate at run time (any status of the CUDNN_STATUS_NOT_SUPPORTED category, 3000-3999
 * in cuDNN 9, or a misaligned pointer), the next one whose workspace fits the planned size takes its place for
 * good. A direction without any usable candidate is an error when it is called, with the reason the plan gives.
 * Batches beyond cuDNN's int sizes run in chunks of samples (the plan's chunk_n); backward filter adds the chunks
 * with beta 1 after the first. dbias is a deterministic two-pass reduction over all output positions (size_t
 * indices). */
#include "conv3d/conv3d_cudnn_plan.h"

#define CONV_BIAS_MIN_ROWS 64     /* dbias partial pass: output positions per block, at least */
#define CONV_BIAS_MAX_BLOCKS 1024 /* dbias partial pass: blocks, at most */
#define CONV_BIAS_ROWS_PER_THREAD 8
#define CONV_BIAS_MAX_ROW_BLOCKS (1u << 20)

/* cuDNN's answers that mean "not this algorithm here" rather than a bug in our call: try the next candidate. */
static int refused(cudnnStatus_t st) {
    return CUDNN_STATUS_CATEGORY(st) == CUDNN_STATUS_NOT_SUPPORTED || st == CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER;
}

/* Runs `call` (a cuDNN call using p->cand[dir][p->cur[dir]]) and, while cuDNN refuses the algorithm, moves to the
 * next candidate whose workspace fits the planned size. */
typedef cudnnStatus_t (*ConvCall)(ConvPlan *p, const ConvCand *c, size_t chunk, const void *ctx);

static void run_with_fallback(ConvPlan *p, int dir, ConvCall call, size_t chunk, const void *ctx) {
    if (p->ncand[dir] == 0) {
        errno = 0;
        vx_fatal("%s", p->unusable[dir]);
    }
    for (;;) {
        const cudnnStatus_t st = call(p, &p->cand[dir][p->cur[dir]], chunk, ctx);
        if (st == CUDNN_STATUS_SUCCESS) return;
        int next = p->cur[dir] + 1;
        while (next < p->ncand[dir] && p->cand[dir][next].ws > p->ws_bytes) next++;
        if (!refused(st) || next >= p->ncand[dir]) {
            char shape[200], what[400];
            conv_shape_str(&p->shape, shape, sizeof shape);
            snprintf(what, sizeof what, "cuDNN %s convolution (algorithm %d, math %d) of conv3d %s", CONV_DIR_NAME[dir],
                     p->cand[dir][p->cur[dir]].algo, (int)p->cand[dir][p->cur[dir]].math, shape);
            vx_cuda_fail(__FILE__, __LINE__, what, "cuDNN", cudnnGetErrorString(st), vx_cudnn_hint(st));
        }
        conv_log_switch(p, dir, p->cur[dir], next, st);
        p->cur[dir] = next;
        CUDNN_CHECK(cudnnSetConvolutionMathType(conv_desc(p, dir)->cd[dir], p->cand[dir][next].math));
    }
}

/* ---- bias kernels (with the fused residual) and the dw accumulation ------------------------------------- */

/* Thread layout over [rows][c]: thread (tx, ty) = (threadIdx % CW, threadIdx / CW) owns vector lane tx (+ CW, ...)
 * of rows ty, ty + RY, ...; lanes = c/V vectors per row. */
typedef struct {
    int V, lanes, CW, RY;
} RowLayout;

static RowLayout row_layout(int c, int vec) {
    RowLayout l;
    l.V = vec ? 4 : 1;
    l.lanes = c / l.V;
    l.CW = l.lanes < VX_THREADS ? l.lanes : VX_THREADS;
    l.RY = VX_THREADS / l.CW;
    return l;
}

/* y [P][c] = (y + bias [c]) + r [P][c]: bias and r optional (RES: r given); in float, stored as T */
template <typename T, int V, bool RES>
__global__ void conv_bias_kernel(size_t P, int lanes, int CW, int RY, size_t rows_per_block, size_t row_blocks,
                                 const float *__restrict__ bias, const T *__restrict__ r, T *__restrict__ y) {
    const int tx = threadIdx.x % CW, ty = threadIdx.x / CW;
    if (ty >= RY) return; /* no block-wide synchronization below */
    for (size_t rb = blockIdx.x; rb < row_blocks; rb += gridDim.x) {
        const size_t p0 = rb * rows_per_block, p1 = p0 + rows_per_block < P ? p0 + rows_per_block : P;
        for (int lane = tx; lane < lanes; lane += CW) {
            float bv[V];
#pragma unroll
            for (int k = 0; k < V; k++) bv[k] = bias ? bias[lane * V + k] : 0.0f;
            for (size_t p = p0 + ty; p < p1; p += RY) {
                float v[V], rv[V];
                vx_load<V>(y, p * lanes + lane, v);
                if constexpr (RES) vx_load<V>(r, p * lanes + lane, rv);
#pragma unroll
                for (int k = 0; k < V; k++) {
                    v[k] += bv[k];
                    if constexpr (RES) v[k] += rv[k]; /* (conv + bias) + skip, as the separate add it replaces */
                }
                vx_store<V>(y, p * lanes + lane, v);
            }
        }
    }
}

/* y += bias, then + residual (either may be NULL; nothing to do when both are) */
static void add_bias(const Conv3dShape *s, const float *bias, const void *residual, void *y) {
    if (!bias && !residual) return;
    const size_t P = (size_t)s->n * s->od * s->oh * s->ow;
    const RowLayout l = row_layout(s->c_out, s->c_out % 4 == 0 && vx_aligned16(y) && (!residual || vx_aligned16(residual)));
    const size_t rpb = (size_t)l.RY * CONV_BIAS_ROWS_PER_THREAD, row_blocks = (P + rpb - 1) / rpb;
    const unsigned grid = (unsigned)(row_blocks < CONV_BIAS_MAX_ROW_BLOCKS ? row_blocks : CONV_BIAS_MAX_ROW_BLOCKS);
    cudaStream_t st = vx_cuda_stream();
#define BIAS_ARGS P, l.lanes, l.CW, l.RY, rpb, row_blocks, bias, (const T *)residual, (T *)y
    VX_DTYPE_SWITCH(s->dtype, T, {
        if (residual) {
            if (l.V == 4) conv_bias_kernel<T, 4, true><<<grid, VX_THREADS, 0, st>>>(BIAS_ARGS);
            else conv_bias_kernel<T, 1, true><<<grid, VX_THREADS, 0, st>>>(BIAS_ARGS);
        } else {
            if (l.V == 4) conv_bias_kernel<T, 4, false><<<grid, VX_THREADS, 0, st>>>(BIAS_ARGS);
            else conv_bias_kernel<T, 1, false><<<grid, VX_THREADS, 0, st>>>(BIAS_ARGS);
        }
    });
#undef BIAS_ARGS
    LAUNCH_CHECK("conv_bias_kernel");
}

/* part [nblk][c]: block blk sums rows [blk*SB, (blk+1)*SB) of dy [P][c] per channel, its threads in ty order */
template <typename T, int V>
__global__ void conv_dbias_partial_kernel(size_t P, int c, int lanes, int CW, int RY, size_t SB,
                                          const T *__restrict__ dy, double *__restrict__ part) {
    __shared__ double sh[VX_THREADS * 4];
    const int tx = threadIdx.x % CW, ty = threadIdx.x / CW;
    const size_t blk = blockIdx.x;
    const size_t p0 = blk * SB, p1 = p0 + SB < P ? p0 + SB : P;
    for (int l0 = 0; l0 < lanes; l0 += CW) {
        const int lane = l0 + tx;
        double s[V];
#pragma unroll
        for (int k = 0; k < V; k++) s[k] = 0.0;
        if (ty < RY && lane < lanes)
            for (size_t p = p0 + ty; p < p1; p += RY) {
                float v[V];
                vx_load<V>(dy, p * lanes + lane, v);
#pragma unroll
                for (int k = 0; k < V; k++) s[k] += (double)v[k];
            }
#pragma unroll
        for (int k = 0; k < V; k++) sh[threadIdx.x * V + k] = s[k];
        __syncthreads();
        if (ty == 0 && lane < lanes) {
#pragma unroll
            for (int k = 0; k < V; k++) {
                double a = 0.0;
                for (int r = 0; r < RY; r++) a += sh[(r * CW + tx) * V + k];
                part[blk * c + (size_t)lane * V + k] = a;
            }
        }
        __syncthreads();
    }
}

/* dbias[j] = beta*dbias[j] + sum over blocks, in order, of part[blk][j] */
__global__ void conv_dbias_final_kernel(int c, int nblk, const double *__restrict__ part, float *__restrict__ dbias,
                                        float beta) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= c) return;
    double s = 0.0;
    for (int blk = 0; blk < nblk; blk++) s += part[(size_t)blk * c + j];
    dbias[j] = beta != 0.0f ? beta * dbias[j] + (float)s : (float)s;
}

static void bias_grad(const Conv3dShape *s, const void *dy, float *dbias, float beta) {
    const size_t P = (size_t)s->n * s->od * s->oh * s->ow, c = (size_t)s->c_out;
    /* partition: a function of the shape only */
    size_t nblk = (P + CONV_BIAS_MIN_ROWS - 1) / CONV_BIAS_MIN_ROWS;
    if (nblk > CONV_BIAS_MAX_BLOCKS) nblk = CONV_BIAS_MAX_BLOCKS;
    const size_t fit = VX_SCRATCH_BYTES / sizeof(double) / c;
    if (fit < 1) vx_fatal("conv3d: %d output channels do not fit the dbias scratch", s->c_out);
    if (nblk > fit) nblk = fit;
    if (nblk < 1) nblk = 1;
    const size_t SB = (P + nblk - 1) / nblk;
    nblk = (P + SB - 1) / SB;
    const RowLayout l = row_layout(s->c_out, s->c_out % 4 == 0 && vx_aligned16(dy));
    double *part = (double *)vx_cuda_scratch();
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(s->dtype, T, {
        const T *g = (const T *)dy;
        if (l.V == 4)
            conv_dbias_partial_kernel<T, 4><<<(unsigned)nblk, VX_THREADS, 0, st>>>(P, s->c_out, l.lanes, l.CW, l.RY, SB,
                                                                                 g, part);
        else
            conv_dbias_partial_kernel<T, 1><<<(unsigned)nblk, VX_THREADS, 0, st>>>(P, s->c_out, l.lanes, l.CW, l.RY, SB,
                                                                                 g, part);
    });
    LAUNCH_CHECK("conv_dbias_partial_kernel");
    conv_dbias_final_kernel<<<(unsigned)((c + VX_THREADS - 1) / VX_THREADS), VX_THREADS, 0, vx_cuda_stream()>>>(
        s->c_out, (int)nblk, part, dbias, beta);
    LAUNCH_CHECK("conv_dbias_final_kernel");
}

/* dw [count] = beta*dw + lp [count] in float (the low-precision weight gradient's float32 accumulation) */
template <typename T, bool ACC>
__global__ void conv_dw_accumulate_kernel(size_t count, const T *__restrict__ lp, float *__restrict__ dw, float beta) {
    for (size_t i = vx_global_thread(); i < count; i += vx_grid_threads()) {
        const float g = vx_f32(lp[i]);
        dw[i] = ACC ? beta * dw[i] + g : g;
    }
}

static void dw_accumulate(const Conv3dShape *s, const void *lp, float *dw, float beta) {
    const size_t n = (size_t)conv3d_weight_count(s);
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(s->dtype, T, {
        if (beta != 0.0f)
            conv_dw_accumulate_kernel<T, true><<<vx_ew_blocks(n), VX_THREADS, 0, st>>>(n, (const T *)lp, dw, beta);
        else conv_dw_accumulate_kernel<T, false><<<vx_ew_blocks(n), VX_THREADS, 0, st>>>(n, (const T *)lp, dw, beta);
    });
    LAUNCH_CHECK("conv_dw_accumulate_kernel");
}

/* ---- the three directions --------------------------------------------------------------------------------- */

typedef struct {
    const char *a, *b; /* forward: x, wt; data: dy, wt; filter: x, dy (bytes: chunks are offset by element size) */
    char *out;         /* y, dx, dw (dw: of the storage type, the float32 one or the low-precision scratch) */
    float beta;        /* of the first chunk (later chunks of backward filter add) */
    void *ws;
    size_t es;         /* bytes per element of the storage type */
} ConvArgs;

static cudnnStatus_t call_forward(ConvPlan *p, const ConvCand *c, size_t chunk, const void *ctx) {
    const ConvArgs *a = (const ConvArgs *)ctx;
    const float one = 1.0f, zero = 0.0f;
    const ConvDesc *d = conv_desc(p, DIR_FWD);
    return cudnnConvolutionForward(vx_cudnn_handle(), &one, d->xd, a->a + chunk * p->x_chunk * a->es, d->wd, a->b,
                                   d->cd[DIR_FWD], (cudnnConvolutionFwdAlgo_t)c->algo, a->ws, c->ws, &zero, d->yd,
                                   a->out + chunk * p->y_chunk * a->es);
}

static cudnnStatus_t call_data(ConvPlan *p, const ConvCand *c, size_t chunk, const void *ctx) {
    const ConvArgs *a = (const ConvArgs *)ctx;
    const float one = 1.0f;
    const ConvDesc *d = conv_desc(p, DIR_DATA);
    return cudnnConvolutionBackwardData(vx_cudnn_handle(), &one, d->wd, a->b, d->yd, a->a + chunk * p->y_chunk * a->es,
                                        d->cd[DIR_DATA], (cudnnConvolutionBwdDataAlgo_t)c->algo, a->ws, c->ws, &a->beta,
                                        d->xd, a->out + chunk * p->x_chunk * a->es);
}

static cudnnStatus_t call_filter(ConvPlan *p, const ConvCand *c, size_t chunk, const void *ctx) {
    const ConvArgs *a = (const ConvArgs *)ctx;
    const float one = 1.0f;
    const float beta = chunk == 0 ? a->beta : 1.0f;
    const ConvDesc *d = conv_desc(p, DIR_FILTER);
    return cudnnConvolutionBackwardFilter(vx_cudnn_handle(), &one, d->xd, a->a + chunk * p->x_chunk * a->es, d->yd,
                                          a->b + chunk * p->y_chunk * a->es, d->cd[DIR_FILTER],
                                          (cudnnConvolutionBwdFilterAlgo_t)c->algo, a->ws, c->ws, &beta, d->wd, a->out);
}

static void check_workspace(const ConvPlan *p, const void *workspace) {
    if (p->ws_bytes + conv_lp_dw_bytes(p) > 0 && !workspace) {
        char shape[200];
        conv_shape_str(&p->shape, shape, sizeof shape);
        vx_fatal("conv3d %s needs %zu bytes of workspace, got NULL", shape, p->ws_bytes + conv_lp_dw_bytes(p));
    }
}

extern "C" void conv3d_forward_cuda(const Conv3dShape *s, const void *x, const void *wt, const float *bias,
                                    const void *residual, void *y, void *workspace) {
    ConvPlan *p = conv_plan_get(s);
    check_workspace(p, workspace);
    const ConvArgs a = {(const char *)x, (const char *)wt, (char *)y, 0.0f, workspace, dtype_size(s->dtype)};
    for (int ch = 0; ch < s->n / p->chunk_n; ch++) run_with_fallback(p, DIR_FWD, call_forward, (size_t)ch, &a);
    add_bias(s, bias, residual, y);
}

extern "C" void conv3d_backward_data_cuda(const Conv3dShape *s, const void *dy, const void *wt, void *dx, float beta,
                                          void *workspace) {
    ConvPlan *p = conv_plan_get(s);
    check_workspace(p, workspace);
    const ConvArgs a = {(const char *)dy, (const char *)wt, (char *)dx, beta, workspace, dtype_size(s->dtype)};
    for (int ch = 0; ch < s->n / p->chunk_n; ch++) run_with_fallback(p, DIR_DATA, call_data, (size_t)ch, &a);
}

/* float32 storage: cuDNN writes dw (beta for the first chunk, 1 after). 16-bit storage: each chunk's weight gradient
 * goes to the workspace's low-precision slot (beta 0) and is added to the float32 dw from there, so accumulation
 * over chunks and micro-batches stays in float32. */
extern "C" void conv3d_backward_filter_cuda(const Conv3dShape *s, const void *x, const void *dy, float *dw,
                                            float *dbias, float beta, void *workspace) {
    ConvPlan *p = conv_plan_get(s);
    check_workspace(p, workspace);
    const size_t es = dtype_size(s->dtype);
    const char *xb = (const char *)x, *dyb = (const char *)dy;
    if (s->dtype == DT_F32) {
        const ConvArgs a = {xb, dyb, (char *)dw, beta, workspace, es};
        for (int ch = 0; ch < s->n / p->chunk_n; ch++) run_with_fallback(p, DIR_FILTER, call_filter, (size_t)ch, &a);
    } else {
        char *lp_dw = (char *)workspace + conv_lp_dw_offset(p);
        for (int ch = 0; ch < s->n / p->chunk_n; ch++) {
            /* each chunk on its own into the slot (as chunk 0: beta 0), then added to dw in float32 */
            const ConvArgs a = {xb + (size_t)ch * p->x_chunk * es, dyb + (size_t)ch * p->y_chunk * es, lp_dw, 0.0f,
                                workspace, es};
            run_with_fallback(p, DIR_FILTER, call_filter, 0, &a);
            dw_accumulate(s, lp_dw, dw, ch == 0 ? beta : 1.0f);
        }
    }
    if (dbias) bias_grad(s, dy, dbias, beta);
}

/* ---- the CUDA backend's table (ops.def) ---------------------------------------------------------------------- */

extern "C" const Conv3dOps conv3d_ops_cuda = {{op_supports_all_types}, conv3d_workspace_bytes_cuda, conv3d_forward_cuda, conv3d_backward_data_cuda,
                                             conv3d_backward_filter_cuda};
