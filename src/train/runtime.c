/* runtime.c: backend, batch size and model set-up shared by every subcommand, and a model's gradient buckets (see
 * runtime.h). */
#include "train/runtime.h"

#include <stdlib.h>
#include <string.h>

#include "common/cpu_gemm.h"
#include "conv3d/conv3d_cpu_select.h"
#include "core/util.h"
#include "data/phantom.h"

void runtime_open(Runtime *rt, const ModelConfig *model, TrainConfig *train, int verbose) {
    runtime_open_rank(rt, model, train, verbose, 0, 1, 1);
}

void runtime_resolve_precision(TrainConfig *cfg, const Backend *be, const char *device_reason) {
    DType dt;
    char why[512];
    if (!model_dtype(cfg->precision, be, &dt, why, sizeof why))
        vx_usage_error("%s (device: %s: %s); use --amp off, or a machine whose GPU voxscale can use", why, be->name,
                       device_reason);
    const int bf16_math = model_bf16_math(cfg->precision, be); /* the CPU's bf16: float32 storage, bf16 math */
    snprintf(cfg->precision, sizeof cfg->precision, "%s",
             dt == DT_BF16 || bf16_math ? "bf16" : dt == DT_F16 ? "fp16" : "off");
    if (strcmp(cfg->loss_scale, "auto") == 0)
        snprintf(cfg->loss_scale, sizeof cfg->loss_scale, "%s", dt == DT_F16 ? "dynamic" : "off");
}

