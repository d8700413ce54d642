/* conv3d_dnnl.c: conv3d.h's three CPU directions through oneDNN's C API (conv3d_dnnl.h).
 *
 * Primitives are made once per (shape, direction, variant, thread count) and kept in a list: the variant is what
 * changes the primitive (forward: with bias, with the fused residual; backward-data: the whole batch, or one sample
 * for beta = 1; backward-filter: with the bias gradient). Activations stay NDHWC (oneDNN's "ndhwc", which its AVX-512
 * and AVX2 kernels read directly, so no reorder of the large tensors ever happens); the weights' layout is left to
 * oneDNN ("any"): the caller's KTRSC weights (oneDNN's "odhwi") are reordered into that layout in the workspace at
 * each call, and a weight gradient computed in it is reordered back.
 * Fusions, as the im2col path has them: bias in the primitive; the ResBlock's residual as a binary-add post-op, so
 * y = (conv + bias) + r as the separate add computes it; where an implementation refuses the post-op, our own pass
 * adds r after.
 * beta: oneDNN's backward primitives overwrite (no post-ops in backward). beta = 1 for dx runs a one-sample primitive
 * per sample into a sample-sized temporary and adds it (a temporary the size of the whole dx would grow the shared
 * workspace by the largest activation); dw and dbias, small, go through a temporary.
 * oneDNN's scratchpad is ours ("user" mode): it lives at the start of the planned workspace, so a step allocates
 * nothing. Execution is synchronous (oneDNN's OpenMP runtime, the same libgomp as ours).
 * bf16 math (Conv3dShape.bf16_math, conv3d.h): the same three directions with bf16 source, weights and diff_dst
 * (what oneDNN's avx512_core_bf16 and AMX kernels read) and float32 destination, diff_src, diff_weights and bias:
 * the float32 x and dy the direction reads are converted (reorders, round to nearest even) into bf16 copies in the
 * workspace, the weights into the primitive's bf16 layout by the reorder that blocks them anyway; what the step
 * stores stays float32. */
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cpu_gemm.h"
#include "conv3d/conv3d_dnnl.h"
#include "core/util.h"

enum { FWD_BIAS = 1, FWD_RESIDUAL = 2, FWD_ADD_AFTER = 4 }; /* forward variants (ADD_AFTER: post-op refused) */
enum { DATA_ONE_SAMPLE = 1 };                               /* backward-data: the n = 1 primitive for beta = 1 */
enum { FILTER_BIAS = 1 };                                   /* backward-filter: with dbias */

typedef struct Prim {
    Conv3dShape s; /* n = 1 for DATA_ONE_SAMPLE */
    int dir, flags, threads;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t conv; /* made at the first call */
    dnnl_memory_desc_t user_w, prim_w; /* the caller's odhwi weights (or dw) and the primitive's layout */
    dnnl_primitive_t reorder;          /* user -> prim (forward, data) or prim -> user (filter); NULL when equal */
    int reorder_needed;
    int lp_x, lp_y;                    /* bf16 math: x (forward, filter) and dy (data, filter) read as bf16 copies */
    dnnl_primitive_t to_lp_x, to_lp_y; /* their float32 -> bf16 reorders */
    size_t scratch_bytes, w_bytes;
    dnnl_memory_t m_x, m_w, m_b, m_y, m_r, m_scratch, m_wuser, m_wprim; /* handles set at each call */
    dnnl_memory_t m_xf, m_yf;          /* the float32 x and dy the bf16 copies are made from */
    char impl[64], layout[48];
    struct Prim *next;
} Prim;

static dnnl_engine_t engine;
static dnnl_stream_t stream;
static Prim *cache;

#define ALIGN64(b) (((b) + 63) & ~(size_t)63)

static void dnnl_start(void) {
    if (engine) return;
    (void)cpu_isa(); /* VX_CPU_ISA's cap reaches oneDNN before its first primitive */
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success || dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success)
        vx_fatal("oneDNN: cannot create its CPU engine and stream");
}

const char *conv3d_dnnl_version(void) {
    static char buf[32];
    const dnnl_version_t *v = dnnl_version();
    snprintf(buf, sizeof buf, "oneDNN %d.%d.%d", v->major, v->minor, v->patch);
    return buf;
}

