/* avgpool_spec.c: the global average pool's entries in the op spec table (common/op_spec.h), with float64
 * references. A case's shape: KernelCase.dims[0] samples, .dims[1] channels, .count spatial positions. */
#include "avgpool/avgpool.h"
#include "common/op_spec.h"

/* the backend's table of this op, as the entries receive it */
static const AvgPoolOps *table(const OpHead *ops) { return (const AvgPoolOps *)(const void *)ops; }

typedef struct {
    int n;
    long spatial;
    int c;
} AvgPoolCase;

static AvgPoolCase shape_of(const KernelCase *k) { return (AvgPoolCase){k->dims[0], k->count, k->dims[1]}; }

static void ap_fwd_setup(KernelCase *k, const OpHead *ops) {
    const AvgPoolCase s = shape_of(k);
    op_spec_bufs(k, 2, (long[]){(long)s.n * s.spatial * s.c, (long)s.n * s.c}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x3,
                 0);
}
static void ap_fwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const AvgPoolCase s = shape_of(k);
    table(ops)->forward(k->dtype, s.n, s.spatial, s.c, b[0], b[1]);
}
static void ap_fwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const AvgPoolCase s = shape_of(k);
    for (long i = 0; i < (long)s.n * s.c; i++) {
        const long b = i / s.c, j = i % s.c;
        double sum = 0;
        for (long p = 0; p < s.spatial; p++) sum += in[0][(b * s.spatial + p) * s.c + j];
        ref[1][i] = sum / (double)s.spatial;
    }
}

/* dy -> dx */
static void ap_bwd_setup(KernelCase *k, const OpHead *ops) {
    const AvgPoolCase s = shape_of(k);
    op_spec_bufs(k, 2, (long[]){(long)s.n * s.c, (long)s.n * s.spatial * s.c}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x3,
                 0x2);
}
static void ap_bwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const AvgPoolCase s = shape_of(k);
    table(ops)->backward(k->dtype, s.n, s.spatial, s.c, b[0], b[1], k->beta);
}
static void ap_bwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const AvgPoolCase s = shape_of(k);
    for (long i = 0; i < (long)s.n * s.spatial * s.c; i++)
        ref[1][i] = in[0][(i / (s.spatial * s.c)) * s.c + i % s.c] / (double)s.spatial;
}

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp avgpool_specs[] = {
    {"avgpool_forward", AVGPOOL_FORWARD, 0, 1e-6, ap_fwd_setup, ap_fwd_run, ap_fwd_ref, NULL},
    {"avgpool_backward", AVGPOOL_BACKWARD, 0, 1e-6, ap_bwd_setup, ap_bwd_run, ap_bwd_ref, NULL},
};
const int avgpool_specs_count = sizeof avgpool_specs / sizeof avgpool_specs[0];
