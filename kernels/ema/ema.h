/* ema.h: the exponential moving average of the weights that diffusion models sample with:
 *   ema[i] = decay * ema[i] + (1 - decay) * param[i]      over a float32 flat buffer of count elements
 * decay is read from backend memory when the op runs (decay[0], float32), as the loss scale is, so that a captured
 * step follows a decay that changes from step to step (a warmup); skip (backend memory, NULL: never) is the
 * optimizer's OptimState.skip (optim.h): when skip[0] is non-zero the step updated no parameter, and the average is
 * left as it was too. Computed in float as ema + (1 - decay)*(param - ema), torch's lerp_ (ema.lerp_(param, 1 - decay),
 * what timm's ModelEmaV3 and diffusers' EMAModel do): exact at decay 1 (nothing moves) and decay 0 (a copy).
 * CPU and CUDA, float32 only (the master weights and their average are float32 whatever the activations' type). */
#pragma once
#include <stdint.h>

#include "common/dtype.h"
#include "common/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The op's sub-table (kernels/backend/ops.def): be->ema->... */
enum { EMA_UPDATE }; /* its functions, for supports() */
typedef struct EmaOps {
    OpHead head;
    void (*update)(long count, const float *decay, const int32_t *skip, const float *param, float *ema);
} EmaOps;
extern const EmaOps ema_ops_cpu;
extern const EmaOps ema_ops_cuda; /* CUDA builds only */

#ifdef __cplusplus
}
#endif