const char *conv3d_dnnl_isa(void) { return cpu_isa_onednn_name(); }

/* A blocked layout as oneDNN's tags spell it ("Odhwi16o", "OIdhw16i16o"): dims outermost first by stride,
 * upper case where a dim is also blocked, then the inner blocks. */
static void layout_name(const dnnl_memory_desc_t *md, const char *letters, char *buf, size_t len) {
    if (md->format_kind != dnnl_blocked) {
        snprintf(buf, len, "%s", dnnl_fmt_kind2str(md->format_kind));
        return;
    }
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    int order[DNNL_MAX_NDIMS], n = md->ndims, blocked[DNNL_MAX_NDIMS] = {0};
    for (int i = 0; i < b->inner_nblks; i++) blocked[b->inner_idxs[i]] = 1;
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 0; i < n; i++) /* by stride, descending (stable: outer dims first on ties) */
        for (int j = i + 1; j < n; j++)
            if (b->strides[order[j]] > b->strides[order[i]]) {
                int t = order[i];
                order[i] = order[j], order[j] = t;
            }
    size_t k = 0;
    for (int i = 0; i < n && k + 1 < len; i++) {
        char c = letters[order[i]];
        buf[k++] = blocked[order[i]] ? (char)(c - 'a' + 'A') : c;
    }
    buf[k] = 0;
    for (int i = 0; i < b->inner_nblks && k + 8 < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%d%c", (int)b->inner_blks[i], letters[b->inner_idxs[i]]);
}

static void md5(dnnl_memory_desc_t *md, dnnl_dim_t a, dnnl_dim_t b, dnnl_dim_t c, dnnl_dim_t d, dnnl_dim_t e,
                dnnl_format_tag_t tag, dnnl_data_type_t type) {
    const dnnl_dims_t dims = {a, b, c, d, e};
    if (dnnl_memory_desc_init_by_tag(md, 5, dims, type, tag) != dnnl_success)
        vx_fatal("oneDNN: cannot describe a 5-D tensor");
}

/* The shape's descriptors: x, y NDHWC float32 and (x_lp, y_lp) their bf16 copies; weights (odhwi float32 as we hold
 * them, any in the computing type: bf16 under bf16 math, and float32 for the weight gradient); bias; strides,
 * paddings. oneDNN's output size
 * is (d + pad_l + pad_r - k) / stride + 1, floor as ours: pad_r is the smallest non-negative padding that gives our
 * od (the positions beyond it are never read), or the exact one where that is negative. */
typedef struct {
    dnnl_memory_desc_t x, y, x_lp, y_lp, w_user, w_any, w_any_f32, b;
    dnnl_dims_t strides, pad_l, pad_r;
} Descs;

static void descs(const Conv3dShape *s, Descs *d) {
    const dnnl_data_type_t lp = s->bf16_math ? dnnl_bf16 : dnnl_f32;
    md5(&d->x, s->n, s->c_in, s->d, s->h, s->w, dnnl_ndhwc, dnnl_f32);
    md5(&d->y, s->n, s->c_out, s->od, s->oh, s->ow, dnnl_ndhwc, dnnl_f32);
    md5(&d->x_lp, s->n, s->c_in, s->d, s->h, s->w, dnnl_ndhwc, lp);
    md5(&d->y_lp, s->n, s->c_out, s->od, s->oh, s->ow, dnnl_ndhwc, lp);
    md5(&d->w_user, s->c_out, s->c_in, s->k[0], s->k[1], s->k[2], dnnl_odhwi, dnnl_f32);
    md5(&d->w_any, s->c_out, s->c_in, s->k[0], s->k[1], s->k[2], dnnl_format_tag_any, lp);
    md5(&d->w_any_f32, s->c_out, s->c_in, s->k[0], s->k[1], s->k[2], dnnl_format_tag_any, dnnl_f32);
    const dnnl_dims_t bd = {s->c_out};
    if (dnnl_memory_desc_init_by_tag(&d->b, 1, bd, dnnl_f32, dnnl_a) != dnnl_success) vx_fatal("oneDNN: bias desc");
    const int size[3] = {s->d, s->h, s->w}, out[3] = {s->od, s->oh, s->ow};
    for (int a = 0; a < 3; a++) {
        d->strides[a] = s->stride[a];
        d->pad_l[a] = s->pad[a];
        long r = (long)(out[a] - 1) * s->stride[a] + s->k[a] - size[a] - s->pad[a];
        if (r < 0 && r + s->stride[a] - 1 >= 0) r = 0;
        d->pad_r[a] = r;
    }
}

