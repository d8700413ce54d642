/* layernorm_spec.c: LayerNorm's entries in the op spec table (common/op_spec.h), with float64 references of
 * layernorm.h. A case's shape is a LayerNormShape in KernelCase.params; affine 0 passes NULL for gamma, beta and
 * their gradients (whose buffers then stay unchecked). Rows are offset from 0 (x = 2 + 1.5u + 0.1*(r%7)), so a
 * one-pass variance would lose digits; the backward's mean and rstd are the forward's, computed from x in fill. */
#include <math.h>
#include <stdlib.h>

#include "common/op_spec.h"
#include "core/util.h"
#include "layernorm/layernorm.h"

static const LayerNormOps *table(const OpHead *ops) { return (const LayerNormOps *)(const void *)ops; }
static LayerNormShape shape_of(const KernelCase *k) {
    LayerNormShape s;
    kernel_case_get_params(k, &s, sizeof s);
    return s;
}
static LayerNormShape typed(KernelCase *k) {
    LayerNormShape s = shape_of(k);
    s.dtype = k->dtype;
    kernel_case_set_params(k, &s, sizeof s);
    return s;
}

/* x [rows][c] of row r, as fill makes it (before rounding to the storage type) */
static void x_row(const LayerNormShape *s, unsigned seed, int b, long r, float *out) {
    for (int j = 0; j < s->c; j++)
        out[j] = 2.0f + 1.5f * (2.0f * vx_uniform01(vx_hash3(seed, (uint64_t)b, (uint64_t)(r * s->c + j))) - 1.0f) +
                 0.1f * (float)(r % 7);
}
static void row_stats(const float *x, int c, float eps, double *mean, double *rstd) {
    double m = 0, v = 0;
    for (int j = 0; j < c; j++) m += x[j];
    m /= c;
    for (int j = 0; j < c; j++) v += (x[j] - m) * (x[j] - m);
    *mean = m, *rstd = 1.0 / sqrt(v / c + eps);
}

/* ---- forward: x gamma beta -> y mean rstd ------------------------------------------------------------------- */

static void fwd_setup(KernelCase *k, const OpHead *ops) {
    const LayerNormShape s = typed(k);
    const long n = s.rows * s.c;
    op_spec_bufs(k, 6, (long[]){n, s.c, s.c, n, s.rows, s.rows},
                 (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_OUT, KB_OUT, KB_OUT}, 0x9, 0);
}
static void fwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const LayerNormShape s = shape_of(k);
    table(ops)->forward(&s, b[0], s.affine ? b[1] : NULL, s.affine ? b[2] : NULL, b[3], b[4], b[5]);
}
static void fwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const LayerNormShape s = shape_of(k);
    for (long r = 0; r < s.rows; r++) {
        double m, rs;
        row_stats(in[0] + r * s.c, s.c, s.eps, &m, &rs);
        ref[4][r] = m, ref[5][r] = rs;
        for (int j = 0; j < s.c; j++) {
            const double xh = (in[0][r * s.c + j] - m) * rs;
            ref[3][r * s.c + j] = s.affine ? xh * in[1][j] + in[2][j] : xh;
        }
    }
}

/* ---- backward: dy x gamma mean rstd -> dx dgamma dbeta (beta on all three) --------------------------------- */

static void bwd_setup(KernelCase *k, const OpHead *ops) {
    const LayerNormShape s = typed(k);
    const long n = s.rows * s.c;
    op_spec_bufs(k, 8, (long[]){n, n, s.c, s.rows, s.rows, n, s.c, s.c},
                 (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_IN, KB_IN, KB_OUT, KB_OUT, KB_OUT}, 0x23,
                 s.affine ? 0xE0 : 0x20);
}
static void bwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const LayerNormShape s = shape_of(k);
    table(ops)->backward(&s, b[0], b[1], s.affine ? b[2] : NULL, b[3], b[4], b[5], s.affine ? b[6] : NULL,
                         s.affine ? b[7] : NULL, k->beta, k->beta);
}
static void bwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const LayerNormShape s = shape_of(k);
    const int c = s.c;
    if (s.affine)
        for (int j = 0; j < c; j++) ref[6][j] = ref[7][j] = 0;
    for (long r = 0; r < s.rows; r++) {
        const float *dy = in[0] + r * c, *x = in[1] + r * c;
        const double m = in[3][r], rs = in[4][r];
        double a = 0, b = 0;
        for (int j = 0; j < c; j++) {
            const double xh = (x[j] - m) * rs, g = s.affine ? (double)dy[j] * in[2][j] : dy[j];
            a += g, b += g * xh;
            if (s.affine) ref[6][j] += dy[j] * xh, ref[7][j] += dy[j];
        }
        for (int j = 0; j < c; j++) {
            const double xh = (x[j] - m) * rs, g = s.affine ? (double)dy[j] * in[2][j] : dy[j];
            ref[5][r * c + j] = rs * (g - a / c - xh * b / c);
        }
    }
}

static void ln_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    const LayerNormShape s = shape_of(k);
    const int fwd = k->nbuf == 6, xb = fwd ? 0 : 1;
    if (b == xb) {
        for (long r = 0; r < s.rows; r++) x_row(&s, seed, xb, r, h + r * s.c);
    } else if (!fwd && (b == 3 || b == 4)) { /* the forward's mean and rstd of x */
        float *x = vx_malloc(sizeof(float) * (size_t)s.c);
        for (long r = 0; r < s.rows; r++) {
            double m, rs;
            x_row(&s, seed, xb, r, x);
            for (int j = 0; j < s.c; j++) x[j] = dtype_round(k->dtype, x[j]); /* the x the op reads */
            row_stats(x, s.c, s.eps, &m, &rs);
            h[r] = (float)(b == 3 ? m : rs);
        }
        free(x);
    } else {
        op_spec_uniform_fill(h, count, seed, b);
        if (b == (fwd ? 1 : 2))
            for (long i = 0; i < count; i++) h[i] = 1.0f + 0.5f * h[i]; /* gamma near 1 */
    }
}

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp layernorm_specs[] = {
    {"layernorm_forward", LAYERNORM_FORWARD, 0, 1e-5, fwd_setup, fwd_run, fwd_ref, ln_fill},
    {"layernorm_backward", LAYERNORM_BACKWARD, 0, 1e-5, bwd_setup, bwd_run, bwd_ref, ln_fill},
};
const int layernorm_specs_count = sizeof layernorm_specs / sizeof layernorm_specs[0];
