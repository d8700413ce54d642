/* conv3d_cudnn_plan.cu: how each convolution shape is described to cuDNN and which algorithms run it (the plan of
 * conv3d_cudnn_plan.h), made once per (shape, options) and cached; conv3d_cuda.cu runs the plans.
 *
 * Descriptors: x [n][d][h][w][c_in] as 5-D dims {n, c_in, d, h, w} with explicit NDHWC strides, the filter
 * [c_out][kd][kh][kw][c_in] as {c_out, c_in, kd, kh, kw} in CUDNN_TENSOR_NHWC format, y likewise; 3 spatial dims,
 * the shape's pad and stride per dim (d, h, w), dilation 1, cross-correlation, float compute; tensors and filter of the shape's storage type
 * (float, bfloat16 or half: cuDNN's FLOAT, PSEUDO_BFLOAT16 and PSEUDO_HALF configurations). Layouts: a tensor with a single channel (the
 * first conv's input, the last conv's output) has the same memory in NDHWC and NCDHW, but its NDHWC strides make
 * C and W both stride 1, which cuDNN may refuse or treat as a layout it has no 3-D kernel for. Such shapes are
 * described first as LAYOUT_C1_NCDHW (the single-channel tensor with packed NCDHW strides, and a c_in == 1 filter
 * in NCHW format: [c_out][kd][kh][kw][1] is [c_out][1][kd][kh][kw]) and, for each direction where that gives no usable
 * algorithm, as plain LAYOUT_NDHWC. Other shapes have LAYOUT_NDHWC only.
 *
 * Algorithms: per direction, cuDNN's heuristics (cudnnGet*Algorithm_v7: no memory and no trial runs needed) in
 * cuDNN's order of preference, keeping those whose status is SUCCESS, whose workspace is at most CONV_WS_LIMIT,
 * whose math type respects TF32, and, with the deterministic option, whose determinism is CUDNN_DETERMINISTIC. The
 * workspace reported for the shape is the largest of the directions' first candidates. A failing heuristics or
 * workspace query, or a descriptor cuDNN refuses, moves on to the next candidate or layout; with none left the
 * direction records why, and that is reported where it matters: when the direction is called (the first conv's
 * backward-data never is), or by conv3d_cuda_usable during the device choice, which then picks the CPU (auto) or
 * stops with the reason (--device cuda). Planning itself never exits.
 * Math: float32 storage with TF32 allowed -> CUDNN_DEFAULT_MATH (TF32 tensor cores on Ampere and newer), else
 * CUDNN_FMA_MATH (float32 FMA kernels only); never CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION (it would round to fp16).
 * 16-bit storage: whatever math cuDNN proposes (tensor cores are what it is for; accumulation stays float32).
 * cuDNN 9.10.2 to 9.15
 * have a broken 3-D TF32 kernel (PyTorch turned TF32 off for conv3d on them): with those loaded, TF32 stays off
 * and the run says so once.
 * Batches whose tensors pass 2^31-1 elements (cuDNN's descriptors take int sizes and strides) run as equal chunks
 * of samples (the largest divisor of n that fits). */
#include <limits.h>
#include <pthread.h>
#include <string.h>

#include "conv3d/conv3d_cudnn_plan.h"

#define CONV_WS_LIMIT (1UL << 30) /* workspace per algorithm, at most */
#define CONV_HEUR_MAX 16          /* heuristic results asked for per direction */

const char *const CONV_DIR_NAME[3] = {"forward", "backward-data", "backward-filter"};
static const char *const LAYOUT_NAME[CONV_N_LAYOUTS] = {"NDHWC", "single channel as NCDHW"};

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static ConvPlan **cache;
static size_t cache_n, cache_cap;

/* "3" for the same value on every axis (what a cubic shape printed before per-axis shapes), else "1x3x3" */
static void axes_str(const int v[3], char *buf, size_t len) {
    if (v[0] == v[1] && v[1] == v[2]) snprintf(buf, len, "%d", v[0]);
    else snprintf(buf, len, "%dx%dx%d", v[0], v[1], v[2]);
}

