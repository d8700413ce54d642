/* head_loss_cpu.c: the float32 CPU head losses of head_loss.h (CE, BCE with logits, Cox/Breslow), loss and gradient
 * in one call, everything in double. Per-sample values are computed in parallel into arrays and summed in sample
 * order on one thread, so the bits do not depend on the thread count.
 *   CE:  lse_i = m_i + log sum_j exp(z_ij - m_i) (m_i the row's max); loss = sum w_i (lse_i - z_i,t_i) / sum w_i;
 *        dz_ij = g w_i/W (softmax_ij - [j == t_i]). A target that is not a class index in [0, k) makes its weight
 *        NaN, and with it the loss and the gradient (the trainer's divergence check then stops the run).
 *   BCE: head_loss_math.h's stable forms, mean over n*k.
 *   COX: the samples sorted by time, latest first (ties by index, a total order), the risk sums
 *        S(t) = sum_{t_j >= t} exp(z_j - zmax) accumulated over that order a whole tie group at a time (Breslow: a
 *        tie is in the risk set), loss = -(1/E) sum_{events} (z_i - zmax - log S(t_i)); then, earliest first,
 *        C(t) = sum_{events i, t_i <= t} 1/S(t_i) and dz_m = (g/E) (exp(z_m - zmax) C(t_m) - event_m). No event:
 *        loss 0 and gradient 0. An event is a nonzero target[i][1].
 * g = grad_scale * loss_scale[0] (host memory on the CPU). n = 0: loss 0. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/cpu_op.h"
#include "core/util.h"
#include "head_loss/head_loss.h"
#include "head_loss/head_loss_math.h"

static void ce_cpu(int n, int k, const float *z, const float *target, const float *weight, float *loss_out, float *dz,
                   double g) {
    double *wl = vx_malloc(sizeof(double) * 3 * (size_t)n), *wi = wl + n, *lse = wl + 2 * n;
#pragma omp parallel for schedule(static) if ((long)n * k >= 65536)
    for (int i = 0; i < n; i++) {
        const float *zr = z + (long)i * k;
        const int t = head_class(target[i], k);
        double m = zr[0];
        for (int j = 1; j < k; j++) m = zr[j] > m ? zr[j] : m;
        double se = 0.0;
        for (int j = 0; j < k; j++) se += exp((double)zr[j] - m);
        lse[i] = m + log(se);
        wi[i] = t < 0 ? NAN : weight ? (double)weight[t] : 1.0;
        wl[i] = t < 0 ? NAN : wi[i] * (lse[i] - zr[t]);
    }
    double W = 0.0, L = 0.0;
    for (int i = 0; i < n; i++) W += wi[i], L += wl[i];
    loss_out[0] = (float)(L / W);
    if (dz) {
#pragma omp parallel for schedule(static) if ((long)n * k >= 65536)
        for (int i = 0; i < n; i++) {
            const int t = head_class(target[i], k);
            const double a = g * wi[i] / W;
            for (int j = 0; j < k; j++)
                dz[(long)i * k + j] = (float)(a * (exp((double)z[(long)i * k + j] - lse[i]) - (j == t)));
        }
    }
    free(wl);
}

static void bce_cpu(int n, int k, const float *z, const float *target, const float *pos_weight, float *loss_out,
                    float *dz, double g) {
    double *row = vx_malloc(sizeof(double) * (size_t)n);
    const double count = (double)n * k, gc = g / count;
#pragma omp parallel for schedule(static) if ((long)n * k >= 16384)
    for (int i = 0; i < n; i++) {
        double s = 0.0;
        for (int j = 0; j < k; j++) {
            const long e = (long)i * k + j;
            const double pw = pos_weight ? pos_weight[j] : 1.0;
            s += head_bce(z[e], target[e], pw);
            if (dz) dz[e] = (float)(gc * head_bce_grad(z[e], target[e], pw));
        }
        row[i] = s;
    }
    double L = 0.0;
    for (int i = 0; i < n; i++) L += row[i];
    loss_out[0] = (float)(L / count);
    free(row);
}

/* sort order of the Cox pass: time descending, index ascending (qsort's context through a file-scope pointer would
 * not be reentrant: the pairs carry their time) */
