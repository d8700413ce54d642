/* adaln.h: adaLN-Zero's two pieces (DiT, Peebles & Xie 2023), per sample b of n, over [tokens][c] activations, with
 * the modulation vectors (shift, scale, gate: [c] per sample) broadcast over the sample's tokens:
 *   modulate  y = x * (1 + scale[b]) + shift[b]            (x: the LayerNorm's output, layernorm.h with affine 0)
 *             backward: dx = [beta_dx*dx +] dy * (1 + scale[b])
 *                       dshift[b][j] = [beta_mod*dshift +] sum_t dy,  dscale[b][j] = [beta_mod*dscale +] sum_t dy*x
 *   gate      out = res + gate[b] * h                      (the gated residual; out may be res itself: in place)
 *             backward: dh = [beta_dh*dh +] dout * gate[b];  dgate[b][j] = [beta_mod*dgate +] sum_t dout*h;
 *                       the residual's gradient is dout itself (the caller passes it on or adds it)
 *   x, y, res, h, out and their gradients   [n][tokens][c] of shape.dtype
 *   shift, scale, gate and their gradients  [n][c] rows of shape.dtype, mod_stride elements apart: the six vectors
 *                                           of a block come from one Linear as [n][6c] (adaLN's SiLU -> Linear), and
 *                                           each points into it (mod_stride 6c) with no copy; their gradients are
 *                                           written into the packed gradient the same way
 * "Zero" is the initialisation (that Linear's weights and bias zero, so every block starts as the identity): the
 * model's, not this op's. Sums over tokens run in double over fixed chunks of tokens, the chunks added in order, so
 * the bits do not depend on the thread count or the launch. */
#pragma once
#include "common/dtype.h"
#include "common/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int n;           /* samples */
    long tokens;     /* per sample */
    int c;           /* channels */
    long mod_stride; /* elements from one sample's shift/scale/gate row to the next (>= c) */
    DType dtype;     /* storage of every array */
} AdaLNShape;

/* The op's sub-table (kernels/backend/ops.def): be->adaln->... */
enum { ADALN_MODULATE, ADALN_MODULATE_BACKWARD, ADALN_GATE, ADALN_GATE_BACKWARD }; /* for supports() */
typedef struct AdaLNOps {
    OpHead head;
    void (*modulate)(const AdaLNShape *s, const void *x, const void *shift, const void *scale, void *y);
    void (*modulate_backward)(const AdaLNShape *s, const void *dy, const void *x, const void *scale, void *dx,
                              void *dshift, void *dscale, float beta_dx, float beta_mod);
    void (*gate)(const AdaLNShape *s, const void *res, const void *h, const void *gate, void *out);
    void (*gate_backward)(const AdaLNShape *s, const void *dout, const void *h, const void *gate, void *dh,
                          void *dgate, float beta_dh, float beta_mod);
} AdaLNOps;
extern const AdaLNOps adaln_ops_cpu;
extern const AdaLNOps adaln_ops_cuda; /* CUDA builds only */

#ifdef __cplusplus
}
#endif
