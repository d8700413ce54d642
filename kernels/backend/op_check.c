/* op_check.c: run one case of the op spec table and check it against its float64 reference (see op_check.h). */
#include "backend/op_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "common/rng.h"

#define KCHECK_MIN_OFFSET_COUNT 64

size_t kernel_case_bytes(const KernelCase *k, int b) {
    return (size_t)k->buf_count[b] * (k->act[b] ? dtype_size(k->dtype) : sizeof(float));
}

double kernel_check_tolerance(const KernelCase *k, int tf32) {
    int n_ops;
    const KernelOp *op = &kernel_ops(&n_ops)[k->op];
    double tol = op->tolerance;
    if (tf32 && op->compute_bound && k->dtype == DT_F32 && tol < 1e-2) tol = 1e-2; /* TF32: a 10-bit mantissa */
    /* bf16 math: x, w and dy rounded to 8 significant bits (2^-9 relative each) before float32 accumulation, against
     * a reference of the unrounded float32 inputs: the bound of 16-bit storage below */
    if (k->bf16_math && op->compute_bound && k->dtype == DT_F32 && tol < 1.6e-2) tol = 1.6e-2;
    /* 16-bit storage: every stored output is rounded to 8 (bf16) or 11 (fp16) significant bits, 2^-9 and 2^-12
     * relative, and beta-1 outputs add two rounded values; the bound leaves room for a few such roundings. Casts are
     * exact (0): they are the rounding. */
    if (k->dtype == DT_BF16 && tol > 0) tol = tol > 1.6e-2 ? tol : 1.6e-2;
    if (k->dtype == DT_F16 && tol > 0) tol = tol > 2e-3 ? tol : 2e-3;
    return tol;
}

float **kernel_case_inputs(const KernelCase *k, unsigned seed) {
    int n_ops;
    const KernelOp *op = &kernel_ops(&n_ops)[k->op];
    float **h = vx_malloc(KOP_MAX_BUFS * sizeof *h);
    for (int b = 0; b < k->nbuf; b++) {
        h[b] = vx_malloc((size_t)(k->buf_count[b] > 0 ? k->buf_count[b] : 1) * sizeof(float));
        if (k->role[b] == KB_OUT) {
            memset(h[b], 0, (size_t)k->buf_count[b] * sizeof(float));
            continue;
        }
        if (op->fill) op->fill(k, b, h[b], k->buf_count[b], seed);
        else
            for (long i = 0; i < k->buf_count[b]; i++)
                h[b][i] = 2.0f * vx_uniform01(vx_hash3(seed, (uint64_t)b, (uint64_t)i)) - 1.0f;
        if (k->act[b]) /* what the op will read: the values of the storage type */
            for (long i = 0; i < k->buf_count[b]; i++) h[b][i] = dtype_round(k->dtype, h[b][i]);
    }
    return h;
}

void kernel_case_upload(const Backend *be, const KernelCase *k, int b, const float *h, void *dev) {
    const size_t bytes = kernel_case_bytes(k, b);
    if (!bytes) return;
    if (!k->act[b] || k->dtype == DT_F32) {
        be->copy_to_device(dev, h, bytes);
        return;
    }
    void *t = vx_malloc(bytes);
    dtype_convert((size_t)k->buf_count[b], DT_F32, h, k->dtype, t);
    be->copy_to_device(dev, t, bytes);
    free(t);
}

/* Every `stride`-th output element of a convolution (an odd stride not divisible by 3, so the samples walk through
 * every channel and position): about 1500 samples, fewer where each costs many multiply-adds (a weight gradient's
 * element sums over the whole batch), so that no reference takes much over 3e8 of them; 1 for the other ops. */
static long check_stride(const KernelOp *op, const KernelCase *k) {
    if (!op->compute_bound) return 1;
    long most = 0;
    for (int b = 0; b < k->nbuf; b++)
        if (k->role[b] != KB_IN && k->buf_count[b] > most) most = k->buf_count[b];
    const double macs_per_element = k->flops / (2.0 * (double)most);
    double samples = 3e8 / (macs_per_element > 1 ? macs_per_element : 1);
    samples = samples > 1500 ? 1500 : samples < 64 ? 64 : samples;
    long s = (long)((double)most / samples);
    if (s <= 1) return 1;
    s |= 1;
    while (s % 3 == 0) s += 2;
    return s;
}

