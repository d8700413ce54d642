/* patch_spec.c: patchify / unpatchify's entries in the op spec table (common/op_spec.h), with references written
 * from patch.h's formula by nested loops over the volume (not through patch_volume_index, which both backends use).
 * A case's shape is a PatchShape in KernelCase.params. */
#include "common/op_spec.h"
#include "patch/patch.h"

static const PatchOps *table(const OpHead *ops) { return (const PatchOps *)(const void *)ops; }
static PatchShape shape_of(const KernelCase *k) {
    PatchShape s;
    kernel_case_get_params(k, &s, sizeof s);
    return s;
}
static PatchShape typed(KernelCase *k) {
    PatchShape s = shape_of(k);
    s.dtype = k->dtype;
    kernel_case_set_params(k, &s, sizeof s);
    return s;
}

/* f(volume index, token index) for every element, by the volume's coordinates */
#define FOR_PAIRS(s, body)                                                                                       \
    for (long b_ = 0; b_ < (s).n; b_++)                                                                          \
        for (int z_ = 0; z_ < (s).d; z_++)                                                                       \
            for (int y_ = 0; y_ < (s).h; y_++)                                                                   \
                for (int x_ = 0; x_ < (s).w; x_++)                                                               \
                    for (int c_ = 0; c_ < (s).c; c_++) {                                                         \
                        const long vi_ = (((b_ * (s).d + z_) * (s).h + y_) * (s).w + x_) * (s).c + c_;           \
                        const long tok_ = (((b_ * ((s).d / (s).p[0]) + z_ / (s).p[0]) * ((s).h / (s).p[1]) +     \
                                            y_ / (s).p[1]) * ((s).w / (s).p[2])) + x_ / (s).p[2];                \
                        const long in_ = (((long)(z_ % (s).p[0]) * (s).p[1] + y_ % (s).p[1]) * (s).p[2] +        \
                                          x_ % (s).p[2]) * (s).c + c_;                                           \
                        const long ti_ = tok_ * patch_token_dim(&(s)) + in_;                                     \
                        body;                                                                                    \
                    }

static void setup(KernelCase *k, const OpHead *ops) {
    const PatchShape s = typed(k);
    op_spec_bufs(k, 2, (long[]){patch_count(&s), patch_count(&s)}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x3, 0x2);
}
static void tok_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const PatchShape s = shape_of(k);
    table(ops)->to_tokens(&s, b[0], b[1], k->beta);
}
static void vol_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const PatchShape s = shape_of(k);
    table(ops)->to_volume(&s, b[0], b[1], k->beta);
}
static void tok_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const PatchShape s = shape_of(k);
    FOR_PAIRS(s, ref[1][ti_] = in[0][vi_]);
}
static void vol_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const PatchShape s = shape_of(k);
    FOR_PAIRS(s, ref[1][vi_] = in[0][ti_]);
}

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp patch_specs[] = {
    {"patch_to_tokens", PATCH_TO_TOKENS, 0, 1e-7, setup, tok_run, tok_ref, NULL},
    {"patch_to_volume", PATCH_TO_VOLUME, 0, 1e-7, setup, vol_run, vol_ref, NULL},
};
const int patch_specs_count = sizeof patch_specs / sizeof patch_specs[0];