void runtime_open_rank(Runtime *rt, const ModelConfig *model, TrainConfig *cfg, int verbose, int gpu,
                       int threads_share, int world) {
    memset(rt, 0, sizeof *rt);
    hw_detect(&rt->hw);
    /* NCCL 2.30 lets several ranks share a GPU (NCCL_MULTI_RANK_GPU_ENABLE=1): ranks then go round the GPUs */
    const char *shared = getenv("NCCL_MULTI_RANK_GPU_ENABLE");
    if (shared && strcmp(shared, "1") == 0 && rt->hw.n_gpus > 0) gpu %= rt->hw.n_gpus;
    rt->hw.gpu = gpu;
    /* more threads than cores only adds switching: 4096 threads made a 0.05 s step take 36 s */
    if (cfg->threads > rt->hw.cores)
        vx_usage_error("train.threads = %d exceeds the %d CPU cores of this machine; use 0 (all cores) or at most %d",
                       cfg->threads, rt->hw.cores, rt->hw.cores);
    rt->be = hw_choose_backend(model, cfg, &rt->hw, rt->device_reason, sizeof rt->device_reason);
    /* ranks of one machine share its cores: each takes its part unless train.threads says otherwise */
    int threads = cfg->threads;
    if (threads == 0 && threads_share > 1) threads = rt->hw.cores / threads_share > 1 ? rt->hw.cores / threads_share : 1;
    if (strcmp(rt->be->name, "cpu") == 0) backend_cpu_set_threads(threads);
    /* the plan decides train.precision auto and an automatic batch itself, and says which it decided: it gets the
     * config as asked. Resolving the precision first refuses a 16-bit type the backend cannot run, with the device's
     * reason; where the two choose (auto), they agree on every device this build runs on (the CPU, sm_80 and newer) */
    const TrainConfig asked = *cfg;
    runtime_resolve_precision(cfg, rt->be, rt->device_reason);
    rt->dev = hw_plan_device(&rt->hw, rt->be);
    char why[400];
    const int automatic = cfg->batch_size == 0;
    if (hw_plan(model, &asked, rt->be, &rt->dev, world, &rt->plan, why, sizeof why)) {
        hw_plan_apply(&rt->plan, cfg);
        if (verbose) {
            char line[700];
            hw_plan_describe(&rt->plan, &rt->dev, &asked, line, sizeof line);
            vx_log("%s%s\n", line, automatic ? " (train.batch_size 0: the largest power of two that fits)" : "");
        }
    } else if (automatic) {
        vx_usage_error("no batch size fits: %s; lower model.input_size or model.channels", why);
    } /* a given batch that does not fit: the memory checks below and train's say so with their exit codes */
    ModelOptions opt = hw_model_options(cfg);
    opt.world = world;
    rt->model = model_build(model, &opt, cfg->batch_size, rt->be);
    const Model *m = rt->model;
    char plan[200]; /* quoted by an allocation that fails (core/util.h) */
    snprintf(plan, sizeof plan, "%s arena %.1f MiB + %.1f MiB parameters, gradients and AdamW state = %.1f MiB at "
             "batch %d", rt->be->name, m->plan.total / 1048576.0, (model_device_bytes(m) - m->plan.total) / 1048576.0,
             model_device_bytes(m) / 1048576.0, m->batch);
    vx_set_memory_plan(plan);
    if (verbose) {
        if (strcmp(rt->be->name, "cpu") == 0) {
            /* what the CPU runs: its instruction set, the GEMM kernels (a BLAS older than the CPU said here, never
             * silently), the convolutions the plan chose */
            char isa[96], gemm[256], conv[512];
            cpu_isa_describe(isa, sizeof isa);
            cpu_gemm_describe(gemm, sizeof gemm);
            conv3d_cpu_describe(conv, sizeof conv);
            vx_log("device: %s (%s); %s, %d threads, %s; GEMM: %s; convolutions: %s\n", rt->be->name,
                   rt->device_reason, rt->hw.cpu_model, threads ? threads : rt->hw.cores, isa, gemm, conv);
        } else {
            vx_log("device: %s (%s)\n", rt->be->name, rt->device_reason);
            const HwGpu *g = &rt->hw.gpus[rt->hw.gpu];
            vx_log("gpu: %s, %.1f GiB (%.1f GiB free), %d SMs, compute capability %d.%d; TF32 convolutions %s, "
                   "deterministic algorithms %s\n",
                   g->name, g->total_bytes / 1073741824.0, g->free_bytes / 1073741824.0, g->sms, g->cc_major,
                   g->cc_minor, cfg->tf32 ? "on" : "off", cfg->deterministic ? "on" : "off");
        }
        vx_log("model: %ld parameters in %d tensors, %d nodes, %.2f GFLOP per micro-batch step; %.1f MiB of device "
               "memory planned\n", m->param_count, m->n_params, m->n_nodes,
               (m->conv_flops_step + m->gemm_flops_step + m->attn_flops_step) * 1e-9,
               model_device_bytes(m) / 1048576.0);
        if (m->bf16_math && m->gemm_flops_step > 0) { /* a transformer: its products say whether they take it */
            char no[320] = "";
            if (!m->bf16_gemm && rt->be->gemm->bf16_math) rt->be->gemm->bf16_math(no, sizeof no);
            vx_log("precision: bf16 math on the CPU (inputs, weights and gradients rounded to bf16 inside each call, "
                   "float32 accumulation and outputs) in the convolutions where measured faster than float32%s%s%s; "
                   "activations, master weights, gradients, AdamW state, attention and every other op float32\n",
                   m->bf16_gemm ? " and in the Linears' GEMMs (those of 16 or more in each dimension)"
                                 : "; the Linears' GEMMs stay float32: ", no,
                   m->bf16_gemm || no[0] ? "" : "not chosen here");
        } else if (m->bf16_math)
            vx_log("precision: bf16 math in the convolutions on the CPU (inputs, weights and gradients rounded to "
                   "bf16 inside each call, float32 accumulation and outputs, where measured faster than float32); "
                   "activations, master weights, gradients, AdamW state and every other op float32\n");
        else if (m->dtype != DT_F32)
            vx_log("precision: %s activations and convolutions (mixed precision: float32 master weights, gradients, "
                   "AdamW state, statistics and reductions)%s\n", cfg->precision,
                   strcmp(cfg->loss_scale, "dynamic") == 0 ? "; dynamic loss scaling" : "");
        else if (strcmp(cfg->loss_scale, "dynamic") == 0) vx_log("precision: float32; dynamic loss scaling\n");
        else vx_detail("precision: float32\n");
        const Dims lp = m->tensors[m->t_input_lp].dims;
        if (lp.c != model->in_channels)
            vx_log("input padding: encoder.conv_in reads %d channel(s) zero-padded to %d, for cuDNN's tensor cores "
                   "(model.pad_input_channels %s)\n", model->in_channels, lp.c, model->pad_input_channels);
        if (cfg->compile)
            vx_log("compile: %s\n", rt->be->graph_capture_begin ? "the training step is captured in a CUDA Graph "
                   "after its first (eager) run and replayed" : "no graphs on this backend: the step runs eagerly, "
                   "reading its per-step values from memory as the captured step does");
        vx_detail("memory: arena %.1f MiB planned (%.1f MiB without reuse) + %.1f MiB parameters%s%s = %.1f MiB "
                  "peak\n",
                  m->plan.total / 1048576.0, plan_unshared_bytes(&m->plan) / 1048576.0,
                  (model_device_bytes(m) - m->plan.total) / 1048576.0,
                  m->inference ? "" : ", gradients and AdamW state",
                  m->dtype != DT_F32 ? " (and their low-precision copy)" : "", model_device_bytes(m) / 1048576.0);
        if (cfg->checkpoint_activations && m->n_blocks) {
            const char *what = m->family == FAMILY_DENSENET    ? "dense layers (each reading its block's buffer)"
                               : m->family == FAMILY_AE3D      ? "ResBlocks"
                               : m->family == FAMILY_RESNET3D  ? "residual blocks"
                                                               : "transformer blocks";
            vx_log("activation checkpointing: %d %s keep only their input and output; backward reruns %.2f "
                   "GFLOP of their convolutions per micro-batch\n", m->n_blocks, what, m->recompute_flops * 1e-9);
        }
    }
}

