/* conv3d_cuda.cu: the 3D convolution of conv3d.h on the GPU through cuDNN's legacy convolution API (still
 * shipped in cuDNN 9), plus two small kernels of our own for the bias.
 *   x  [n][d][h][w][c_in]          described to cuDNN as 5-D dims {n, c_in, d, h, w} with explicit NDHWC strides
 *   wt [c_out][k][k][k][c_in]      a 5-D filter {c_out, c_in, k, k, k} in CUDNN_TENSOR_NHWC format
 *   y  [n][od][oh][ow][c_out]      likewise
 *   convolution: 3 spatial dims, pad/stride per dim, dilation 1, CUDNN_CROSS_CORRELATION, float compute.
 * beta 0/1 is passed to cuDNN as its beta (0: the output is not read, so NaN there is overwritten; 1: added).
 *
 * Plans, one per (shape, options), created the first time a shape is seen (normally by conv3d_workspace_bytes
 * while the model is planned, before any buffer exists) and cached for the life of the process: descriptors,
 * and for each direction a list of candidate algorithms from cuDNN's heuristics (cudnnGet*Algorithm_v7: no
 * memory and no trial runs needed), in cuDNN's order of preference, keeping those whose status is SUCCESS, whose
 * workspace is at most CONV_WS_LIMIT, whose math type respects allow_tf32, and, with the deterministic option,
 * whose determinism is CUDNN_DETERMINISTIC. The first candidate runs; the workspace reported for the shape is
 * the largest of the three first candidates' sizes. Should cuDNN refuse a candidate at run time (any status of
 * the CUDNN_STATUS_NOT_SUPPORTED category, 3000-3999 in cuDNN 9, or a misaligned pointer), the next one whose
 * workspace fits the planned size takes its place for good. A direction without any usable candidate is not an
 * error until it is called: the first conv's backward-data never is (its input is the data), and planning must
 * not stop on it (nor make `--device auto` exit instead of choosing the CPU).
 * Math: allow_tf32 -> CUDNN_DEFAULT_MATH (TF32 tensor cores allowed on Ampere and newer), else CUDNN_FMA_MATH
 * (plain float32 FMA kernels only). Never CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION (it would round to fp16).
 *
 * Batches whose tensors pass 2^31-1 elements (cuDNN's descriptors take int sizes and strides) run as equal
 * chunks of samples (the largest divisor of n that fits); backward filter adds the chunks with beta 1 after the
 * first. dbias is a deterministic two-pass reduction over all output positions (size_t indices). */
#include <limits.h>
#include <pthread.h>
#include <string.h>

#include "conv3d.h"
#include "cuda_check.h"

#define CONV_WS_LIMIT (1UL << 30) /* workspace per algorithm, at most */
#define CONV_MAX_CAND 8           /* candidates kept per direction */
#define CONV_BIAS_MIN_ROWS 64     /* dbias partial pass: output positions per block, at least */
#define CONV_BIAS_MAX_BLOCKS 1024 /* dbias partial pass: blocks, at most */
#define CONV_BIAS_ROWS_PER_THREAD 8
#define CONV_BIAS_MAX_ROW_BLOCKS (1u << 20)

enum { DIR_FWD = 0, DIR_DATA = 1, DIR_FILTER = 2 };
static const char *const DIR_NAME[3] = {"forward", "backward-data", "backward-filter"};

typedef struct {
    int algo; /* cudnnConvolutionFwdAlgo_t / BwdDataAlgo_t / BwdFilterAlgo_t */
    cudnnMathType_t math;
    size_t ws;
} ConvCand;

typedef struct {
    Conv3dShape shape; /* key, with the two options */
    int deterministic, allow_tf32;
    int chunk_n;                      /* samples per cuDNN call; divides shape.n */
    size_t x_chunk, y_chunk;          /* elements of x and y per chunk */
    cudnnTensorDescriptor_t xd, yd;   /* chunk_n samples */
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd[3]; /* one per direction: each carries its algorithm's math type */
    ConvCand cand[3][CONV_MAX_CAND];
    int ncand[3], cur[3];
    char *unusable[3]; /* when ncand[dir] == 0: why, reported on the direction's first call */
    size_t ws_bytes; /* what conv3d_workspace_bytes_cuda reports: max over the directions' first candidates */
} ConvPlan;

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static ConvPlan **cache;
static size_t cache_n, cache_cap;