static dnnl_status_t forward_pd(const Conv3dShape *s, int flags, dnnl_primitive_desc_t *pd) {
    Descs d;
    descs(s, &d);
    dnnl_convolution_desc_t cd;
    dnnl_status_t st = dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training, dnnl_convolution_direct, &d.x_lp,
                                                          &d.w_any, flags & FWD_BIAS ? &d.b : NULL, &d.y, d.strides,
                                                          d.pad_l, d.pad_r);
    if (st != dnnl_success) return st;
    dnnl_primitive_attr_t attr;
    dnnl_primitive_attr_create(&attr);
    dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    dnnl_post_ops_t po = NULL;
    if ((flags & FWD_RESIDUAL) && !(flags & FWD_ADD_AFTER)) {
        dnnl_post_ops_create(&po);
        dnnl_post_ops_append_binary(po, dnnl_binary_add, &d.y);
        dnnl_primitive_attr_set_post_ops(attr, po);
    }
    st = dnnl_primitive_desc_create(pd, &cd, attr, engine, NULL);
    if (po) dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    return st;
}

/* Makes p->pd (and what is known before the first call); dnnl_success or oneDNN's status. */
static dnnl_status_t prim_describe(Prim *p) {
    const Conv3dShape *s = &p->s;
    Descs d;
    descs(s, &d);
    dnnl_status_t st;
    if (p->dir == CONV3D_FORWARD) {
        st = forward_pd(s, p->flags, &p->pd);
        if (st == dnnl_unimplemented && (p->flags & FWD_RESIDUAL)) { /* the post-op refused: our own add after */
            p->flags |= FWD_ADD_AFTER;
            st = forward_pd(s, p->flags, &p->pd);
        }
    } else {
        dnnl_primitive_desc_t hint;
        st = forward_pd(s, 0, &hint);
        if (st != dnnl_success) return st;
        dnnl_convolution_desc_t cd;
        dnnl_primitive_attr_t attr;
        dnnl_primitive_attr_create(&attr);
        dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
        if (p->dir == CONV3D_BACKWARD_DATA)
            st = dnnl_convolution_backward_data_desc_init(&cd, dnnl_convolution_direct, &d.x, &d.w_any, &d.y_lp,
                                                          d.strides, d.pad_l, d.pad_r);
        else /* the weight gradient in float32 whatever the math: it is the master gradient */
            st = dnnl_convolution_backward_weights_desc_init(&cd, dnnl_convolution_direct, &d.x_lp, &d.w_any_f32,
                                                             p->flags & FILTER_BIAS ? &d.b : NULL, &d.y_lp, d.strides,
                                                             d.pad_l, d.pad_r);
        if (st == dnnl_success) st = dnnl_primitive_desc_create(&p->pd, &cd, attr, engine, hint);
        dnnl_primitive_attr_destroy(attr);
        dnnl_primitive_desc_destroy(hint);
    }
    if (st != dnnl_success) return st;
    const char *impl = NULL;
    dnnl_primitive_desc_query(p->pd, dnnl_query_impl_info_str, 0, &impl);
    snprintf(p->impl, sizeof p->impl, "%s", impl ? impl : "?");
    p->user_w = d.w_user;
    p->prim_w = *dnnl_primitive_desc_query_md(p->pd, p->dir == CONV3D_BACKWARD_FILTER ? dnnl_query_diff_weights_md
                                                                                       : dnnl_query_weights_md, 0);
    p->reorder_needed = !dnnl_memory_desc_equal(&p->user_w, &p->prim_w);
    layout_name(&p->prim_w, "oidhw", p->layout, sizeof p->layout);
    p->lp_x = s->bf16_math && p->dir != CONV3D_BACKWARD_DATA;
    p->lp_y = s->bf16_math && p->dir != CONV3D_FORWARD;
    p->scratch_bytes = dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(p->pd, dnnl_query_scratchpad_md, 0));
    p->w_bytes = dnnl_memory_desc_get_size(&p->prim_w);
    return dnnl_success;
}