void conv_shape_str(const Conv3dShape *s, char *buf, size_t len) {
    char k[40], st[40], pd[40];
    axes_str(s->k, k, sizeof k);
    axes_str(s->stride, st, sizeof st);
    axes_str(s->pad, pd, sizeof pd);
    snprintf(buf, len, "n=%d %dx%dx%d c_in=%d -> c_out=%d, k=%s stride=%s pad=%s (output %dx%dx%d), %s", s->n, s->d,
             s->h, s->w, s->c_in, s->c_out, k, st, pd, s->od, s->oh, s->ow, dtype_name(s->dtype));
}

static int same_axes(const int a[3], const int b[3]) { return a[0] == b[0] && a[1] == b[1] && a[2] == b[2]; }

static int same_shape(const Conv3dShape *a, const Conv3dShape *b) {
    return a->n == b->n && a->d == b->d && a->h == b->h && a->w == b->w && a->c_in == b->c_in &&
           a->c_out == b->c_out && same_axes(a->k, b->k) && same_axes(a->stride, b->stride) &&
           same_axes(a->pad, b->pad) && a->od == b->od && a->oh == b->oh && a->ow == b->ow && a->dtype == b->dtype;
}

/* cuDNN's name for a storage type */
static cudnnDataType_t cudnn_type(DType t) {
    return t == DT_BF16 ? CUDNN_DATA_BFLOAT16 : t == DT_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

extern "C" int conv3d_cuda_tf32_broken(size_t cudnn_version) { return cudnn_version >= 91002 && cudnn_version < 91600; }

/* ---- names for the log ------------------------------------------------------------------------------------ */

static const char *algo_name(int dir, int algo) {
    static const char *const fwd[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT",
                                      "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
    static const char *const data[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
    static const char *const filt[] = {"ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED",
                                       "FFT_TILING"};
    const char *const *t = dir == DIR_FWD ? fwd : dir == DIR_DATA ? data : filt;
    const int n = dir == DIR_FWD ? 8 : dir == DIR_DATA ? 6 : 7;
    return algo >= 0 && algo < n ? t[algo] : "unknown";
}

static const char *math_name(cudnnMathType_t m) {
    switch (m) {
    case CUDNN_DEFAULT_MATH: return "DEFAULT (TF32 allowed)";
    case CUDNN_TENSOR_OP_MATH: return "TENSOR_OP (TF32)";
    case CUDNN_FMA_MATH: return "FMA (float32)";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "TENSOR_OP (conversion allowed)";
    default: return "other";
    }
}

static int log_state = -1; /* -1: VX_CONV_LOG not read yet */
int conv_log_on(void) {
    if (log_state < 0) log_state = vx_env_flag("VX_CONV_LOG");
    return log_state;
}

static void log_plan(const ConvPlan *p) {
    char shape[200];
    conv_shape_str(&p->shape, shape, sizeof shape);
    for (int dir = 0; dir < 3; dir++) {
        if (p->ncand[dir] == 0) {
            fprintf(stderr, "conv3d %s %s: no usable algorithm: %s\n", shape, CONV_DIR_NAME[dir], p->unusable[dir]);
            continue;
        }
        const ConvCand *c = &p->cand[dir][0];
        fprintf(stderr,
                "conv3d %s %s: %s (algo %d), math %s, %s, workspace %.2f MiB, layout %s, %d candidate%s%s\n", shape,
                CONV_DIR_NAME[dir], algo_name(dir, c->algo), c->algo, math_name(c->math),
                c->determinism == CUDNN_DETERMINISTIC ? "deterministic" : "non-deterministic", c->ws / 1048576.0,
                LAYOUT_NAME[p->layout[dir]], p->ncand[dir], p->ncand[dir] == 1 ? "" : "s",
                p->allow_tf32 && !p->tf32 ? " (TF32 off: this cuDNN's 3-D TF32 is broken)" : "");
    }
}

void conv_log_switch(const ConvPlan *p, int dir, int from, int to, cudnnStatus_t why) {
    if (!conv_log_on()) return;
    char shape[200];
    conv_shape_str(&p->shape, shape, sizeof shape);
    const ConvCand *a = &p->cand[dir][from], *b = &p->cand[dir][to];
    fprintf(stderr, "conv3d %s %s: cuDNN refused %s (algo %d, math %s): %s; now %s (algo %d, math %s, %s)\n", shape,
            CONV_DIR_NAME[dir], algo_name(dir, a->algo), a->algo, math_name(a->math), cudnnGetErrorString(why),
            algo_name(dir, b->algo), b->algo, math_name(b->math),
            b->determinism == CUDNN_DETERMINISTIC ? "deterministic" : "non-deterministic");
}

/* ---- descriptors ------------------------------------------------------------------------------------------ */

/* p->chunk_n and the chunk sizes; 0 with a reason when one sample or the filter is beyond cuDNN's int sizes. */
static int chunking(ConvPlan *p, char *why, size_t why_len) {
    const Conv3dShape *s = &p->shape;
    const size_t in_ps = (size_t)s->d * s->h * s->w * s->c_in, out_ps = (size_t)s->od * s->oh * s->ow * s->c_out;
    const size_t per = in_ps > out_ps ? in_ps : out_ps;
    if (per > (size_t)INT_MAX || (size_t)conv3d_weight_count(s) > (size_t)INT_MAX) {
        char shape[200];
        conv_shape_str(s, shape, sizeof shape);
        snprintf(why, why_len, "conv3d %s: one sample or the filter has more than 2^31-1 elements, beyond cuDNN's "
                 "int sizes; lower model.input_size or model.channels", shape);
        return 0;
    }
    int cn = (int)((size_t)INT_MAX / per < (size_t)s->n ? (size_t)INT_MAX / per : (size_t)s->n);
    while (s->n % cn) cn--;
    p->chunk_n = cn;
    p->x_chunk = in_ps * cn;
    p->y_chunk = out_ps * cn;
    return 1;
}

/* The layouts a shape is tried with, in order. */
static void layout_order(ConvPlan *p) {
    p->n_layouts = 0;
    if (p->shape.c_in == 1 || p->shape.c_out == 1) p->order[p->n_layouts++] = LAYOUT_C1_NCDHW;
    p->order[p->n_layouts++] = LAYOUT_NDHWC;
}

/* A cuDNN call inside describe(): a failure is reported through `why`, never fatal. */
#define DESCRIBE_TRY(call)                                                                                     \
    do {                                                                                                       \
        const cudnnStatus_t st_ = (call);                                                                      \
        if (st_ != CUDNN_STATUS_SUCCESS) {                                                                     \
            snprintf(why, why_len, "conv3d %s, layout %s: %s failed: %s", shape, LAYOUT_NAME[layout], #call,     \
                     cudnnGetErrorString(st_));                                                                \
            return 0;                                                                                          \
        }                                                                                                      \
    } while (0)

/* Strides of a [cn][d][h][w][c] tensor: NDHWC, or packed NCDHW when it has a single channel and the layout says so
 * (the same memory). */
static void tensor_strides(int d, int h, int w, int c, int as_ncdhw, int str[5]) {
    const int ps = d * h * w * c;
    if (as_ncdhw) {
        str[0] = ps, str[1] = d * h * w, str[2] = h * w, str[3] = w, str[4] = 1;
    } else {
        str[0] = ps, str[1] = 1, str[2] = h * w * c, str[3] = w * c, str[4] = c;
    }
}

/* p->desc[layout] for p->shape and p->chunk_n (needs the cuDNN library, not a GPU or a handle); 0 with a one-line
 * reason when cuDNN refuses a descriptor or computes another output shape. */
static int describe(ConvPlan *p, int layout, char *why, size_t why_len) {
    const Conv3dShape *s = &p->shape;
    ConvDesc *d = &p->desc[layout];
    char shape[200];
    conv_shape_str(s, shape, sizeof shape);
    const int c1 = layout == LAYOUT_C1_NCDHW, cn = p->chunk_n;
    const int xdim[5] = {cn, s->c_in, s->d, s->h, s->w}, ydim[5] = {cn, s->c_out, s->od, s->oh, s->ow};
    int xstr[5], ystr[5];
    tensor_strides(s->d, s->h, s->w, s->c_in, c1 && s->c_in == 1, xstr);
    tensor_strides(s->od, s->oh, s->ow, s->c_out, c1 && s->c_out == 1, ystr);
    const int wdim[5] = {s->c_out, s->c_in, s->k[0], s->k[1], s->k[2]};
    const cudnnTensorFormat_t wfmt = c1 && s->c_in == 1 ? CUDNN_TENSOR_NCHW : CUDNN_TENSOR_NHWC;
    const int *pad = s->pad, *stride = s->stride, dil[3] = {1, 1, 1};
    DESCRIBE_TRY(cudnnCreateTensorDescriptor(&d->xd));
    DESCRIBE_TRY(cudnnCreateTensorDescriptor(&d->yd));
    DESCRIBE_TRY(cudnnCreateFilterDescriptor(&d->wd));
    const cudnnDataType_t dt = cudnn_type(s->dtype);
    DESCRIBE_TRY(cudnnSetTensorNdDescriptor(d->xd, dt, 5, xdim, xstr));
    DESCRIBE_TRY(cudnnSetTensorNdDescriptor(d->yd, dt, 5, ydim, ystr));
    DESCRIBE_TRY(cudnnSetFilterNdDescriptor(d->wd, dt, wfmt, 5, wdim));
    for (int dir = 0; dir < 3; dir++) {
        DESCRIBE_TRY(cudnnCreateConvolutionDescriptor(&d->cd[dir]));
        DESCRIBE_TRY(cudnnSetConvolutionNdDescriptor(d->cd[dir], 3, pad, stride, dil, CUDNN_CROSS_CORRELATION,
                                                    CUDNN_DATA_FLOAT));
        DESCRIBE_TRY(cudnnSetConvolutionMathType(d->cd[dir], p->tf32 || s->dtype != DT_F32 ? CUDNN_DEFAULT_MATH
                                                                                         : CUDNN_FMA_MATH));
    }
    /* cuDNN's idea of the output shape must be ours */
    int odim[5] = {0, 0, 0, 0, 0};
    DESCRIBE_TRY(cudnnGetConvolutionNdForwardOutputDim(d->cd[DIR_FWD], d->xd, d->wd, 5, odim));
    for (int i = 0; i < 5; i++)
        if (odim[i] != ydim[i]) {
            snprintf(why, why_len,
                     "conv3d %s: cuDNN computes output dims {%d, %d, %d, %d, %d}, conv3d_shape {%d, %d, %d, %d, %d}",
                     shape, odim[0], odim[1], odim[2], odim[3], odim[4], ydim[0], ydim[1], ydim[2], ydim[3], ydim[4]);
            return 0;
        }
    d->described = 1;
    return 1;
}

static void desc_destroy(ConvDesc *d) {
    for (int dir = 0; dir < 3; dir++)
        if (d->cd[dir]) cudnnDestroyConvolutionDescriptor(d->cd[dir]);
    if (d->wd) cudnnDestroyFilterDescriptor(d->wd);
    if (d->yd) cudnnDestroyTensorDescriptor(d->yd);
    if (d->xd) cudnnDestroyTensorDescriptor(d->xd);
    memset(d, 0, sizeof *d);
}

static void plan_destroy(ConvPlan *p) {
    for (int l = 0; l < CONV_N_LAYOUTS; l++) desc_destroy(&p->desc[l]);
    for (int dir = 0; dir < 3; dir++) free(p->unusable[dir]);
    free(p);
}

/* ---- algorithms ------------------------------------------------------------------------------------------- */

/* The math type to run a heuristic result with, or -1 to skip it (see the file comment). */
static int usable_math(cudnnMathType_t m, int tf32, DType storage) {
    if (storage != DT_F32) return (int)m; /* 16-bit inputs: tensor cores with float accumulation */
    if (m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return -1;
    if (tf32) return (int)m;
    return m == CUDNN_TENSOR_OP_MATH ? -1 : (int)CUDNN_FMA_MATH;
}

/* Heuristic results of one direction, common fields (the three perf structs differ only in the algo's type). */
typedef struct {
    int algo;
    cudnnStatus_t status;
    cudnnDeterminism_t determinism;
    cudnnMathType_t math;
} Heur;

#define COPY_HEUR(perf, n)                                                                                     \
    for (int i_ = 0; i_ < (n); i_++) out[i_] = Heur{(int)perf[i_].algo, perf[i_].status, perf[i_].determinism, perf[i_].mathType}

static cudnnStatus_t heuristics(ConvDesc *d, int dir, Heur *out, int *count) {
    cudnnHandle_t h = vx_cudnn_handle();
    int returned = 0;
    cudnnStatus_t st;
    if (dir == DIR_FWD) {
        cudnnConvolutionFwdAlgoPerf_t perf[CONV_HEUR_MAX];
        st = cudnnGetConvolutionForwardAlgorithm_v7(h, d->xd, d->wd, d->cd[dir], d->yd, CONV_HEUR_MAX, &returned, perf);
        if (st == CUDNN_STATUS_SUCCESS) COPY_HEUR(perf, returned);
    } else if (dir == DIR_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CONV_HEUR_MAX];
        st = cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d->wd, d->yd, d->cd[dir], d->xd, CONV_HEUR_MAX, &returned,
                                                         perf);
        if (st == CUDNN_STATUS_SUCCESS) COPY_HEUR(perf, returned);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CONV_HEUR_MAX];
        st = cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d->xd, d->yd, d->cd[dir], d->wd, CONV_HEUR_MAX,
                                                           &returned, perf);
        if (st == CUDNN_STATUS_SUCCESS) COPY_HEUR(perf, returned);
    }
    *count = st == CUDNN_STATUS_SUCCESS ? (returned < CONV_HEUR_MAX ? returned : CONV_HEUR_MAX) : 0;
    return st;
}