static void shape_str(const Conv3dShape *s, char *buf, size_t len) {
    snprintf(buf, len, "n=%d %dx%dx%d c_in=%d -> c_out=%d, k=%d stride=%d pad=%d (output %dx%dx%d)", s->n, s->d, s->h,
             s->w, s->c_in, s->c_out, s->k, s->stride, s->pad, s->od, s->oh, s->ow);
}

static int same_shape(const Conv3dShape *a, const Conv3dShape *b) {
    return a->n == b->n && a->d == b->d && a->h == b->h && a->w == b->w && a->c_in == b->c_in &&
           a->c_out == b->c_out && a->k == b->k && a->stride == b->stride && a->pad == b->pad && a->od == b->od &&
           a->oh == b->oh && a->ow == b->ow;
}

/* The math type to run a heuristic result with, or -1 to skip it (see the file comment). */
static int usable_math(cudnnMathType_t m, int allow_tf32) {
    if (m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return -1;
    if (allow_tf32) return (int)m;
    return m == CUDNN_TENSOR_OP_MATH ? -1 : (int)CUDNN_FMA_MATH;
}

/* Heuristic results of one direction, common fields (the three perf structs differ only in the algo's type). */
typedef struct {
    int algo;
    cudnnStatus_t status;
    cudnnDeterminism_t determinism;
    cudnnMathType_t math;
} Heur;

static int heuristics(ConvPlan *p, int dir, Heur *out, int max) {
    cudnnHandle_t h = vx_cudnn_handle();
    int returned = 0;
    if (dir == DIR_FWD) {
        cudnnConvolutionFwdAlgoPerf_t perf[16];
        CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, p->xd, p->wd, p->cd[dir], p->yd, 16, &returned, perf));
        for (int i = 0; i < returned && i < max; i++)
            out[i] = Heur{(int)perf[i].algo, perf[i].status, perf[i].determinism, perf[i].mathType};
    } else if (dir == DIR_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[16];
        CUDNN_CHECK(
            cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p->wd, p->yd, p->cd[dir], p->xd, 16, &returned, perf));
        for (int i = 0; i < returned && i < max; i++)
            out[i] = Heur{(int)perf[i].algo, perf[i].status, perf[i].determinism, perf[i].mathType};
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[16];
        CUDNN_CHECK(
            cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p->xd, p->yd, p->cd[dir], p->wd, 16, &returned, perf));
        for (int i = 0; i < returned && i < max; i++)
            out[i] = Heur{(int)perf[i].algo, perf[i].status, perf[i].determinism, perf[i].mathType};
    }
    return returned < max ? returned : max;
}

/* Workspace of one algorithm under the descriptor's current math type; non-SUCCESS when cuDNN refuses it. */
static cudnnStatus_t workspace_of(ConvPlan *p, int dir, int algo, size_t *ws) {
    cudnnHandle_t h = vx_cudnn_handle();
    *ws = 0;
    if (dir == DIR_FWD)
        return cudnnGetConvolutionForwardWorkspaceSize(h, p->xd, p->wd, p->cd[dir], p->yd,
                                                       (cudnnConvolutionFwdAlgo_t)algo, ws);
    if (dir == DIR_DATA)
        return cudnnGetConvolutionBackwardDataWorkspaceSize(h, p->wd, p->yd, p->cd[dir], p->xd,
                                                            (cudnnConvolutionBwdDataAlgo_t)algo, ws);
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p->xd, p->yd, p->cd[dir], p->wd,
                                                          (cudnnConvolutionBwdFilterAlgo_t)algo, ws);
}