static void mem(dnnl_memory_t *m, const dnnl_memory_desc_t *md) {
    if (dnnl_memory_create(m, md, engine, DNNL_MEMORY_NONE) != dnnl_success) vx_fatal("oneDNN: cannot make a memory object");
}

static dnnl_primitive_t reorder_make(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to) {
    dnnl_primitive_desc_t rpd;
    dnnl_primitive_t r;
    if (dnnl_reorder_primitive_desc_create(&rpd, from, engine, to, engine, NULL) != dnnl_success ||
        dnnl_primitive_create(&r, rpd) != dnnl_success)
        vx_fatal("oneDNN: cannot make a float32 -> bf16 reorder of an activation");
    dnnl_primitive_desc_destroy(rpd);
    return r;
}

/* The primitive itself, its reorder and memory objects: at the first call (JIT code generation takes a few ms). */
static void prim_make(Prim *p) {
    if (p->conv) return;
    if (dnnl_primitive_create(&p->conv, p->pd) != dnnl_success)
        vx_fatal("oneDNN: cannot create the %s primitive it described", p->impl);
    Descs d;
    descs(&p->s, &d);
    mem(&p->m_x, p->lp_x ? &d.x_lp : &d.x); /* what the primitive reads or writes */
    mem(&p->m_y, p->lp_y ? &d.y_lp : &d.y);
    mem(&p->m_xf, &d.x);
    mem(&p->m_yf, &d.y);
    if (p->lp_x) p->to_lp_x = reorder_make(&d.x, &d.x_lp);
    if (p->lp_y) p->to_lp_y = reorder_make(&d.y, &d.y_lp);
    mem(&p->m_w, &p->prim_w);
    mem(&p->m_b, &d.b);
    mem(&p->m_r, &d.y);
    mem(&p->m_wuser, &p->user_w);
    mem(&p->m_wprim, &p->prim_w);
    mem(&p->m_scratch, dnnl_primitive_desc_query_md(p->pd, dnnl_query_scratchpad_md, 0));
    if (p->reorder_needed) {
        dnnl_primitive_desc_t rpd;
        const int back = p->dir == CONV3D_BACKWARD_FILTER;
        if (dnnl_reorder_primitive_desc_create(&rpd, back ? &p->prim_w : &p->user_w, engine,
                                               back ? &p->user_w : &p->prim_w, engine, NULL) != dnnl_success ||
            dnnl_primitive_create(&p->reorder, rpd) != dnnl_success)
            vx_fatal("oneDNN: cannot reorder the weights to %s", p->layout);
        dnnl_primitive_desc_destroy(rpd);
    }
}

static int same_shape(const Conv3dShape *a, const Conv3dShape *b) { return memcmp(a, b, sizeof *a) == 0; }

/* The cached primitive of (s, dir, flags) at the current thread count, described if new; NULL (with oneDNN's
 * status in *status) when oneDNN has no implementation. */
static Prim *prim_get(const Conv3dShape *s, int dir, int flags, dnnl_status_t *status) {
    dnnl_start();
    Conv3dShape k = *s;
    if (dir == CONV3D_BACKWARD_DATA && (flags & DATA_ONE_SAMPLE)) k.n = 1;
    const int threads = omp_get_max_threads();
    for (Prim *p = cache; p; p = p->next)
        if (p->dir == dir && (p->flags & ~FWD_ADD_AFTER) == flags && p->threads == threads && same_shape(&p->s, &k))
            return p->pd ? p : NULL;
    Prim *p = vx_calloc(1, sizeof *p);
    p->s = k, p->dir = dir, p->flags = flags, p->threads = threads;
    dnnl_status_t st = prim_describe(p);
    if (st != dnnl_success) p->pd = NULL;
    if (status) *status = st;
    p->next = cache;
    cache = p;
    return p->pd ? p : NULL;
}

