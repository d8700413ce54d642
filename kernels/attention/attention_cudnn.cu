/* attention_cudnn.cu: the CUDA backend's attention through cuDNN's fused flash attention where the loaded cuDNN
 * offers it for the shape and storage type, the own kernel (attention_cuda.cu) otherwise.
 *
 * Plans: one per (shape, direction, deterministic), made on first use and cached until attention_cuda_cache_clear:
 * the shape rules (attention_cudnn_rules.c), compute capability 8.0+, the graph (attention_cudnn_graph.cu) and its
 * operation graph, cuDNN's heuristics (mode A, then FALLBACK) in cuDNN's order, keeping the first engine config
 * whose execution plan finalizes with a workspace of at most ATT_WS_LIMIT and, with device_options' deterministic,
 * that carries no CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC (the deterministic form of the backward graph, dQ written
 * directly, is built then; otherwise the float32 dQ accumulator form, whose engines add with atomics). Planning never
 * exits: a failing cuDNN call, a refused shape or no engine leaves the plan "unusable" with the reason, and the own
 * kernel runs it. The workspace a plan needs (the accumulator, 256-byte aligned, then cuDNN's) is reported through
 * the op table's workspace_bytes, which the model planner adds to the buffer it shares with the convolutions.
 *
 * The first call of each plan on the device is checked: cuDNN writes the real outputs, the own kernel the same
 * call's outputs into buffers of its own (cudaMalloc'd for the check, then freed), and the two are compared on the
 * host over the head columns, as max|cuDNN - own| / max|own| per output against attention_cudnn_tolerance (twice
 * the op checks' bound for the storage type). If they disagree (or the execution fails) the call is rerun with the
 * own kernel, which runs that shape from then on, and one stderr line says by how much. A call made while a CUDA
 * graph is being captured cannot be checked (no synchronisation there): an unchecked plan leaves it to the own
 * kernel (the trainer captures from the second step, after an eager first one).
 *
 * Calls the plan cannot take run the own kernel: backward with beta != 0 (cuDNN overwrites dq dk dv; the model's
 * attention always overwrites, so no workspace is set aside for an add), pointers not 16-byte aligned (an op check's
 * offset buffers), no workspace passed.
 * Environment: VX_ATTN_CUDA=auto (default) | own (never cuDNN) | cudnn (a shape or plan cuDNN cannot run, or a
 * failed check, is a one-line error and exit 2; the calls above still run the own kernel); VX_ATTN_LOG=1: one
 * stderr line per choice (plan, check, own-kernel call kinds) and why.
 *
 * Verified here: compiles; the descriptors finalize with cuDNN 9.19 (tests/unit/test_attention_cudnn.c); the rules.
 * NOT verified: nothing of this file has run on a GPU (none was available): operation graph finalize, heuristics,
 * execution, the check and the fallbacks are unrun. ci/gpu.sh's ops step runs the op checks and the float64 and
 * own-kernel comparisons with VX_ATTN_CUDA=cudnn where a GPU is lent. */
#include <pthread.h>
#include <string.h>

#include "attention/attention_cudnn_graph.h"

#define ATT_WS_LIMIT (1UL << 30) /* workspace per plan, at most */
#define ATT_HEUR_MAX 16          /* engine configs asked for per heuristics mode */

enum { PLAN_UNUSABLE = 0, PLAN_UNCHECKED = 1, PLAN_CHECKED = 2, PLAN_REJECTED = 3 };
enum { MODE_AUTO = 0, MODE_OWN = 1, MODE_CUDNN = 2 };
static const char *const DIR_NAME[2] = {"forward", "backward"};

typedef struct {
    AttentionShape s; /* key, with dir and deterministic */
    int dir, deterministic;
    int state;
    char why[700];    /* unusable or rejected: why */
    AttGraph g;
    cudnnBackendDescriptor_t keep[2 * ATT_HEUR_MAX + 8]; /* op graph, heuristics, configs, plan: freed together */
    int n_keep;
    cudnnBackendDescriptor_t plan;
    int64_t engine;
    size_t ws_cudnn, ws_total; /* cuDNN's; the whole (accumulator first) */
    int said_call;             /* bits: own-kernel call kinds already logged */
} AttPlan;

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static AttPlan **cache;
static size_t cache_n, cache_cap;

