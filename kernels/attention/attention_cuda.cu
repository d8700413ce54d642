/* attention_cuda.cu: attention (attention.h) on the GPU, the memory-efficient way: no score matrix in global memory,
 * keys or queries streamed through shared memory in tiles, the online softmax in registers.
 * A row (a query, or a key in dk/dv) is held by TPR consecutive threads of a warp, each with CPT = 16 of its d
 * columns (columns sub, sub + TPR, ...: neighbouring lanes read neighbouring shared-memory words), so d <= 16*TPR:
 * TPR 2, 4, 8 for d up to 32, 64, 128; a dot product is each thread's 16 terms in order then a butterfly over the
 * TPR lanes (__shfl_xor_sync), the same order every run. A block is 256 threads = 256/TPR rows of one (batch, head).
 *   forward    block: rows of queries; key tiles of ATT_TILE (K and V in shared memory, float): scores of the tile,
 *              its max, the rescale of l and the accumulator, then P V; o = acc / l, lse = m + log l.
 *   backward   delta (dO . o per query row, in double), then dk/dv (block: rows of keys; query tiles of ATT_TILE
 *              with their lse and delta in shared memory) and dq (block: rows of queries; key tiles). Scores are
 *              recomputed in both passes; nothing is added atomically, so the result's bits are fixed.
 * Storage T is float, bf16 or f16; every product, exponential and sum is float32 (delta's sum double).
 * This is SIMT float32 arithmetic (about 2 FMAs per score element per pass): correct and linear in memory, but far
 * from tensor-core FlashAttention or cuDNN's fused attention; it has not run on a GPU (none was available), only under
 * the host emulation (tests/tools/cuda_emu).
 * The op table's functions ask attention_cudnn.cu first: cuDNN's fused attention takes bf16/fp16 shapes it can run
 * (after a first call checked against these kernels), these kernels the rest (float32 always, every call under
 * VX_ATTN_CUDA=own). The host emulation links a stub that always answers "own" (tests/tools/cuda_emu). */
#include "attention/attention_cudnn.h"

#define ATT_CPT 16  /* columns per thread */
#define ATT_TILE 32 /* keys (forward, dq) or queries (dk/dv) per shared-memory tile */

typedef struct {
    int heads, tq, tk, d, ld_q, ld_k, ld_v, ld_o;
    float scale, beta;
} AttArgs;

/* element (b, token t, head h, column 0) of a [batch][tokens][ld] tensor */
__device__ __forceinline__ size_t att_at(int b, int tokens, int t, int ld, int h, int d) {
    return ((size_t)b * tokens + t) * (size_t)ld + (size_t)h * d;
}

