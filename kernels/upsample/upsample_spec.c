/* upsample_spec.c: the 2x nearest upsampling's entries in the op spec table (common/op_spec.h), with float64
 * references. */
#include <math.h>
#include <string.h>

#include "common/op_spec.h"
#include "upsample/upsample.h"

/* the backend's table of this op, as the entries receive it */
static const UpsampleOps *table(const OpHead *ops) { return (const UpsampleOps *)(const void *)ops; }

static long up_in_count(const KernelCase *k) {
    return (long)k->dims[0] * k->dims[1] * k->dims[2] * k->dims[3] * k->dims[4];
}
static void up_fwd_setup(KernelCase *k, const OpHead *ops) {
    op_spec_bufs(k, 2, (long[]){up_in_count(k), 8 * up_in_count(k)}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x3, 0);
}
static void up_bwd_setup(KernelCase *k, const OpHead *ops) {
    op_spec_bufs(k, 2, (long[]){8 * up_in_count(k), up_in_count(k)}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x3, 0x2);
}
static void up_fwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    table(ops)->forward(k->dtype, k->dims[0], k->dims[1], k->dims[2], k->dims[3], k->dims[4], b[0], b[1]);
}
static void up_bwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    table(ops)->backward(k->dtype, k->dims[0], k->dims[1], k->dims[2], k->dims[3], k->dims[4], b[0], b[1], k->beta);
}
/* index of output voxel (n, z, y, x, c) of the 2x grid, and of its input voxel */
static void up_pairs(const KernelCase *k, long o, long *i) {
    const int d = k->dims[1], h = k->dims[2], w = k->dims[3], c = k->dims[4];
    long t = o;
    const int ch = (int)(t % c); t /= c;
    const int x = (int)(t % (2 * w)); t /= 2 * w;
    const int y = (int)(t % (2 * h)); t /= 2 * h;
    const int z = (int)(t % (2 * d)), n = (int)(t / (2 * d));
    *i = ((((long)n * d + z / 2) * h + y / 2) * w + x / 2) * c + ch;
}
static void up_fwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    for (long o = 0; o < 8 * up_in_count(k); o++) {
        long i;
        up_pairs(k, o, &i);
        ref[1][o] = in[0][i];
    }
}
static void up_bwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    for (long i = 0; i < up_in_count(k); i++) ref[1][i] = 0;
    for (long o = 0; o < 8 * up_in_count(k); o++) {
        long i;
        up_pairs(k, o, &i);
        ref[1][i] += in[0][o];
    }
}

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp upsample_specs[] = {
    {"upsample2x_forward", UPSAMPLE_FORWARD, 0, 0, up_fwd_setup, up_fwd_run, up_fwd_ref, NULL},
    {"upsample2x_backward", UPSAMPLE_BACKWARD, 0, 1e-6, up_bwd_setup, up_bwd_run, up_bwd_ref, NULL},
};
const int upsample_specs_count = sizeof upsample_specs / sizeof upsample_specs[0];
