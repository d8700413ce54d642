/* scaling.c: `voxscale bench scaling`: weak scaling (fixed per-rank batch) and strong scaling (fixed global batch)
 * of the real trainer on the ranks this machine can run, and a projection for the counts beyond it.
 *
 *   measured   the trainer itself (`train`, under `mpirun -np N` on CPU ranks where mpirun exists, else `train
 *              --gpus N`), a few steps after warm-up; samples/s from the median step time in its metrics.jsonl.
 *   projected  from a measured one-rank step of the same per-rank batch: forward, backward and optimizer times and
 *              the moment in backward at which each gradient bucket is complete (the trainer's own bucket plan); the
 *              all-reduce of bucket i costs the alpha-beta ring model T = 2(n-1) a + 2(n-1)/n S_i / B, with a and B
 *              fitted by `bench allreduce` on these ranks or taken from an interconnect preset; bucket i starts at
 *              max(ready_i, end of bucket i-1), as the trainer launches them in order during backward, and the
 *              step is forward + max(backward, last all-reduce's end) + optimizer.
 * On CPU ranks the one-rank step is measured with the per-rank thread count of the N-rank run (cores / N, at least
 * 1), and where N ranks x threads exceed the cores, the compute times are stretched by that oversubscription: the
 * ranks of this testbed share cores, GPUs would not. Bucket-ready moments are host timestamps on the CPU backend
 * (synchronous); on a GPU they are estimated from each backward node's share of the convolution FLOPs, scaled to
 * the CUDA-event backward time (the backend has no per-node GPU timer yet), and the report says so.
 * The model is checked where it can be: every measured count above 1 is projected too, and the relative error is
 * printed beside it; projected rows carry the errors seen on this machine.
 *
 * Every row is also projected with each interconnect preset (same compute, another link), and measured rows carry
 * the trainer's own exposed communication and data wait (its metrics.jsonl), for the report's charts.
 * Reports: results/<device>/scaling_<config>.json and .md, TensorBoard scalars (step = rank count) and the chart as
 * an image in results/<device>/scaling_<config>_tb/. The chart itself (charts/scaling_<config>.png and .svg) and the
 * device's index.html are drawn by the report script, bench/report/report.py (matplotlib), which this command runs
 * on the device's folder when it finds the script and a Python with matplotlib; otherwise it says why and goes on. */
#include <cJSON.h>
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench.h"
#include "bench/bench_util.h"
#include "bench/scaling_model.h"
#include "core/fsutil.h"
#include "core/stop_signal.h"
#include "core/progress.h"
#include "core/util.h"
#include "tb/tb_writer.h"
#include "train/runtime.h"
#include "train/step.h"
#include "train/train.h"
#include "conv3d/conv3d.h"

/* Interconnect presets: bus bandwidth B (what nccl-tests calls busbw) and latency per ring step a. Not measured
 * here; each says where its figure comes from. */
typedef struct {
    const char *name, *source;
    double bus_gbps, alpha_us;
} Interconnect;
static const Interconnect PRESETS[] = {
    {"h100-nvlink", "8x H100 SXM, NVLink 4 + NVSwitch: NCCL all-reduce busbw ~480 GB/s with NVLS (~370 GB/s ring), "
                    "NVIDIA's published nccl-tests figures for DGX H100 as quoted in issue 13; a = 5 us assumed",
     480, 5},
    {"pcie4", "PCIe 4.0 x16: 31.5 GB/s per direction (PCI-SIG), 80% of it assumed reachable by a ring; a = 10 us "
              "assumed", 25.2, 10},
    {"ib400", "400 Gb/s InfiniBand NDR (IBTA): 50 GB/s per direction, 90% assumed reachable; a = 15 us assumed", 45, 15},
};


typedef struct {
    int mode;               /* 0 weak, 1 strong */
    int n, batch, global;   /* ranks, per-rank batch, global batch */
    int measured;
    double sps, step_ms;    /* measured (or projected, for projected rows) */
    double proj_sps, err;   /* the model's figure, and its relative error where measured (NAN otherwise) */
    int threads;
    double comm_ms, data_ms; /* measured: the trainer's median comm_wait_ms and data_wait_ms (NAN otherwise) */
    double proj_comm_ms;     /* the model's exposed communication: projected step - compute */
    double preset_sps[3], preset_comm_ms[3]; /* the same step projected with each interconnect preset */
} Row;

static double now_s(void) { return vx_now(); }
static double *hook_t;
static void record_hook(void *ctx, int node) { (void)ctx, hook_t[node] = now_s(); }

