/* backend.h: the op table the training loop calls. One instance per backend ("cpu" and "cuda"); the model and
 * the loop only ever see a `const Backend *`, never which one runs. Pointers passed to ops are backend memory
 * (host memory for the CPU backend, device memory for CUDA), allocated through the table's alloc.
 * On CUDA every op is enqueued on one compute stream and returns before the GPU has finished: results written to
 * backend memory (including the single floats of recon_loss, latent_forward and sumsq) are read back with
 * copy_to_host, which waits for the work enqueued before it. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "augment.h"
#include "conv3d.h"
#include "elementwise.h"
#include "groupnorm.h"
#include "latent.h"
#include "loss.h"
#include "optim.h"
#include "rng.h"
#include "silu.h"
#include "upsample.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Timer slots of timer_mark / timer_elapsed_ms. */
#define BACKEND_TIMER_SLOTS 8

typedef struct Backend {
    const char *name; /* "cpu" or "cuda" */

    /* memory */
    void *(*alloc)(size_t bytes);
    void (*release)(void *ptr);
    void (*copy_to_device)(void *dst, const void *src, size_t bytes);
    void (*copy_to_host)(void *dst, const void *src, size_t bytes);
    void (*zero)(void *ptr, size_t bytes);
    void (*synchronize)(void); /* waits for all enqueued work (compute and uploads) */

    /* Host staging buffers (the data loader's ring slots): pinned (page-locked) memory on CUDA, so uploads from
     * them are true asynchronous DMA; 64-byte aligned malloc on the CPU. Released with release_host only. */
    void *(*alloc_host)(size_t bytes);
    void (*release_host)(void *ptr);
    /* Asynchronous upload of host memory to backend memory. CUDA: the copy runs on a separate copy stream; it
     * starts after the compute work enqueued before this call (so dst may still be in use by it), and compute
     * work enqueued after this call waits for the copy (so it sees the data). The host buffer must stay untouched
     * until upload_wait returns. Call it from the thread that enqueues the ops: "the compute work enqueued before"
     * is that thread's, and the two events it reuses are not locked. CPU: memcpy. */
    void (*upload_async)(void *dst_device, const void *src_host, size_t bytes);
    /* Blocks the host until the last upload_async has finished reading its host buffer. CPU: nothing to wait for. */
    void (*upload_wait)(void);

    /* Step timing: timer_mark records a point on the compute stream's timeline in slot 0..BACKEND_TIMER_SLOTS-1
     * (CUDA: an event; CPU: the wall clock); timer_elapsed_ms waits until to_slot's point has been reached and
     * returns the milliseconds between the two marks. Both slots must have been marked. */
    void (*timer_mark)(int slot);
    double (*timer_elapsed_ms)(int from_slot, int to_slot);

    /* Ordering across streams (the NCCL communicator's stream, dist/comm_nccl.cu): event_record records, on the
     * compute stream, the point after the work enqueued so far; event_wait makes the compute stream's later work
     * wait for an event recorded on another stream (no host block). CPU: everything runs in program order, so the
     * four are no-ops (event_create returns a token that is not NULL). */
    void *(*event_create)(void);
    void (*event_destroy)(void *ev);
    void (*event_record)(void *ev);
    void (*event_wait)(void *ev);

    /* Bytes currently allocated through alloc (not alloc_host, not the backend's internal buffers), and the
     * most there have been at once since the process started. */
    size_t (*bytes_in_use)(void);
    size_t (*peak_bytes)(void);

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
                               const float *beta, const float *mean, const float *rstd, float *dx, float *dgamma, float *dbeta,
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
    void (*augment)(int d, int h, int w, int c, uint32_t code, const float *x, float *y);
} Backend;

/* The float32 CPU backend (OpenMP + BLAS). Always available. */
const Backend *backend_cpu(void);
/* Sets the CPU backend's OpenMP thread count (0 = all cores). */
void backend_cpu_set_threads(int threads);

/* ---- CUDA backend (float32, cuDNN convolutions, own kernels) ------------------------------------------------
 * In a build without CUDA (make CUDA=0) backend_cuda_init always returns 0 with the reason and backend_cuda
 * returns NULL. */
typedef struct {
    int deterministic; /* 1: only algorithms whose results are bitwise reproducible run to run (convolutions;
                          every own kernel is deterministic anyway) */
    int allow_tf32;    /* 1: cuDNN may use TF32 tensor cores in float32 convolutions (Ampere and newer; about 1e-3
                          relative error); 0: full float32 FMA math */
} BackendOptions;
/* Sets the CUDA backend's options; the defaults are {deterministic 0, allow_tf32 1} (PyTorch's for
 * convolutions). Call it before building the model: the convolution algorithms, and so the workspace sizes
 * that conv3d_workspace_bytes reports to the planner, are chosen under the options in force when a shape is
 * first seen (a shape is cached per options, so a later change plans new shapes and leaves old ones alone).
 * May be called before backend_cuda_init. */
void backend_cuda_set_options(const BackendOptions *o);
/* Makes GPU `device` the backend's device: sets it, creates the compute and copy streams, the cuDNN handle,
 * the timer events and the reduction scratch buffer. Returns 1 when the GPU is usable, else 0 with a one-line
 * reason in reason[reason_len] (no driver, no such device, compute capability below 8.0, cuDNN failed to
 * initialise, ...). Calling it again after success returns 1 and changes nothing. Registers
 * backend_cuda_shutdown with atexit. The ops are to be called from the thread that called init (the device is
 * per host thread); alloc/release and alloc_host/release_host select the device themselves and may be called
 * from any thread (the data loader's); upload_async/upload_wait belong to the ops' thread (see above). */
int backend_cuda_init(int device, char *reason, size_t reason_len);
/* The CUDA op table; NULL before a successful backend_cuda_init. */
const Backend *backend_cuda(void);
/* Frees everything the backend holds (streams, events, cuDNN handle and descriptors, scratch, and any alloc'd
 * buffer still live), so leak checkers stay quiet. Safe to call more than once and without init; after it,
 * backend_cuda() is NULL until the next init, and release / release_host of older buffers do nothing more. */
void backend_cuda_shutdown(void);

#ifdef __cplusplus
}
#endif
