/* maxpool_spec.c: max pooling's entries in the op spec table (common/op_spec.h), with float64 references. A case's
 * shape is a MaxPoolShape (maxpool_shape) in KernelCase.params.
 * The arg buffer holds int32 in a buffer the checker reads as float32 (non-activation buffers are 4 bytes per
 * element, copied as bytes): its reference is the expected int32's bits read as a float (a tiny subnormal, exact in
 * double), so a wrong winner is a relative error of at least 1/(k^3 - 1) over the buffer: caught at float32's and
 * float16's tolerances for every k the cases use, at bfloat16's for k <= 3. The forward's fill quantises x to a few
 * levels, so windows hold ties and the tie rule is checked; backward's fill makes args that point at real positions
 * (a forward would never point into the padding). */
#include <string.h>

#include "common/op_spec.h"
#include "maxpool/maxpool.h"

/* the backend's table of this op, as the entries receive it */
static const MaxPoolOps *table(const OpHead *ops) { return (const MaxPoolOps *)(const void *)ops; }
static MaxPoolShape shape_of(const KernelCase *k) {
    MaxPoolShape s;
    kernel_case_get_params(k, &s, sizeof s);
    return s;
}
static MaxPoolShape typed(KernelCase *k) {
    MaxPoolShape s = shape_of(k);
    s.dtype = k->dtype;
    kernel_case_set_params(k, &s, sizeof s);
    return s;
}
static long in_count(const MaxPoolShape *s) { return (long)s->n * s->d * s->h * s->w * s->c; }
static long out_count(const MaxPoolShape *s) { return (long)s->n * s->od * s->oh * s->ow * s->c; }
static float int_bits(int32_t v) {
    float f;
    memcpy(&f, &v, sizeof f);
    return f;
}
static int32_t bits_int(float f) {
    int32_t v;
    memcpy(&v, &f, sizeof v);
    return v;
}

/* x -> y arg */
static void mp_fwd_setup(KernelCase *k, const OpHead *ops) {
    const MaxPoolShape s = typed(k);
    op_spec_bufs(k, 3, (long[]){in_count(&s), out_count(&s), out_count(&s)}, (KernelBufRole[]){KB_IN, KB_OUT, KB_OUT},
                 0x3, 0);
}
static void mp_fwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const MaxPoolShape s = shape_of(k);
    table(ops)->forward(&s, b[0], b[1], b[2]);
}
/* output index t -> (b, oz, oy, ox, j) */
static void out_pos(const MaxPoolShape *s, long t, long *b, int *oz, int *oy, int *ox, int *j) {
    *j = (int)(t % s->c);
    t /= s->c;
    *ox = (int)(t % s->ow);
    t /= s->ow;
    *oy = (int)(t % s->oh);
    t /= s->oh;
    *oz = (int)(t % s->od);
    *b = t / s->od;
}
static void mp_fwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const MaxPoolShape s = shape_of(k);
    for (long t = 0; t < out_count(&s); t++) {
        long b;
        int oz, oy, ox, j;
        out_pos(&s, t, &b, &oz, &oy, &ox, &j);
        double best = -INFINITY;
        int32_t at = -1;
        for (int kd = 0; kd < s.k; kd++)
            for (int kh = 0; kh < s.k; kh++)
                for (int kw = 0; kw < s.k; kw++) {
                    const int z = oz * s.stride - s.pad + kd, y = oy * s.stride - s.pad + kh,
                              x = ox * s.stride - s.pad + kw;
                    if (z < 0 || z >= s.d || y < 0 || y >= s.h || x < 0 || x >= s.w) continue; /* -infinity */
                    const double v = in[0][(((b * s.d + z) * s.h + y) * s.w + x) * s.c + j];
                    if (at < 0 || v > best) best = v, at = (kd * s.k + kh) * s.k + kw; /* ties: the first */
                }
        ref[1][t] = best;
        ref[2][t] = int_bits(at);
    }
}
/* x on 5 levels in [-1, 1]: ties in most windows */
static void mp_fwd_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    for (long i = 0; i < count; i++) h[i] = (float)((int)(5.0f * vx_uniform01(vx_hash3(seed, 0, (uint64_t)i))) - 2) * 0.5f;
}

/* dy arg -> dx */
static void mp_bwd_setup(KernelCase *k, const OpHead *ops) {
    const MaxPoolShape s = typed(k);
    op_spec_bufs(k, 3, (long[]){out_count(&s), out_count(&s), in_count(&s)}, (KernelBufRole[]){KB_IN, KB_IN, KB_OUT},
                 0x5, 0x4);
}
static void mp_bwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const MaxPoolShape s = shape_of(k);
    table(ops)->backward(&s, b[0], b[1], b[2], k->beta);
}
static void mp_bwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const MaxPoolShape s = shape_of(k);
    for (long i = 0; i < in_count(&s); i++) ref[2][i] = 0;
    for (long t = 0; t < out_count(&s); t++) { /* scattered here: the reference is not the gather it checks */
        long b;
        int oz, oy, ox, j;
        out_pos(&s, t, &b, &oz, &oy, &ox, &j);
        const int32_t a = bits_int(in[1][t]);
        const int kd = a / (s.k * s.k), kh = a / s.k % s.k, kw = a % s.k;
        const int z = oz * s.stride - s.pad + kd, y = oy * s.stride - s.pad + kh, x = ox * s.stride - s.pad + kw;
        ref[2][(((b * s.d + z) * s.h + y) * s.w + x) * s.c + j] += in[0][t];
    }
}
/* dy uniform; arg a random tap of each window, moved along each axis into the input where it falls in the padding */
static void mp_bwd_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    if (b == 0) {
        op_spec_uniform_fill(h, count, seed, b);
        return;
    }
    const MaxPoolShape s = shape_of(k);
    for (long t = 0; t < count; t++) {
        long bb;
        int o[3], j;
        out_pos(&s, t, &bb, &o[0], &o[1], &o[2], &j);
        const int size[3] = {s.d, s.h, s.w};
        int tap[3];
        for (int a = 0; a < 3; a++) {
            const int start = o[a] * s.stride - s.pad;
            int p = start + (int)(s.k * vx_uniform01(vx_hash3(seed, (uint64_t)(b * 3 + a), (uint64_t)t)));
            if (p > start + s.k - 1) p = start + s.k - 1; /* the uniform reaches 1.0 */
            p = p < 0 ? 0 : p >= size[a] ? size[a] - 1 : p;
            tap[a] = p - start;
        }
        h[t] = int_bits((tap[0] * s.k + tap[1]) * s.k + tap[2]);
    }
}

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp maxpool_specs[] = {
    {"maxpool_forward", MAXPOOL_FORWARD, 0, 1e-6, mp_fwd_setup, mp_fwd_run, mp_fwd_ref, mp_fwd_fill},
    {"maxpool_backward", MAXPOOL_BACKWARD, 0, 1e-5, mp_bwd_setup, mp_bwd_run, mp_bwd_ref, mp_bwd_fill},
};
const int maxpool_specs_count = sizeof maxpool_specs / sizeof maxpool_specs[0];