/* Fills p->cand[dir]; with none usable, records why in p->unusable[dir] instead. */
static void choose_algorithms(ConvPlan *p, int dir) {
    Heur heur[16];
    const int nh = heuristics(p, dir, heur, 16);
    p->ncand[dir] = 0;
    for (int i = 0; i < nh && p->ncand[dir] < CONV_MAX_CAND; i++) {
        const Heur *r = &heur[i];
        if (r->status != CUDNN_STATUS_SUCCESS) continue;
        if (p->deterministic && r->determinism != CUDNN_DETERMINISTIC) continue;
        const int math = usable_math(r->math, p->allow_tf32);
        if (math < 0) continue;
        int dup = 0;
        for (int j = 0; j < p->ncand[dir]; j++)
            dup |= p->cand[dir][j].algo == r->algo && (int)p->cand[dir][j].math == math;
        if (dup) continue;
        CUDNN_CHECK(cudnnSetConvolutionMathType(p->cd[dir], (cudnnMathType_t)math));
        size_t ws = 0;
        if (workspace_of(p, dir, r->algo, &ws) != CUDNN_STATUS_SUCCESS || ws > CONV_WS_LIMIT) continue;
        p->cand[dir][p->ncand[dir]++] = ConvCand{r->algo, (cudnnMathType_t)math, ws};
    }
    if (p->ncand[dir] == 0) {
        char shape[200], tried[600] = "";
        shape_str(&p->shape, shape, sizeof shape);
        for (int i = 0; i < nh; i++) {
            const size_t used = strlen(tried);
            snprintf(tried + used, sizeof tried - used, "%s algo %d (%s, %s, math %d)", i ? "," : "", heur[i].algo,
                     cudnnGetErrorString(heur[i].status),
                     heur[i].determinism == CUDNN_DETERMINISTIC ? "deterministic" : "non-deterministic",
                     (int)heur[i].math);
        }
        char why[1200];
        snprintf(why, sizeof why,
                 "cuDNN offers no usable %s convolution algorithm for conv3d %s with deterministic=%d, tf32=%d and a "
                 "workspace limit of %lu MiB (heuristics returned:%s); try train.deterministic=0, train.tf32=1 or "
                 "--device cpu",
                 DIR_NAME[dir], shape, p->deterministic, p->allow_tf32, (unsigned long)(CONV_WS_LIMIT >> 20),
                 nh ? tried : " nothing");
        p->unusable[dir] = strdup(why);
        return;
    }
    p->cur[dir] = 0;
    CUDNN_CHECK(cudnnSetConvolutionMathType(p->cd[dir], p->cand[dir][0].math));
}

/* A cuDNN call inside describe(): a failure is reported through `why`, not fatal, so the descriptor test can run
 * every shape. */
