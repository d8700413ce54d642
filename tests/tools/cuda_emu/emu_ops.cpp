// emu_ops.cpp: the op tests' cases (tests/unit/op_cases.c, those marked emu) on the CUDA backend's own kernels run
// under the host emulation (run.sh), in every storage type, against the float64 references of the op table
// (kernels/<op>/<op>_spec.c) through the same check as test_backend_ops (kernels/common/op_check.c). The backend here
// is the CUDA op table with host memory: buffers from posix_memalign with no slack (ASan sees any access past one),
// copies as memcpy, the reduction scratch poisoned with NaN before every op. Convolutions are cuDNN's and have no
// emulation: their bias and dw-accumulation kernels are checked by bias_test.cpp.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
extern "C" {
#include "backend/backend.h"
#include "conv3d/conv3d.h"
#include "diffusion/diffusion.h"
#include "drr/drr.h"
#include "ema/ema.h"
#include "elementwise/elementwise.h"
#include "groupnorm/groupnorm.h"
#include "latent/latent.h"
#include "loss/loss.h"
#include "normal/normal.h"
#include "optim/optim.h"
#include "adaln/adaln.h"
#include "attention/attention.h"
#include "augment/augment.h"
#include "avgpool/avgpool.h"
#include "batchnorm/batchnorm.h"
#include "dropout/dropout.h"
#include "gelu/gelu.h"
#include "gemm/gemm.h"
#include "gemm/gemm_lt.h"
#include "head_loss/head_loss.h"
#include "layernorm/layernorm.h"
#include "linear/linear.h"
#include "maxpool/maxpool.h"
#include "pool_window/pool_window.h"
#include "upconv_phase/upconv_phase.h"
#include "patch/patch.h"
#include "relu/relu.h"
#include "silu/silu.h"
#include "softmax/softmax.h"
#include "timestep/timestep.h"
#include "common/rng.h"
#include "upsample/upsample.h"
#include "resample/resample.h"
#include "op_cases.h"
}
void emu_poison_scratch(void);

static void *emu_alloc(size_t bytes) {
    void *p = nullptr;
    if (posix_memalign(&p, 64, bytes ? bytes : 1)) abort();
    return p;
}
static void emu_copy(void *d, const void *s, size_t n) { if (n) memcpy(d, s, n); }
static void emu_zero(void *p, size_t n) { if (n) memset(p, 0, n); }
static void emu_nop(void) {}
static void emu_upload(void *d, const void *s, size_t n, void *) { emu_copy(d, s, n); }
static int emu_token;
static void *emu_event_create(void) { return &emu_token; }
static void emu_event_nop(void *) {}
static void emu_mark(int) {}
static double emu_elapsed(int, int) { return 0; }
static size_t emu_zero_bytes(void) { return 0; }
static size_t emu_no_workspace(const Conv3dShape *) { return 0; }

/* the reducing ops read the scratch: poison it first, so a partial sum read before it is written shows */
static void emu_gn_forward(const GroupNormShape *s, const void *x, const float *g, const float *b, void *y, float *m,
                           float *r) {
    emu_poison_scratch();
    groupnorm_forward_cuda(s, x, g, b, y, m, r);
}
static void emu_gn_backward(const GroupNormShape *s, const void *dy, const void *x, const float *g, const float *b,
                            const float *m, const float *r, void *dx, float *dg, float *db, float bx, float bp) {
    emu_poison_scratch();
    groupnorm_backward_cuda(s, dy, x, g, b, m, r, dx, dg, db, bx, bp);
}
static void emu_loss(ReconLoss k, DType dt, long n, const void *p, const float *t, float *l, void *dp, float gs,
                     const float *ls) {
    emu_poison_scratch();
    recon_loss_cuda(k, dt, n, p, t, l, dp, gs, ls);
}
static void emu_latent_forward(const LatentShape *s, const void *mu, const void *lv, const float *e, void *z, float *kl) {
    emu_poison_scratch();
    latent_forward_cuda(s, mu, lv, e, z, kl);
}
static void emu_sumsq(long n, const float *x, float *out) {
    emu_poison_scratch();
    sumsq_cuda(n, x, out);
}

