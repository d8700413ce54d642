/* bench.c: benchmarks that write results/<device>/ (JSON for machines, Markdown for people).
 *   bench step: full training steps as the trainer runs them (train/step.h: forward, loss, backward, norm, clip,
 *               AdamW; in the config's precision, captured in a CUDA Graph with --compile) on one fixed batch, after
 *               warm-up; median step time, samples/s, conv GFLOP/s, peak memory, against the GEMM ceiling; then a
 *               few eager steps timed phase by phase (forward, backward, optimizer).
 *   bench gemm: the machine's sgemm rate at a large square shape and at the convolutions' GEMM shapes. */
#include "bench/bench.h"

#include <cblas.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench/bench_util.h"
#include "common/cpu_gemm.h"
#include "core/fsutil.h"
#include "core/stop_signal.h"
#include "core/progress.h"
#include "core/util.h"
#include "parallel/comm.h"
#include "train/runtime.h"
#include "train/step.h"

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

/* tf32: train.tf32; c0: model.channels[0], the width of the largest convolution GEMM */
static Ceiling measure_ceiling(const Runtime *rt, int tf32, int c0) {
    Ceiling c = {0};
    if (strcmp(rt->be->name, "cuda") == 0) {
        c.gflops = bench_cublas_sgemm_gflops(8192, tf32);
        snprintf(c.what, sizeof c.what, "cuBLAS SGEMM 8192^3 (%s), same GPU, same run", tf32 ? "TF32 tensor cores" : "FP32");
        return c;
    }
    c.gflops = bench_sgemm_gflops(2048, 2048, 2048);
    c.conv_shape = bench_sgemm_gflops(4096, c0, 27 * c0);
    snprintf(c.what, sizeof c.what, "%s sgemm 2048^3, same threads, same run", cpu_gemm_uses_onednn() ? "oneDNN" : "OpenBLAS");
    return c;
}

/* PHASE_STEPS eager steps timed phase by phase: the medians of forward, backward and optimizer (ms) */
enum { PHASE_STEPS = 3 };
static void time_phases(Stepper *st, int64_t *step, double out[3]) {
    double f[PHASE_STEPS], b[PHASE_STEPS], o[PHASE_STEPS];
    stepper_time_phases(st, 1);
    for (int i = 0; i < PHASE_STEPS; i++) {
        StepOutcome r;
        stepper_one(st, ++*step, 1e-4, &r);
        f[i] = r.forward_ms, b[i] = r.backward_ms, o[i] = r.optimizer_ms;
    }
    stepper_time_phases(st, 0);
    out[0] = bench_median(f, PHASE_STEPS), out[1] = bench_median(b, PHASE_STEPS), out[2] = bench_median(o, PHASE_STEPS);
}

/* LAYER_PASSES eager steps with an event before and after every layer's forward and backward; each layer's forward
 * and backward are the medians over the passes (one pass moved single layers by 20-40% on a shared 2-core VM, and
 * its step by as much against the timed steps' median). From them: the time spent in the convolution layers (cuDNN,
 * with their bias and residual epilogues and weight-gradient accumulation, which are ours), in the other layers (our
 * kernels), and what the step spent outside any layer (the loss, the optimizer, launch gaps). node_ms[i]: layer i,
 * forward plus backward; step_ms: the passes' median step. */
enum { LAYER_PASSES = 3 };
typedef struct {
    const Backend *be;
    void **ev; /* 4 per node: before/after forward, before/after backward */
} LayerEvents;
static void record_layer(void *ctx, int node, int phase) {
    const LayerEvents *l = ctx;
    l->be->event_record(l->ev[4 * node + phase]);
}
typedef struct {
    double conv_ms, other_ms, step_ms, *node_ms, *fwd_ms, *bwd_ms; /* node_ms = fwd_ms + bwd_ms */
    double gemm_ms, attn_ms; /* of other_ms: the transformers' Linear GEMMs and attention */
} LayerTimes;

