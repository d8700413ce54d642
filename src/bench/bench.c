/* bench.c: benchmarks that write results/<device>/ (JSON for machines, Markdown for people).
 *   bench step: full training steps (forward, backward, grad norm, AdamW) on one fixed batch, after warm-up;
 *               median step time, samples/s, conv GFLOP/s, peak planned memory, against the GEMM ceiling.
 *   bench gemm: the machine's sgemm rate at a large square shape and at the convolutions' GEMM shapes. */
#include "bench/bench.h"

#include <cblas.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench/bench_util.h"
#include "core/fsutil.h"
#include "core/util.h"
#include "train/runtime.h"

#ifndef VX_CUDA
double bench_cublas_sgemm_gflops(int n, int allow_tf32) {
    (void)n;
    (void)allow_tf32;
    vx_fatal("bench_cublas_sgemm_gflops called in a build without CUDA");
}
#endif

/* The step's ceiling, measured in this run: cuBLAS SGEMM on a GPU, the CPU BLAS sgemm otherwise. */
typedef struct {
    char what[160];
    double gflops;      /* the ceiling the fraction is taken of */
    double conv_shape;  /* CPU only: sgemm at the model's largest conv GEMM shape (0 on a GPU) */
} Ceiling;

static Ceiling measure_ceiling(const Runtime *rt, const Config *cfg) {
    Ceiling c = {0};
    if (strcmp(rt->be->name, "cuda") == 0) {
        c.gflops = bench_cublas_sgemm_gflops(8192, cfg->tf32);
        snprintf(c.what, sizeof c.what, "cuBLAS SGEMM 8192^3 (%s), same GPU, same run", cfg->tf32 ? "TF32 tensor cores" : "FP32");
        return c;
    }
    c.gflops = bench_sgemm_gflops(2048, 2048, 2048);
    int c0 = cfg->channels[0];
    c.conv_shape = bench_sgemm_gflops(4096, c0, 27 * c0);
    snprintf(c.what, sizeof c.what, "sgemm 2048^3, same BLAS, same threads, same run");
    return c;
}

