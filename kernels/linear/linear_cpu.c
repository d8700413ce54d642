/* linear_cpu.c: the float32 CPU fully connected layer (linear.h).
 *   forward        y [n][out] = x [n][in] w [out][in]^T (+ b), one sgemm per row: a row is a sample (the head of a
 *                  network), and BLAS kernels round a row by its place in their register blocks (OpenBLAS's Haswell
 *                  sgemm by its place among 12), so only a call per row gives a sample the same bits in every slot
 *                  of every batch (what predict and validation promise); the head is a sliver of the network's work
 *   backward_data  dx [n][in] = [beta*dx +] dy [n][out] w [out][in], one sgemm per fixed chunk of LIN_CHUNK rows
 *   backward_filter dw [out][in] = [beta*dw +] sum over n of dy[n][o] x[n][i], db [out] = [beta*db +] sum of dy,
 *                  in double, each output summed over the samples in order
 * Deterministic: the chunks depend on the shape only and each runs a single-threaded sgemm on one OpenMP thread
 * (OpenBLAS is switched to one thread for the call, as conv3d_cpu.c does), and the weight gradient's sums are
 * per-output loops, so the bits do not depend on the thread count. */
#include <stdlib.h>
#include <string.h>

#include "common/cpu_gemm.h"
#include "common/cpu_op.h"
#include "core/util.h"
#include "linear/linear.h"

#define LIN_CHUNK 32L /* rows (samples) per sgemm */

static void check(const LinearShape *s) {
    if (s->n < 0 || s->in < 1 || s->out < 1) vx_fatal("linear: invalid shape n=%d in=%d out=%d", s->n, s->in, s->out);
}

static void linear_forward_cpu(const LinearShape *s, const float *x, const float *w, const float *b, float *y) {
    check(s);
    const int saved = cpu_gemm_serial_begin();
#pragma omp parallel for schedule(static) if (s->n > 1)
    for (long r = 0; r < s->n; r++) {
        float *yr = y + r * s->out;
        memset(yr, 0, sizeof(float) * (size_t)s->out); /* sgemm's beta 0 is not relied on to ignore NaN */
        cpu_sgemm(0, 1, 1, s->out, s->in, 1.0f, x + r * s->in, s->in, w, s->in, 0.0f, yr, s->out);
        if (b)
            for (int o = 0; o < s->out; o++) yr[o] += b[o];
    }
    cpu_gemm_serial_end(saved);
}

static void linear_backward_data_cpu(const LinearShape *s, const float *dy, const float *w, float *dx, float beta) {
    check(s);
    const long nch = ((long)s->n + LIN_CHUNK - 1) / LIN_CHUNK;
    const int saved = cpu_gemm_serial_begin();
#pragma omp parallel for schedule(static) if (nch > 1)
    for (long c = 0; c < nch; c++) {
        const long r0 = c * LIN_CHUNK, rows = r0 + LIN_CHUNK <= s->n ? LIN_CHUNK : s->n - r0;
        float *dxc = dx + r0 * s->in;
        if (beta == 0.0f) memset(dxc, 0, sizeof(float) * (size_t)(rows * s->in)); /* dx may hold NaN */
        cpu_sgemm(0, 0, (int)rows, s->in, s->out, 1.0f, dy + r0 * s->out,
                    s->out, w, s->in, beta, dxc, s->in);
    }
    cpu_gemm_serial_end(saved);
}

static void linear_backward_filter_cpu(const LinearShape *s, const float *x, const float *dy, float *dw, float *db,
                                       float beta) {
    check(s);
    const int n = s->n, in = s->in, out = s->out;
#pragma omp parallel
    {
        double *acc = vx_malloc(sizeof(double) * (size_t)in);
#pragma omp for schedule(static)
        for (int o = 0; o < out; o++) {
            memset(acc, 0, sizeof(double) * (size_t)in);
            double sb = 0.0;
            for (int r = 0; r < n; r++) {
                const double d = dy[(long)r * out + o];
                const float *xr = x + (long)r * in;
                sb += d;
                for (int i = 0; i < in; i++) acc[i] += d * xr[i];
            }
            float *dwr = dw + (long)o * in;
            if (beta != 0.0f)
                for (int i = 0; i < in; i++) dwr[i] = beta * dwr[i] + (float)acc[i];
            else
                for (int i = 0; i < in; i++) dwr[i] = (float)acc[i];
            if (db) db[o] = beta != 0.0f ? beta * db[o] + (float)sb : (float)sb;
        }
        free(acc);
    }
}

/* ---- the CPU backend's table (ops.def): float32 only -------------------------------------------------------- */

static void cpu_forward(const LinearShape *s, const void *x, const void *w, const float *b, void *y) {
    cpu_need_f32(s->dtype, "linear_forward");
    linear_forward_cpu(s, x, w, b, y);
}
static void cpu_backward_data(const LinearShape *s, const void *dy, const void *w, void *dx, float beta) {
    cpu_need_f32(s->dtype, "linear_backward_data");
    linear_backward_data_cpu(s, dy, w, dx, beta);
}
static void cpu_backward_filter(const LinearShape *s, const void *x, const void *dy, float *dw, float *db, float beta) {
    cpu_need_f32(s->dtype, "linear_backward_filter");
    linear_backward_filter_cpu(s, x, dy, dw, db, beta);
}
const LinearOps linear_ops_cpu = {{op_supports_f32}, cpu_forward, cpu_backward_data, cpu_backward_filter};