#define DESCRIBE_TRY(call)                                                                                     \
    do {                                                                                                       \
        const cudnnStatus_t st_ = (call);                                                                      \
        if (st_ != CUDNN_STATUS_SUCCESS) {                                                                     \
            snprintf(why, why_len, "conv3d %s: %s failed: %s", shape, #call, cudnnGetErrorString(st_));        \
            return 0;                                                                                          \
        }                                                                                                      \
    } while (0)

/* The chunking and the descriptors of p (p->shape and p->allow_tf32 set): needs the cuDNN library but no GPU and
 * no handle. 0 with a one-line reason when cuDNN refuses a descriptor or computes another output shape. */
static int describe(ConvPlan *p, char *why, size_t why_len) {
    const Conv3dShape *s = &p->shape;
    char shape[200];
    shape_str(s, shape, sizeof shape);
    /* chunk of samples: every tensor of a cuDNN call within int range */
    const size_t in_ps = (size_t)s->d * s->h * s->w * s->c_in, out_ps = (size_t)s->od * s->oh * s->ow * s->c_out;
    const size_t per = in_ps > out_ps ? in_ps : out_ps;
    if (per > (size_t)INT_MAX || (size_t)s->c_out * s->k * s->k * s->k * s->c_in > (size_t)INT_MAX) {
        snprintf(why, why_len, "conv3d %s: one sample or the filter has more than 2^31-1 elements, beyond cuDNN's "
                 "int sizes; lower model.input_size or model.channels", shape);
        return 0;
    }
    int cn = (int)((size_t)INT_MAX / per < (size_t)s->n ? (size_t)INT_MAX / per : (size_t)s->n);
    while (s->n % cn) cn--;
    p->chunk_n = cn;
    p->x_chunk = in_ps * cn;
    p->y_chunk = out_ps * cn;

    const int xdim[5] = {cn, s->c_in, s->d, s->h, s->w};
    const int xstr[5] = {(int)in_ps, 1, s->h * s->w * s->c_in, s->w * s->c_in, s->c_in};
    const int ydim[5] = {cn, s->c_out, s->od, s->oh, s->ow};
    const int ystr[5] = {(int)out_ps, 1, s->oh * s->ow * s->c_out, s->ow * s->c_out, s->c_out};
    const int wdim[5] = {s->c_out, s->c_in, s->k, s->k, s->k};
    const int pad[3] = {s->pad, s->pad, s->pad}, stride[3] = {s->stride, s->stride, s->stride}, dil[3] = {1, 1, 1};
    DESCRIBE_TRY(cudnnCreateTensorDescriptor(&p->xd));
    DESCRIBE_TRY(cudnnCreateTensorDescriptor(&p->yd));
    DESCRIBE_TRY(cudnnCreateFilterDescriptor(&p->wd));
    DESCRIBE_TRY(cudnnSetTensorNdDescriptor(p->xd, CUDNN_DATA_FLOAT, 5, xdim, xstr));
    DESCRIBE_TRY(cudnnSetTensorNdDescriptor(p->yd, CUDNN_DATA_FLOAT, 5, ydim, ystr));
    DESCRIBE_TRY(cudnnSetFilterNdDescriptor(p->wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, 5, wdim));
    for (int dir = 0; dir < 3; dir++) {
        DESCRIBE_TRY(cudnnCreateConvolutionDescriptor(&p->cd[dir]));
        DESCRIBE_TRY(cudnnSetConvolutionNdDescriptor(p->cd[dir], 3, pad, stride, dil, CUDNN_CROSS_CORRELATION,
                                                    CUDNN_DATA_FLOAT));
        DESCRIBE_TRY(cudnnSetConvolutionMathType(p->cd[dir], p->allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
    }
    /* cuDNN's idea of the output shape must be ours */
    int odim[5] = {0, 0, 0, 0, 0};
    DESCRIBE_TRY(cudnnGetConvolutionNdForwardOutputDim(p->cd[DIR_FWD], p->xd, p->wd, 5, odim));
    for (int i = 0; i < 5; i++)
        if (odim[i] != ydim[i]) {
            snprintf(why, why_len,
                     "conv3d %s: cuDNN computes output dims {%d, %d, %d, %d, %d}, conv3d_shape {%d, %d, %d, %d, %d}",
                     shape, odim[0], odim[1], odim[2], odim[3], odim[4], ydim[0], ydim[1], ydim[2], ydim[3], ydim[4]);
            return 0;
        }
    return 1;
}

static void plan_destroy(ConvPlan *p) {
    for (int dir = 0; dir < 3; dir++) {
        if (p->cd[dir]) cudnnDestroyConvolutionDescriptor(p->cd[dir]);
        free(p->unusable[dir]);
    }
    if (p->wd) cudnnDestroyFilterDescriptor(p->wd);
    if (p->yd) cudnnDestroyTensorDescriptor(p->yd);
    if (p->xd) cudnnDestroyTensorDescriptor(p->xd);
    free(p);
}

static ConvPlan *plan_create(const Conv3dShape *s, const BackendOptions *o) {
    ConvPlan *p = (ConvPlan *)vx_calloc(1, sizeof *p);
    p->shape = *s;
    p->deterministic = o->deterministic != 0;
    p->allow_tf32 = o->allow_tf32 != 0;
    char why[600];
    if (!describe(p, why, sizeof why)) {
        errno = 0;
        vx_fatal("%s", why);
    }

    p->ws_bytes = 0;
    for (int dir = 0; dir < 3; dir++) {
        choose_algorithms(p, dir);
        if (p->ncand[dir] > 0 && p->cand[dir][0].ws > p->ws_bytes) p->ws_bytes = p->cand[dir][0].ws;
    }
    return p;
}

/* The plan of a shape under the current options, created on first use. */
static ConvPlan *plan_get(const Conv3dShape *s) {
    const BackendOptions *o = vx_cuda_options();
    const int det = o->deterministic != 0, tf32 = o->allow_tf32 != 0;
    pthread_mutex_lock(&cache_mu);
    for (size_t i = 0; i < cache_n; i++) {
        ConvPlan *p = cache[i];
        if (p->deterministic == det && p->allow_tf32 == tf32 && same_shape(&p->shape, s)) {
            pthread_mutex_unlock(&cache_mu);
            return p;
        }
    }
    if (cache_n == cache_cap) {
        cache_cap = cache_cap ? 2 * cache_cap : 64;
        cache = (ConvPlan **)realloc(cache, sizeof(ConvPlan *) * cache_cap);
        if (!cache) vx_fatal("out of host memory for the convolution plan cache");
    }
    ConvPlan *p = plan_create(s, o);
    cache[cache_n++] = p;
    pthread_mutex_unlock(&cache_mu);
    return p;
}

void conv3d_cuda_cache_clear(void) {
    /* A fatal error inside plan_create exits with cache_mu held, and shutdown then runs from atexit on the same
     * thread: locking again would hang the exit, so a held lock means "exiting, leave it". */
    if (pthread_mutex_trylock(&cache_mu) != 0) return;
    for (size_t i = 0; i < cache_n; i++) plan_destroy(cache[i]);
    free(cache);
    cache = NULL;
    cache_n = cache_cap = 0;
    pthread_mutex_unlock(&cache_mu);
}

extern "C" size_t conv3d_workspace_bytes_cuda(const Conv3dShape *s) { return plan_get(s)->ws_bytes; }

extern "C" int conv3d_cuda_describe(const Conv3dShape *s, int *chunk_n, char *why, size_t why_len) {
    ConvPlan *p = (ConvPlan *)vx_calloc(1, sizeof *p);
    p->shape = *s;
    const int ok = describe(p, why, why_len);
    if (ok && chunk_n) *chunk_n = p->chunk_n;
    plan_destroy(p);
    return ok;
}

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
            shape_str(&p->shape, shape, sizeof shape);
            snprintf(what, sizeof what, "cuDNN %s convolution (algorithm %d, math %d) of conv3d %s", DIR_NAME[dir],
                     p->cand[dir][p->cur[dir]].algo, (int)p->cand[dir][p->cur[dir]].math, shape);
            vx_cuda_fail(__FILE__, __LINE__, what, "cuDNN", cudnnGetErrorString(st), vx_cudnn_hint(st));
        }
        p->cur[dir] = next;
        CUDNN_CHECK(cudnnSetConvolutionMathType(p->cd[dir], p->cand[dir][next].math));
    }
}