static int env_mode(void) {
    static int mode = -1;
    if (mode < 0) {
        const char *e = getenv("VX_ATTN_CUDA");
        if (!e || !*e || strcmp(e, "auto") == 0) mode = MODE_AUTO;
        else if (strcmp(e, "own") == 0) mode = MODE_OWN;
        else if (strcmp(e, "cudnn") == 0) mode = MODE_CUDNN;
        else vx_usage_error("VX_ATTN_CUDA=%s: expected auto, own or cudnn", e);
    }
    return mode;
}

static int log_on(void) {
    static int on = -1;
    if (on < 0) on = vx_env_flag("VX_ATTN_LOG");
    return on;
}

static void shape_str(const AttentionShape *s, char *buf, size_t len) {
    snprintf(buf, len, "b%d h%d %dx%d d%d ld %d/%d/%d/%d %s", s->batch, s->heads, s->tq, s->tk, s->d, s->ld_q,
             s->ld_k, s->ld_v, s->ld_o, dtype_name(s->dtype));
}

static int same_shape(const AttentionShape *a, const AttentionShape *b) {
    return a->batch == b->batch && a->heads == b->heads && a->tq == b->tq && a->tk == b->tk && a->d == b->d &&
           a->ld_q == b->ld_q && a->ld_k == b->ld_k && a->ld_v == b->ld_v && a->ld_o == b->ld_o &&
           a->scale == b->scale && a->dtype == b->dtype;
}

static void say(const AttPlan *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const AttPlan *p, const char *fmt, ...) {
    char shape[160], msg[900];
    shape_str(&p->s, shape, sizeof shape);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "attention %s %s: %s\n", shape, DIR_NAME[p->dir], msg);
}

/* ---- planning ------------------------------------------------------------------------------------------------ */

static cudnnBackendDescriptor_t keep(AttPlan *p, cudnnBackendDescriptorType_t type) {
    cudnnBackendDescriptor_t d = NULL;
    if (p->n_keep == (int)(sizeof p->keep / sizeof p->keep[0])) return NULL;
    if (cudnnBackendCreateDescriptor(type, &d) != CUDNN_STATUS_SUCCESS) return NULL;
    p->keep[p->n_keep++] = d;
    return d;
}

#define PLAN_TRY(call)                                                                                         \
    do {                                                                                                       \
        const cudnnStatus_t st_ = (call);                                                                      \
        if (st_ != CUDNN_STATUS_SUCCESS) {                                                                     \
            snprintf(p->why, sizeof p->why, "%s failed: %s", #call, cudnnGetErrorString(st_));                 \
            return 0;                                                                                          \
        }                                                                                                      \
    } while (0)

/* Tries engine config cfg: 1 with p->plan set, 0 with a short note of why not appended to tried. */
static int try_config(AttPlan *p, cudnnBackendDescriptor_t cfg, char *tried, size_t tried_len, int *nondet) {
    cudnnHandle_t h = vx_cudnn_handle();
    cudnnBackendDescriptor_t eng = keep(p, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    int64_t n = 0, index = -1;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t n_notes = 0;
    const size_t used = strlen(tried);
    if (!eng || cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                         &eng) != CUDNN_STATUS_SUCCESS) {
        snprintf(tried + used, tried_len - used, " (engine unreadable)");
        return 0;
    }
    cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index);
    if (cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n_notes, notes) != CUDNN_STATUS_SUCCESS)
        n_notes = 0;
    int nd = 0;
    for (int64_t i = 0; i < n_notes; i++) nd |= notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
    if (nd && p->deterministic) {
        (*nondet)++;
        snprintf(tried + used, tried_len - used, " %lld (non-deterministic)", (long long)index);
        return 0;
    }
    cudnnBackendDescriptor_t plan = keep(p, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    cudnnStatus_t st = plan ? cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h)
                            : CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                      &cfg);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(plan);
    int64_t ws = 0;
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws);
    if (st != CUDNN_STATUS_SUCCESS) {
        snprintf(tried + used, tried_len - used, " %lld (%s)", (long long)index, cudnnGetErrorString(st));
        return 0;
    }
    if (ws < 0 || (size_t)ws > ATT_WS_LIMIT) {
        snprintf(tried + used, tried_len - used, " %lld (workspace %lld MiB)", (long long)index, (long long)(ws >> 20));
        return 0;
    }
    p->plan = plan;
    p->engine = index;
    p->ws_cudnn = (size_t)ws;
    return 1;
}

