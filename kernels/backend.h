/* backend.h: the op table the training loop calls. One instance per backend (cpu now, cuda next); the model and
 * the loop only ever see a `const Backend *`, never which one runs. Pointers passed to ops are backend memory
 * (host memory for the CPU backend, device memory for CUDA), allocated through the table's alloc. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "conv3d.h"
#include "elementwise.h"
#include "groupnorm.h"
#include "latent.h"
#include "loss.h"
#include "optim.h"
#include "rng.h"
#include "silu.h"
#include "upsample.h"

typedef struct Backend {
    const char *name; /* "cpu" or "cuda" */

    /* memory */
    void *(*alloc)(size_t bytes);
    void (*release)(void *ptr);
    void (*copy_to_device)(void *dst, const void *src, size_t bytes);
    void (*copy_to_host)(void *dst, const void *src, size_t bytes);
    void (*zero)(void *ptr, size_t bytes);
    void (*synchronize)(void);

    /* ops: see each header for shapes and semantics */
    size_t (*conv3d_workspace_bytes)(const Conv3dShape *s);
    void (*conv3d_forward)(const Conv3dShape *s, const float *x, const float *wt, const float *bias, float *y,
                           void *workspace);
    void (*conv3d_backward_data)(const Conv3dShape *s, const float *dy, const float *wt, float *dx, float beta,
                                 void *workspace);
    void (*conv3d_backward_filter)(const Conv3dShape *s, const float *x, const float *dy, float *dw, float *dbias,
                                   float beta, void *workspace);
    void (*groupnorm_forward)(const GroupNormShape *s, const float *x, const float *gamma, const float *beta,
                              float *y, float *mean, float *rstd);
    void (*groupnorm_backward)(const GroupNormShape *s, const float *dy, const float *x, const float *gamma,
                               const float *mean, const float *rstd, float *dx, float *dgamma, float *dbeta,
                               float beta_dx, float beta_dparam);
    void (*silu_forward)(long count, const float *x, float *y);
    void (*silu_backward)(long count, const float *x, const float *dy, float *dx, float beta);
    void (*upsample2x_forward)(int n, int d, int h, int w, int c, const float *x, float *y);
    void (*upsample2x_backward)(int n, int d, int h, int w, int c, const float *dy, float *dx, float beta);
    void (*add_forward)(long count, const float *a, const float *b, float *y);
    void (*accumulate)(long count, const float *src, float *dst, float beta);
    void (*scale)(long count, float *x, float scale);
    void (*recon_loss)(ReconLoss kind, long count, const float *pred, const float *target, float *loss_out,
                       float *dpred, float grad_scale);
    void (*latent_forward)(const LatentShape *s, const float *mu, const float *logvar_raw, const float *eps,
                           float *z, float *kl_out);
    void (*latent_backward)(const LatentShape *s, const float *mu, const float *logvar_raw, const float *eps,
                            const float *dz, float kl_scale, float *dmu, float *dlogvar);
    void (*normal_fill)(long count, uint64_t seed, uint64_t stream, uint64_t offset, float *out);
    void (*adamw)(long count, float *p, const float *g, float *m, float *v, const AdamWParams *a);
    void (*sumsq)(long count, const float *x, float *out);
} Backend;

/* The float32 CPU backend (OpenMP + BLAS). Always available. */
const Backend *backend_cpu(void);
/* Sets the CPU backend's OpenMP thread count (0 = all cores). */
void backend_cpu_set_threads(int threads);
