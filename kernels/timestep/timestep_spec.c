/* timestep_spec.c: the timestep embedding's entry in the op spec table (common/op_spec.h), with a float64 reference
 * written from timestep.h's formula (not timestep_math.h's code); timesteps spread over [0, 1000), fractional ones
 * included, as a sampler with few steps gives them. A case's shape is a TimestepShape in KernelCase.params. */
#include <math.h>

#include "common/op_spec.h"
#include "timestep/timestep.h"

static const TimestepOps *table(const OpHead *ops) { return (const TimestepOps *)(const void *)ops; }
static TimestepShape shape_of(const KernelCase *k) {
    TimestepShape s;
    kernel_case_get_params(k, &s, sizeof s);
    return s;
}

static void setup(KernelCase *k, const OpHead *ops) {
    TimestepShape s = shape_of(k);
    s.dtype = k->dtype;
    kernel_case_set_params(k, &s, sizeof s);
    op_spec_bufs(k, 2, (long[]){s.n, (long)s.n * s.dim}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x2, 0);
}
static void run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const TimestepShape s = shape_of(k);
    table(ops)->embed(&s, b[0], b[1]);
}
static void ref(const KernelCase *k, const float *const *in, double *const *out, long stride) {
    const TimestepShape s = shape_of(k);
    const int half = s.dim / 2;
    for (int b = 0; b < s.n; b++)
        for (int j = 0; j < s.dim; j++) {
            double v = 0;
            if (j < half) v = cos(in[0][b] * exp(-log((double)s.max_period) * j / half));
            else if (j < 2 * half) v = sin(in[0][b] * exp(-log((double)s.max_period) * (j - half) / half));
            out[1][(long)b * s.dim + j] = v;
        }
}
/* t: 0, 999, then uniform in [0, 1000) with a fractional part */
static void fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    for (long i = 0; i < count; i++)
        h[i] = i == 0 ? 0.0f : i == 1 ? 999.0f : 1000.0f * vx_uniform01(vx_hash3(seed, (uint64_t)b, (uint64_t)i));
}

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp timestep_specs[] = {
    {"timestep_embed", TIMESTEP_EMBED, 0, 1e-6, setup, run, ref, fill},
};
const int timestep_specs_count = sizeof timestep_specs / sizeof timestep_specs[0];
