/* backend_cpu.c: the float32 CPU backend's op table (backend.h): host memory (64-byte aligned so AVX-512 loads
 * never split a cache line) and the *_cpu kernels, plus the thread-count setting shared by OpenMP and OpenBLAS.
 * alloc puts the block's size in a 64-byte header in front of it (the returned pointer stays 64-byte aligned),
 * so release can keep bytes_in_use exact; the counters are atomic because the loader thread may allocate too.
 * Uploads are memcpy and the timer is the wall clock: every CPU op has finished when it returns.
 * The ops are the float32 reference kernels (kernels/..._cpu.c) behind thin adapters: the table's untyped activation
 * pointers must be float32 here (anything else is a bug in the caller: supports() says no), the values the CUDA
 * backend reads from device memory (loss scale, noise offset, optimizer state) are read from host memory. */
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "core/util.h"
#include "rng.h"
#include "silu.h"
#include "upsample.h"

#define CPU_ALIGN 64 /* also the size of the header alloc keeps in front of each block */

static size_t cpu_in_use, cpu_peak; /* bytes through cpu_alloc; __atomic builtins only */

static void *aligned_alloc64(size_t bytes) {
    void *p = NULL;
    int rc = posix_memalign(&p, CPU_ALIGN, bytes ? bytes : CPU_ALIGN);
    if (rc != 0) {
        errno = rc; /* posix_memalign reports through its return value, vx_fatal prints errno */
        vx_fatal("out of host memory allocating %zu bytes; lower batch_size or input_size", bytes);
    }
    return p;
}

