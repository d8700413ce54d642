/* diffusion_cpu.c: the float32 CPU diffusion pieces (diffusion.h), elementwise loops over OpenMP; the loss summed in
 * double over fixed chunks of DIFF_CHUNK elements whose partial sums are added in chunk order, so the value does not
 * depend on the thread count (as loss_cpu.c). */
#include <stdlib.h>

#include "common/cpu_op.h"
#include "diffusion/diffusion.h"
#include "diffusion/diffusion_math.h"

#define DIFF_CHUNK 8192L

static void check(const DiffusionShape *s, const char *fn) {
    cpu_need_f32(s->dtype, fn);
    const char *e = diffusion_shape_error(s);
    if (*e) vx_fatal("%s: %s (n=%d count=%ld param=%d)", fn, e, s->n, s->count, s->param);
}

static void cpu_q_sample(const DiffusionShape *s, const float *alpha, const float *sigma, const float *x0,
                         const float *eps, void *xtv, float *target) {
    check(s, "diffusion_q_sample");
    float *xt = xtv;
    const int v = s->param == DIFFUSION_V;
    const float k = diffusion_data_scale(s);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < diffusion_total(s); i++) {
        const float a = alpha[i / s->count], sg = sigma[i / s->count], x = k * x0[i];
        xt[i] = a * x + sg * eps[i];
        target[i] = v ? a * eps[i] - sg * x : eps[i];
    }
}

static void cpu_predict_x0(const DiffusionShape *s, const float *alpha, const float *sigma, const void *xtv,
                           const void *predv, void *x0v) {
    check(s, "diffusion_predict_x0");
    const float *xt = xtv, *pred = predv;
    float *x0 = x0v;
    const float k = diffusion_data_scale(s);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < diffusion_total(s); i++)
        x0[i] = diffusion_x0(s->param, alpha[i / s->count], sigma[i / s->count], xt[i], pred[i]) / k;
}

static void cpu_predict_x0_backward(const DiffusionShape *s, const float *alpha, const float *sigma, const void *dx0v,
                                    void *dpredv, float beta) {
    check(s, "diffusion_predict_x0_backward");
    const float *dx0 = dx0v;
    float *dpred = dpredv;
    const float k = diffusion_data_scale(s);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < diffusion_total(s); i++) {
        const float g = diffusion_dx0_dpred(s->param, alpha[i / s->count], sigma[i / s->count]) / k * dx0[i];
        dpred[i] = beta != 0.0f ? beta * dpred[i] + g : g;
    }
}

static void cpu_loss(const DiffusionShape *s, const void *predv, const float *target, const float *w, float *loss_out,
                     void *dpredv, float grad_scale, const float *loss_scale) {
    check(s, "diffusion_loss");
    const long total = diffusion_total(s);
    if (total <= 0) {
        loss_out[0] = 0.0f;
        return;
    }
    const float *pred = predv;
    float *dpred = dpredv;
    const long nb = (total + DIFF_CHUNK - 1) / DIFF_CHUNK;
    double *part = vx_malloc(sizeof(double) * (size_t)nb);
    const float g2 = (float)(2.0 * (double)cpu_scaled(grad_scale, loss_scale) / (double)total);
#pragma omp parallel for schedule(static)
    for (long blk = 0; blk < nb; blk++) {
        const long i0 = blk * DIFF_CHUNK, i1 = i0 + DIFF_CHUNK < total ? i0 + DIFF_CHUNK : total;
        double acc = 0.0;
        for (long i = i0; i < i1; i++) {
            const float wb = w ? w[i / s->count] : 1.0f, d = pred[i] - target[i];
            acc += (double)wb * ((double)d * d);
            if (dpred) dpred[i] = g2 * wb * d;
        }
        part[blk] = acc;
    }
    double sum = 0.0;
    for (long blk = 0; blk < nb; blk++) sum += part[blk];
    free(part);
    loss_out[0] = (float)(sum / (double)total);
}

static void cpu_ddim_step(const DiffusionShape *s, const float *alpha, const float *sigma, const float *alpha_next,
                          const float *sigma_next, const float *x_t, const void *predv, float *x_next) {
    check(s, "diffusion_ddim_step");
    const float *pred = predv;
#pragma omp parallel for schedule(static)
    for (long i = 0; i < diffusion_total(s); i++) {
        const long b = i / s->count;
        const float xt = x_t[i];
        const float x0 = diffusion_x0(s->param, alpha[b], sigma[b], xt, pred[i]);
        const float e = diffusion_eps(s->param, alpha[b], sigma[b], xt, pred[i]);
        x_next[i] = alpha_next[b] * x0 + sigma_next[b] * e;
    }
}

/* ---- the CPU backend's table (ops.def): float32 only -------------------------------------------------------- */

const DiffusionOps diffusion_ops_cpu = {{op_supports_f32}, cpu_q_sample, cpu_predict_x0, cpu_predict_x0_backward,
                                        cpu_loss, cpu_ddim_step};
