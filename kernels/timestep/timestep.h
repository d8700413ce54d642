/* timestep.h: the sinusoidal timestep embedding of diffusion models (DiT's TimestepEmbedder.timestep_embedding,
 * after "Attention is all you need"): for sample b with timestep t[b] (float32, may be fractional) and dim = 2*half
 * (+1 when odd),
 *   freq_j = exp(-ln(max_period) * j / half),  j in [0, half)
 *   emb[b][j] = cos(t[b] * freq_j),  emb[b][half + j] = sin(t[b] * freq_j),  emb[b][dim - 1] = 0 when dim is odd
 * computed in double and stored as shape.dtype. Forward only: the timesteps are data, not parameters. The embedding's
 * MLP (Linear -> SiLU -> Linear) is made of linear.h / gemm.h and silu.h. */
#pragma once
#include "common/dtype.h"
#include "common/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int n;            /* samples */
    int dim;          /* embedding width */
    float max_period; /* 10000 in DiT */
    DType dtype;      /* storage of emb */
} TimestepShape;

/* The op's sub-table (kernels/backend/ops.def): be->timestep->... */
enum { TIMESTEP_EMBED }; /* its functions, for supports() */
typedef struct TimestepOps {
    OpHead head;
    void (*embed)(const TimestepShape *s, const float *t, void *emb);
} TimestepOps;
extern const TimestepOps timestep_ops_cpu;
extern const TimestepOps timestep_ops_cuda; /* CUDA builds only */

#ifdef __cplusplus
}
#endif