/* the ResNet family's reducing ops: the CUDA tables' functions, the scratch poisoned first */
static void emu_bn_stats(const BatchNormShape *s, const void *x, const float *center, double count, float *out) {
    emu_poison_scratch();
    batchnorm_ops_cuda.stats(s, x, center, count, out);
}
static void emu_bn_backward_reduce(const BatchNormShape *s, const void *dy, const void *x, const float *mean,
                                   const float *invstd, const float *gamma, const float *beta, float *sum_dy,
                                   float *sum_dy_xhat) {
    emu_poison_scratch();
    batchnorm_ops_cuda.backward_reduce(s, dy, x, mean, invstd, gamma, beta, sum_dy, sum_dy_xhat);
}
static void emu_avgpool_forward(DType dt, int n, long spatial, int c, const void *x, void *y) {
    emu_poison_scratch();
    avgpool_ops_cuda.forward(dt, n, spatial, c, x, y);
}
static void emu_head_loss(const HeadLossShape *s, const void *z, const float *target, const float *weight,
                          float *loss_out, void *dz, float grad_scale, const float *loss_scale) {
    emu_poison_scratch();
    head_loss_ops_cuda.run(s, z, target, weight, loss_out, dz, grad_scale, loss_scale);
}

/* the transformer family's reducing ops (issue 21), the scratch poisoned first */
static void emu_ln_backward(const LayerNormShape *s, const void *dy, const void *x, const float *gamma, const float *mean,
                            const float *rstd, void *dx, float *dgamma, float *dbeta, float beta_dx, float beta_param) {
    emu_poison_scratch();
    layernorm_ops_cuda.backward(s, dy, x, gamma, mean, rstd, dx, dgamma, dbeta, beta_dx, beta_param);
}
static void emu_ada_modulate_backward(const AdaLNShape *s, const void *dy, const void *x, const void *scale, void *dx,
                                      void *dshift, void *dscale, float beta_dx, float beta_mod) {
    emu_poison_scratch();
    adaln_ops_cuda.modulate_backward(s, dy, x, scale, dx, dshift, dscale, beta_dx, beta_mod);
}
static void emu_ada_gate_backward(const AdaLNShape *s, const void *dout, const void *h, const void *gate, void *dh,
                                  void *dgate, float beta_dh, float beta_mod) {
    emu_poison_scratch();
    adaln_ops_cuda.gate_backward(s, dout, h, gate, dh, dgate, beta_dh, beta_mod);
}

/* the diffusion model's ops (issue 21) that use the scratch: the DRR's integrals and gradients, the loss's partials */
static void emu_drr_forward(const DrrShape *s, const void *x, float *img) {
    emu_poison_scratch();
    drr_ops_cuda.forward(s, x, img);
}
static void emu_drr_backward(const DrrShape *s, const void *x, const float *dimg, void *dx, float beta) {
    emu_poison_scratch();
    drr_ops_cuda.backward(s, x, dimg, dx, beta);
}
static void emu_diffusion_loss(const DiffusionShape *s, const void *pred, const float *target, const float *w,
                               float *loss_out, void *dpred, float grad_scale, const float *loss_scale) {
    emu_poison_scratch();
    diffusion_ops_cuda.loss(s, pred, target, w, loss_out, dpred, grad_scale, loss_scale);
}

static void emu_gemm_bias_grad(DType dt, long rows, int cols, const void *dy, float *db, float beta) {
    emu_poison_scratch();
    gemm_ops_cuda.bias_grad(dt, rows, cols, dy, db, beta);
}
/* no cuBLASLt under the emulation: gemm_cuda.cu's own tiled kernel and epilogues run */
int gemm_lt_matmul(const GemmShape *, const void *, const void *, const float *, void *, void *, float, int *pending) {
    *pending = 0;
    return 0;
}

/* the op tables: CUDA's own where nothing is poisoned first; no convolutions (cuDNN has no emulation) */
static int emu_no_conv(int, DType) { return 0; }
static int emu_optim_supports(int fn, DType dt) { return fn == OPTIM_ADAMW ? op_supports_all_types(fn, dt) : dt == DT_F32; }
static const Conv3dOps emu_conv3d = {{emu_no_conv}, emu_no_workspace, nullptr, nullptr, nullptr};
static const GroupNormOps emu_groupnorm = {{op_supports_all_types}, emu_gn_forward, emu_gn_backward};
static const LossOps emu_loss_ops = {{op_supports_all_types}, emu_loss};
static const LatentOps emu_latent = {{op_supports_all_types}, emu_latent_forward, latent_backward_cuda};
static void emu_sumsq_part(long n, const float *x, double *out) {
    emu_poison_scratch();
    sumsq_part_cuda(n, x, out);
}
/* every field named: a function added to the table later is a compile error here, not a NULL call at run time */
static const OptimOps emu_optim = {.head = {emu_optim_supports}, .adamw = adamw_cuda, .sumsq = emu_sumsq,
                                   .prepare = optim_prepare_cuda, .sumsq_part = emu_sumsq_part,
                                   .sumsq_join = sumsq_join_cuda};
static const BatchNormOps emu_batchnorm = {batchnorm_ops_cuda.head, emu_bn_stats, batchnorm_ops_cuda.finalize,
                                           batchnorm_ops_cuda.forward, emu_bn_backward_reduce, batchnorm_ops_cuda.backward};