/* The op graph, heuristics and the first usable engine config: 1, or 0 with p->why. */
static int choose_engine(AttPlan *p) {
    cudnnHandle_t h = vx_cudnn_handle();
    cudnnBackendDescriptor_t graph = keep(p, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    if (!graph) PLAN_TRY(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED);
    PLAN_TRY(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    PLAN_TRY(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, p->g.n_ops,
                                      p->g.ops));
    PLAN_TRY(cudnnBackendFinalize(graph));
    char tried[400] = "";
    int offered = 0, nondet = 0;
    const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    for (int m = 0; m < 2; m++) {
        cudnnBackendDescriptor_t heur = keep(p, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
        if (!heur) break;
        int64_t count = 0;
        if (cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                     &graph) != CUDNN_STATUS_SUCCESS ||
            cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[m]) !=
                CUDNN_STATUS_SUCCESS ||
            cudnnBackendFinalize(heur) != CUDNN_STATUS_SUCCESS ||
            cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                     NULL) != CUDNN_STATUS_SUCCESS)
            continue;
        if (count > ATT_HEUR_MAX) count = ATT_HEUR_MAX;
        cudnnBackendDescriptor_t cfgs[ATT_HEUR_MAX];
        int made = 0;
        for (; made < count; made++)
            if (!(cfgs[made] = keep(p, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR))) break;
        int64_t got = 0;
        if (made == 0 || cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                                  made, &got, cfgs) != CUDNN_STATUS_SUCCESS)
            continue;
        offered += (int)got;
        for (int64_t i = 0; i < got && i < made; i++)
            if (try_config(p, cfgs[i], tried, sizeof tried, &nondet)) return 1;
    }
    if (p->deterministic && offered > 0 && nondet == offered)
        snprintf(p->why, sizeof p->why, "deterministic is on and every engine cuDNN offers is non-deterministic (%d)",
                 offered);
    else
        snprintf(p->why, sizeof p->why, "no usable engine: heuristics offered %d config%s%s%s", offered,
                 offered == 1 ? "" : "s", offered ? ", engines:" : "", tried);
    return 0;
}
#undef PLAN_TRY

static AttPlan *plan_create(const AttentionShape *s, int dir, int deterministic) {
    AttPlan *p = (AttPlan *)vx_calloc(1, sizeof *p);
    p->s = *s;
    p->dir = dir;
    p->deterministic = deterministic;
    p->state = PLAN_UNUSABLE;
    const char *rule = attention_cudnn_shape_rule(s, dir == ATT_BWD, cudnnGetVersion());
    cudaDeviceProp prop;
    if (*rule) {
        snprintf(p->why, sizeof p->why, "%s", rule);
    } else if (cudaGetDeviceProperties(&prop, vx_cuda_device_id()) != cudaSuccess || prop.major < 8) {
        cudaGetLastError();
        snprintf(p->why, sizeof p->why, "cuDNN's fused attention needs compute capability 8.0 or newer");
    } else if (!att_graph_build(&p->g, s, dir, !deterministic)) {
        snprintf(p->why, sizeof p->why, "cuDNN refused a descriptor: %s", p->g.why);
    } else if (choose_engine(p)) {
        p->ws_total = (p->g.dq_accum_bytes + 255) / 256 * 256 + p->ws_cudnn;
        p->state = PLAN_UNCHECKED;
    }
    if (log_on()) {
        if (p->state == PLAN_UNUSABLE) say(p, "own kernel: %s", p->why);
        else
            say(p, "cuDNN fused attention, engine %lld, %s, workspace %.2f MiB (checked against the own kernel at "
                "its first call)", (long long)p->engine,
                dir == ATT_FWD ? "forward graph" : p->g.dq_accum ? "dQ accumulated in float32" : "dQ direct (deterministic)",
                p->ws_total / 1048576.0);
    }
    return p;
}