int bench_step(Config *cfg, const BenchStepOptions *o) {
    int iters = o->iters > 0 ? o->iters : 5, warmup = o->warmup >= 0 ? o->warmup : 1;
    Runtime rt;
    runtime_open(&rt, cfg, 1);
    Model *m = rt.model;
    const Backend *be = rt.be;
    model_allocate(m);
    model_init_params(m, (uint64_t)cfg->seed);
    float *batch = runtime_load_phantom_batch(&rt, cfg, 0);
    double *t = vx_malloc((size_t)iters * sizeof(double));
    for (int i = -warmup; i < iters; i++) {
        be->timer_mark(0); /* CUDA events on a GPU, the wall clock on the CPU */
        model_forward(m, 1, (uint64_t)(i + warmup) * (uint64_t)m->batch); /* fresh noise per step, as in training */
        model_backward(m, 1.0f, 0.0f);
        model_grad_sumsq(m);
        AdamWParams ap = {.lr = 1e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01,
                          .grad_scale = 1.0f, .step = i + warmup + 1};
        be->adamw(m->param_floats, m->param, m->grad, m->adam_m, m->adam_v, &ap);
        be->timer_mark(1);
        double dt = be->timer_elapsed_ms(0, 1) * 1e-3;
        if (i >= 0) t[i] = dt;
        vx_log("%s %d: %.1f ms\n", i < 0 ? "warm-up" : "step", i < 0 ? i + warmup + 1 : i + 1, dt * 1e3);
    }
    double tmin = t[0], tmax = t[0];
    for (int i = 1; i < iters; i++) {
        if (t[i] < tmin) tmin = t[i];
        if (t[i] > tmax) tmax = t[i];
    }
    double med = bench_median(t, iters);
    double sps = m->batch / med, gflops = m->conv_flops_step / med * 1e-9;
    double peak_mib = be->peak_bytes() / 1048576.0;
    /* the ceiling's GEMM buffers (768 MiB on a GPU) must not compete with a model sized to the free memory */
    model_release_memory(m);
    Ceiling ceil = measure_ceiling(&rt, cfg);
    int gpu = strcmp(be->name, "cuda") == 0;

    char slug[160], commit[64], stem[128], dir[512], path[1024], device[600];
    bench_device_slug(&rt, slug, sizeof slug);
    bench_git_commit(commit, sizeof commit);
    snprintf(stem, sizeof stem, "%s", strrchr(o->config_path, '/') ? strrchr(o->config_path, '/') + 1 : o->config_path);
    if (strrchr(stem, '.')) *strrchr(stem, '.') = 0;
    snprintf(dir, sizeof dir, "%s/%s", o->results_dir ? o->results_dir : "results", slug);
    fs_mkdirs(dir);
    int threads = cfg->threads ? cfg->threads : rt.hw.cores;
    if (gpu)
        snprintf(device, sizeof device, "%s, %.0f GiB, compute capability %d.%d, TF32 %s, deterministic %s",
                 rt.hw.gpus[0].name, rt.hw.gpus[0].total_bytes / 1073741824.0, rt.hw.gpus[0].cc_major,
                 rt.hw.gpus[0].cc_minor, cfg->tf32 ? "on" : "off", cfg->deterministic ? "on" : "off");
    else
        snprintf(device, sizeof device, "%s, %d cores, %d threads, %s", rt.hw.cpu_model, rt.hw.cores, threads,
                 openblas_get_config());
    char json[8192];
    int n = snprintf(json, sizeof json,
                     "{\n  \"benchmark\": \"step\",\n  \"config\": \"%s\",\n  \"device\": \"%s\",\n  \"backend\": \"%s\",\n"
                     "  \"device_detail\": \"%s\",\n  \"cpu\": \"%s\",\n  \"cores\": %d,\n  \"threads\": %d,\n"
                     "  \"blas\": \"%s\",\n  \"compiler\": \"gcc %s\",\n  \"tf32\": %d,\n  \"deterministic\": %d,\n"
                     "  \"commit\": \"%s\",\n  \"batch\": %d,\n  \"input_size\": [%d, %d, %d],\n  \"params\": %ld,\n"
                     "  \"warmup\": %d,\n  \"iters\": %d,\n  \"step_ms_median\": %.3f,\n  \"step_ms_min\": %.3f,\n"
                     "  \"step_ms_max\": %.3f,\n  \"samples_per_s\": %.4f,\n  \"conv_gflop_per_step\": %.4f,\n"
                     "  \"conv_gflops\": %.3f,\n  \"peak_memory_mib\": %.2f,\n  \"ceiling\": \"%s\",\n"
                     "  \"ceiling_gflops\": %.3f,\n  \"ceiling_sgemm_conv_shape_gflops\": %.3f,\n"
                     "  \"fraction_of_ceiling\": %.4f\n}\n",
                     stem, slug, be->name, device, rt.hw.cpu_model, rt.hw.cores, threads, openblas_get_config(),
                     __VERSION__, cfg->tf32, cfg->deterministic, commit, m->batch, cfg->input_size[0],
                     cfg->input_size[1], cfg->input_size[2], m->param_count, warmup, iters, med * 1e3, tmin * 1e3,
                     tmax * 1e3, sps, m->conv_flops_step * 1e-9, gflops, peak_mib, ceil.what, ceil.gflops,
                     ceil.conv_shape, gflops / ceil.gflops);
    snprintf(path, sizeof path, "%s/step_%s.json", dir, stem);
    fs_write_atomic(path, json, (size_t)n);
    char md[8192];
    n = snprintf(md, sizeof md,
                 "# bench step: %s on %s\n\n"
                 "| metric | value |\n|---|---|\n"
                 "| step time (median of %d, after %d warm-up) | %.1f ms (min %.1f, max %.1f) |\n"
                 "| samples/s | %.3f |\n| batch | %d x %dx%dx%d |\n| conv work per step | %.2f GFLOP |\n"
                 "| achieved conv rate | %.2f GFLOP/s |\n| ceiling: %s | %.2f GFLOP/s |\n"
                 "| fraction of the ceiling | %.1f%% |\n| peak memory (all backend allocations) | %.1f MiB |\n\n"
                 "Device: %s. Backend %s, gcc %s, commit %s. One step = forward, L1+KL loss, backward, global "
                 "gradient norm, AdamW, timed with %s.\n",
                 stem, slug, iters, warmup, med * 1e3, tmin * 1e3, tmax * 1e3, sps, m->batch, cfg->input_size[0],
                 cfg->input_size[1], cfg->input_size[2], m->conv_flops_step * 1e-9, gflops, ceil.what, ceil.gflops,
                 100 * gflops / ceil.gflops, peak_mib, device, be->name, __VERSION__, commit,
                 gpu ? "CUDA events" : "the wall clock");
    snprintf(path, sizeof path, "%s/step_%s.md", dir, stem);
    fs_write_atomic(path, md, (size_t)n);
    fputs(md, stdout);
    printf("\nwritten: %s/step_%s.{json,md}\n", dir, stem);
    free(t);
    free(batch);
    runtime_close(&rt);
    return 0;
}

int bench_gemm(void) {
    printf("blas: %s\n", openblas_get_config());
    int shapes[][3] = {{2048, 2048, 2048}, {4096, 32, 864}, {4096, 64, 1728}, {4096, 128, 3456}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        printf("sgemm %5d x %4d x %4d: %8.2f GFLOP/s\n", shapes[i][0], shapes[i][1], shapes[i][2],
               bench_sgemm_gflops(shapes[i][0], shapes[i][1], shapes[i][2]));
    return 0;
}