/* Workspace of one algorithm under the descriptor's current math type; non-SUCCESS when cuDNN refuses it. */
static cudnnStatus_t workspace_of(ConvDesc *d, int dir, int algo, size_t *ws) {
    cudnnHandle_t h = vx_cudnn_handle();
    *ws = 0;
    if (dir == DIR_FWD)
        return cudnnGetConvolutionForwardWorkspaceSize(h, d->xd, d->wd, d->cd[dir], d->yd,
                                                       (cudnnConvolutionFwdAlgo_t)algo, ws);
    if (dir == DIR_DATA)
        return cudnnGetConvolutionBackwardDataWorkspaceSize(h, d->wd, d->yd, d->cd[dir], d->xd,
                                                            (cudnnConvolutionBwdDataAlgo_t)algo, ws);
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d->xd, d->yd, d->cd[dir], d->wd,
                                                          (cudnnConvolutionBwdFilterAlgo_t)algo, ws);
}

static const char *const HEUR_CALL[3] = {"cudnnGetConvolutionForwardAlgorithm_v7",
                                         "cudnnGetConvolutionBackwardDataAlgorithm_v7",
                                         "cudnnGetConvolutionBackwardFilterAlgorithm_v7"};

/* Fills p->cand[dir] from the heuristics of layout `layout` and returns how many; with none, why says why. */
static int choose_algorithms(ConvPlan *p, int dir, int layout, char *why, size_t why_len) {
    ConvDesc *d = &p->desc[layout];
    Heur heur[CONV_HEUR_MAX];
    int nh = 0;
    p->ncand[dir] = 0;
    const cudnnStatus_t hs = heuristics(d, dir, heur, &nh);
    if (hs != CUDNN_STATUS_SUCCESS) {
        snprintf(why, why_len, "layout %s: %s failed: %s", LAYOUT_NAME[layout], HEUR_CALL[dir], cudnnGetErrorString(hs));
        return 0;
    }
    for (int i = 0; i < nh && p->ncand[dir] < CONV_MAX_CAND; i++) {
        const Heur *r = &heur[i];
        if (r->status != CUDNN_STATUS_SUCCESS) continue;
        if (p->deterministic && r->determinism != CUDNN_DETERMINISTIC) continue;
        const int math = usable_math(r->math, p->tf32, p->shape.dtype);
        if (math < 0) continue;
        int dup = 0;
        for (int j = 0; j < p->ncand[dir]; j++)
            dup |= p->cand[dir][j].algo == r->algo && (int)p->cand[dir][j].math == math;
        if (dup) continue;
        if (cudnnSetConvolutionMathType(d->cd[dir], (cudnnMathType_t)math) != CUDNN_STATUS_SUCCESS) continue;
        size_t ws = 0;
        if (workspace_of(d, dir, r->algo, &ws) != CUDNN_STATUS_SUCCESS || ws > CONV_WS_LIMIT) continue;
        p->cand[dir][p->ncand[dir]++] = ConvCand{r->algo, (cudnnMathType_t)math, r->determinism, ws};
    }
    if (p->ncand[dir] > 0 && cudnnSetConvolutionMathType(d->cd[dir], p->cand[dir][0].math) != CUDNN_STATUS_SUCCESS)
        p->ncand[dir] = 0;
    if (p->ncand[dir] == 0) {
        char tried[700] = "";
        for (int i = 0; i < nh; i++) {
            const size_t used = strlen(tried);
            snprintf(tried + used, sizeof tried - used, "%s %s (%s, %s, math %d)", i ? "," : "",
                     algo_name(dir, heur[i].algo), cudnnGetErrorString(heur[i].status),
                     heur[i].determinism == CUDNN_DETERMINISTIC ? "deterministic" : "non-deterministic",
                     (int)heur[i].math);
        }
        snprintf(why, why_len, "layout %s: heuristics returned:%s", LAYOUT_NAME[layout], nh ? tried : " nothing");
        return 0;
    }
    p->cur[dir] = 0;
    p->layout[dir] = layout;
    return p->ncand[dir];
}