static Prim *prim_need(const Conv3dShape *s, int dir, int flags) {
    dnnl_status_t st = dnnl_success;
    Prim *p = prim_get(s, dir, flags, &st);
    if (!p) vx_fatal("oneDNN: no implementation for a convolution it was chosen for (%s)", dnnl_status2str(st));
    prim_make(p);
    return p;
}

static void run(dnnl_primitive_t prim, int n, const dnnl_exec_arg_t *args) {
    if (dnnl_primitive_execute(prim, stream, n, args) != dnnl_success || dnnl_stream_wait(stream) != dnnl_success)
        vx_fatal("oneDNN: a convolution primitive failed to execute");
}

static void set(dnnl_memory_t m, const void *ptr) {
    if (dnnl_memory_set_data_handle(m, (void *)ptr) != dnnl_success) vx_fatal("oneDNN: cannot set a data handle");
}

/* The weights in the primitive's layout: wt itself, or reordered into ws (at ws_w). */
static void *weights_in(Prim *p, const float *wt, char *ws_w) {
    if (!p->reorder_needed) return (void *)wt;
    set(p->m_wuser, wt);
    set(p->m_wprim, ws_w);
    const dnnl_exec_arg_t a[] = {{DNNL_ARG_FROM, p->m_wuser}, {DNNL_ARG_TO, p->m_wprim}};
    run(p->reorder, 2, a);
    return ws_w;
}

/* ---- the three directions --------------------------------------------------------------------------------- */

/* Where each part of a direction's workspace lives (byte offsets, 64-aligned), and the total: oneDNN's scratchpad;
 * the weights (or dw) in the primitive's layout when it differs from ours; the temporaries of beta = 1 (a sample of
 * dx; dw and dbias in our layout); under bf16 math the bf16 copies of x and dy. */
typedef struct {
    size_t w, tmp, b_tmp, x_lp, y_lp, total;
} Ws;

static Ws ws_layout(const Prim *p) {
    const Conv3dShape *s = &p->s;
    Ws l = {0};
    size_t at = ALIGN64(p->scratch_bytes);
    l.w = at;
    at += p->reorder_needed ? ALIGN64(p->w_bytes) : 0;
    l.tmp = at;
    if (p->dir == CONV3D_BACKWARD_DATA && s->n == 1 && (p->flags & DATA_ONE_SAMPLE))
        at += ALIGN64(sizeof(float) * (size_t)conv3d_input_count(s));
    if (p->dir == CONV3D_BACKWARD_FILTER) at += ALIGN64(sizeof(float) * (size_t)conv3d_weight_count(s));
    l.b_tmp = at;
    if (p->dir == CONV3D_BACKWARD_FILTER) at += ALIGN64(sizeof(float) * (size_t)s->c_out);
    l.x_lp = at;
    at += p->lp_x ? ALIGN64(2 * (size_t)conv3d_input_count(s)) : 0;
    l.y_lp = at;
    at += p->lp_y ? ALIGN64(2 * (size_t)conv3d_output_count(s)) : 0;
    l.total = at;
    return l;
}

/* The tensor the primitive reads: src itself, or (bf16 math) its bf16 copy made in ws at `at`. */
static const void *lp_in(dnnl_primitive_t to_lp, dnnl_memory_t m_f32, dnnl_memory_t m_lp, const float *src,
                         char *at) {
    if (!to_lp) return src;
    set(m_f32, src);
    set(m_lp, at);
    const dnnl_exec_arg_t a[] = {{DNNL_ARG_FROM, m_f32}, {DNNL_ARG_TO, m_lp}};
    run(to_lp, 2, a);
    return at;
}

