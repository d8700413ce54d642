/* pool_window_spec.c: the windowed average pool's entries in the op spec table (common/op_spec.h), with float64
 * references written from the definition (each output the mean of its window; each input its window's gradient / K,
 * 0 outside every window). A case's shape is a PoolWindowShape in KernelCase.params. */
#include "common/op_spec.h"
#include "pool_window/pool_window.h"

/* the backend's table of this op, as the entries receive it */
static const PoolWindowOps *table(const OpHead *ops) { return (const PoolWindowOps *)(const void *)ops; }

static PoolWindowShape shape_of(const KernelCase *k) {
    PoolWindowShape s;
    kernel_case_get_params(k, &s, sizeof s);
    s.dtype = k->dtype;
    return s;
}
static long in_count(const PoolWindowShape *s) { return (long)s->n * s->d * s->h * s->w * s->c; }
static long out_count(const PoolWindowShape *s) { return (long)s->n * s->od * s->oh * s->ow * s->c; }

static void fwd_setup(KernelCase *k, const OpHead *ops) {
    const PoolWindowShape s = shape_of(k);
    op_spec_bufs(k, 2, (long[]){in_count(&s), out_count(&s)}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x3, 0);
}
static void fwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const PoolWindowShape s = shape_of(k);
    table(ops)->forward(&s, b[0], b[1]);
}
static void fwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const PoolWindowShape s = shape_of(k);
    const double K = (double)s.k[0] * s.k[1] * s.k[2];
    for (long i = 0; i < out_count(&s); i++) {
        const long j = i % s.c, r = i / s.c;
        const long ox = r % s.ow, oy = r / s.ow % s.oh, oz = r / ((long)s.ow * s.oh) % s.od;
        const long b = r / ((long)s.ow * s.oh * s.od);
        double sum = 0;
        for (int a = 0; a < s.k[0]; a++)
            for (int e = 0; e < s.k[1]; e++)
                for (int f = 0; f < s.k[2]; f++)
                    sum += in[0][(((b * s.d + oz * s.k[0] + a) * s.h + oy * s.k[1] + e) * s.w + ox * s.k[2] + f) * s.c +
                                 j];
        ref[1][i] = sum / K;
    }
}

static void bwd_setup(KernelCase *k, const OpHead *ops) {
    const PoolWindowShape s = shape_of(k);
    op_spec_bufs(k, 2, (long[]){out_count(&s), in_count(&s)}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x3, 0x2);
}
static void bwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const PoolWindowShape s = shape_of(k);
    table(ops)->backward(&s, b[0], b[1], k->beta);
}
static void bwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const PoolWindowShape s = shape_of(k);
    const double K = (double)s.k[0] * s.k[1] * s.k[2];
    for (long i = 0; i < in_count(&s); i++) {
        const long j = i % s.c, p = i / s.c;
        const long x = p % s.w, y = p / s.w % s.h, z = p / ((long)s.w * s.h) % s.d, b = p / ((long)s.w * s.h * s.d);
        const long oz = z / s.k[0], oy = y / s.k[1], ox = x / s.k[2];
        ref[1][i] = oz < s.od && oy < s.oh && ox < s.ow
                        ? in[0][(((b * s.od + oz) * s.oh + oy) * s.ow + ox) * s.c + j] / K
                        : 0.0;
    }
}

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp pool_window_specs[] = {
    {"pool_window_forward", POOL_WINDOW_FORWARD, 0, 1e-6, fwd_setup, fwd_run, fwd_ref, NULL},
    {"pool_window_backward", POOL_WINDOW_BACKWARD, 0, 1e-6, bwd_setup, bwd_run, bwd_ref, NULL},
};
const int pool_window_specs_count = sizeof pool_window_specs / sizeof pool_window_specs[0];