/* ---- plans ------------------------------------------------------------------------------------------------ */

static ConvPlan *plan_create(const Conv3dShape *s, const BackendOptions *o) {
    ConvPlan *p = (ConvPlan *)vx_calloc(1, sizeof *p);
    p->shape = *s;
    p->deterministic = o->deterministic != 0;
    p->allow_tf32 = o->allow_tf32 != 0;
    const size_t version = cudnnGetVersion();
    p->tf32 = p->allow_tf32 && !conv3d_cuda_tf32_broken(version);
    static int tf32_said;
    if (p->allow_tf32 && !p->tf32 && !tf32_said) {
        tf32_said = 1;
        fprintf(stderr, "voxscale: cuDNN %zu.%zu.%zu has a known bug in 3-D convolutions with TF32 (9.10.2 to 9.15; "
                "PyTorch turns TF32 off for conv3d there): this run's convolutions use float32 FMA math despite "
                "train.tf32=1; cuDNN 9.16 or newer fixes it\n", version / 10000, version / 100 % 100, version % 100);
    }
    char shape[200], fail[CONV_N_LAYOUTS][900], whole[2600];
    conv_shape_str(s, shape, sizeof shape);
    layout_order(p);
    if (!chunking(p, whole, sizeof whole)) {
        for (int dir = 0; dir < 3; dir++) p->unusable[dir] = strdup(whole);
        return p;
    }
    int described = 0;
    for (int i = 0; i < p->n_layouts; i++) described += describe(p, p->order[i], fail[i], sizeof fail[i]);
    for (int dir = 0; dir < 3; dir++) {
        char tried[CONV_N_LAYOUTS][900];
        int found = 0;
        for (int i = 0; i < p->n_layouts && !found; i++) {
            if (!p->desc[p->order[i]].described) memcpy(tried[i], fail[i], sizeof tried[i]);
            else found = choose_algorithms(p, dir, p->order[i], tried[i], sizeof tried[i]) > 0;
        }
        if (found) {
            if (p->cand[dir][0].ws > p->ws_bytes) p->ws_bytes = p->cand[dir][0].ws;
            continue;
        }
        snprintf(whole, sizeof whole,
                 "cuDNN offers no usable %s convolution algorithm for conv3d %s with deterministic=%d, tf32=%d and a "
                 "workspace limit of %lu MiB (%s%s%s); try train.deterministic=0, train.tf32=1 or --device cpu",
                 CONV_DIR_NAME[dir], shape, p->deterministic, p->tf32, (unsigned long)(CONV_WS_LIMIT >> 20), tried[0],
                 p->n_layouts > 1 ? "; " : "", p->n_layouts > 1 ? tried[1] : "");
        if (!described) snprintf(whole, sizeof whole, "cuDNN refused the descriptors: %s%s%s", fail[0],
                                 p->n_layouts > 1 ? "; " : "", p->n_layouts > 1 ? fail[1] : "");
        p->unusable[dir] = strdup(whole);
    }
    if (conv_log_on()) log_plan(p);
    return p;
}