void conv3d_dnnl_forward(const Conv3dShape *s, const float *x, const float *wt, const float *bias,
                         const float *residual, float *y, void *workspace) {
    Prim *p = prim_need(s, CONV3D_FORWARD, (bias ? FWD_BIAS : 0) | (residual ? FWD_RESIDUAL : 0));
    char *ws = workspace;
    const Ws l = ws_layout(p);
    void *w = weights_in(p, wt, ws + l.w);
    const void *xin = lp_in(p->to_lp_x, p->m_xf, p->m_x, x, ws + l.x_lp);
    set(p->m_x, xin), set(p->m_w, w), set(p->m_y, y), set(p->m_scratch, ws);
    dnnl_exec_arg_t a[6] = {{DNNL_ARG_SRC, p->m_x}, {DNNL_ARG_WEIGHTS, p->m_w}, {DNNL_ARG_DST, p->m_y},
                            {DNNL_ARG_SCRATCHPAD, p->m_scratch}};
    int n = 4;
    if (bias) set(p->m_b, bias), a[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, p->m_b};
    const int post_op = residual && !(p->flags & FWD_ADD_AFTER);
    if (post_op) set(p->m_r, residual), a[n++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, p->m_r};
    run(p->conv, n, a);
    if (residual && !post_op) { /* (conv + bias) + residual, as the separate add */
        const long count = conv3d_output_count(s);
#pragma omp parallel for schedule(static)
        for (long i = 0; i < count; i++) y[i] += residual[i];
    }
}

void conv3d_dnnl_backward_data(const Conv3dShape *s, const float *dy, const float *wt, float *dx, float beta,
                               void *workspace) {
    Prim *p = prim_need(s, CONV3D_BACKWARD_DATA, beta != 0.0f ? DATA_ONE_SAMPLE : 0);
    char *ws = workspace;
    const Ws l = ws_layout(p);
    void *w = weights_in(p, wt, ws + l.w);
    float *tmp = (float *)(ws + l.tmp);
    set(p->m_w, w), set(p->m_scratch, ws);
    const dnnl_exec_arg_t a[] = {{DNNL_ARG_DIFF_DST, p->m_y}, {DNNL_ARG_WEIGHTS, p->m_w},
                                 {DNNL_ARG_DIFF_SRC, p->m_x}, {DNNL_ARG_SCRATCHPAD, p->m_scratch}};
    if (beta == 0.0f) {
        set(p->m_y, lp_in(p->to_lp_y, p->m_yf, p->m_y, dy, ws + l.y_lp)), set(p->m_x, dx);
        run(p->conv, 4, a);
        return;
    }
    /* beta = 1: sample by sample into tmp, then added */
    const long in_sample = conv3d_input_count(&p->s), out_sample = conv3d_output_count(&p->s);
    for (int i = 0; i < s->n; i++) {
        set(p->m_y, lp_in(p->to_lp_y, p->m_yf, p->m_y, dy + i * out_sample, ws + l.y_lp));
        set(p->m_x, tmp);
        run(p->conv, 4, a);
        float *d = dx + i * in_sample;
#pragma omp parallel for schedule(static)
        for (long j = 0; j < in_sample; j++) d[j] = beta * d[j] + tmp[j];
    }
}