static void plan_destroy(AttPlan *p) {
    for (int i = p->n_keep - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(p->keep[i]);
    att_graph_free(&p->g);
    free(p);
}

static AttPlan *plan_get(const AttentionShape *s, int dir) {
    const int det = vx_cuda_options()->deterministic != 0;
    pthread_mutex_lock(&cache_mu);
    for (size_t i = 0; i < cache_n; i++)
        if (cache[i]->dir == dir && cache[i]->deterministic == det && same_shape(&cache[i]->s, s)) {
            pthread_mutex_unlock(&cache_mu);
            return cache[i];
        }
    if (cache_n == cache_cap) {
        cache_cap = cache_cap ? 2 * cache_cap : 32;
        cache = (AttPlan **)realloc(cache, sizeof(AttPlan *) * cache_cap);
        if (!cache) vx_fatal("out of host memory for the attention plan cache");
    }
    AttPlan *p = plan_create(s, dir, det);
    cache[cache_n++] = p;
    pthread_mutex_unlock(&cache_mu);
    return p;
}

extern "C" void attention_cuda_cache_clear(void) {
    if (pthread_mutex_trylock(&cache_mu) != 0) return; /* exiting from inside the lock: leave it (as conv's) */
    for (size_t i = 0; i < cache_n; i++) plan_destroy(cache[i]);
    free(cache);
    cache = NULL;
    cache_n = cache_cap = 0;
    pthread_mutex_unlock(&cache_mu);
}

size_t attention_cudnn_workspace_bytes(const AttentionShape *s) {
    if (env_mode() == MODE_OWN || *attention_cudnn_shape_rule(s, 0, cudnnGetVersion())) return 0;
    size_t ws = 0;
    for (int dir = 0; dir < 2; dir++) {
        const AttPlan *p = plan_get(s, dir);
        if (p->state != PLAN_UNUSABLE && p->ws_total > ws) ws = p->ws_total;
    }
    return ws;
}

/* ---- running --------------------------------------------------------------------------------------------------- */

typedef struct {
    int64_t uid;
    void *ptr;
} Binding;

/* One execution of p's plan with the bindings: the status (never exits). */
static cudnnStatus_t execute(AttPlan *p, const Binding *b, int n, void *workspace) {
    int64_t uids[16];
    void *ptrs[16];
    for (int i = 0; i < n; i++) uids[i] = b[i].uid, ptrs[i] = b[i].ptr;
    cudnnBackendDescriptor_t vp = NULL;
    cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    void *ws = p->ws_cudnn ? (char *)workspace + (p->ws_total - p->ws_cudnn) : NULL;
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(vp);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendExecute(vx_cudnn_handle(), p->plan, vp);
    if (vp) cudnnBackendDestroyDescriptor(vp);
    return st;
}

/* Own-kernel calls of a usable plan, logged once per kind. */
enum { CALL_BETA = 1, CALL_ALIGN = 2, CALL_NO_WS = 4, CALL_CAPTURE = 8 };
static int own_call(AttPlan *p, int kind, const char *why) {
    if (log_on() && !(p->said_call & kind)) say(p, "this call runs the own kernel: %s", why);
    p->said_call |= kind;
    return 0;
}

/* A plan that cannot run: VX_ATTN_CUDA=cudnn stops here, auto lets the own kernel run. */
static int unusable(const AttPlan *p) {
    if (env_mode() == MODE_CUDNN) {
        char shape[160];
        shape_str(&p->s, shape, sizeof shape);
        vx_usage_error("attention %s %s: VX_ATTN_CUDA=cudnn, but cuDNN's fused attention cannot run it: %s", shape,
                       DIR_NAME[p->dir], p->why);
    }
    return 0;
}

static void reject(AttPlan *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void reject(AttPlan *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->why, sizeof p->why, fmt, ap);
    va_end(ap);
    p->state = PLAN_REJECTED;
    if (env_mode() == MODE_CUDNN) unusable(p);
    say(p, "%s: the own kernel runs this shape from now on", p->why);
}

/* The checks every call makes: the plan, or NULL when the own kernel is to run the call. */
static AttPlan *usable_plan(const AttentionShape *s, int dir, void *const *ptrs, int n, void *workspace) {
    if (env_mode() == MODE_OWN || s->batch == 0 || s->tq == 0) return NULL; /* (no queries: nothing to compute) */
    AttPlan *p = plan_get(s, dir);
    if (p->state == PLAN_UNUSABLE || p->state == PLAN_REJECTED) {
        unusable(p);
        return NULL;
    }
    int aligned = 1;
    for (int i = 0; i < n; i++) aligned &= vx_aligned16(ptrs[i]);
    if (!aligned) {
        own_call(p, CALL_ALIGN, "a pointer not 16-byte aligned");
        return NULL;
    }
    if (p->ws_total && !workspace) {
        own_call(p, CALL_NO_WS, "no workspace passed");
        return NULL;
    }
    if (p->state == PLAN_UNCHECKED && vx_cuda_capturing) {
        own_call(p, CALL_CAPTURE, "the first call is being captured (it cannot be checked)");
        return NULL;
    }
    return p;
}

/* ---- the first call's check --------------------------------------------------------------------------------------- */

/* max over the first `cols` columns of n_rows rows ld elements apart (the heads' columns) of |a - b|, and of |b|;
 * a and b device buffers of type dt. Only up to the last row's last column is read: a may be dk inside a packed
 * QKV gradient, which ends there. */
static void compare(DType dt, const void *a, const void *b, long n_rows, int ld, int cols, double *diff,
                    double *ref) {
    const size_t es = dtype_size(dt), bytes = n_rows > 0 ? ((size_t)(n_rows - 1) * ld + cols) * es : 0;
    void *ha = vx_malloc(bytes ? bytes : 1), *hb = vx_malloc(bytes ? bytes : 1);
    cudaStream_t st = vx_cuda_stream();
    CUDA_CHECK(cudaMemcpyAsync(ha, a, bytes, cudaMemcpyDeviceToHost, st));
    CUDA_CHECK(cudaMemcpyAsync(hb, b, bytes, cudaMemcpyDeviceToHost, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    for (long r = 0; r < n_rows; r++)
        for (int c = 0; c < cols; c++) {
            const size_t i = (size_t)r * ld + c;
            const double x = dtype_load(dt, ha, i), y = dtype_load(dt, hb, i), e = fabs(x - y);
            if (!(e <= *diff)) *diff = e; /* NaN sticks */
            if (fabs(y) > *ref) *ref = fabs(y);
        }
    free(ha);
    free(hb);
}

/* The check's verdict on one output: 1 when within tolerance; else *worst and *name say where. */
static int within(const char *name, double diff, double ref, double tol, double *worst, const char **worst_name) {
    const double rel = diff / (ref > 0 ? ref : 1.0);
    if (!(rel <= *worst)) *worst = rel, *worst_name = name;
    return rel <= tol;
}

static void *check_alloc(size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 256) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

/* outs[i] (rows[i] x ld[i] elements of the storage type, or float32 when f32[i]) from cuDNN against own[i]. */
typedef struct {
    const char *name;
    void *real, *own;
    long rows;
    int ld, cols, f32;
} CheckOut;

static int judge(AttPlan *p, cudnnStatus_t st, const CheckOut *o, int n) {
    if (st != CUDNN_STATUS_SUCCESS) {
        reject(p, "cuDNN's execution failed (%s)", cudnnGetErrorString(st));
        return 0;
    }
    const double tol = attention_cudnn_tolerance(p->s.dtype);
    double worst = 0;
    const char *where = "";
    int ok = 1;
    for (int i = 0; i < n; i++) {
        double diff = 0, ref = 0;
        compare(o[i].f32 ? DT_F32 : p->s.dtype, o[i].real, o[i].own, o[i].rows, o[i].ld, o[i].cols, &diff, &ref);
        ok &= within(o[i].name, diff, ref, tol, &worst, &where);
    }
    if (!ok) {
        reject(p, "cuDNN's fused attention (engine %lld) differs from the own kernel by %.3g of the largest value "
               "(%s; tolerance %.3g for %s)", (long long)p->engine, worst, where, tol, dtype_name(p->s.dtype));
        return 0;
    }
    p->state = PLAN_CHECKED;
    if (log_on()) say(p, "cuDNN agrees with the own kernel: %.3g of the largest value at most (%s; tolerance %.3g)",
                      worst, where, tol);
    return 1;
}

/* ---- the directions (attention_cuda.cu's table calls these first) ------------------------------------------------- */

int attention_cudnn_forward(const AttentionShape *s, const void *q, const void *k, const void *v, void *o, float *lse,
                            void *workspace, AttOwnForward own) {
    void *const ptrs[5] = {(void *)q, (void *)k, (void *)v, o, lse};
    AttPlan *p = usable_plan(s, ATT_FWD, ptrs, 5, workspace);
    if (!p) return 0;
    float scale = s->scale;
    const Binding b[6] = {{ATT_UID_Q, (void *)q}, {ATT_UID_K, (void *)k}, {ATT_UID_V, (void *)v},
                          {ATT_UID_O, o},          {ATT_UID_STATS, lse}, {ATT_UID_SCALE, &scale}};
    if (p->state == PLAN_CHECKED) {
        const cudnnStatus_t st = execute(p, b, 6, workspace);
        if (st == CUDNN_STATUS_SUCCESS) return 1;
        reject(p, "cuDNN's execution failed (%s)", cudnnGetErrorString(st));
        return 0;
    }
    const long rows = (long)s->batch * s->tq, lrows = (long)s->batch * s->heads * s->tq;
    void *o_own = check_alloc((size_t)rows * s->ld_o * dtype_size(s->dtype));
    void *l_own = check_alloc(sizeof(float) * (size_t)lrows);
    int ok = 0;
    if (!o_own || !l_own) {
        reject(p, "the first call's check could not allocate its buffers");
    } else {
        own(s, q, k, v, o_own, (float *)l_own);
        const CheckOut out[2] = {{"o", o, o_own, rows, s->ld_o, s->heads * s->d, 0},
                                 {"lse", lse, l_own, lrows, 1, 1, 1}};
        ok = judge(p, execute(p, b, 6, workspace), out, 2);
    }
    cudaFree(o_own);
    cudaFree(l_own);
    return ok;
}

int attention_cudnn_backward(const AttentionShape *s, const void *q, const void *k, const void *v, const void *o,
                             const void *dout, const float *lse, float *delta, void *dq, void *dk, void *dv,
                             float beta, void *workspace, AttOwnBackward own) {
    void *const ptrs[10] = {(void *)q, (void *)k, (void *)v, (void *)o, (void *)dout, (void *)lse, delta, dq, dk, dv};
    AttPlan *p = usable_plan(s, ATT_BWD, ptrs, 10, workspace);
    if (!p) return 0;
    if (beta != 0.0f) return own_call(p, CALL_BETA, "beta 1 (cuDNN overwrites dq dk dv)");
    float scale = s->scale, one = 1.0f;
    const Binding b[13] = {{ATT_UID_Q, (void *)q},     {ATT_UID_K, (void *)k},      {ATT_UID_V, (void *)v},
                           {ATT_UID_O, (void *)o},     {ATT_UID_DO, (void *)dout},  {ATT_UID_STATS, (void *)lse},
                           {ATT_UID_DQ, dq},           {ATT_UID_DK, dk},            {ATT_UID_DV, dv},
                           {ATT_UID_SCALE, &scale},    {ATT_UID_ONE, &one},         {ATT_UID_SUM, delta},
                           {ATT_UID_DQ_ACC, workspace}};
    const int nb = p->g.dq_accum ? 13 : 12;
    if (p->state == PLAN_CHECKED) {
        const cudnnStatus_t st = execute(p, b, nb, workspace);
        if (st == CUDNN_STATUS_SUCCESS) return 1;
        reject(p, "cuDNN's execution failed (%s)", cudnnGetErrorString(st));
        return 0;
    }
    const long rq = (long)s->batch * s->tq, rk = (long)s->batch * s->tk;
    const size_t es = dtype_size(s->dtype);
    void *q_own = check_alloc((size_t)rq * s->ld_q * es), *k_own = check_alloc((size_t)rk * s->ld_k * es);
    void *v_own = check_alloc((size_t)rk * s->ld_v * es);
    int ok = 0;
    if (!q_own || !k_own || !v_own) {
        reject(p, "the first call's check could not allocate its buffers");
    } else {
        own(s, q, k, v, o, dout, lse, delta, q_own, k_own, v_own, 0.0f);
        const int hd = s->heads * s->d;
        const CheckOut out[3] = {{"dq", dq, q_own, rq, s->ld_q, hd, 0},
                                 {"dk", dk, k_own, rk, s->ld_k, hd, 0},
                                 {"dv", dv, v_own, rk, s->ld_v, hd, 0}};
        ok = judge(p, execute(p, b, nb, workspace), out, 3);
    }
    cudaFree(q_own);
    cudaFree(k_own);
    cudaFree(v_own);
    return ok;
}