static void *cpu_alloc(size_t bytes) {
    if (bytes > SIZE_MAX - CPU_ALIGN) vx_fatal("allocation of %zu bytes is too large", bytes);
    char *base = aligned_alloc64(bytes + CPU_ALIGN);
    memcpy(base, &bytes, sizeof bytes);
    const size_t now = __atomic_add_fetch(&cpu_in_use, bytes, __ATOMIC_RELAXED);
    size_t peak = __atomic_load_n(&cpu_peak, __ATOMIC_RELAXED);
    while (now > peak && !__atomic_compare_exchange_n(&cpu_peak, &peak, now, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return base + CPU_ALIGN;
}

static void cpu_release(void *ptr) {
    if (!ptr) return;
    char *base = (char *)ptr - CPU_ALIGN;
    size_t bytes;
    memcpy(&bytes, base, sizeof bytes);
    __atomic_sub_fetch(&cpu_in_use, bytes, __ATOMIC_RELAXED);
    free(base);
}
static size_t cpu_bytes_in_use(void) { return __atomic_load_n(&cpu_in_use, __ATOMIC_RELAXED); }
static size_t cpu_peak_bytes(void) { return __atomic_load_n(&cpu_peak, __ATOMIC_RELAXED); }

static void *cpu_alloc_host(size_t bytes) { return aligned_alloc64(bytes); }
static void cpu_release_host(void *ptr) { free(ptr); }
static void cpu_copy(void *dst, const void *src, size_t bytes) {
    if (bytes) memcpy(dst, src, bytes);
}
static void cpu_zero(void *ptr, size_t bytes) {
    if (bytes) memset(ptr, 0, bytes);
}
static void cpu_synchronize(void) {} /* every CPU op has finished when it returns */
static void cpu_upload_wait(void) {}
static void cpu_upload_async(void *dst, const void *src, size_t bytes, void *after) {
    (void)after; /* program order */
    cpu_copy(dst, src, bytes);
}

/* timer slots: wall-clock seconds of the last mark, and whether there was one */
static double cpu_marks[BACKEND_TIMER_SLOTS];
static int cpu_marked[BACKEND_TIMER_SLOTS];

static void check_slot(int slot) {
    if (slot < 0 || slot >= BACKEND_TIMER_SLOTS)
        vx_fatal("timer slot %d is outside 0..%d", slot, BACKEND_TIMER_SLOTS - 1);
}
static void cpu_timer_mark(int slot) {
    check_slot(slot);
    cpu_marks[slot] = vx_now();
    cpu_marked[slot] = 1;
}
static double cpu_timer_elapsed_ms(int from_slot, int to_slot) {
    check_slot(from_slot);
    check_slot(to_slot);
    if (!cpu_marked[from_slot] || !cpu_marked[to_slot])
        vx_fatal("timer_elapsed_ms(%d, %d): slot %d was never marked", from_slot, to_slot,
                 cpu_marked[from_slot] ? to_slot : from_slot);
    return (cpu_marks[to_slot] - cpu_marks[from_slot]) * 1e3;
}

/* program order is the only order on the CPU: an event is the wall-clock time of its last record */
static void *cpu_event_create(void) {
    double *t = vx_malloc(sizeof *t);
    *t = NAN;
    return t;
}
static void cpu_event_destroy(void *ev) { free(ev); }
static void cpu_event_record(void *ev) { *(double *)ev = vx_now(); }
static void cpu_event_nop(void *ev) { (void)ev; }
static double cpu_event_elapsed_ms(void *from, void *to) {
    const double a = *(const double *)from, b = *(const double *)to;
    if (isnan(a) || isnan(b)) vx_fatal("event_elapsed_ms: an event was never recorded");
    return (b - a) * 1e3;
}

/* ---- the ops: float32 only, except the casts ------------------------------------------------------------------ */

static int cpu_supports(BackendOp op, DType dt) { return dt == DT_F32 || op == BOP_CAST || op == BOP_PAD_CHANNELS; }

static void need_f32(DType dt, const char *op) {
    if (dt != DT_F32)
        vx_fatal("the CPU backend computes %s in float32 only, not %s (a caller that did not ask supports())", op,
                 dtype_name(dt));
}
static float scaled(float v, const float *loss_scale) { return loss_scale ? v * loss_scale[0] : v; }

static void cpu_conv3d_forward(const Conv3dShape *s, const void *x, const void *wt, const float *bias,
                               const void *residual, void *y, void *ws) {
    need_f32(s->dtype, "conv3d_forward");
    conv3d_forward_cpu(s, x, wt, bias, residual, y, ws);
}
static void cpu_conv3d_backward_data(const Conv3dShape *s, const void *dy, const void *wt, void *dx, float beta,
                                     void *ws) {
    need_f32(s->dtype, "conv3d_backward_data");
    conv3d_backward_data_cpu(s, dy, wt, dx, beta, ws);
}
static void cpu_conv3d_backward_filter(const Conv3dShape *s, const void *x, const void *dy, float *dw, float *dbias,
                                       float beta, void *ws) {
    need_f32(s->dtype, "conv3d_backward_filter");
    conv3d_backward_filter_cpu(s, x, dy, dw, dbias, beta, ws);
}
static void cpu_groupnorm_forward(const GroupNormShape *s, const void *x, const float *gamma, const float *beta,
                                  void *y, float *mean, float *rstd) {
    need_f32(s->dtype, "groupnorm_forward");
    groupnorm_forward_cpu(s, x, gamma, beta, y, mean, rstd);
}
static void cpu_groupnorm_backward(const GroupNormShape *s, const void *dy, const void *x, const float *gamma,
                                   const float *beta, const float *mean, const float *rstd, void *dx, float *dgamma,
                                   float *dbeta, float beta_dx, float beta_dparam) {
    need_f32(s->dtype, "groupnorm_backward");
    groupnorm_backward_cpu(s, dy, x, gamma, beta, mean, rstd, dx, dgamma, dbeta, beta_dx, beta_dparam);
}
static void cpu_silu_forward(DType dt, long count, const void *x, void *y) {
    need_f32(dt, "silu_forward");
    silu_forward_cpu(count, x, y);
}
static void cpu_silu_backward(DType dt, long count, const void *x, const void *dy, void *dx, float beta) {
    need_f32(dt, "silu_backward");
    silu_backward_cpu(count, x, dy, dx, beta);
}
static void cpu_upsample2x_forward(DType dt, int n, int d, int h, int w, int c, const void *x, void *y) {
    need_f32(dt, "upsample2x_forward");
    upsample2x_forward_cpu(n, d, h, w, c, x, y);
}
static void cpu_upsample2x_backward(DType dt, int n, int d, int h, int w, int c, const void *dy, void *dx, float beta) {
    need_f32(dt, "upsample2x_backward");
    upsample2x_backward_cpu(n, d, h, w, c, dy, dx, beta);
}
static void cpu_add_forward(DType dt, long count, const void *a, const void *b, void *y) {
    need_f32(dt, "add_forward");
    add_forward_cpu(count, a, b, y);
}
static void cpu_accumulate(DType dt, long count, const void *src, void *dst, float beta) {
    need_f32(dt, "accumulate");
    accumulate_cpu(count, src, dst, beta);
}
static void cpu_recon_loss(ReconLoss kind, DType dt, long count, const void *pred, const float *target,
                           float *loss_out, void *dpred, float grad_scale, const float *loss_scale) {
    need_f32(dt, "recon_loss");
    recon_loss_cpu(kind, count, pred, target, loss_out, dpred, scaled(grad_scale, loss_scale));
}
static void cpu_latent_forward(const LatentShape *s, const void *mu, const void *logvar_raw, const float *eps,
                               void *z, float *kl_out) {
    need_f32(s->dtype, "latent_forward");
    latent_forward_cpu(s, mu, logvar_raw, eps, z, kl_out);
}
static void cpu_latent_backward(const LatentShape *s, const void *mu, const void *logvar_raw, const float *eps,
                                const void *dz, float kl_scale, const float *loss_scale, void *dmu, void *dlogvar) {
    need_f32(s->dtype, "latent_backward");
    latent_backward_cpu(s, mu, logvar_raw, eps, dz, scaled(kl_scale, loss_scale), dmu, dlogvar);
}
static void cpu_normal_fill(long count, uint64_t seed, uint64_t stream, const uint64_t *offset, float *out) {
    normal_fill_cpu(count, seed, stream, offset[0], out);
}
static void cpu_adamw(long count, float *p, const float *g, float *m, float *v, const OptimState *st, DType lp_dt,
                      void *p_lp) {
    if (p_lp) vx_fatal("the CPU backend keeps no low-precision parameter copy (asked for %s)", dtype_name(lp_dt));
    if (!st->skip) adamw_cpu(count, p, g, m, v, &st->c);
}
static void cpu_optim_prepare(const OptimConfig *cfg, const float *sumsq, OptimState *st) {
    optim_prepare_step(cfg, sumsq[0], st);
}

static const Backend cpu_backend = {
    .name = "cpu",
    .supports = cpu_supports,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .copy_to_device = cpu_copy,
    .copy_to_host = cpu_copy,
    .zero = cpu_zero,
    .synchronize = cpu_synchronize,
    .alloc_host = cpu_alloc_host,
    .release_host = cpu_release_host,
    .write_async = cpu_copy,
    .copy_to_host_async = cpu_copy,
    .upload_async = cpu_upload_async,
    .upload_wait = cpu_upload_wait,
    .timer_mark = cpu_timer_mark,
    .timer_elapsed_ms = cpu_timer_elapsed_ms,
    .event_create = cpu_event_create,
    .timed_event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .event_wait = cpu_event_nop,
    .event_synchronize = cpu_event_nop,
    .event_elapsed_ms = cpu_event_elapsed_ms,
    .bytes_in_use = cpu_bytes_in_use,
    .peak_bytes = cpu_peak_bytes,
    .conv3d_workspace_bytes = conv3d_workspace_bytes_cpu,
    .conv3d_forward = cpu_conv3d_forward,
    .conv3d_backward_data = cpu_conv3d_backward_data,
    .conv3d_backward_filter = cpu_conv3d_backward_filter,
    .groupnorm_forward = cpu_groupnorm_forward,
    .groupnorm_backward = cpu_groupnorm_backward,
    .silu_forward = cpu_silu_forward,
    .silu_backward = cpu_silu_backward,
    .upsample2x_forward = cpu_upsample2x_forward,
    .upsample2x_backward = cpu_upsample2x_backward,
    .add_forward = cpu_add_forward,
    .accumulate = cpu_accumulate,
    .scale = scale_cpu,
    .cast = cast_cpu,
    .pad_channels = pad_channels_cpu,
    .recon_loss = cpu_recon_loss,
    .latent_forward = cpu_latent_forward,
    .latent_backward = cpu_latent_backward,
    .normal_fill = cpu_normal_fill,
    .adamw = cpu_adamw,
    .sumsq = sumsq_cpu,
    .optim_prepare = cpu_optim_prepare,
    .augment = augment_cpu,
};

const Backend *backend_cpu(void) { return &cpu_backend; }

void backend_cpu_set_threads(int threads) {
    if (threads <= 0) threads = omp_get_num_procs();
    omp_set_num_threads(threads);
    /* the GEMMs run on OpenBLAS's own thread pool, which does not follow omp_set_num_threads */
    openblas_set_num_threads(threads);
}