/* ---- bias kernels ----------------------------------------------------------------------------------------- */

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

/* y [P][c] += bias [c] */
template <int V>
__global__ void conv_bias_kernel(size_t P, int lanes, int CW, int RY, size_t rows_per_block, size_t row_blocks,
                                 const float *__restrict__ bias, float *__restrict__ y) {
    const int tx = threadIdx.x % CW, ty = threadIdx.x / CW;
    if (ty >= RY) return; /* no block-wide synchronization below */
    for (size_t rb = blockIdx.x; rb < row_blocks; rb += gridDim.x) {
        const size_t p0 = rb * rows_per_block, p1 = p0 + rows_per_block < P ? p0 + rows_per_block : P;
        for (int lane = tx; lane < lanes; lane += CW) {
            float bv[V];
#pragma unroll
            for (int k = 0; k < V; k++) bv[k] = bias[lane * V + k];
            for (size_t p = p0 + ty; p < p1; p += RY) {
                float v[V];
                vx_load<V>(y, p * lanes + lane, v);
#pragma unroll
                for (int k = 0; k < V; k++) v[k] += bv[k];
                vx_store<V>(y, p * lanes + lane, v);
            }
        }
    }
}

static void add_bias(const Conv3dShape *s, const float *bias, float *y) {
    const size_t P = (size_t)s->n * s->od * s->oh * s->ow;
    const RowLayout l = row_layout(s->c_out, s->c_out % 4 == 0 && vx_aligned16(y));
    const size_t rpb = (size_t)l.RY * CONV_BIAS_ROWS_PER_THREAD, row_blocks = (P + rpb - 1) / rpb;
    const unsigned grid = (unsigned)(row_blocks < CONV_BIAS_MAX_ROW_BLOCKS ? row_blocks : CONV_BIAS_MAX_ROW_BLOCKS);
    if (l.V == 4)
        conv_bias_kernel<4>
            <<<grid, VX_THREADS, 0, vx_cuda_stream()>>>(P, l.lanes, l.CW, l.RY, rpb, row_blocks, bias, y);
    else
        conv_bias_kernel<1>
            <<<grid, VX_THREADS, 0, vx_cuda_stream()>>>(P, l.lanes, l.CW, l.RY, rpb, row_blocks, bias, y);
    LAUNCH_CHECK("conv_bias_kernel");
}