/* This very binary, which the measured runs start again. */
static void self_exe(char *out, size_t len) {
    const ssize_t k = readlink("/proc/self/exe", out, len - 1);
    out[k > 0 ? k : 0] = 0;
}

/* One rank's step timeline at per-rank batch `batch` with `threads` CPU threads. */
static Timeline measure_timeline(const Config *base, int batch, int threads) {
    Config cfg = *base;
    cfg.train.batch_size = batch;
    cfg.train.threads = threads;
    Runtime rt;
    runtime_open(&rt, &cfg.model, &cfg.train, 0);
    Model *m = rt.model;
    const Backend *be = rt.be;
    const int gpu = strcmp(be->name, "cuda") == 0;
    model_allocate(m);
    model_init_params(m, (uint64_t)cfg.train.seed);
    float *host = runtime_load_phantom_batch(&rt, cfg.train.seed, cfg.data.noise, 0);
    runtime_load_phantom_targets(&rt, cfg.train.seed, 0);
    Comm *single = comm_single_open();
    Buckets *bk = buckets_plan_model(m, single, cfg.dist.bucket_mb, cfg.dist.first_bucket_mb);
    Timeline tl = {.nb = bk->n, .estimated = gpu};
    tl.ready = vx_malloc((size_t)bk->n * sizeof(double));
    tl.bytes = vx_malloc((size_t)bk->n * sizeof(double));
    enum { STEPS = 5, WARM = 2 };
    double f[STEPS], b[STEPS], o[STEPS], *r = vx_malloc((size_t)STEPS * bk->n * sizeof(double));
    hook_t = vx_malloc((size_t)m->n_nodes * sizeof(double));
    if (!gpu) m->backward_hook = record_hook, m->backward_hook_ctx = NULL;
    cfg.train.grad_accum = 1;
    Stepper *st = stepper_create(m, &cfg.train, single, NULL); /* the trainer's step, its phases timed apart */
    stepper_time_phases(st, 1);
    for (int s = -WARM; s < STEPS; s++) {
        const int64_t step1 = s + WARM + 1;
        StepOutcome out;
        const double t0 = now_s(); /* the CPU's ops are synchronous: backward starts about forward_ms after this */
        stepper_one(st, step1, 1e-4, &out);
        if (s < 0) continue;
        f[s] = out.forward_ms * 1e-3, b[s] = out.backward_ms * 1e-3, o[s] = out.optimizer_ms * 1e-3;
        const double t1 = t0 + out.forward_ms * 1e-3;
        for (int i = 0; i < bk->n && !gpu; i++) r[s * bk->n + i] = hook_t[bk->b[i].ready_step] - t1;
    }
    stepper_free(st);
    tl.fwd = bench_median(f, STEPS), tl.bwd = bench_median(b, STEPS), tl.opt = bench_median(o, STEPS);
    double total = 0, *flops = vx_malloc((size_t)m->n_nodes * sizeof(double));
    for (int i = 0; i < m->n_nodes; i++)
        total += flops[i] = node_convolves(&m->nodes[i]) ? 2 * conv3d_forward_flops(&m->nodes[i].conv) : 0;
    for (int i = 0; i < bk->n; i++) {
        tl.bytes[i] = (double)(bk->b[i].end - bk->b[i].begin) * sizeof(float);
        if (gpu) { /* backward runs nodes from the last down: done = the FLOPs of nodes >= ready_step */
            double done = 0;
            for (int j = bk->b[i].ready_step; j < m->n_nodes; j++) done += flops[j];
            tl.ready[i] = tl.bwd * (total > 0 ? done / total : 1.0);
        } else {
            double v[STEPS];
            for (int s = 0; s < STEPS; s++) v[s] = r[s * bk->n + i];
            tl.ready[i] = bench_median(v, STEPS);
        }
    }
    m->backward_hook = NULL;
    free(flops), free(r), free(hook_t), free(host);
    buckets_free(bk);
    comm_close(single);
    runtime_close(&rt);
    return tl;
}

