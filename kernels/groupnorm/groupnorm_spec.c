/* groupnorm_spec.c: GroupNorm's entries in the op spec table (common/op_spec.h), plain and with the fused SiLU
 * (GroupNormShape.silu: ops groupnorm_silu_*), each with a float64 reference. */
#include <math.h>
#include <string.h>

#include "common/op_spec.h"
#include "common/rng.h"
#include "groupnorm/groupnorm.h"

/* the backend's table of this op, as the entries receive it */
static const GroupNormOps *table(const OpHead *ops) { return (const GroupNormOps *)(const void *)ops; }
/* the case's shape (KernelCase.params) */
static GroupNormShape shape_of(const KernelCase *k) {
    GroupNormShape s;
    kernel_case_get_params(k, &s, sizeof s);
    return s;
}

static void gn_fwd_setup(KernelCase *k, const OpHead *ops) {
    GroupNormShape sv = shape_of(k), *s = &sv;
    s->dtype = k->dtype;
    kernel_case_set_params(k, s, sizeof *s);
    const long x = (long)s->n * s->spatial * s->c, st = (long)s->n * s->groups;
    op_spec_bufs(k, 6, (long[]){x, s->c, s->c, x, st, st}, (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_OUT, KB_OUT, KB_OUT},
         0x9, 0);
}
static void gn_fwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const GroupNormShape s = shape_of(k);
    table(ops)->forward(&s, b[0], b[1], b[2], b[3], b[4], b[5]);
}
static void gn_fwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const GroupNormShape sv = shape_of(k), *s = &sv;
    const int cpg = s->c / s->groups;
    for (int n = 0; n < s->n; n++)
        for (int g = 0; g < s->groups; g++) {
            double sum = 0, sq = 0;
            const double cnt = (double)s->spatial * cpg;
            for (long p = 0; p < s->spatial; p++)
                for (int j = 0; j < cpg; j++) {
                    const double v = in[0][((long)n * s->spatial + p) * s->c + g * cpg + j];
                    sum += v;
                }
            const double mean = sum / cnt;
            for (long p = 0; p < s->spatial; p++)
                for (int j = 0; j < cpg; j++) {
                    const double v = in[0][((long)n * s->spatial + p) * s->c + g * cpg + j] - mean;
                    sq += v * v;
                }
            const double rstd = 1.0 / sqrt(sq / cnt + s->eps);
            ref[4][n * s->groups + g] = mean, ref[5][n * s->groups + g] = rstd;
            for (long p = 0; p < s->spatial; p++)
                for (int j = 0; j < cpg; j++) {
                    const int c = g * cpg + j;
                    const long i = ((long)n * s->spatial + p) * s->c + c;
                    const double pre = (in[0][i] - mean) * rstd * in[1][c] + in[2][c];
                    ref[3][i] = s->silu ? pre * op_spec_sigmoid(pre) : pre;
                }
        }
}

static void gn_bwd_setup(KernelCase *k, const OpHead *ops) {
    GroupNormShape sv = shape_of(k), *s = &sv;
    s->dtype = k->dtype;
    kernel_case_set_params(k, s, sizeof *s);
    const long x = (long)s->n * s->spatial * s->c, st = (long)s->n * s->groups;
    /* dy x gamma beta mean rstd -> dx dgamma dbeta (beta is read only when the SiLU is fused) */
    op_spec_bufs(k, 9, (long[]){x, x, s->c, s->c, st, st, x, s->c, s->c},
         (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_IN, KB_IN, KB_IN, KB_OUT, KB_OUT, KB_OUT}, 0x43, 0x1C0);
}
static void gn_bwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const GroupNormShape s = shape_of(k);
    table(ops)->backward(&s, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], k->beta, k->beta);
}
/* The statistics are inputs here (gn_fill makes plausible ones); the gradient is the exact derivative for them:
 * xhat = (x - mean) rstd, dx = rstd (g dy - mean(g dy) - xhat mean(g dy xhat)) over the group, where dy is the
 * normalised value's gradient: the incoming one, or through the fused SiLU dz * silu'(xhat gamma + beta). */
static void gn_bwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const GroupNormShape sv = shape_of(k), *s = &sv;
    const int cpg = s->c / s->groups;
    for (int c = 0; c < s->c; c++) ref[7][c] = ref[8][c] = 0;
    for (int n = 0; n < s->n; n++)
        for (int g = 0; g < s->groups; g++) {
            const double mean = in[4][n * s->groups + g], rstd = in[5][n * s->groups + g];
            const double cnt = (double)s->spatial * cpg;
            double a = 0, b = 0;
            for (int pass = 0; pass < 2; pass++)
                for (long p = 0; p < s->spatial; p++)
                    for (int j = 0; j < cpg; j++) {
                        const int c = g * cpg + j;
                        const long i = ((long)n * s->spatial + p) * s->c + c;
                        const double xhat = (in[1][i] - mean) * rstd;
                        double dy = in[0][i];
                        if (s->silu) {
                            const double pre = xhat * in[2][c] + in[3][c], sg = op_spec_sigmoid(pre);
                            dy *= sg * (1 + pre * (1 - sg));
                        }
                        const double gdy = (double)in[2][c] * dy;
                        if (pass == 0) {
                            a += gdy, b += gdy * xhat;
                            ref[7][c] += dy * xhat, ref[8][c] += dy;
                        } else {
                            ref[6][i] = rstd * (gdy - a / cnt - xhat * b / cnt);
                        }
                    }
        }
}
static void gn_bwd_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    for (long i = 0; i < count; i++) {
        const double u = vx_uniform01(vx_hash3(seed, (uint64_t)b, (uint64_t)i));
        h[i] = b == 4 ? (float)(0.2 * u - 0.1) : b == 5 ? (float)(0.5 + 1.5 * u) : (float)(2 * u - 1);
    }
}

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp groupnorm_specs[] = {
    {"groupnorm_forward", GROUPNORM_FORWARD, 0, 1e-5, gn_fwd_setup, gn_fwd_run, gn_fwd_ref, NULL},
    {"groupnorm_backward", GROUPNORM_BACKWARD, 0, 1e-4, gn_bwd_setup, gn_bwd_run, gn_bwd_ref,
     gn_bwd_fill},
    {"groupnorm_silu_forward", GROUPNORM_FORWARD, 0, 1e-5, gn_fwd_setup, gn_fwd_run, gn_fwd_ref, NULL},
    {"groupnorm_silu_backward", GROUPNORM_BACKWARD, 0, 1e-4, gn_bwd_setup, gn_bwd_run, gn_bwd_ref,
     gn_bwd_fill},
};
const int groupnorm_specs_count = sizeof groupnorm_specs / sizeof groupnorm_specs[0];