/* NaN in the storage type: what a beta-0 output holds before the call */
static void poison(const Backend *be, const KernelCase *k, int b, void *dev) {
    const size_t n = (size_t)k->buf_count[b];
    float *h = vx_malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    kernel_case_upload(be, k, b, h, dev);
    free(h);
}

void kernel_check_case(const Backend *be, const KernelCase *k, int offset, unsigned seed, double tol,
                       int corrupt_first_output, KernelCheck *r) {
    int n_ops;
    const KernelOp *op = &kernel_ops(&n_ops)[k->op];
    float **host = kernel_case_inputs(k, seed);
    char *base[KOP_MAX_BUFS] = {0};
    void *dev[KOP_MAX_BUFS] = {0};
    for (int b = 0; b < k->nbuf; b++) {
        const size_t es = k->act[b] ? dtype_size(k->dtype) : sizeof(float);
        /* single values (a loss scale, the noise offset, the optimizer's state) stay aligned, as the model keeps
         * them: the offset is for the arrays whose vector paths it must refuse */
        const size_t off = k->buf_count[b] >= KCHECK_MIN_OFFSET_COUNT ? (size_t)offset * es : 0;
        base[b] = be->alloc(kernel_case_bytes(k, b) + off);
        dev[b] = base[b] + off;
        if (k->role[b] == KB_OUT) poison(be, k, b, dev[b]);
        else kernel_case_upload(be, k, b, host[b], dev[b]);
    }
    void *ws = k->workspace ? be->alloc(k->workspace) : NULL;
    op->run(kernel_op_table(be, k->op), k, dev, ws);
    be->synchronize();

    const long stride = check_stride(op, k);
    double *ref[KOP_MAX_BUFS] = {0};
    for (int b = 0; b < k->nbuf; b++)
        if (k->role[b] != KB_IN) {
            ref[b] = vx_malloc((size_t)(k->buf_count[b] > 0 ? k->buf_count[b] : 1) * sizeof(double));
            for (long i = 0; i < k->buf_count[b]; i++) ref[b][i] = NAN;
        }
    op->reference(k, (const float *const *)host, ref, stride);
    *r = (KernelCheck){.ok = 1, .tol = tol};
    snprintf(r->detail, sizeof r->detail, "ok");
    int first_out = 1;
    for (int b = 0; b < k->nbuf; b++) {
        if (k->role[b] == KB_IN) continue;
        const long n = k->buf_count[b];
        float *got = vx_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
        void *raw = vx_malloc(kernel_case_bytes(k, b) ? kernel_case_bytes(k, b) : 1);
        be->copy_to_host(raw, dev[b], kernel_case_bytes(k, b));
        dtype_convert((size_t)n, k->act[b] ? k->dtype : DT_F32, raw, DT_F32, got);
        free(raw);
        if (first_out && corrupt_first_output) got[0] += 1.0f + fabsf(got[0]);
        first_out = 0;
        const int add_old = k->accum[b] && k->beta != 0.0f; /* a beta-1 output: its old value plus the result */
        double worst = 0, scale = 0;
        long at = -1, compared = 0;
        for (long i = 0; i < n; i++) {
            if (isnan(ref[b][i])) continue;
            const double want = add_old ? ref[b][i] + host[b][i] : ref[b][i];
            compared++;
            if (fabs(want) > scale && isfinite(want)) scale = fabs(want);
            double d;
            if (isinf(want)) d = got[i] == want ? 0 : INFINITY; /* a cast to float16 overflows to infinity */
            else d = isfinite(got[i]) ? fabs(got[i] - want) : INFINITY;
            if (d > worst || (at < 0 && d != d)) worst = d, at = i;
            ref[b][i] = want;
        }
        const double e = worst / (scale > 0 ? scale : 1.0);
        if (e > r->err || !(e == e)) r->err = e;
        if (!(e <= tol) && r->ok) {
            r->ok = 0;
            snprintf(r->detail, sizeof r->detail, "output %d element %ld: %.9g, reference %.9g (%ld compared)", b, at,
                     at >= 0 ? (double)got[at] : NAN, at >= 0 ? ref[b][at] : NAN, compared);
        }
        free(got);
    }
    for (int b = 0; b < k->nbuf; b++) {
        free(ref[b]);
        free(host[b]);
        be->release(base[b]);
    }
    free(host);
    if (ws) be->release(ws);
}