static void time_layers(Stepper *st, Model *m, int64_t *step, LayerTimes *out) {
    const Backend *be = m->be;
    const int n = m->n_nodes;
    LayerEvents l = {.be = be, .ev = vx_malloc((size_t)4 * n * sizeof(void *))};
    for (int i = 0; i < 4 * n; i++) l.ev[i] = be->timed_event_create();
    double *pass = vx_malloc((size_t)LAYER_PASSES * 2 * n * sizeof(double)), steps[LAYER_PASSES];
    m->node_hook = record_layer, m->node_hook_ctx = &l;
    stepper_time_phases(st, 1);
    for (int p = 0; p < LAYER_PASSES; p++) {
        StepOutcome r;
        stepper_one(st, ++*step, 1e-4, &r);
        be->synchronize(); /* every event of the pass has completed before it is read (and reused) */
        steps[p] = r.ms;
        for (int i = 0; i < n; i++) {
            void **e = l.ev + 4 * i;
            pass[(p * 2) * n + i] = be->event_elapsed_ms(e[0], e[1]);
            pass[(p * 2 + 1) * n + i] = be->event_elapsed_ms(e[2], e[3]);
        }
    }
    stepper_time_phases(st, 0);
    m->node_hook = NULL;
    out->conv_ms = out->other_ms = out->gemm_ms = out->attn_ms = 0;
    out->step_ms = bench_median(steps, LAYER_PASSES);
    out->node_ms = vx_malloc((size_t)3 * n * sizeof(double));
    out->fwd_ms = out->node_ms + n, out->bwd_ms = out->node_ms + 2 * n;
    for (int i = 0; i < n; i++) {
        double f[LAYER_PASSES], b[LAYER_PASSES];
        for (int p = 0; p < LAYER_PASSES; p++) f[p] = pass[(p * 2) * n + i], b[p] = pass[(p * 2 + 1) * n + i];
        out->fwd_ms[i] = bench_median(f, LAYER_PASSES), out->bwd_ms[i] = bench_median(b, LAYER_PASSES);
        out->node_ms[i] = out->fwd_ms[i] + out->bwd_ms[i];
        if (node_convolves(&m->nodes[i])) out->conv_ms += out->node_ms[i];
        else out->other_ms += out->node_ms[i];
        if (m->nodes[i].kind == OP_GEMM) out->gemm_ms += out->node_ms[i];
        if (m->nodes[i].kind == OP_ATTENTION) out->attn_ms += out->node_ms[i];
    }
    for (int i = 0; i < 4 * n; i++) be->event_destroy(l.ev[i]);
    free(l.ev);
    free(pass);
}

/* Every layer of the timed pass in model order, as the JSON array "layers": name, forward and backward ms (a
 * profile to read whole, where the Markdown keeps the slowest ten). Names are the model's own (letters, digits,
 * dots, underscores); anything else is written as '?' so that the file stays valid JSON. Returns a malloc'd text. */
static char *layers_json(const Model *m, const LayerTimes *lt) {
    /* per layer: a name of at most 95 characters, 60 of text, two times in %.4f (a layer's milliseconds): under 256,
     * so no entry is truncated (a truncated one would leave len past cap) */
    const size_t cap = (size_t)m->n_nodes * 256 + 64;
    char *js = vx_malloc(cap);
    size_t len = (size_t)snprintf(js, cap, "[");
    for (int i = 0; i < m->n_nodes; i++) {
        char name[96];
        snprintf(name, sizeof name, "%s", m->nodes[i].name);
        for (char *c = name; *c; c++)
            if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20) *c = '?';
        len += (size_t)snprintf(js + len, cap - len, "%s\n    {\"name\": \"%s\", \"forward_ms\": %.4f, \"backward_ms\": %.4f}",
                                i ? "," : "", name, lt->fwd_ms[i], lt->bwd_ms[i]);
    }
    snprintf(js + len, cap - len, "\n  ]");
    return js;
}