typedef struct {
    float t;
    int i;
} CoxKey;
static int cox_cmp(const void *pa, const void *pb) {
    const CoxKey *a = pa, *b = pb;
    if (a->t != b->t) return a->t > b->t ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

static void cox_cpu(int n, const float *z, const float *target, float *loss_out, float *dz, double g) {
    double E = 0.0, zmax = -INFINITY;
    for (int i = 0; i < n; i++) {
        E += target[2 * i + 1] != 0.0f;
        zmax = z[i] > zmax ? z[i] : zmax;
    }
    if (E == 0.0) { /* every sample censored: nothing to rank */
        loss_out[0] = 0.0f;
        if (dz) memset(dz, 0, sizeof(float) * (size_t)n);
        return;
    }
    CoxKey *key = vx_malloc(sizeof(CoxKey) * (size_t)n);
    double *S = vx_malloc(sizeof(double) * (size_t)n); /* S(t_i), by sample */
    for (int i = 0; i < n; i++) key[i] = (CoxKey){target[2 * i], i};
    qsort(key, (size_t)n, sizeof *key, cox_cmp);
    double run = 0.0, L = 0.0;
    for (int a = 0; a < n;) { /* latest first: a tie group [a, b) joins the risk set whole */
        int b = a;
        while (b < n && key[b].t == key[a].t) run += exp((double)z[key[b++].i] - zmax);
        for (int q = a; q < b; q++) {
            const int i = key[q].i;
            S[i] = run;
            if (target[2 * i + 1] != 0.0f) L += (double)z[i] - zmax - log(run);
        }
        a = b;
    }
    loss_out[0] = (float)(-L / E);
    if (dz) {
        double C = 0.0;
        for (int b = n; b > 0;) { /* earliest first: a tie group [a, b) adds its events before its members read C */
            int a = b;
            while (a > 0 && key[a - 1].t == key[b - 1].t) {
                a--;
                if (target[2 * key[a].i + 1] != 0.0f) C += 1.0 / S[key[a].i];
            }
            for (int q = a; q < b; q++) {
                const int m = key[q].i;
                dz[m] = (float)(g / E * (exp((double)z[m] - zmax) * C - (target[2 * m + 1] != 0.0f)));
            }
            b = a;
        }
    }
    free(key);
    free(S);
}

/* ---- the CPU backend's table (ops.def): float32 only; the loss scale is read from host memory ---------------- */

static void cpu_run(const HeadLossShape *s, const void *z, const float *target, const float *weight, float *loss_out,
                    void *dz, float grad_scale, const float *loss_scale) {
    cpu_need_f32(s->dtype, "head_loss");
    if (s->n < 0 || s->k < 1 || (s->kind == HEAD_LOSS_COX && s->k != 1) || s->kind < HEAD_LOSS_CE ||
        s->kind > HEAD_LOSS_COX)
        vx_fatal("head_loss: invalid shape kind=%d n=%d k=%d (Cox takes k = 1)", (int)s->kind, s->n, s->k);
    if (s->n == 0) {
        loss_out[0] = 0.0f;
        return;
    }
    const double g = (double)cpu_scaled(grad_scale, loss_scale);
    if (s->kind == HEAD_LOSS_CE) ce_cpu(s->n, s->k, z, target, weight, loss_out, dz, g);
    else if (s->kind == HEAD_LOSS_BCE) bce_cpu(s->n, s->k, z, target, weight, loss_out, dz, g);
    else cox_cpu(s->n, z, target, loss_out, dz, g);
}
const HeadLossOps head_loss_ops_cpu = {{op_supports_f32}, cpu_run};