ConvPlan *conv_plan_get(const Conv3dShape *s) {
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
    /* A fatal error raised while the lock is held (out of host memory above) exits, and shutdown then runs from
     * atexit on the same thread: locking again would hang the exit, so a held lock means "exiting, leave it". */
    if (pthread_mutex_trylock(&cache_mu) != 0) return;
    for (size_t i = 0; i < cache_n; i++) plan_destroy(cache[i]);
    free(cache);
    cache = NULL;
    cache_n = cache_cap = 0;
    pthread_mutex_unlock(&cache_mu);
}

/* ---- entry points of conv3d.h ----------------------------------------------------------------------------- */

extern "C" size_t conv3d_workspace_bytes_cuda(const Conv3dShape *s) {
    const ConvPlan *p = conv_plan_get(s);
    return p->ws_bytes + conv_lp_dw_bytes(p);
}

extern "C" int conv3d_cuda_usable(const Conv3dShape *s, int data_grad, char *why, size_t why_len) {
    ConvPlan *p = conv_plan_get(s);
    for (int dir = 0; dir < 3; dir++) {
        if (dir == DIR_DATA && !data_grad) continue;
        if (p->ncand[dir] == 0) {
            snprintf(why, why_len, "%s", p->unusable[dir]);
            return 0;
        }
    }
    return 1;
}