/* the sum of v over the TPR consecutive lanes of a row (every lane gets it) */
template <int TPR> __device__ __forceinline__ float att_row_sum(float v) {
#pragma unroll
    for (int off = TPR / 2; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

/* this thread's CPT columns of row t (zeros past d, or for a row past `tokens`) */
template <typename T, int TPR>
__device__ __forceinline__ void att_load_row(const T *__restrict__ x, int b, int tokens, int t, int ld, int h, int d,
                                             int sub, float *r) {
    const bool ok = t < tokens;
    const T *row = ok ? x + att_at(b, tokens, t, ld, h, d) : x;
#pragma unroll
    for (int i = 0; i < ATT_CPT; i++) {
        const int c = sub + TPR * i;
        r[i] = ok && c < d ? vx_f32(row[c]) : 0.0f;
    }
}

/* rows [t0, t0 + ATT_TILE) of x (head h) into sh[ATT_TILE][DM] as float, zeros past `tokens` and past d */
template <typename T, int DM>
__device__ __forceinline__ void att_load_tile(const T *__restrict__ x, int b, int tokens, int t0, int ld, int h, int d,
                                              float (*sh)[DM]) {
    for (int e = threadIdx.x; e < ATT_TILE * DM; e += VX_THREADS) {
        const int r = e / DM, c = e % DM, t = t0 + r;
        sh[r][c] = t < tokens && c < d ? vx_f32(x[att_at(b, tokens, t, ld, h, d) + c]) : 0.0f;
    }
}

/* ---- forward ------------------------------------------------------------------------------------------------ */

template <typename T, int TPR>
__global__ void att_forward_kernel(AttArgs p, const T *__restrict__ q, const T *__restrict__ k,
                                   const T *__restrict__ v, T *__restrict__ o, float *__restrict__ lse) {
    constexpr int DM = ATT_CPT * TPR, ROWS = VX_THREADS / TPR;
    __shared__ float Ks[ATT_TILE][DM], Vs[ATT_TILE][DM];
    const int sub = threadIdx.x % TPR, b = blockIdx.z, h = blockIdx.y;
    const int i = blockIdx.x * ROWS + threadIdx.x / TPR;
    float qr[ATT_CPT], acc[ATT_CPT], sc[ATT_TILE];
    att_load_row<T, TPR>(q, b, p.tq, i, p.ld_q, h, p.d, sub, qr);
#pragma unroll
    for (int c = 0; c < ATT_CPT; c++) qr[c] *= p.scale, acc[c] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int j0 = 0; j0 < p.tk; j0 += ATT_TILE) {
        const int kn = p.tk - j0 < ATT_TILE ? p.tk - j0 : ATT_TILE;
        __syncthreads(); /* the previous tile is read by everyone */
        att_load_tile<T, DM>(k, b, p.tk, j0, p.ld_k, h, p.d, Ks);
        att_load_tile<T, DM>(v, b, p.tk, j0, p.ld_v, h, p.d, Vs);
        __syncthreads();
        float mt = m;
#pragma unroll
        for (int j = 0; j < ATT_TILE; j++) {
            float part = 0.0f;
#pragma unroll
            for (int c = 0; c < ATT_CPT; c++) part = fmaf(qr[c], Ks[j][sub + TPR * c], part);
            part = att_row_sum<TPR>(part);
            sc[j] = j < kn ? part : -INFINITY;
            mt = fmaxf(mt, sc[j]);
        }
        const float corr = expf(m - mt); /* 0 on the first tile (m = -inf) */
        l *= corr;
#pragma unroll
        for (int c = 0; c < ATT_CPT; c++) acc[c] *= corr;
#pragma unroll
        for (int j = 0; j < ATT_TILE; j++) {
            const float pj = expf(sc[j] - mt); /* 0 past the keys */
            l += pj;
#pragma unroll
            for (int c = 0; c < ATT_CPT; c++) acc[c] = fmaf(pj, Vs[j][sub + TPR * c], acc[c]);
        }
        m = mt;
    }
    if (i >= p.tq) return;
    const float inv = 1.0f / l;
    T *orow = o + att_at(b, p.tq, i, p.ld_o, h, p.d);
#pragma unroll
    for (int c = 0; c < ATT_CPT; c++)
        if (sub + TPR * c < p.d) orow[sub + TPR * c] = vx_to<T>(acc[c] * inv);
    if (sub == 0) lse[((size_t)b * p.heads + h) * p.tq + i] = m + logf(l);
}

/* ---- backward ----------------------------------------------------------------------------------------------- */

/* delta[row] = dO . o over the row's d columns, in double, one thread per (b, h, i) */
template <typename T>
__global__ void att_delta_kernel(AttArgs p, long rows, const T *__restrict__ o, const T *__restrict__ dout,
                                 float *__restrict__ delta) {
    for (size_t r = vx_global_thread(); r < (size_t)rows; r += vx_grid_threads()) {
        const int i = (int)(r % p.tq), h = (int)(r / p.tq % p.heads), b = (int)(r / p.tq / p.heads);
        const size_t at = att_at(b, p.tq, i, p.ld_o, h, p.d);
        double acc = 0.0;
        for (int c = 0; c < p.d; c++) acc += (double)vx_f32(dout[at + c]) * vx_f32(o[at + c]);
        delta[r] = (float)acc;
    }
}

/* dst's CPT columns of row t: beta*dst + g */
template <typename T, int TPR>
__device__ __forceinline__ void att_store_grad(T *__restrict__ x, int b, int tokens, int t, int ld, int h, int d,
                                               int sub, const float *g, float beta) {
    if (t >= tokens) return;
    T *row = x + att_at(b, tokens, t, ld, h, d);
#pragma unroll
    for (int i = 0; i < ATT_CPT; i++) {
        const int c = sub + TPR * i;
        if (c < d) row[c] = vx_to<T>(beta != 0.0f ? beta * vx_f32(row[c]) + g[i] : g[i]);
    }
}

/* dk, dv: a block's rows are keys; the queries pass through shared memory in tiles */
template <typename T, int TPR>
__global__ void att_dkdv_kernel(AttArgs p, const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
                                const T *__restrict__ dout, const float *__restrict__ lse,
                                const float *__restrict__ delta, T *__restrict__ dk, T *__restrict__ dv) {
    constexpr int DM = ATT_CPT * TPR, ROWS = VX_THREADS / TPR;
    __shared__ float Qs[ATT_TILE][DM], Gs[ATT_TILE][DM], Ls[ATT_TILE], Ds[ATT_TILE];
    const int sub = threadIdx.x % TPR, b = blockIdx.z, h = blockIdx.y;
    const int j = blockIdx.x * ROWS + threadIdx.x / TPR;
    const size_t lrow = ((size_t)b * p.heads + h) * p.tq;
    float kr[ATT_CPT], vr[ATT_CPT], gk[ATT_CPT], gv[ATT_CPT];
    att_load_row<T, TPR>(k, b, p.tk, j, p.ld_k, h, p.d, sub, kr);
    att_load_row<T, TPR>(v, b, p.tk, j, p.ld_v, h, p.d, sub, vr);
#pragma unroll
    for (int c = 0; c < ATT_CPT; c++) kr[c] *= p.scale, gk[c] = gv[c] = 0.0f;
    for (int i0 = 0; i0 < p.tq; i0 += ATT_TILE) {
        const int qn = p.tq - i0 < ATT_TILE ? p.tq - i0 : ATT_TILE;
        __syncthreads();
        att_load_tile<T, DM>(q, b, p.tq, i0, p.ld_q, h, p.d, Qs);
        att_load_tile<T, DM>(dout, b, p.tq, i0, p.ld_o, h, p.d, Gs);
        if (threadIdx.x < ATT_TILE) {
            const int ok = (int)threadIdx.x < qn;
            Ls[threadIdx.x] = ok ? lse[lrow + i0 + threadIdx.x] : 0.0f;
            Ds[threadIdx.x] = ok ? delta[lrow + i0 + threadIdx.x] : 0.0f;
        }
        __syncthreads();
        for (int r = 0; r < qn; r++) {
            float s = 0.0f, dp = 0.0f;
#pragma unroll
            for (int c = 0; c < ATT_CPT; c++) {
                s = fmaf(kr[c], Qs[r][sub + TPR * c], s);
                dp = fmaf(vr[c], Gs[r][sub + TPR * c], dp);
            }
            s = att_row_sum<TPR>(s);
            dp = att_row_sum<TPR>(dp);
            const float pr = expf(s - Ls[r]), ds = pr * (dp - Ds[r]);
#pragma unroll
            for (int c = 0; c < ATT_CPT; c++) {
                gv[c] = fmaf(pr, Gs[r][sub + TPR * c], gv[c]);
                gk[c] = fmaf(ds, Qs[r][sub + TPR * c], gk[c]);
            }
        }
    }
#pragma unroll
    for (int c = 0; c < ATT_CPT; c++) gk[c] *= p.scale;
    att_store_grad<T, TPR>(dk, b, p.tk, j, p.ld_k, h, p.d, sub, gk, p.beta);
    att_store_grad<T, TPR>(dv, b, p.tk, j, p.ld_v, h, p.d, sub, gv, p.beta);
}

/* dq: a block's rows are queries; the keys pass through shared memory in tiles */
template <typename T, int TPR>
__global__ void att_dq_kernel(AttArgs p, const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
                              const T *__restrict__ dout, const float *__restrict__ lse,
                              const float *__restrict__ delta, T *__restrict__ dq) {
    constexpr int DM = ATT_CPT * TPR, ROWS = VX_THREADS / TPR;
    __shared__ float Ks[ATT_TILE][DM], Vs[ATT_TILE][DM];
    const int sub = threadIdx.x % TPR, b = blockIdx.z, h = blockIdx.y;
    const int i = blockIdx.x * ROWS + threadIdx.x / TPR;
    const size_t li = ((size_t)b * p.heads + h) * p.tq + i;
    const float L = i < p.tq ? lse[li] : 0.0f, D = i < p.tq ? delta[li] : 0.0f;
    float qr[ATT_CPT], gr[ATT_CPT], gq[ATT_CPT];
    att_load_row<T, TPR>(q, b, p.tq, i, p.ld_q, h, p.d, sub, qr);
    att_load_row<T, TPR>(dout, b, p.tq, i, p.ld_o, h, p.d, sub, gr);
#pragma unroll
    for (int c = 0; c < ATT_CPT; c++) qr[c] *= p.scale, gq[c] = 0.0f;
    for (int j0 = 0; j0 < p.tk; j0 += ATT_TILE) {
        const int kn = p.tk - j0 < ATT_TILE ? p.tk - j0 : ATT_TILE;
        __syncthreads();
        att_load_tile<T, DM>(k, b, p.tk, j0, p.ld_k, h, p.d, Ks);
        att_load_tile<T, DM>(v, b, p.tk, j0, p.ld_v, h, p.d, Vs);
        __syncthreads();
        for (int r = 0; r < kn; r++) {
            float s = 0.0f, dp = 0.0f;
#pragma unroll
            for (int c = 0; c < ATT_CPT; c++) {
                s = fmaf(qr[c], Ks[r][sub + TPR * c], s);
                dp = fmaf(gr[c], Vs[r][sub + TPR * c], dp);
            }
            s = att_row_sum<TPR>(s);
            dp = att_row_sum<TPR>(dp);
            const float ds = expf(s - L) * (dp - D);
#pragma unroll
            for (int c = 0; c < ATT_CPT; c++) gq[c] = fmaf(ds, Ks[r][sub + TPR * c], gq[c]);
        }
    }
#pragma unroll
    for (int c = 0; c < ATT_CPT; c++) gq[c] *= p.scale;
    att_store_grad<T, TPR>(dq, b, p.tq, i, p.ld_q, h, p.d, sub, gq, p.beta);
}

/* ---- launchers ---------------------------------------------------------------------------------------------- */

static AttArgs args_of(const AttentionShape *s, float beta) {
    return AttArgs{s->heads, s->tq, s->tk, s->d, s->ld_q, s->ld_k, s->ld_v, s->ld_o, s->scale, beta};
}

static void check(const AttentionShape *s) {
    const char *bad = attention_shape_error(s);
    if (*bad)
        vx_fatal("attention: %s (batch %d, heads %d, tq %d, tk %d, d %d)", bad, s->batch, s->heads, s->tq, s->tk,
                 s->d);
    if (s->d > ATTN_CUDA_MAX_D)
        vx_fatal("attention: head dim %d is beyond the CUDA kernels' %d; use more heads", s->d, ATTN_CUDA_MAX_D);
    if (s->heads > (int)VX_GRID_Y_MAX || s->batch > (int)VX_GRID_Y_MAX)
        vx_fatal("attention: %d heads or batch %d beyond the launch's %u", s->heads, s->batch, VX_GRID_Y_MAX);
}

/* threads per row for head dim d: 16 columns each */
static int tpr_of(int d) { return d <= 32 ? 2 : d <= 64 ? 4 : 8; }
static dim3 grid_of(const AttentionShape *s, int rows, int tpr) {
    const int per = VX_THREADS / tpr;
    return dim3((unsigned)((rows + per - 1) / per), (unsigned)s->heads, (unsigned)s->batch);
}

/* runs the statements with the compile-time TPR of d (variadic: the statements hold commas) */
#define ATT_TPR_SWITCH(d, ...)                                                                                \
    do {                                                                                                       \
        switch (tpr_of(d)) {                                                                                   \
        case 2: {                                                                                              \
            constexpr int TPR = 2;                                                                             \
            __VA_ARGS__;                                                                                       \
        } break;                                                                                               \
        case 4: {                                                                                              \
            constexpr int TPR = 4;                                                                             \
            __VA_ARGS__;                                                                                       \
        } break;                                                                                               \
        default: {                                                                                             \
            constexpr int TPR = 8;                                                                             \
            __VA_ARGS__;                                                                                       \
        } break;                                                                                               \
        }                                                                                                      \
    } while (0)

static void attention_own_forward(const AttentionShape *s, const void *q, const void *k, const void *v, void *o,
                                  float *lse) {
    if (!s->batch || !s->tq) return;
    const AttArgs p = args_of(s, 0.0f);
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(s->dtype, T, {
        ATT_TPR_SWITCH(s->d, {
            const dim3 grid = grid_of(s, s->tq, TPR);
            att_forward_kernel<T, TPR><<<grid, VX_THREADS, 0, st>>>(p, (const T *)q, (const T *)k, (const T *)v, (T *)o, lse);
        });
    });
    LAUNCH_CHECK("att_forward_kernel");
}

static void attention_own_backward(const AttentionShape *s, const void *q, const void *k, const void *v,
                                   const void *o, const void *dout, const float *lse, float *delta, void *dq,
                                   void *dk, void *dv, float beta) {
    if (!s->batch) return;
    const AttArgs p = args_of(s, beta);
    const long rows = (long)s->batch * s->heads * s->tq;
    cudaStream_t st = vx_cuda_stream();
    VX_DTYPE_SWITCH(s->dtype, T, {
        const T *tq_ = (const T *)q, *tk_ = (const T *)k, *tv_ = (const T *)v, *tdo = (const T *)dout;
        if (rows > 0) {
            const unsigned blocks = vx_ew_blocks((size_t)rows);
            att_delta_kernel<T><<<blocks, VX_THREADS, 0, st>>>(p, rows, (const T *)o, tdo, delta);
            LAUNCH_CHECK("att_delta_kernel");
        }
        ATT_TPR_SWITCH(s->d, {
            const dim3 gk = grid_of(s, s->tk, TPR), gq = grid_of(s, s->tq, TPR);
            att_dkdv_kernel<T, TPR><<<gk, VX_THREADS, 0, st>>>(p, tq_, tk_, tv_, tdo, lse, delta, (T *)dk, (T *)dv);
            LAUNCH_CHECK("att_dkdv_kernel");
            if (rows > 0) {
                att_dq_kernel<T, TPR><<<gq, VX_THREADS, 0, st>>>(p, tq_, tk_, tv_, tdo, lse, delta, (T *)dq);
                LAUNCH_CHECK("att_dq_kernel");
            }
        });
    });
}

/* ---- the CUDA backend's table (ops.def) ---------------------------------------------------------------------- */

static size_t attention_workspace_bytes_cuda(const AttentionShape *s) {
    check(s);
    return attention_cudnn_workspace_bytes(s);
}

static const char *last[2] = {"own", "own"}; /* the path of each function's last call (bench kernels' rows) */
static const char *last_path(int fn) { return last[fn == ATTENTION_BACKWARD]; }

static void attention_forward_cuda(const AttentionShape *s, const void *q, const void *k, const void *v, void *o,
                                   float *lse, void *saved, void *workspace) {
    (void)saved; /* saved_bytes is NULL: nothing is kept */
    check(s);
    last[0] = "cudnn";
    if (attention_cudnn_forward(s, q, k, v, o, lse, workspace, attention_own_forward)) return;
    last[0] = "own";
    attention_own_forward(s, q, k, v, o, lse);
}

static void attention_backward_cuda(const AttentionShape *s, const void *q, const void *k, const void *v,
                                    const void *o, const void *dout, const float *lse, float *delta,
                                    const void *saved, void *dq, void *dk, void *dv, float beta, void *workspace) {
    (void)saved;
    check(s);
    last[1] = "cudnn";
    if (attention_cudnn_backward(s, q, k, v, o, dout, lse, delta, dq, dk, dv, beta, workspace,
                                 attention_own_backward))
        return;
    last[1] = "own";
    attention_own_backward(s, q, k, v, o, dout, lse, delta, dq, dk, dv, beta);
}

extern "C" const AttentionOps attention_ops_cuda = {{op_supports_all_types}, attention_workspace_bytes_cuda,
                                                    attention_forward_cuda, attention_backward_cuda, last_path};