float *runtime_load_phantom_batch(Runtime *rt, int64_t seed, double noise, int64_t first) {
    Model *m = rt->model;
    const Tensor *in = &m->tensors[m->t_input];
    float *batch = vx_malloc((size_t)in->count * sizeof(float));
    phantom_batch((uint64_t)seed, m->cfg.input_size, m->cfg.in_channels, (float)noise, m->batch, first, batch);
    rt->be->copy_to_device(model_tensor(m, m->t_input), batch, (size_t)in->count * sizeof(float));
    return batch;
}

void runtime_load_phantom_targets(Runtime *rt, int64_t seed, int64_t first) {
    Model *m = rt->model;
    if (m->task == TASK_NONE) return;
    const long n = m->task == TASK_SURVIVAL ? (long)m->world * m->batch : m->batch;
    float *t = vx_malloc((size_t)n * m->labels * sizeof(float));
    for (long b = 0; b < n; b++)
        phantom_labels((uint64_t)seed, (uint64_t)(first + b), m->cfg.head.task, m->cfg.head.num_classes,
                       t + b * m->labels);
    model_set_targets(m, t); /* (staged before it returns: t may go) */
    free(t);
}

void runtime_close(Runtime *rt) {
    model_free(rt->model);
    rt->model = NULL;
}

/* The gradient buckets of model m: each parameter's span of the flat gradient and the node whose backward writes
 * it. */
Buckets *buckets_plan_model(const Model *m, Comm *comm, double bucket_mb, double first_bucket_mb) {
    GradSpan *spans = vx_malloc((size_t)m->n_params * sizeof *spans);
    for (int i = 0; i < m->n_params; i++) spans[i] = (GradSpan){m->params[i].offset, m->params[i].count, -1};
    for (int i = 0; i < m->n_nodes; i++)
        for (int k = 0; k < 2; k++) {
            const int p = k == 0 ? m->nodes[i].weight : m->nodes[i].bias;
            if (p >= 0) spans[p].step = i;
        }
    Buckets *b = buckets_plan(spans, m->n_params, m->grad, comm, bucket_mb, first_bucket_mb);
    free(spans);
    return b;
}