extern "C" int conv3d_cuda_layouts(const Conv3dShape *s) { return s->c_in == 1 || s->c_out == 1 ? 2 : 1; }

extern "C" int conv3d_cuda_describe_layout(const Conv3dShape *s, int i, Conv3dCudnnLayout *out, char *why,
                                           size_t why_len) {
    ConvPlan *p = (ConvPlan *)vx_calloc(1, sizeof *p);
    p->shape = *s;
    layout_order(p);
    int ok = i >= 0 && i < p->n_layouts;
    if (!ok) snprintf(why, why_len, "layout %d of %d", i, p->n_layouts);
    ok = ok && chunking(p, why, why_len) && describe(p, p->order[i], why, why_len);
    if (ok && out) {
        /* read back what cuDNN holds */
        const ConvDesc *d = &p->desc[p->order[i]];
        cudnnDataType_t dt, xt;
        cudnnTensorFormat_t fmt;
        int nb = 0;
        memset(out, 0, sizeof *out);
        out->chunk_n = p->chunk_n;
        snprintf(out->name, sizeof out->name, "%s", LAYOUT_NAME[p->order[i]]);
        ok = cudnnGetTensorNdDescriptor(d->xd, 5, &xt, &nb, out->x_dims, out->x_strides) == CUDNN_STATUS_SUCCESS &&
             cudnnGetTensorNdDescriptor(d->yd, 5, &dt, &nb, out->y_dims, out->y_strides) == CUDNN_STATUS_SUCCESS &&
             cudnnGetFilterNdDescriptor(d->wd, 5, &dt, &fmt, &nb, out->w_dims) == CUDNN_STATUS_SUCCESS;
        out->w_nchw = fmt == CUDNN_TENSOR_NCHW;
        out->x_type = (int)xt;
        out->w_type = (int)dt;
        if (!ok) snprintf(why, why_len, "reading a descriptor back from cuDNN failed");
    }
    plan_destroy(p);
    return ok;
}

extern "C" int conv3d_cuda_describe(const Conv3dShape *s, int *chunk_n, char *why, size_t why_len) {
    for (int i = 0; i < conv3d_cuda_layouts(s); i++) {
        Conv3dCudnnLayout l;
        if (!conv3d_cuda_describe_layout(s, i, &l, why, why_len)) return 0;
        if (chunk_n) *chunk_n = l.chunk_n;
    }
    return 1;
}
