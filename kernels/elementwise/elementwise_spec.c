/* elementwise_spec.c: the elementwise ops' entries in the op spec table (common/op_spec.h): add, accumulate, the
 * casts, pad_channels and copy_channels, with float64 references (the casts' exact: they round as dtype.h does). */
#include <math.h>
#include <string.h>

#include "common/op_spec.h"
#include "common/rng.h"
#include "elementwise/elementwise.h"

/* the backend's table of this op, as the entries receive it */
static const ElementwiseOps *table(const OpHead *ops) { return (const ElementwiseOps *)(const void *)ops; }

static void binary_setup(KernelCase *k, const OpHead *ops) {
    op_spec_bufs(k, 3, (long[]){k->count, k->count, k->count}, (KernelBufRole[]){KB_IN, KB_IN, KB_OUT}, 0x7, 0);
}
static void add_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    table(ops)->add(k->dtype, k->count, b[0], b[1], b[2]);
}
static void add_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    for (long i = 0; i < k->count; i++) ref[2][i] = (double)in[0][i] + in[1][i];
}
static void accumulate_setup(KernelCase *k, const OpHead *ops) {
    op_spec_bufs(k, 2, (long[]){k->count, k->count}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x3, 0x2);
}
static void accumulate_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    table(ops)->accumulate(k->dtype, k->count, b[0], b[1], k->beta);
}
static void accumulate_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    for (long i = 0; i < k->count; i++) ref[1][i] = in[0][i];
}
/* cast: float32 -> the storage type (cast_to) and back (cast_from); exact: the reference rounds as dtype.h does */
static void cast_to_setup(KernelCase *k, const OpHead *ops) {
    op_spec_bufs(k, 2, (long[]){k->count, k->count}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x2, 0);
}
static void cast_from_setup(KernelCase *k, const OpHead *ops) {
    op_spec_bufs(k, 2, (long[]){k->count, k->count}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x1, 0);
}
static void cast_to_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    table(ops)->cast(k->count, DT_F32, b[0], k->dtype, b[1]);
}
static void cast_from_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    table(ops)->cast(k->count, k->dtype, b[0], DT_F32, b[1]);
}
static void cast_to_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    for (long i = 0; i < k->count; i++) ref[1][i] = dtype_round(k->dtype, in[0][i]);
}
static void cast_from_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    for (long i = 0; i < k->count; i++) ref[1][i] = in[0][i]; /* already of dtype's values */
}
/* spans float16's range: subnormals, normals, and beyond 65504 (infinity) */
static void cast_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    for (long i = 0; i < count; i++) {
        const double u = vx_uniform01(vx_hash3(seed, (uint64_t)b, (uint64_t)i));
        const double mag = exp2(-30.0 + 48.0 * u); /* 2^-30 .. 2^18 */
        h[i] = (float)((i & 1) ? -mag : mag);
    }
}

/* pad_channels: count rows of dims[0] channels -> dims[1] channels (zero-padded or sliced), from float32 to the
 * storage type (pad_channels_to: the first conv's input and weights) and back (pad_channels_from); beta 1 adds to
 * the output (the sliced weight gradient across micro-batches) */
static void pad_to_setup(KernelCase *k, const OpHead *ops) {
    op_spec_bufs(k, 2, (long[]){k->count * k->dims[0], k->count * k->dims[1]}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x2, 0x2);
}
static void pad_from_setup(KernelCase *k, const OpHead *ops) {
    op_spec_bufs(k, 2, (long[]){k->count * k->dims[0], k->count * k->dims[1]}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x1, 0x2);
}
static void pad_to_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    table(ops)->pad_channels(k->count, DT_F32, k->dims[0], b[0], k->dtype, k->dims[1], b[1], k->beta);
}
static void pad_from_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    table(ops)->pad_channels(k->count, k->dtype, k->dims[0], b[0], DT_F32, k->dims[1], b[1], k->beta);
}
static void pad_ref(const KernelCase *k, const float *const *in, double *const *ref, DType to) {
    const int cf = k->dims[0], ct = k->dims[1];
    for (long r = 0; r < k->count; r++)
        for (int c = 0; c < ct; c++) ref[1][r * ct + c] = c < cf ? dtype_round(to, in[0][r * cf + c]) : 0.0;
}
static void pad_to_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    pad_ref(k, in, ref, k->dtype);
}
static void pad_from_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    pad_ref(k, in, ref, DT_F32); /* the input already holds values of the storage type */
}

/* copy_channels: count rows; dims = {c_src, src_off, c_dst, dst_off, n}; the slice of dst is checked (its other
 * channels are not the op's: their reference stays NaN, not compared) */
static void copy_setup(KernelCase *k, const OpHead *ops) {
    op_spec_bufs(k, 2, (long[]){k->count * k->dims[0], k->count * k->dims[2]}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x3,
                 0x2);
    k->bytes = (double)k->count * k->dims[4] * dtype_size(k->dtype) * (k->beta != 0.0f ? 3 : 2);
}
static void copy_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    table(ops)->copy_channels(k->count, k->dtype, k->dims[0], k->dims[1], b[0], k->dims[2], k->dims[3], b[1],
                              k->dims[4], k->beta);
}
static void copy_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    for (long r = 0; r < k->count; r++)
        for (int j = 0; j < k->dims[4]; j++)
            ref[1][r * k->dims[2] + k->dims[3] + j] = in[0][r * k->dims[0] + k->dims[1] + j];
}

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp elementwise_specs[] = {
    {"add_forward", EW_ADD, 0, 1e-7, binary_setup, add_run, add_ref, NULL},
    {"accumulate", EW_ACCUMULATE, 0, 1e-7, accumulate_setup, accumulate_run, accumulate_ref, NULL},
    {"cast_to", EW_CAST, 0, 0, cast_to_setup, cast_to_run, cast_to_ref, cast_fill},
    {"cast_from", EW_CAST, 0, 0, cast_from_setup, cast_from_run, cast_from_ref, cast_fill},
    /* 1e-7: exact but for beta 1's one float32 rounding of old + new */
    {"pad_channels_to", EW_PAD_CHANNELS, 0, 1e-7, pad_to_setup, pad_to_run, pad_to_ref, NULL},
    {"pad_channels_from", EW_PAD_CHANNELS, 0, 1e-7, pad_from_setup, pad_from_run, pad_from_ref, NULL},
    {"copy_channels", EW_COPY_CHANNELS, 0, 1e-7, copy_setup, copy_run, copy_ref, NULL},
};
const int elementwise_specs_count = sizeof elementwise_specs / sizeof elementwise_specs[0];