static const AvgPoolOps emu_avgpool = {avgpool_ops_cuda.head, emu_avgpool_forward, avgpool_ops_cuda.backward};
static const HeadLossOps emu_head_loss_ops = {head_loss_ops_cuda.head, emu_head_loss};
static const GemmOps emu_gemm = {gemm_ops_cuda.head, gemm_ops_cuda.matmul, emu_gemm_bias_grad};
static const LayerNormOps emu_layernorm = {layernorm_ops_cuda.head, layernorm_ops_cuda.forward, emu_ln_backward};
static const AdaLNOps emu_adaln = {adaln_ops_cuda.head, adaln_ops_cuda.modulate, emu_ada_modulate_backward,
                                   adaln_ops_cuda.gate, emu_ada_gate_backward};

static const DrrOps emu_drr = {drr_ops_cuda.head, emu_drr_forward, emu_drr_backward, drr_ops_cuda.backproject};
static const DiffusionOps emu_diffusion = {.head = diffusion_ops_cuda.head, .q_sample = diffusion_ops_cuda.q_sample,
                                           .predict_x0 = diffusion_ops_cuda.predict_x0,
                                           .predict_x0_backward = diffusion_ops_cuda.predict_x0_backward,
                                           .loss = emu_diffusion_loss, .ddim_step = diffusion_ops_cuda.ddim_step};

static const Backend emu_backend = {
    .name = "cuda-emulated",
    .alloc = emu_alloc,
    .release = free,
    .copy_to_device = emu_copy,
    .copy_to_host = emu_copy,
    .zero = emu_zero,
    .synchronize = emu_nop,
    .write_async = emu_copy,
    .copy_to_host_async = emu_copy,
    .alloc_host = emu_alloc,
    .release_host = free,
    .upload_async = emu_upload,
    .upload_wait = emu_nop,
    .timer_mark = emu_mark,
    .timer_elapsed_ms = emu_elapsed,
    .event_create = emu_event_create,
    .timed_event_create = emu_event_create,
    .event_destroy = emu_event_nop,
    .event_record = emu_event_nop,
    .event_wait = emu_event_nop,
    .event_synchronize = emu_event_nop,
    .event_elapsed_ms = nullptr,
    .graph_capture_begin = nullptr,
    .graph_capture_end = nullptr,
    .graph_launch = nullptr,
    .graph_destroy = nullptr,
    .bytes_in_use = emu_zero_bytes,
    .peak_bytes = emu_zero_bytes,
    .conv3d = &emu_conv3d,
    .groupnorm = &emu_groupnorm,
    .silu = &silu_ops_cuda,
    .upsample = &upsample_ops_cuda,
    .elementwise = &elementwise_ops_cuda,
    .loss = &emu_loss_ops,
    .latent = &emu_latent,
    .normal = &normal_ops_cuda,
    .augment = &augment_ops_cuda,
    .optim = &emu_optim,
    .batchnorm = &emu_batchnorm,
    .relu = &relu_ops_cuda,
    .maxpool = &maxpool_ops_cuda,
    .avgpool = &emu_avgpool,
    .pool_window = &pool_window_ops_cuda,
    .linear = &linear_ops_cuda,
    .dropout = &dropout_ops_cuda,
    .head_loss = &emu_head_loss_ops,
    .gelu = &gelu_ops_cuda,
    .softmax = &softmax_ops_cuda,
    .layernorm = &emu_layernorm,
    .adaln = &emu_adaln,
    .timestep = &timestep_ops_cuda,
    .gemm = &emu_gemm,
    .attention = &attention_ops_cuda,
    .patch = &patch_ops_cuda,
    .drr = &emu_drr,
    .diffusion = &emu_diffusion,
    .ema = &ema_ops_cuda,
    .upconv_phase = &upconv_phase_ops_cuda,
    .resample = &resample_ops_cuda,
};

/* Keyed dropout: the CUDA kernel's mask and float32 values are the CPU's bit for bit (dropout_mask.h is the one
 * definition both compile), forward and backward with beta 0, scalar and float4 paths. Returns the failures. */