void conv3d_dnnl_backward_filter(const Conv3dShape *s, const float *x, const float *dy, float *dw, float *dbias,
                                 float beta, void *workspace) {
    /* bf16 math: the bias gradient from the float32 dy, as the im2col path sums it. oneDNN's, from dy's bf16 copy,
     * loses the sum to cancellation where it is small beside its terms (0.18 relative on a 1-channel output) */
    float *const dbias_user = dbias;
    if (s->bf16_math) dbias = NULL;
    Prim *p = prim_need(s, CONV3D_BACKWARD_FILTER, dbias ? FILTER_BIAS : 0);
    char *ws = workspace;
    const Ws l = ws_layout(p);
    char *w_prim = ws + l.w;
    float *w_tmp = (float *)(ws + l.tmp), *b_tmp = (float *)(ws + l.b_tmp);
    const int acc = beta != 0.0f;
    float *w_user = acc ? w_tmp : dw; /* where dw in our layout lands */
    const void *xin = lp_in(p->to_lp_x, p->m_xf, p->m_x, x, ws + l.x_lp);
    const void *dyin = lp_in(p->to_lp_y, p->m_yf, p->m_y, dy, ws + l.y_lp);
    set(p->m_x, xin), set(p->m_y, dyin), set(p->m_scratch, ws);
    set(p->m_w, p->reorder_needed ? (void *)w_prim : (void *)w_user);
    dnnl_exec_arg_t a[5] = {{DNNL_ARG_SRC, p->m_x}, {DNNL_ARG_DIFF_DST, p->m_y}, {DNNL_ARG_DIFF_WEIGHTS, p->m_w},
                            {DNNL_ARG_SCRATCHPAD, p->m_scratch}};
    int n = 4;
    if (dbias) set(p->m_b, acc ? b_tmp : dbias), a[n++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_BIAS, p->m_b};
    run(p->conv, n, a);
    if (p->reorder_needed) {
        set(p->m_wprim, w_prim);
        set(p->m_wuser, w_user);
        const dnnl_exec_arg_t r[] = {{DNNL_ARG_FROM, p->m_wprim}, {DNNL_ARG_TO, p->m_wuser}};
        run(p->reorder, 2, r);
    }
    if (acc) {
        const long nw = conv3d_weight_count(s);
#pragma omp parallel for schedule(static)
        for (long i = 0; i < nw; i++) dw[i] = beta * dw[i] + w_tmp[i];
        if (dbias)
            for (int i = 0; i < s->c_out; i++) dbias[i] = beta * dbias[i] + b_tmp[i];
    }
    if (dbias_user && !dbias) conv3d_bias_grad_cpu((long)s->n * s->od * s->oh * s->ow, s->c_out, dy, dbias_user, beta);
}

/* ---- planning --------------------------------------------------------------------------------------------- */

/* the variants a direction may be called with; the first is the one described in VX_CONV_LOG and timed */
static const int fwd_variants[] = {FWD_BIAS, 0, FWD_BIAS | FWD_RESIDUAL, FWD_RESIDUAL};
static const int data_variants[] = {0, DATA_ONE_SAMPLE};
static const int filter_variants[] = {FILTER_BIAS, 0};

static int variants(int dir, const int **v) {
    if (dir == CONV3D_FORWARD) return *v = fwd_variants, 4;
    if (dir == CONV3D_BACKWARD_DATA) return *v = data_variants, 2;
    return *v = filter_variants, 2;
}

int conv3d_dnnl_usable(const Conv3dShape *s, int dir, char *impl, size_t impl_len, char *why, size_t why_len) {
    const int *v;
    const int nv = variants(dir, &v);
    for (int i = 0; i < nv; i++) {
        dnnl_status_t st = dnnl_success;
        Prim *p = prim_get(s, dir, v[i], &st);
        if (!p) {
            if (why) snprintf(why, why_len, "oneDNN has no implementation (%s)", dnnl_status2str(st));
            return 0;
        }
        if (i == 0 && impl) snprintf(impl, impl_len, "%s, weights %s", p->impl, p->layout);
    }
    return 1;
}

size_t conv3d_dnnl_workspace_bytes(const Conv3dShape *s, int dir) {
    const int *v;
    const int nv = variants(dir, &v);
    size_t most = 0;
    for (int i = 0; i < nv; i++) {
        Prim *p = prim_get(s, dir, v[i], NULL);
        if (!p) return 0;
        const size_t b = ws_layout(p).total;
        if (b > most) most = b;
    }
    return most;
}

void conv3d_dnnl_cache_clear(void) {
    while (cache) {
        Prim *p = cache;
        cache = p->next;
        if (p->conv) {
            dnnl_primitive_destroy(p->conv);
            dnnl_memory_t ms[] = {p->m_x, p->m_w, p->m_b, p->m_y, p->m_r, p->m_scratch, p->m_wuser, p->m_wprim,
                                  p->m_xf, p->m_yf};
            for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) dnnl_memory_destroy(ms[i]);
        }
        if (p->reorder) dnnl_primitive_destroy(p->reorder);
        if (p->to_lp_x) dnnl_primitive_destroy(p->to_lp_x);
        if (p->to_lp_y) dnnl_primitive_destroy(p->to_lp_y);
        if (p->pd) dnnl_primitive_desc_destroy(p->pd);
        free(p);
    }
}