/* Runs argv to completion, output to log; returns its exit code. */
static int run_child(char *const *argv, const char *log) {
    fflush(NULL);
    const pid_t pid = fork();
    VX_CHECK(pid >= 0, "bench scaling: fork failed");
    if (pid == 0) {
        FILE *f = freopen(log, "w", stdout);
        if (f) dup2(fileno(stdout), 2);
        stop_signal_child_before_exec();
        execvp(argv[0], argv);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static int have_mpirun(void) { return system("command -v mpirun >/dev/null 2>&1") == 0; }

/* The medians of a finished run's metrics.jsonl over the steps after the first two: step time (s), and the
 * communication wait and data wait (ms) into comm_ms and data_ms (NAN where absent). */
static double run_step_time(const char *run_dir, double *comm_ms, double *data_ms) {
    char path[1200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    *comm_ms = *data_ms = NAN;
    FILE *f = fopen(path, "r");
    if (!f) return NAN;
    double v[512], c[512], d[512];
    int n = 0, nc = 0, nd = 0;
    char line[4096];
    while (fgets(line, sizeof line, f) && n < 512) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *s = cJSON_GetObjectItem(j, "step"), *ms = cJSON_GetObjectItem(j, "step_ms"),
                    *cw = cJSON_GetObjectItem(j, "comm_wait_ms"), *dw = cJSON_GetObjectItem(j, "data_wait_ms");
        if (cJSON_IsNumber(s) && cJSON_IsNumber(ms) && s->valuedouble > 2) {
            v[n++] = ms->valuedouble * 1e-3;
            if (cJSON_IsNumber(cw)) c[nc++] = cw->valuedouble;
            if (cJSON_IsNumber(dw)) d[nd++] = dw->valuedouble;
        }
        cJSON_Delete(j);
    }
    fclose(f);
    if (nc) *comm_ms = bench_median(c, nc);
    if (nd) *data_ms = bench_median(d, nd);
    return n ? bench_median(v, n) : NAN;
}

/* mpirun and its flags into argv (returns how many): VX_MPIRUN_ARGS adds more, split on spaces (a host list and a
 * launch agent: how tests/integration/test_two_hosts.py runs the ranks across two network namespaces). */
static int mpirun_head(const char **argv, const char *np) {
    static char extra[2048];
    int a = 0;
    argv[a++] = "mpirun", argv[a++] = "--allow-run-as-root", argv[a++] = "--oversubscribe";
    snprintf(extra, sizeof extra, "%s", getenv("VX_MPIRUN_ARGS") ? getenv("VX_MPIRUN_ARGS") : "");
    for (char *tok = strtok(extra, " "); tok && a < 28; tok = strtok(NULL, " ")) argv[a++] = tok;
    argv[a++] = "-np", argv[a++] = np;
    return a;
}

/* The measured run of n ranks: returns its step time (s), or NAN with the log's path printed. */
static double measure_run(const BenchScalingOptions *o, const char *tmp, int mode, int n, int batch, int global,
                          int threads, int use_mpi, const char *device, double *comm_ms, double *data_ms) {
    char dir[1024], log[1100], nbuf[16], steps[32], bs[48], gb[48], th[48];
    snprintf(dir, sizeof dir, "%s/%s-%d", tmp, mode ? "strong" : "weak", n);
    snprintf(log, sizeof log, "%s.log", dir);
    snprintf(nbuf, sizeof nbuf, "%d", n);
    snprintf(steps, sizeof steps, "%d", o->steps);
    snprintf(bs, sizeof bs, "train.batch_size=%d", batch);
    snprintf(gb, sizeof gb, "train.global_batch=%d", mode ? global : 0);
    snprintf(th, sizeof th, "train.threads=%d", threads);
    char real[1024];
    self_exe(real, sizeof real);
    const char *argv[128];
    int a = n > 1 && use_mpi ? mpirun_head(argv, nbuf) : 0;
    argv[a++] = real, argv[a++] = "train", argv[a++] = "--config", argv[a++] = o->config_path;
    argv[a++] = "--device", argv[a++] = device, argv[a++] = "--steps", argv[a++] = steps, argv[a++] = "--out";
    argv[a++] = dir;
    if (n > 1 && !use_mpi) argv[a++] = "--gpus", argv[a++] = nbuf;
    const char *sets[] = {bs, gb, th, "train.log_every=1", "train.val_every=0", "train.val_samples=0",
                          "output.tensorboard=0", "train.lr_scaling=none"};
    for (size_t i = 0; i < sizeof sets / sizeof *sets; i++) argv[a++] = "--set", argv[a++] = sets[i];
    for (int i = 0; i < o->n_sets && a < 124; i++) argv[a++] = "--set", argv[a++] = o->sets[i];
    argv[a] = NULL;
    const int rc = run_child((char *const *)argv, log);
    *comm_ms = *data_ms = NAN;
    if (rc != 0) {
        char tail_out[640];
        bench_log_tail(log, 600, tail_out, sizeof tail_out); /* the log goes with the scratch folder */
        vx_log("bench scaling: the %d-rank %s run exited %d; it ended: %s\n", n, mode ? "strong" : "weak", rc, tail_out);
        return NAN;
    }
    return run_step_time(dir, comm_ms, data_ms);
}

/* a and B fitted by `bench allreduce` on n ranks (mpirun), into *alpha (s) and *bus (B/s); 0 on failure */
static int measure_interconnect(const char *tmp, int n, double *alpha, double *bus) {
    char real[1024], nbuf[16], res[1024], log[1100], path[1300];
    self_exe(real, sizeof real);
    snprintf(nbuf, sizeof nbuf, "%d", n);
    snprintf(res, sizeof res, "%s/allreduce", tmp);
    snprintf(log, sizeof log, "%s/allreduce-%d.log", tmp, n);
    const char *argv[64], *tail[] = {real, "bench", "allreduce", "-b", "4K", "-e", "16M", "-f", "4", "--device", "cpu",
                                     "--results", res, NULL};
    int na = mpirun_head(argv, nbuf);
    for (size_t i = 0; i < sizeof tail / sizeof *tail; i++) argv[na++] = tail[i];
    if (run_child((char *const *)argv, log) != 0) {
        char tail_out[640];
        bench_log_tail(log, 600, tail_out, sizeof tail_out); /* the log goes with the scratch folder */
        vx_log("bench scaling: bench allreduce on %d CPU ranks failed, no measured link there; it ended: %s\n", n,
               tail_out);
        return 0;
    }
    char cmd[1500];
    snprintf(cmd, sizeof cmd, "ls %s/*/allreduce_%dranks.json 2>/dev/null", res, n);
    FILE *p = popen(cmd, "r");
    if (!p || !fgets(path, sizeof path, p)) {
        if (p) pclose(p);
        return 0;
    }
    pclose(p);
    path[strcspn(path, "\n")] = 0;
    size_t len;
    char *text = fs_read_file(path, 1 << 20, &len);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    const cJSON *fit = cJSON_GetObjectItem(j, "fit");
    const double a = cJSON_GetNumberValue(cJSON_GetObjectItem(fit, "alpha_us")),
                 b = cJSON_GetNumberValue(cJSON_GetObjectItem(fit, "bus_gbps"));
    cJSON_Delete(j);
    free(text);
    if (!(b > 0)) return 0;
    *alpha = a * 1e-6, *bus = b * 1e9;
    return 1;
}

/* ---- the chart: drawn by the report script (bench/report/report.py, matplotlib) ------------------------------ */

/* bench/report/report.py beside this binary's tree (build/voxscale, build/cpu-only/voxscale: a folder or two up),
 * or VX_REPORT_SCRIPT; 0 when there is none (an installed binary, the Docker image). */
static int find_report_script(char *out, size_t len) {
    const char *env = getenv("VX_REPORT_SCRIPT");
    if (env && env[0]) return snprintf(out, len, "%s", env), access(out, R_OK) == 0;
    char dir[1024];
    self_exe(dir, sizeof dir);
    for (int up = 0; up < 4 && strrchr(dir, '/'); up++) {
        *strrchr(dir, '/') = 0;
        snprintf(out, len, "%s/bench/report/report.py", dir);
        if (access(out, R_OK) == 0) return 1;
    }
    return 0;
}

/* Runs the report script on the device's folder (every chart of it, its index.html and the results index) with
 * the first of VX_PYTHON, python3 and /usr/bin/python3 that has matplotlib (the script exits 3 where it is
 * missing). Returns 1 when the charts were drawn; otherwise says why. */
static int draw_report(const char *dir, const char *tmp) {
    char script[1200], log[1100];
    if (!find_report_script(script, sizeof script)) {
        vx_log("bench scaling: chart not drawn: no bench/report/report.py beside this binary (set VX_REPORT_SCRIPT, or "
               "run python3 bench/report/report.py %s from the repository)\n", dir);
        return 0;
    }
    snprintf(log, sizeof log, "%s/report.log", tmp);
    const char *env = getenv("VX_PYTHON");
    const char *pythons[] = {env && env[0] ? env : "python3", "python3", "/usr/bin/python3"};
    int rc = 127;
    for (size_t i = 0; i < sizeof pythons / sizeof *pythons; i++) {
        if (i && strcmp(pythons[i], pythons[i - 1]) == 0) continue;
        const char *argv[] = {pythons[i], script, "--device", dir, NULL};
        rc = run_child((char *const *)argv, log);
        if (rc == 0) return 1;
        if (rc != 3 && rc != 127) break; /* 3: no matplotlib in that Python, 127: no such Python */
    }
    size_t len = 0;
    char *text = fs_read_file(log, 1 << 16, &len);
    vx_log("bench scaling: chart not drawn: the report script exited %d%s%s", rc, text && len ? ":\n" : "\n",
           text ? text : "");
    free(text);
    return 0;
}

/* The chart's PNG as a TensorBoard image (decoded with libpng, composited on white). */
static void tb_add_chart(TbWriter *tw, const char *png_path) {
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_file(&im, png_path)) return;
    im.format = PNG_FORMAT_RGB;
    const png_color white = {255, 255, 255};
    uint8_t *px = malloc(PNG_IMAGE_SIZE(im));
    if (px && png_image_finish_read(&im, &white, px, 0, NULL))
        tb_writer_add_image(tw, "scaling/chart", 0, px, (int)im.width, (int)im.height, 3);
    else
        png_image_free(&im);
    free(px);
}

int bench_scaling(Config *cfg, const BenchScalingOptions *o) {
    Runtime probe;
    Config pc = *cfg;
    runtime_open(&probe, &pc.model, &pc.train, 1);
    const int gpu = strcmp(probe.be->name, "cuda") == 0, cores = probe.hw.cores > 0 ? probe.hw.cores : 1;
    char slug[400], commit[64], dir[700], path[1200], stem[128];
    bench_device_slug(&probe, slug, sizeof slug);
    bench_build_commit(commit, sizeof commit);
    bench_results_dir(&probe, o->results_dir, dir, sizeof dir);
    const int n_gpus = probe.hw.n_gpus;
    /* the data-parallel mode the runs train in (--set dist.zero=N): its communication in the projection. Offload's
     * host link is PCIe 4.0 x16's practical 25 GB/s, not measured (no GPU has been lent yet) */
    const int zstage = strcmp(cfg->dist.zero, "auto") == 0 ? 0 : atoi(cfg->dist.zero);
    const ZeroComm zc = {.stage = zstage, .offload = gpu && zstage > 0 && strcmp(cfg->dist.offload_optimizer, "cpu") == 0,
                         .param_bytes = (double)probe.model->param_floats *
                                        (probe.model->dtype == DT_F32 ? 4.0 : (double)dtype_size(probe.model->dtype)),
                         .host_bus = 25e9};
    runtime_close(&probe);
    const char *device = gpu ? "cuda" : "cpu";
    bench_config_stem(o->config_path, stem, sizeof stem);
    for (int k = 0; k < 2; k++) { /* refused before the runs, not after */
        snprintf(path, sizeof path, "scaling_%s.%s", stem, k ? "md" : "json");
        bench_claim_result(dir, path, o->overwrite);
    }
    int max_count = 1;
    for (int i = 0; i < o->n_counts; i++) max_count = o->counts[i] > max_count ? o->counts[i] : max_count;
    const int measure_max = o->measure_max > 0 ? o->measure_max : gpu ? n_gpus : 4;
    const int use_mpi = !gpu && have_mpirun();
    const int b = cfg->train.batch_size > 0 ? cfg->train.batch_size : 1, global = b * max_count;
    const double load_before = bench_load_average();
    char tmp[] = "/tmp/voxscale-scaling-XXXXXX";
    VX_CHECK(mkdtemp(tmp) != NULL, "bench scaling: cannot make a scratch directory in /tmp");

    /* the interconnect: fitted on each measured rank count (CPU ranks over MPI), or a preset */
    double fit_a[17] = {0}, fit_b[17] = {0};
    int largest_fit = 0;
    for (int i = 0; i < o->n_counts; i++) {
        const int n = o->counts[i];
        if (n > 1 && n <= measure_max && use_mpi && n <= 16 && measure_interconnect(tmp, n, &fit_a[n], &fit_b[n])) {
            vx_log("interconnect, %d CPU ranks over MPI: a = %.1f us, B = %.2f GB/s (bench allreduce fit)\n", n,
                   fit_a[n] * 1e6, fit_b[n] * 1e-9);
            if (n > largest_fit) largest_fit = n;
        }
    }
    const Interconnect *preset = NULL;
    for (size_t i = 0; i < sizeof PRESETS / sizeof *PRESETS; i++)
        if (strcmp(o->interconnect, PRESETS[i].name) == 0) preset = &PRESETS[i];
    if (!preset && !largest_fit) preset = &PRESETS[0]; /* nothing measured (one GPU): the 8x H100 preset */
    double beyond_a = preset ? preset->alpha_us * 1e-6 : fit_a[largest_fit];
    double beyond_b = preset ? preset->bus_gbps * 1e9 : fit_b[largest_fit];
    char inter[400];
    if (preset) snprintf(inter, sizeof inter, "preset %s: %s", preset->name, preset->source);
    else snprintf(inter, sizeof inter, "measured: bench allreduce on %d CPU ranks over MPI (a = %.1f us, B = %.2f GB/s)",
                  largest_fit, beyond_a * 1e6, beyond_b * 1e-9);

    Row rows[64];
    int nr = 0;
    double worst_err = 0;
    int n_rows = 0; /* the rows to come, for the progress line's ETA (a run per row: minutes in all) */
    for (int mode = 0; mode < 2; mode++)
        for (int i = 0; i < o->n_counts; i++)
            n_rows += ((mode == 0 && o->weak) || (mode == 1 && o->strong && global % o->counts[i] == 0));
    Progress prog;
    progress_begin(&prog, "bench scaling", n_rows, "rank counts");
    for (int mode = 0; mode < 2; mode++) {
        if ((mode == 0 && !o->weak) || (mode == 1 && !o->strong)) continue;
        for (int i = 0; i < o->n_counts && nr < 64; i++) {
            const int n = o->counts[i];
            const int pb = mode ? global / n : b;
            if (mode && global % n) {
                vx_log("bench scaling: strong scaling skips %d ranks: the global batch %d does not divide by it\n", n,
                       global);
                continue;
            }
            const int threads = gpu ? cfg->train.threads : (cores / n > 1 ? cores / n : 1);
            const double share = gpu ? 1.0 : fmax(1.0, (double)n * threads / cores);
            Row *r = &rows[nr++];
            *r = (Row){.mode = mode, .n = n, .batch = pb, .global = pb * n, .threads = threads, .err = NAN,
                       .comm_ms = NAN, .data_ms = NAN};
            Timeline tl = measure_timeline(cfg, pb, threads);
            const int measurable = n <= measure_max;
            const double a = measurable && fit_b[n] > 0 ? fit_a[n] : beyond_a;
            const double bb = measurable && fit_b[n] > 0 ? fit_b[n] : beyond_b;
            const double proj = scaling_project_step_zero(&tl, n, a, bb, share, &zc);
            const double compute = (tl.fwd + tl.bwd + tl.opt) * share;
            r->proj_sps = pb * n / proj, r->proj_comm_ms = (proj - compute) * 1e3;
            for (int p = 0; p < 3; p++) { /* the same compute, each preset's link */
                const Interconnect *ic = &PRESETS[p];
                const double t = scaling_project_step_zero(&tl, n, ic->alpha_us * 1e-6, ic->bus_gbps * 1e9, share, &zc);
                r->preset_sps[p] = pb * n / t, r->preset_comm_ms[p] = (t - compute) * 1e3;
            }
            if (measurable) {
                const double t = measure_run(o, tmp, mode, n, pb, pb * n, threads, use_mpi, device, &r->comm_ms,
                                             &r->data_ms);
                r->measured = 1, r->step_ms = t * 1e3, r->sps = pb * n / t;
                r->err = r->proj_sps / r->sps - 1;
                if (isfinite(r->err) && n > 1 && fabs(r->err) > fabs(worst_err)) worst_err = r->err;
            } else {
                r->step_ms = proj * 1e3, r->sps = r->proj_sps;
            }
            vx_log("%s %d ranks: batch %d/rank, %s %.2f samples/s (step %.0f ms); model %.2f samples/s%s\n",
                   mode ? "strong" : "weak", n, pb, r->measured ? "measured" : "projected", r->sps, r->step_ms,
                   r->proj_sps, "");
            free(tl.ready), free(tl.bytes);
            progress_add(&prog, 1);
        }
    }
    progress_end(&prog);

    /* speedup and efficiency against the same mode's single rank */
    double speed[64], eff[64];
    for (int i = 0; i < nr; i++) {
        double one = NAN;
        for (int j = 0; j < nr; j++)
            if (rows[j].mode == rows[i].mode && rows[j].n == 1) one = rows[j].sps;
        speed[i] = rows[i].sps / one, eff[i] = speed[i] / rows[i].n;
    }
    vx_log("\n| mode | ranks | batch/rank | global | kind | samples/s | speedup | efficiency | model | model error |\n"
           "|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nr; i++) {
        char err[64];
        if (isfinite(rows[i].err)) snprintf(err, sizeof err, "%+.0f%%", 100 * rows[i].err);
        else snprintf(err, sizeof err, "(measured error up to %+.0f%% at 2-%d ranks)", 100 * worst_err, measure_max);
        vx_log("| %s | %d | %d | %d | %s | %.2f | %.2fx | %.0f%% | %.2f | %s |\n", rows[i].mode ? "strong" : "weak",
               rows[i].n, rows[i].batch, rows[i].global, rows[i].measured ? "measured" : "projected", rows[i].sps,
               speed[i], 100 * eff[i], rows[i].proj_sps, err);
    }
    vx_log("interconnect beyond this machine: %s\n", inter);
    if (zstage > 0) vx_log("data-parallel mode: ZeRO-%d%s (dist.zero): the projection's reduce-scatters, norm parts and "
                           "parameter all-gather are that mode's\n", zstage, zc.offload ? " + offload" : "");

    /* JSON, Markdown, chart, TensorBoard */
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "benchmark", "scaling");
    cJSON_AddStringToObject(j, "config", stem);
    cJSON_AddStringToObject(j, "device", slug);
    char isa[420] = "";
    if (!gpu) bench_cpu_isa(isa, sizeof isa);
    cJSON_AddStringToObject(j, "isa", isa);
    cJSON_AddStringToObject(j, "commit", commit);
    cJSON_AddStringToObject(j, "launcher", gpu ? "train --gpus N" : use_mpi ? "mpirun -np N" : "train --gpus N (tcp)");
    cJSON_AddNumberToObject(j, "cores", cores);
    cJSON_AddStringToObject(j, "interconnect_beyond", inter);
    cJSON_AddStringToObject(j, "bucket_ready", gpu ? "estimated from FLOP shares of the CUDA-event backward time"
                                                   : "host timestamps of the CPU backend");
    cJSON_AddNumberToObject(j, "worst_measured_model_error", worst_err);
    cJSON_AddStringToObject(j, "data_parallel_mode", zstage == 0 ? "DDP" : zc.offload ? "ZeRO-2 + offload"
                                                     : zstage == 1 ? "ZeRO-1" : "ZeRO-2");
    const double load_after = bench_load_average(); /* the measured runs compete with whatever else runs here */
    cJSON *load = cJSON_AddArrayToObject(j, "load_average_before_after");
    cJSON_AddItemToArray(load, cJSON_CreateNumber(isfinite(load_before) ? load_before : -1));
    cJSON_AddItemToArray(load, cJSON_CreateNumber(isfinite(load_after) ? load_after : -1));
    cJSON *ics = cJSON_AddArrayToObject(j, "interconnects"); /* the presets every row is also projected with */
    for (int p = 0; p < 3; p++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", PRESETS[p].name);
        cJSON_AddStringToObject(e, "source", PRESETS[p].source);
        cJSON_AddNumberToObject(e, "alpha_us", PRESETS[p].alpha_us);
        cJSON_AddNumberToObject(e, "bus_gbps", PRESETS[p].bus_gbps);
        cJSON_AddItemToArray(ics, e);
    }
    cJSON *fits = cJSON_AddArrayToObject(j, "fits"); /* bench allreduce's fit on each measured rank count */
    for (int n = 2; n <= 16; n++)
        if (fit_b[n] > 0) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "ranks", n);
            cJSON_AddNumberToObject(e, "alpha_us", fit_a[n] * 1e6);
            cJSON_AddNumberToObject(e, "bus_gbps", fit_b[n] * 1e-9);
            cJSON_AddItemToArray(fits, e);
        }
    cJSON *arr = cJSON_AddArrayToObject(j, "rows");
    for (int i = 0; i < nr; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "mode", rows[i].mode ? "strong" : "weak");
        cJSON_AddNumberToObject(e, "ranks", rows[i].n);
        cJSON_AddNumberToObject(e, "batch_per_rank", rows[i].batch);
        cJSON_AddNumberToObject(e, "global_batch", rows[i].global);
        cJSON_AddNumberToObject(e, "threads_per_rank", rows[i].threads);
        cJSON_AddStringToObject(e, "kind", rows[i].measured ? "measured" : "projected");
        cJSON_AddNumberToObject(e, "samples_per_s", rows[i].sps);
        cJSON_AddNumberToObject(e, "step_ms", rows[i].step_ms);
        cJSON_AddNumberToObject(e, "speedup", speed[i]);
        cJSON_AddNumberToObject(e, "efficiency", eff[i]);
        cJSON_AddNumberToObject(e, "model_samples_per_s", rows[i].proj_sps);
        if (isfinite(rows[i].err)) cJSON_AddNumberToObject(e, "model_error", rows[i].err);
        cJSON_AddNumberToObject(e, "model_exposed_comm_ms", rows[i].proj_comm_ms);
        if (isfinite(rows[i].comm_ms)) cJSON_AddNumberToObject(e, "comm_wait_ms", rows[i].comm_ms);
        if (isfinite(rows[i].data_ms)) cJSON_AddNumberToObject(e, "data_wait_ms", rows[i].data_ms);
        cJSON *pj = cJSON_AddObjectToObject(e, "interconnects");
        for (int p = 0; p < 3; p++) {
            cJSON *q = cJSON_AddObjectToObject(pj, PRESETS[p].name);
            cJSON_AddNumberToObject(q, "samples_per_s", rows[i].preset_sps[p]);
            cJSON_AddNumberToObject(q, "exposed_comm_ms", rows[i].preset_comm_ms[p]);
        }
        cJSON_AddItemToArray(arr, e);
    }
    snprintf(path, sizeof path, "scaling_%s.json", stem);
    bench_write_json(dir, path, j, o->overwrite);

    char md[16384];
    size_t len = (size_t)snprintf(md, sizeof md,
                                  "# bench scaling: %s on %s\n\n| mode | ranks | batch/rank | global | kind | samples/s | "
                                  "speedup | efficiency | model | model error |\n|---|---|---|---|---|---|---|---|---|---|\n",
                                  stem, slug);
    for (int i = 0; i < nr && len < sizeof md - 400; i++) {
        char err[64];
        if (isfinite(rows[i].err)) snprintf(err, sizeof err, "%+.0f%%", 100 * rows[i].err);
        else snprintf(err, sizeof err, "- (up to %+.0f%% where measured)", 100 * worst_err);
        len += (size_t)snprintf(md + len, sizeof md - len, "| %s | %d | %d | %d | %s | %.2f | %.2fx | %.0f%% | %.2f | %s |\n",
                                rows[i].mode ? "strong" : "weak", rows[i].n, rows[i].batch, rows[i].global,
                                rows[i].measured ? "measured" : "projected", rows[i].sps, speed[i], 100 * eff[i],
                                rows[i].proj_sps, err);
    }
    len += (size_t)snprintf(md + len, sizeof md - len,
                            "\nModel error: projection / measurement - 1, where both exist; the worst at 2 ranks and "
                            "up: %+.0f%%. Load average before and after the runs: %.2f, %.2f. Interconnect for "
                            "counts beyond this machine: %s. Bucket-ready moments: %s. On CPU ranks, threads per rank "
                            "= cores / ranks (at least 1), and compute is stretched by the oversubscription where "
                            "ranks x threads exceed the %d cores. Chart: charts/scaling_%s.png and .svg, drawn by "
                            "bench/report/report.py (speedup and efficiency against ranks: measured, projected with "
                            "this link and with each interconnect preset, the ideal line and the seeds' claims). "
                            "Commit %s.\n",
                            100 * worst_err, load_before, load_after, inter,
                            gpu ? "estimated from FLOP shares" : "CPU host timestamps", cores, stem, commit);
    snprintf(path, sizeof path, "scaling_%s.md", stem);
    bench_write_text(dir, path, md, len, o->overwrite);
    const int drawn = draw_report(dir, tmp);
    snprintf(path, sizeof path, "%s/scaling_%s_tb", dir, stem);
    TbWriter *tw;
    if (tb_writer_open(&tw, path, NULL) == 0) {
        for (int i = 0; i < nr; i++) {
            char tag[96];
            const char *mode = rows[i].mode ? "strong" : "weak", *kind = rows[i].measured ? "measured" : "projected";
            snprintf(tag, sizeof tag, "scaling/%s/%s/samples_per_s", mode, kind);
            tb_writer_add_scalar(tw, tag, rows[i].n, rows[i].sps, 0);
            snprintf(tag, sizeof tag, "scaling/%s/%s/speedup", mode, kind);
            tb_writer_add_scalar(tw, tag, rows[i].n, speed[i], 0);
            snprintf(tag, sizeof tag, "scaling/%s/%s/efficiency", mode, kind);
            tb_writer_add_scalar(tw, tag, rows[i].n, eff[i], 0);
        }
        snprintf(path, sizeof path, "%s/charts/scaling_%s.png", dir, stem);
        if (drawn) tb_add_chart(tw, path);
        tb_writer_close(tw);
    }
    vx_log("written: %s/scaling_%s.{json,md}, scaling_%s_tb/%s\n", dir, stem, stem,
           drawn ? ", charts/ and index.html (bench/report/report.py)" : "");
    char rm[200];
    snprintf(rm, sizeof rm, "rm -rf %s", tmp);
    if (system(rm) != 0) vx_log("bench scaling: could not remove %s\n", tmp);
    for (int i = 0; i < nr; i++)
        if (rows[i].measured && !isfinite(rows[i].sps)) return VX_EXIT_FAIL;
    return 0;
}