static int dropout_bitwise(void) {
    int fails = 0;
    const struct { int n; long per_sample; float p; uint64_t first; } cases[] = {
        {3, 1001, 0.3f, 12345}, {4, 4096, 0.5f, 1ull << 40}, {2, 1000, 0.0f, 3}, {2, 999, 0.9f, 0}};
    for (const auto &c : cases) {
        const DropoutShape s = {c.n, c.per_sample, c.p, 77, 5, DT_F32};
        const long count = (long)c.n * c.per_sample;
        float *x = (float *)emu_alloc(sizeof(float) * count), *y[2], *dx[2];
        for (long i = 0; i < count; i++) x[i] = 2.0f * vx_uniform01(vx_hash3(1, 2, (uint64_t)i)) - 1.0f;
        for (int b = 0; b < 2; b++) {
            const DropoutOps *ops = b == 0 ? &dropout_ops_cpu : &dropout_ops_cuda;
            y[b] = (float *)emu_alloc(sizeof(float) * count), dx[b] = (float *)emu_alloc(sizeof(float) * count);
            ops->forward(&s, &c.first, x, y[b]);
            ops->backward(&s, &c.first, x, dx[b], 0.0f);
        }
        long kept = 0;
        for (long i = 0; i < count; i++) kept += y[0][i] != 0.0f;
        if (memcmp(y[0], y[1], sizeof(float) * count) || memcmp(dx[0], dx[1], sizeof(float) * count)) {
            printf("FAIL dropout p=%g n=%d x%ld: CUDA and CPU differ\n", (double)c.p, c.n, c.per_sample);
            fails++;
        } else if (c.p == 0.0f ? kept != count : (kept == 0 || kept == count)) {
            printf("FAIL dropout p=%g: %ld of %ld kept\n", (double)c.p, kept, count);
            fails++;
        }
    }
    printf("dropout: CUDA and CPU bit for bit in %zu cases, %d failures\n", sizeof cases / sizeof cases[0], fails);
    return fails;
}

/* VX_EMU_ONLY=a,b: only the cases of ops whose names start with one of these (a quicker run while working on them) */
static int wanted(const char *op) {
    const char *e = getenv("VX_EMU_ONLY");
    if (!e || !*e) return 1;
    for (const char *p = e; *p;) {
        const size_t n = strcspn(p, ",");
        if (n && strncmp(op, p, n) == 0) return 1;
        p += n + (p[n] == ',');
    }
    return 0;
}

int main() {
    int n_cases, failed = dropout_bitwise(), run = 0;
    const OpTestCase *cases = op_test_cases(&n_cases);
    for (int c = 0; c < n_cases; c++) {
        if (!cases[c].emu || !wanted(cases[c].op)) continue;
        const int op = kernel_op_find(cases[c].op);
        for (int dt = 0; dt < DT_COUNT; dt++) {
            if (!kernel_op_supported(&emu_backend, op, (DType)dt) || (cases[c].emu == 2 && dt != DT_F32)) continue;
            char why[512];
            const auto t0 = std::chrono::steady_clock::now();
            const int ok = op_test_case_check(&cases[c], c, (DType)dt, &emu_backend, why, sizeof why);
            if (getenv("VX_EMU_TIMES"))
                fprintf(stderr, "%8.3f s %s %s %s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                        cases[c].op, dtype_name((DType)dt), cases[c].k.shape);
            run++;
            if (!ok) {
                printf("FAIL %s\n", why);
                failed++;
            }
        }
    }
    /* float16's loss gradient at the loss-scale floor (optim_loss_scale_floor): the kernel's own multiplier and store,
     * with a large count and a small scale. Count 2^16 with grad_scale 2^-8 stands for 2^24 voxels on one rank: the
     * floor is 1, where every element of the L1 gradient is +2^-24 (float16's smallest subnormal); at half of it every
     * element rounds to 0 and the step would go on, finite, learning nothing: why the trainer ends a run there. */
    {
        const long n = 1L << 16;
        const float gs = 0x1p-8f;
        uint16_t *pred = (uint16_t *)emu_alloc((size_t)n * 2), *grad = (uint16_t *)emu_alloc((size_t)n * 2);
        float *target = (float *)emu_alloc((size_t)n * 4), *loss = (float *)emu_alloc(4), *scale = (float *)emu_alloc(4);
        for (long i = 0; i < n; i++) target[i] = 0.25f * (float)(i % 7), dtype_store(DT_F16, pred, (size_t)i, target[i] + 0.5f);
        const double floor = optim_loss_scale_floor(DT_F16, (double)n, gs);
        for (int half = 0; half < 2; half++) {
            scale[0] = (float)(half ? floor / 2 : floor);
            emu_loss(LOSS_L1, DT_F16, n, pred, target, loss, grad, gs, scale);
            long nonzero = 0, exact = 0;
            for (long i = 0; i < n; i++) {
                const float g = dtype_load(DT_F16, grad, (size_t)i);
                nonzero += g != 0.0f;
                exact += g == 0x1p-24f;
            }
            run++;
            const int ok = half ? nonzero == 0 : exact == n && floor == 1.0;
            printf("float16 loss gradient at %sthe loss-scale floor %g: %ld of %ld elements non-zero (%s)\n",
                   half ? "half " : "", floor, nonzero, n, ok ? "as expected" : "FAIL");
            if (!ok) failed++;
        }
    }
    printf("%d cases run under the emulation, %d failures\n", run, failed);
    return failed != 0 || run == 0;
}