/* The slowest layers of the timed pass, as Markdown rows (at most `top`). */
static int slowest_layers(const Model *m, const LayerTimes *lt, int top, char *md, size_t cap) {
    int *order = vx_malloc((size_t)m->n_nodes * sizeof(int)), len = 0;
    for (int i = 0; i < m->n_nodes; i++) order[i] = i;
    for (int i = 1; i < m->n_nodes; i++) /* insertion sort, slowest first */
        for (int j = i; j > 0 && lt->node_ms[order[j]] > lt->node_ms[order[j - 1]]; j--) {
            const int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    for (int k = 0; k < top && k < m->n_nodes; k++)
        len += snprintf(md + len, cap - (size_t)len, "| %s | %.3f ms | %.1f%% |\n", m->nodes[order[k]].name,
                        lt->node_ms[order[k]], 100 * lt->node_ms[order[k]] / lt->step_ms);
    free(order);
    return len;
}

int bench_step(Config *cfg, const BenchStepOptions *o) {
    int iters = o->iters > 0 ? o->iters : 5, warmup = o->warmup >= 0 ? o->warmup : 1;
    const ModelConfig *model = &cfg->model;
    TrainConfig *train = &cfg->train;
    train->grad_accum = 1; /* one fixed batch per step */
    stop_signal_catch(1); /* SIGINT/SIGTERM: exit 130 before the next step, nothing written */
    Runtime rt;
    runtime_open(&rt, model, train, 1);
    char slug[160], commit[64], stem[128], dir[512], path[1024], device[600];
    bench_device_slug(&rt, slug, sizeof slug);
    bench_config_stem(o->config_path, stem, sizeof stem);
    snprintf(dir, sizeof dir, "%s/%s", o->results_dir ? o->results_dir : "results", slug);
    for (int k = 0; k < 2; k++) { /* refused before the steps are timed, not after */
        snprintf(path, sizeof path, "step_%s.%s", stem, k ? "md" : "json");
        bench_claim_result(dir, path, o->overwrite);
    }
    Model *m = rt.model;
    const Backend *be = rt.be;
    model_allocate(m);
    model_init_params(m, (uint64_t)train->seed);
    float *batch = runtime_load_phantom_batch(&rt, train->seed, cfg->data.noise, 0);
    runtime_load_phantom_targets(&rt, train->seed, 0);
    Comm *single = comm_single_open();
    Stepper *st = stepper_create(m, train, single, NULL);
    double *t = vx_malloc((size_t)iters * sizeof(double));
    int64_t step = 0;
    Progress prog; /* (each step's line says its time; this one how far the timed steps are) */
    progress_begin(&prog, "bench step", warmup + iters, "steps");
    for (int i = -warmup; i < iters; i++) {
        stop_signal_honour("bench step", "no result was written");
        StepOutcome r;
        stepper_one(st, ++step, 1e-4, &r); /* each step alone, as PyTorch's reference times its steps */
        if (i >= 0) t[i] = r.ms * 1e-3;
        vx_log("%s %d: %.2f ms\n", i < 0 ? "warm-up" : "step", i < 0 ? i + warmup + 1 : i + 1, r.ms);
        progress_add(&prog, 1);
    }
    progress_end(&prog);
    const int graphs = stepper_graphs(st);
    double phase[3];
    stop_signal_honour("bench step", "no result was written");
    time_phases(st, &step, phase);
    vx_log("phases (eager): forward %.2f ms, backward %.2f ms, optimizer %.2f ms\n", phase[0], phase[1], phase[2]);
    LayerTimes lt;
    time_layers(st, m, &step, &lt);
    vx_log("layers (eager, each the median of %d steps; their median step %.2f ms): convolutions %.2f ms, other layers "
           "%.2f ms (GEMMs %.2f ms, attention %.2f ms), optimizer %.2f ms\n", LAYER_PASSES, lt.step_ms, lt.conv_ms,
           lt.other_ms, lt.gemm_ms, lt.attn_ms, phase[2]);
    char layers_md[4096];
    slowest_layers(m, &lt, 10, layers_md, sizeof layers_md);
    /* the first layer: the nodes through the first convolution (ae3d's: the input cast, when there is one, and
     * encoder.conv_in), what model.pad_input_channels changes */
    double first_ms = 0;
    const char *first_conv = "none";
    for (int i = 0; i < m->n_nodes; i++) {
        first_ms += lt.node_ms[i];
        if (node_convolves(&m->nodes[i])) {
            first_conv = m->nodes[i].name;
            break;
        }
    }
    const int in_c = model->in_channels, in_c_stored = m->tensors[m->t_input_lp].dims.c;
    vx_log("first layer (the nodes through the first convolution, %s; %d input channel(s) stored as %d): %.3f ms\n",
           first_conv, in_c, in_c_stored, first_ms);
    char *layers_js = layers_json(m, &lt);
    free(lt.node_ms);
    stepper_free(st);
    comm_close(single);
    double tmin = t[0], tmax = t[0];
    for (int i = 1; i < iters; i++) {
        if (t[i] < tmin) tmin = t[i];
        if (t[i] > tmax) tmax = t[i];
    }
    double med = bench_median(t, iters);
    /* the model's work: its convolutions and, in a transformer, its Linear GEMMs and attention (model_build.c) */
    const double work = m->conv_flops_step + m->gemm_flops_step + m->attn_flops_step;
    double sps = m->batch / med, gflops = m->conv_flops_step / med * 1e-9, work_gflops = work / med * 1e-9;
    double peak_mib = be->peak_bytes() / 1048576.0;
    /* the ceiling's GEMM buffers (768 MiB on a GPU) must not compete with a model sized to the free memory */
    model_release_memory(m);
    Ceiling ceil = measure_ceiling(&rt, train->tf32, model->channels[0]);
    int gpu = strcmp(be->name, "cuda") == 0;

    bench_build_commit(commit, sizeof commit);
    fs_mkdirs(dir);
    int threads = train->threads ? train->threads : rt.hw.cores;
    if (gpu)
        snprintf(device, sizeof device, "%s, %.0f GiB, compute capability %d.%d, TF32 %s, deterministic %s",
                 rt.hw.gpus[0].name, rt.hw.gpus[0].total_bytes / 1073741824.0, rt.hw.gpus[0].cc_major,
                 rt.hw.gpus[0].cc_minor, train->tf32 ? "on" : "off", train->deterministic ? "on" : "off");
    else
        snprintf(device, sizeof device, "%s, %d cores, %d threads, %s", rt.hw.cpu_model, rt.hw.cores, threads,
                 openblas_get_config());
    char diff_loss[96];
    snprintf(diff_loss, sizeof diff_loss, "%s%s MSE%s", m->cfg.diff.min_snr_gamma > 0 ? "min-SNR-weighted " : "",
             strcmp(m->cfg.diff.prediction, "epsilon") == 0 ? "epsilon" : "v",
             m->cfg.diff.physics_weight > 0 ? " + physics_weight x projection MSE" : "");
    const char *loss = m->family == FAMILY_AE3D       ? "L1+KL"
                       : m->family == FAMILY_VIT3D     ? (strcmp(m->cfg.loss, "mse") == 0 ? "MSE" : "L1")
                       : m->family == FAMILY_VIT3D_DIFFUSION ? diff_loss
                       : m->task == TASK_SURVIVAL      ? "Cox"
                       : m->task == TASK_REGRESSION    ? "MSE"
                       : m->task == TASK_MULTILABEL    ? "BCE"
                                                       : "cross-entropy";
    char isa[420];
    bench_isa(&rt, isa, sizeof isa);
    const size_t json_cap = 16384 + strlen(layers_js);
    char *json = vx_malloc(json_cap);
    int n = snprintf(json, json_cap,
                     "{\n  \"benchmark\": \"step\",\n  \"config\": \"%s\",\n  \"device\": \"%s\",\n  \"backend\": \"%s\",\n"
                     "  \"device_detail\": \"%s\",\n  \"isa\": \"%s\",\n  \"cpu\": \"%s\",\n  \"cores\": %d,\n"
                     "  \"threads\": %d,\n"
                     "  \"blas\": \"%s\",\n  \"compiler\": \"gcc %s\",\n  \"tf32\": %d,\n  \"deterministic\": %d,\n"
                     "  \"commit\": \"%s\",\n  \"batch\": %d,\n  \"input_size\": [%d, %d, %d],\n  \"params\": %ld,\n"
                     "  \"warmup\": %d,\n  \"iters\": %d,\n  \"step_ms_median\": %.3f,\n  \"step_ms_min\": %.3f,\n"
                     "  \"step_ms_max\": %.3f,\n  \"samples_per_s\": %.4f,\n  \"conv_gflop_per_step\": %.4f,\n"
                     "  \"conv_gflops\": %.3f,\n  \"gemm_gflop_per_step\": %.4f,\n"
                     "  \"attention_gflop_per_step\": %.4f,\n"
                     "  \"work_gflop_per_step\": %.4f,\n  \"work_gflops\": %.3f,\n"
                     "  \"peak_memory_mib\": %.2f,\n  \"ceiling\": \"%s\",\n"
                     "  \"ceiling_gflops\": %.3f,\n  \"ceiling_sgemm_conv_shape_gflops\": %.3f,\n"
                     "  \"fraction_of_ceiling\": %.4f,\n  \"precision\": \"%s\",\n  \"compile\": %d,\n"
                     "  \"graphs\": %d,\n  \"forward_ms\": %.3f,\n  \"backward_ms\": %.3f,\n  \"optimizer_ms\": %.3f,\n"
                     "  \"conv_ms\": %.3f,\n  \"other_layers_ms\": %.3f,\n  \"gemm_ms\": %.3f,\n"
                     "  \"attention_ms\": %.3f,\n  \"own_kernels_ms\": %.3f,\n"
                     "  \"layers_step_ms\": %.3f,\n  \"step_over_conv\": %.4f,\n  \"first_layer_ms\": %.3f,\n"
                     "  \"input_channels_stored\": %d,\n  \"loss\": \"%s\",\n  \"layers\": %s\n}\n",
                     stem, slug, be->name, device, isa, rt.hw.cpu_model, rt.hw.cores, threads, openblas_get_config(),
                     __VERSION__, train->tf32, train->deterministic, commit, m->batch, model->input_size[0],
                     model->input_size[1], model->input_size[2], m->param_count, warmup, iters, med * 1e3, tmin * 1e3,
                     tmax * 1e3, sps, m->conv_flops_step * 1e-9, gflops, m->gemm_flops_step * 1e-9,
                     m->attn_flops_step * 1e-9, work * 1e-9, work_gflops, peak_mib, ceil.what, ceil.gflops,
                     ceil.conv_shape, work_gflops / ceil.gflops, m->dtype == DT_F32 && !m->bf16_math ? "fp32" : train->precision, train->compile,
                     graphs, phase[0], phase[1], phase[2], lt.conv_ms, lt.other_ms, lt.gemm_ms, lt.attn_ms,
                     lt.other_ms + phase[2], lt.step_ms,
                     med * 1e3 / lt.conv_ms, first_ms, in_c_stored, loss, layers_js);
    snprintf(path, sizeof path, "step_%s.json", stem);
    bench_write_text(dir, path, json, (size_t)n, o->overwrite);
    free(json);
    free(layers_js);
    char md[16384];
    n = snprintf(md, sizeof md,
                 "# bench step: %s on %s\n\n"
                 "| metric | value |\n|---|---|\n"
                 "| step time (median of %d, after %d warm-up) | %.1f ms (min %.1f, max %.1f) |\n"
                 "| samples/s | %.3f |\n| batch | %d x %dx%dx%d |\n"
                 "| work per step: convolutions + GEMMs + attention | %.2f GFLOP (%.2f + %.2f + %.2f) |\n"
                 "| achieved rate (of the convolutions alone) | %.2f GFLOP/s (%.2f) |\n| ceiling: %s | %.2f GFLOP/s |\n"
                 "| fraction of the ceiling | %.1f%% |\n| peak memory (all backend allocations) | %.1f MiB |\n"
                 "| precision, graphs | %s, %s |\n"
                 "| phases, eager (median of %d) | forward %.2f ms, backward %.2f ms, optimizer %.2f ms |\n"
                 "| layers, each the median of %d eager steps (their median step %.2f ms) | convolutions %.2f ms "
                 "(%.0f%%), other layers %.2f ms (GEMMs %.2f ms, attention %.2f ms), optimizer %.2f ms |\n"
                 "| step time / convolution time | %.2f |\n\n"
                 "Slowest layers of those steps (forward + backward, medians):\n\n| layer | time | of the step |\n"
                 "|---|---|---|\n%s\n"
                 "Device: %s. Backend %s, gcc %s, commit %s. One step = forward, %s loss, backward, global "
                 "gradient norm, AdamW, timed with %s.\n",
                 stem, slug, iters, warmup, med * 1e3, tmin * 1e3, tmax * 1e3, sps, m->batch, model->input_size[0],
                 model->input_size[1], model->input_size[2], work * 1e-9, m->conv_flops_step * 1e-9,
                 m->gemm_flops_step * 1e-9, m->attn_flops_step * 1e-9, work_gflops, gflops, ceil.what, ceil.gflops,
                 100 * work_gflops / ceil.gflops, peak_mib, m->dtype == DT_F32 && !m->bf16_math ? "fp32" : train->precision,
                 graphs ? "the step replayed as CUDA Graphs" : "eager", PHASE_STEPS, phase[0], phase[1], phase[2],
                 LAYER_PASSES, lt.step_ms, lt.conv_ms, 100 * lt.conv_ms / lt.step_ms, lt.other_ms, lt.gemm_ms,
                 lt.attn_ms, phase[2],
                 med * 1e3 / lt.conv_ms,
                 layers_md,
                 device, be->name, __VERSION__, commit,
                 loss, gpu ? "CUDA events" : "the wall clock");
    snprintf(path, sizeof path, "step_%s.md", stem);
    bench_write_text(dir, path, md, (size_t)n, o->overwrite);
    fputs(md, stdout);
    printf("\nwritten: %s/step_%s.{json,md}\n", dir, stem);
    free(t);
    free(batch);
    runtime_close(&rt);
    return 0;
}

int bench_gemm(void) {
    char gemm[256];
    cpu_gemm_describe(gemm, sizeof gemm);
    printf("blas: %s\ngemm: %s\n", openblas_get_config(), gemm);
    int shapes[][3] = {{2048, 2048, 2048}, {4096, 32, 864}, {4096, 64, 1728}, {4096, 128, 3456}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        printf("sgemm %5d x %4d x %4d: %8.2f GFLOP/s\n", shapes[i][0], shapes[i][1], shapes[i][2],
               bench_sgemm_gflops(shapes[i][0], shapes[i][1], shapes[i][2]));
    return 0;
}