/* part [nblk][c]: block blk sums rows [blk*SB, (blk+1)*SB) of dy [P][c] per channel, its threads in ty order */
template <int V>
__global__ void conv_dbias_partial_kernel(size_t P, int c, int lanes, int CW, int RY, size_t SB,
                                          const float *__restrict__ dy, double *__restrict__ part) {
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

static void bias_grad(const Conv3dShape *s, const float *dy, float *dbias, float beta) {
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
    if (l.V == 4)
        conv_dbias_partial_kernel<4><<<(unsigned)nblk, VX_THREADS, 0, vx_cuda_stream()>>>(P, s->c_out, l.lanes, l.CW,
                                                                                        l.RY, SB, dy, part);
    else
        conv_dbias_partial_kernel<1><<<(unsigned)nblk, VX_THREADS, 0, vx_cuda_stream()>>>(P, s->c_out, l.lanes, l.CW,
                                                                                        l.RY, SB, dy, part);
    LAUNCH_CHECK("conv_dbias_partial_kernel");
    conv_dbias_final_kernel<<<(unsigned)((c + VX_THREADS - 1) / VX_THREADS), VX_THREADS, 0, vx_cuda_stream()>>>(
        s->c_out, (int)nblk, part, dbias, beta);
    LAUNCH_CHECK("conv_dbias_final_kernel");
}

/* ---- the three directions --------------------------------------------------------------------------------- */

typedef struct {
    const float *a, *b; /* forward: x, wt; data: dy, wt; filter: x, dy */
    float *out;         /* y, dx, dw */
    float beta;         /* of the first chunk (later chunks of backward filter add) */
    void *ws;
} ConvArgs;

static cudnnStatus_t call_forward(ConvPlan *p, const ConvCand *c, size_t chunk, const void *ctx) {
    const ConvArgs *a = (const ConvArgs *)ctx;
    const float one = 1.0f, zero = 0.0f;
    return cudnnConvolutionForward(vx_cudnn_handle(), &one, p->xd, a->a + chunk * p->x_chunk, p->wd, a->b,
                                   p->cd[DIR_FWD], (cudnnConvolutionFwdAlgo_t)c->algo, a->ws, c->ws, &zero, p->yd,
                                   a->out + chunk * p->y_chunk);
}

static cudnnStatus_t call_data(ConvPlan *p, const ConvCand *c, size_t chunk, const void *ctx) {
    const ConvArgs *a = (const ConvArgs *)ctx;
    const float one = 1.0f;
    return cudnnConvolutionBackwardData(vx_cudnn_handle(), &one, p->wd, a->b, p->yd, a->a + chunk * p->y_chunk,
                                        p->cd[DIR_DATA], (cudnnConvolutionBwdDataAlgo_t)c->algo, a->ws, c->ws, &a->beta,
                                        p->xd, a->out + chunk * p->x_chunk);
}

static cudnnStatus_t call_filter(ConvPlan *p, const ConvCand *c, size_t chunk, const void *ctx) {
    const ConvArgs *a = (const ConvArgs *)ctx;
    const float one = 1.0f;
    const float beta = chunk == 0 ? a->beta : 1.0f;
    return cudnnConvolutionBackwardFilter(vx_cudnn_handle(), &one, p->xd, a->a + chunk * p->x_chunk, p->yd,
                                          a->b + chunk * p->y_chunk, p->cd[DIR_FILTER],
                                          (cudnnConvolutionBwdFilterAlgo_t)c->algo, a->ws, c->ws, &beta, p->wd, a->out);
}

static void check_workspace(const ConvPlan *p, const void *workspace) {
    if (p->ws_bytes > 0 && !workspace) {
        char shape[200];
        shape_str(&p->shape, shape, sizeof shape);
        vx_fatal("conv3d %s needs %zu bytes of workspace, got NULL", shape, p->ws_bytes);
    }
}

extern "C" void conv3d_forward_cuda(const Conv3dShape *s, const float *x, const float *wt, const float *bias, float *y,
                                    void *workspace) {
    ConvPlan *p = plan_get(s);
    check_workspace(p, workspace);
    const ConvArgs a = {x, wt, y, 0.0f, workspace};
    for (int ch = 0; ch < s->n / p->chunk_n; ch++) run_with_fallback(p, DIR_FWD, call_forward, (size_t)ch, &a);
    if (bias) add_bias(s, bias, y);
}

extern "C" void conv3d_backward_data_cuda(const Conv3dShape *s, const float *dy, const float *wt, float *dx, float beta,
                                          void *workspace) {
    ConvPlan *p = plan_get(s);
    check_workspace(p, workspace);
    const ConvArgs a = {dy, wt, dx, beta, workspace};
    for (int ch = 0; ch < s->n / p->chunk_n; ch++) run_with_fallback(p, DIR_DATA, call_data, (size_t)ch, &a);
}

extern "C" void conv3d_backward_filter_cuda(const Conv3dShape *s, const float *x, const float *dy, float *dw,
                                            float *dbias, float beta, void *workspace) {
    ConvPlan *p = plan_get(s);
    check_workspace(p, workspace);
    const ConvArgs a = {x, dy, dw, beta, workspace};
    for (int ch = 0; ch < s->n / p->chunk_n; ch++) run_with_fallback(p, DIR_FILTER, call_filter, (size_t)ch, &a);
    if (dbias) bias_grad(s, dy, dbias, beta);
}
