/* train.c: the training loop (see train.h). A run first validates everything (config, device, memory plan,
 * checkpoint), then takes the run directory (run_dir.h), then writes there: a refused run touches nothing.
 * One optimizer step (train_step), on each of W data-parallel ranks (W = 1 for one process):
 *   for each of grad_accum micro-batches: copy the loader's batch in (rank r reads part r of the global micro-batch:
 *   samples next_sample + r*batch ..), forward (each sample's noise keyed by its global index), loss and backward
 *   (loss gradient scaled by 1/(grad_accum x W), parameter gradients accumulated after the first); during the last
 *   backward every gradient bucket is all-reduced (summed) as soon as it is complete (dist/buckets.h); then the
 *   optimizer waits for what is in flight, and the global gradient norm -> clip factor -> fused AdamW run on the
 *   reduced gradients, identically on every rank. The losses are averaged over ranks and a stop request shared, so
 *   every rank takes the same decisions. A non-finite loss or gradient norm ends the run (exit 4) before anything is
 *   updated or saved. Rank 0 alone writes the run directory, validates and logs. */
#include "train/train.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/fsutil.h"
#include "core/util.h"
#include "data/data.h"
#include "dist/buckets.h"
#include "dist/comm.h"
#include "dist/launch.h"
#include "model/ckpt.h"
#include "tb/tb_writer.h"
#include "trace/gpu_activity.h"
#include "trace/trace.h"
#include "train/run_dir.h"
#include "train/runtime.h"
#include "train/schedule.h"
#include "train/train_log.h"

#define VAL_SEED_SALT 0x7A11DA7Eull /* held-out volumes come from a different stream than training ones */

static volatile sig_atomic_t stop_requested = 0;
static void on_signal(int sig) {
    stop_requested = sig;
    tb_writer_flush_all_on_signal(); /* records so far are on disk even if a second signal kills us */
}

typedef struct {
    float l1, psnr;
} ValResult;

/* Everything one run holds between its steps. */
typedef struct {
    Config *cfg;
    Runtime rt;
    Model *m;
    const Backend *be;
    Loader loader;
    FILE *metrics;
    FILE *samples; /* output.sample_log: one line per micro-batch, the global samples it read */
    TrainLog *tb;
    CkptState st;
    float *val; /* the held-out volumes: validation set, the first n_shown of them also shown as images */
    int n_shown, n_held;
    DistEnv env;
    Comm *comm;        /* single for one process */
    Buckets *buckets;  /* NULL for one process */
    double lr_scale;   /* train.lr_scaling's factor for this number of ranks */
} Trainer;

/* Deterministic forward (z = mu) of `count` host volumes in micro-batches of the model's size; returns their
 * reconstructions (host, same shape as vols; caller frees). */
static float *reconstruct(Model *m, const float *vols, int count) {
    long per_batch = m->tensors[m->t_input].count, vol = per_batch / m->batch;
    float *recon = vx_malloc((size_t)count * vol * sizeof(float));
    float *batch = vx_calloc((size_t)per_batch, sizeof(float));
    float *out = vx_malloc((size_t)per_batch * sizeof(float));
    for (int start = 0; start < count; start += m->batch) {
        int used = count - start < m->batch ? count - start : m->batch;
        memcpy(batch, vols + (long)start * vol, (size_t)used * vol * sizeof(float));
        m->be->copy_to_device(model_tensor(m, m->t_input), batch, (size_t)per_batch * sizeof(float));
        model_forward(m, 0, 0);
        m->be->copy_to_host(out, model_tensor(m, m->t_recon), (size_t)per_batch * sizeof(float));
        memcpy(recon + (long)start * vol, out, (size_t)used * vol * sizeof(float));
    }
    free(out);
    free(batch);
    return recon;
}

/* Validation: L1 and PSNR of the reconstructions of the held-out volumes. */
static ValResult validate(Model *m, const float *val_host, int count) {
    long n = count * (m->tensors[m->t_input].count / m->batch);
    float *recon = reconstruct(m, val_host, count);
    double l1 = 0, se = 0;
    for (long i = 0; i < n; i++) {
        double d = (double)recon[i] - (double)val_host[i];
        l1 += fabs(d);
        se += d * d;
    }
    free(recon);
    double mse = se / (double)n;
    /* PSNR against a peak of 1.0: the phantoms' intensities live in [0, 1] up to noise. */
    return (ValResult){.l1 = (float)(l1 / (double)n), .psnr = (float)(10.0 * log10(1.0 / (mse > 1e-20 ? mse : 1e-20)))};
}

__attribute__((noreturn)) static void diverged(Trainer *t, int64_t step1, const char *what, double value);

/* Validates after `step` optimizer steps and reports it on stdout and in metrics.jsonl. */
static void validate_and_log(Trainer *t, int64_t step) {
    trace_range_push("validation", "user_annotation");
    ValResult vr = validate(t->m, t->val, t->cfg->val_samples);
    trace_range_pop();
    if (!isfinite(vr.l1)) diverged(t, step, "the validation L1", vr.l1);
    train_log_scalar(t->tb, "val/l1", step, vr.l1);
    train_log_scalar(t->tb, "val/psnr", step, vr.psnr);
    vx_log("val  %5ld | l1 %.6f | psnr %.2f dB (%d held-out volumes%s)\n", (long)step, vr.l1, vr.psnr,
           t->cfg->val_samples, step == 0 ? ", before training" : "");
    fprintf(t->metrics, "{\"step\": %ld, \"val_l1\": %.9g, \"val_psnr\": %.9g}\n", (long)step, vr.l1, vr.psnr);
    if (fflush(t->metrics) != 0) fs_write_failed("write", "metrics.jsonl in the run directory", errno);
}

static void format_eta(double seconds, char *out, size_t len) {
    long s = (long)(seconds + 0.5);
    if (s >= 3600) snprintf(out, len, "%ldh%02ldm", s / 3600, (s / 60) % 60);
    else if (s >= 60) snprintf(out, len, "%ldm%02lds", s / 60, s % 60);
    else snprintf(out, len, "%lds", s);
}

static void save_checkpoint(const Config *cfg, const Model *m, const CkptState *st) {
    char path[CONFIG_STR + 64];
    snprintf(path, sizeof path, "%s/checkpoints/step_%ld.ckpt", cfg->out_dir, (long)st->step);
    ckpt_save(path, m, st);
    vx_log("checkpoint: %s\n", path);
}

/* The optional profiler window (output.profile): trace steps [first, last], 1-based. */
typedef struct {
    int first, last, active, gpu; /* gpu: CUPTI is recording kernels, copies and memsets */
} ProfileWindow;

static void profile_step_begin(ProfileWindow *p, const Config *cfg, const Runtime *rt, int64_t step1) {
    if (p->active || step1 < p->first || step1 > p->last) return;
    if (trace_begin(cfg->out_dir, 0) != TRACE_OK) vx_fatal("cannot start the profiler trace");
    trace_set_thread_name("train");
    if (strcmp(rt->be->name, "cuda") == 0) {
        const HwGpu *g = &rt->hw.gpus[rt->hw.gpu];
        TraceDevice dev = {.id = 0, .name = g->name, .total_global_mem = g->total_bytes,
                           .compute_major = g->cc_major, .compute_minor = g->cc_minor, .num_sms = g->sms,
                           .warp_size = g->warp_size, .max_threads_per_block = g->max_threads_per_block,
                           .shared_mem_per_block = g->shared_mem_per_block};
        trace_add_device(&dev);
        char why[256];
        p->gpu = trace_gpu_begin(0, why, sizeof why);
        if (!p->gpu) vx_log("profile: GPU activity not recorded (%s); the trace has the host side only\n", why);
    }
    p->active = 1;
    vx_log("profile: recording steps %d..%d\n", p->first, p->last);
}

static void profile_step_end(ProfileWindow *p, const Backend *be, int64_t step1, int force) {
    if (!p->active || (step1 < p->last && !force)) return;
    if (p->gpu) {
        be->synchronize(); /* unfinished kernels have no end time */
        trace_gpu_end();
        p->gpu = 0;
    }
    trace_end();
    p->active = 0;
    vx_log("profile: trace written to %s (open it in ui.perfetto.dev or chrome://tracing)\n", trace_last_file());
}

/* Mid-slice images of the first held-out volumes and their reconstructions. */
static void log_images(TrainLog *tb, Model *m, const Config *cfg, const float *vols, int count, int64_t step) {
    if (!tb || count == 0) return;
    trace_range_push("tensorboard images", "user_annotation");
    float *recon = reconstruct(m, vols, count);
    train_log_images(tb, cfg, vols, recon, count, step);
    free(recon);
    trace_range_pop();
}

static int every(int interval, int64_t step) { return interval > 0 && step % interval == 0; }

typedef struct {
    double loss, recon, kl, lr, gnorm, ms, wait_s;
    double comm_wait_ms; /* how long the optimizer waited for the gradient buckets still in flight */
    int stop;            /* a rank was asked to stop (SIGINT/SIGTERM): every rank stops after this step */
} StepResult;

/* A non-finite value: the run ends with exit 4 before the step's update, so the last checkpoint is the last good
 * state (ckpt_save refuses non-finite parameters, should any ever get there). */
__attribute__((noreturn)) static void diverged(Trainer *t, int64_t step1, const char *what, double value) {
    train_log_close(t->tb, 1);
    if (t->metrics) fflush(t->metrics);
    vx_exit_error(VX_EXIT_DIVERGED, "training diverged at step %lld: %s is %g; no checkpoint is written for it (the "
                  "last one stays); lower train.lr, set train.grad_clip, or check the data", (long long)step1, what,
                  value);
}

/* The bucket all-reduces of the step on the trace (rank 0's, CPU communicators: NCCL's kernels come through
 * CUPTI), on a track of their own, so their overlap with backward shows. */
static void trace_buckets(const Buckets *bk) {
    if (!bk || !trace_is_active()) return;
    const int64_t track = 1000000 + getpid();
    trace_set_track_name(getpid(), track, "gradient all-reduce");
    for (int i = 0; i < bk->n; i++) {
        const CommTimes *c = &bk->b[i].times;
        if (c->start_ns == 0 || c->end_ns < c->start_ns) continue;
        char args[96];
        snprintf(args, sizeof args, "\"bucket\": %d, \"bytes\": %ld", i + 1, (bk->b[i].end - bk->b[i].begin) * 4L);
        trace_add_complete_args("allreduce", "comm", trace_us_at(c->start_ns), (c->end_ns - c->start_ns) / 1e3,
                                getpid(), track, -1, args);
    }
}

/* One optimizer step (see the file comment); advances t->st. */
static void train_step(Trainer *t, StepResult *r) {
    Model *m = t->m;
    const Backend *be = t->be;
    const Config *cfg = t->cfg;
    const int world = t->comm->world, rank = t->comm->rank;
    const int64_t step1 = t->st.step + 1;
    const size_t batch_bytes = (size_t)m->tensors[m->t_input].count * sizeof(float);
    be->timer_mark(0); /* CUDA: an event on the compute stream; the step is timed on the device's clock */
    *r = (StepResult){.lr = schedule_lr(cfg, t->st.step) * t->lr_scale};
    const double wait_before = t->loader.wait_seconds;
    for (int micro = 0; micro < cfg->grad_accum; micro++) {
        trace_range_push("data wait", "dataloader");
        const float *batch = loader_next(&t->loader);
        trace_range_pop();
        trace_range_push("upload batch", "user_annotation");
        be->upload_async(model_tensor(m, m->t_input), batch, batch_bytes); /* pinned slot, copy stream */
        trace_range_pop();
        const int64_t first = t->st.next_sample + (int64_t)rank * m->batch; /* this rank's part */
        if (t->samples) fprintf(t->samples, "%lld\t%d\t%lld\t%d\n", (long long)step1, micro, (long long)first, m->batch);
        model_forward(m, 1, (uint64_t)first);
        const int reduce = t->buckets && micro == cfg->grad_accum - 1; /* accumulate locally, reduce once */
        if (reduce) {
            buckets_begin(t->buckets, step1);
            m->backward_hook = buckets_backward_hook;
            m->backward_hook_ctx = t->buckets;
        }
        model_backward(m, 1.0f / (float)(cfg->grad_accum * world), micro == 0 ? 0.0f : 1.0f);
        m->backward_hook = NULL;
        Losses l = model_read_losses(m); /* waits for this micro-batch's device work */
        be->upload_wait();
        loader_release(&t->loader); /* only now may the loader refill the slot */
        r->loss += l.total / cfg->grad_accum;
        r->recon += l.recon / cfg->grad_accum;
        r->kl += l.kl / cfg->grad_accum;
        t->st.next_sample += (int64_t)m->batch * world;
    }
    r->wait_s = t->loader.wait_seconds - wait_before;
    /* the optimizer waits for the buckets still in flight: on a GPU the compute stream does, between the marks */
    be->timer_mark(2);
    if (t->buckets) buckets_wait(t->buckets);
    be->timer_mark(3);
    r->comm_wait_ms = be->timer_elapsed_ms(2, 3);
    trace_buckets(t->buckets);
    /* every rank decides on the same numbers: the mean loss over ranks, and whether any rank must stop */
    float g[4] = {(float)r->loss, (float)r->recon, (float)r->kl, stop_requested ? 1.0f : 0.0f};
    if (t->buckets) { /* a communicator is running (always, with several ranks) */
        comm_allreduce_host(t->comm, g, 4, COMM_SUM, "the step's losses");
        for (int i = 0; i < 3; i++) g[i] /= (float)world;
    }
    r->loss = g[0];
    r->recon = g[1];
    r->kl = g[2];
    r->stop = g[3] > 0;
    if (!isfinite(r->loss)) diverged(t, step1, "the loss", r->loss);
    trace_range_push("optimizer", "optimizer");
    r->gnorm = sqrt(model_grad_sumsq(m)); /* of the reduced gradients: the same on every rank */
    if (!isfinite(r->gnorm)) diverged(t, step1, "the gradient norm", r->gnorm);
    float clip = 1.0f;
    if (cfg->grad_clip > 0 && r->gnorm > cfg->grad_clip) clip = (float)(cfg->grad_clip / (r->gnorm + 1e-6));
    AdamWParams a = {.lr = r->lr, .beta1 = cfg->beta1, .beta2 = cfg->beta2, .eps = cfg->adam_eps,
                     .weight_decay = cfg->weight_decay, .grad_scale = clip, .step = step1};
    be->adamw(m->param_floats, m->param, m->grad, m->adam_m, m->adam_v, &a);
    be->timer_mark(1);
    r->ms = be->timer_elapsed_ms(0, 1); /* waits for the device: the step range covers its work */
    trace_range_pop();
    t->st.step++;
    t->st.loss_ema = t->st.step == 1 ? r->loss : 0.9 * t->st.loss_ema + 0.1 * r->loss;
}

/* ---- the memory plan ---------------------------------------------------------------------------------------- */

typedef struct {
    const char *what, *lower; /* the buffer, and the config keys that shrink it */
    double bytes;
} HostItem;

/* Every large host buffer of a run, so that a run that cannot fit is refused before it starts, not OOM-killed. */
static int host_plan(const Runtime *rt, const Config *cfg, HostItem *items) {
    const Model *m = rt->model;
    const double vol = (double)(m->tensors[m->t_input].count / m->batch) * sizeof(float);
    const int n_shown = cfg->image_every > 0 ? cfg->image_samples : 0;
    const int n_held = cfg->val_samples > n_shown ? cfg->val_samples : n_shown;
    const double ckpt = (double)ckpt_file_bytes((uint64_t)m->param_count);
    const double hist = 3.0 * (double)m->param_floats * sizeof(float);
    int n = 0;
    if (strcmp(rt->be->name, "cpu") == 0)
        items[n++] = (HostItem){"model (activations, parameters, gradients, AdamW state)",
                                "train.batch_size or model.input_size", (double)model_device_bytes(m)};
    /* the volumes, their reconstructions, and one batch in and out */
    items[n++] = (HostItem){"held-out volumes", "train.val_samples",
                            2.0 * n_held * vol + 2.0 * m->batch * vol};
    items[n++] = (HostItem){"data loader", "data.prefetch or train.batch_size", (double)cfg->prefetch * m->batch * vol};
    items[n++] = (HostItem){"checkpoint and histogram copies", "model.channels", ckpt > hist ? ckpt : hist};
    return n;
}

void train_check_memory(const Runtime *rt, const Config *cfg, int ranks_here, int verbose) {
    HostItem items[4];
    const int n = host_plan(rt, cfg, items);
    double total = 0;
    int largest = 0;
    char parts[512] = "";
    for (int i = 0; i < n; i++) {
        items[i].bytes *= ranks_here; /* every rank of this machine holds its own */
        total += items[i].bytes;
        if (items[i].bytes > items[largest].bytes) largest = i;
        const size_t used = strlen(parts);
        snprintf(parts + used, sizeof parts - used, "%s%s %.1f MiB", i ? ", " : "", items[i].what,
                 items[i].bytes / 1048576.0);
    }
    const double have = HW_MEMORY_SHARE * (double)rt->hw.ram_available;
    if (verbose)
        vx_log("host memory: %.1f MiB planned (%s)%s\n", total / 1048576.0, parts,
               ranks_here > 1 ? ", for all ranks of this machine" : "");
    if (total > have)
        vx_exit_error(VX_EXIT_MEMORY, "the run plans %.2f GiB of host memory (%s), more than %.0f%% of the %.2f GiB "
                      "available (%.2f GiB); lower %s", total / 1073741824.0, parts, 100 * HW_MEMORY_SHARE,
                      rt->hw.ram_available / 1073741824.0, have / 1073741824.0, items[largest].lower);
}

/* ---- the run ------------------------------------------------------------------------------------------------ */

/* The progress line, metrics.jsonl and TensorBoard for the steps since the last log line. */
static void log_progress(Trainer *t, const StepResult *r, double ms_window, double wait_window, double comm_window,
                         long window_steps) {
    const Config *cfg = t->cfg;
    const double dt = ms_window / 1e3 / window_steps;
    const double sps = (double)t->m->batch * cfg->grad_accum * t->comm->world / dt; /* global samples/s */
    const double wait_ms = wait_window * 1e3 / window_steps, comm_ms = comm_window / window_steps;
    char eta[32];
    format_eta(dt * (cfg->steps - t->st.step), eta, sizeof eta);
    char comm[48] = "";
    if (t->comm->world > 1) snprintf(comm, sizeof comm, " | comm wait %.1f ms", comm_ms);
    vx_log("step %5ld/%d | loss %.6f (recon %.6f kl %.3f) | lr %.3e | grad norm %.4f | %.2f samples/s | "
           "%.0f ms/step | data wait %.1f ms%s | eta %s\n",
           (long)t->st.step, cfg->steps, r->loss, r->recon, r->kl, r->lr, r->gnorm, sps, dt * 1e3, wait_ms, comm, eta);
    /* metrics.jsonl and TensorBoard get the same float32 values (9 digits print a float32 exactly). */
    static const char *const KEYS[] = {"loss", "recon", "kl", "lr", "grad_norm", "samples_per_s", "step_ms",
                                       "data_wait_ms", "comm_wait_ms", "peak_mib"};
    static const char *const TAGS[] = {"train/loss", "train/recon", "train/kl", "lr", "grad_norm",
                                       "perf/samples_per_s", "perf/step_ms", "perf/data_wait_ms", "perf/comm_wait_ms",
                                       "memory/peak_mib"};
    const float values[] = {(float)r->loss, (float)r->recon, (float)r->kl, (float)r->lr, (float)r->gnorm,
                            (float)sps, (float)(dt * 1e3), (float)wait_ms, (float)comm_ms,
                            (float)(t->be->peak_bytes() / 1048576.0)};
    fprintf(t->metrics, "{\"step\": %ld", (long)t->st.step);
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        fprintf(t->metrics, ", \"%s\": %.9g", KEYS[i], values[i]);
        train_log_scalar(t->tb, TAGS[i], t->st.step, values[i]);
    }
    fprintf(t->metrics, "}\n");
    if (fflush(t->metrics) != 0) fs_write_failed("write", "metrics.jsonl in the run directory", errno);
}

/* Opens a file of the run directory for appending, or ends the run (exit 6) saying why. */
static FILE *open_run_file(const Config *cfg, const char *name) {
    char path[CONFIG_STR + 64];
    snprintf(path, sizeof path, "%s/%s", cfg->out_dir, name);
    FILE *f = fopen(path, "a");
    if (!f) fs_write_failed("open", path, errno);
    return f;
}

double train_plan_ranks(Config *cfg, int world) {
    if (cfg->global_batch > 0) {
        const long per = (long)world * cfg->grad_accum;
        if (cfg->global_batch % per != 0)
            vx_usage_error("train.global_batch = %d cannot be split into %d rank(s) x %d micro-batches "
                           "(train.grad_accum); choose a multiple of %ld", cfg->global_batch, world, cfg->grad_accum,
                           per);
        cfg->batch_size = (int)(cfg->global_batch / per);
        return 1.0;
    }
    if (strcmp(cfg->lr_scaling, "linear") == 0) return world;
    if (strcmp(cfg->lr_scaling, "sqrt") == 0) return sqrt((double)world);
    return 1.0;
}

/* Validates everything (device, model and memory plan, the checkpoint), then rank 0 takes the run directory and
 * writes there; then the ranks meet, and start from rank 0's parameters. */
static void open_run(Trainer *t, const char *config_name, const char *resume_path) {
    Config *cfg = t->cfg;
    dist_detect(&t->env);
    const int world = t->env.world, rank = t->env.rank, rank0 = rank == 0;
    if (world > 1) {
        char prefix[48];
        snprintf(prefix, sizeof prefix, "rank %d/%d: ", rank, world);
        vx_set_error_prefix(prefix);
        vx_log_rank = rank;
    }
    t->lr_scale = train_plan_ranks(cfg, world);
    runtime_open_rank(&t->rt, cfg, 1, t->env.local_rank, t->env.local_world);
    t->m = t->rt.model;
    t->be = t->rt.be;
    train_check_memory(&t->rt, cfg, t->env.local_world, 1);
    Ckpt ck = {0};
    if (resume_path) ckpt_read(resume_path, t->m, &ck);
    if (rank0) {
        run_dir_take(cfg, config_name, resume_path != NULL);
        char path[CONFIG_STR + 64];
        snprintf(path, sizeof path, "%s/config.json", cfg->out_dir);
        config_write(cfg, path);
        t->metrics = open_run_file(cfg, "metrics.jsonl");
        t->tb = train_log_open(cfg);
        if (t->tb) vx_log("tensorboard: %s (tensorboard --logdir %s)\n", train_log_path(t->tb), cfg->out_dir);
    }
    if (cfg->sample_log && cfg->out_dir[0]) { /* every rank logs what it reads: samples.tsv, samples.rank1.tsv, ... */
        char name[48];
        snprintf(name, sizeof name, rank0 ? "samples.tsv" : "samples.rank%d.tsv", rank);
        t->samples = open_run_file(cfg, name);
    }
    t->comm = comm_open(&t->env, strcmp(t->be->name, "cuda") == 0, cfg->dist_timeout_s);
    /* a rank that refused to start (rank 0's directory busy, say) ends the run here, not in the first bucket */
    comm_wait(t->comm, comm_barrier(t->comm, "the start of the run"), NULL);
    Model *m = t->m;
    model_allocate(m);
    model_init_params(m, (uint64_t)cfg->seed);
    if (resume_path) {
        ckpt_apply(&ck, m, &t->st);
        ckpt_free(&ck);
        vx_log("resumed: %s at step %ld, sample %lld\n", resume_path, (long)t->st.step, (long long)t->st.next_sample);
    }
    t->st.world_size = world;
    if (strcmp(t->comm->name, "single") != 0) { /* (VX_COMM runs a communicator for one rank too) */
        char who[160];
        dist_describe(&t->env, who, sizeof who);
        vx_log("ranks: %s, %s communicator; batch %d per rank x %d ranks x %d accumulation = %ld samples per step; "
               "lr x %.3g (train.lr_scaling %s%s)\n", who, t->comm->name, cfg->batch_size, world, cfg->grad_accum,
               (long)cfg->batch_size * world * cfg->grad_accum, t->lr_scale, cfg->lr_scaling,
               cfg->global_batch ? ", not applied with train.global_batch" : "");
        /* every rank starts from rank 0's state, whatever it initialised or read */
        float *const state[3] = {m->param, m->adam_m, m->adam_v};
        static const char *const NAME[3] = {"the parameters", "AdamW's first moments", "AdamW's second moments"};
        for (int k = 0; k < 3; k++)
            comm_wait(t->comm, comm_broadcast(t->comm, state[k], (size_t)m->param_floats, 0, NAME[k]), NULL);
        GradSpan *spans = vx_malloc((size_t)m->n_params * sizeof *spans);
        for (int i = 0; i < m->n_params; i++) spans[i] = (GradSpan){m->params[i].offset, m->params[i].count, -1};
        for (int i = 0; i < m->n_nodes; i++) /* the node whose backward writes each parameter's gradient */
            for (int k = 0; k < 2; k++) {
                const int p = k == 0 ? m->nodes[i].weight : m->nodes[i].bias;
                if (p >= 0) spans[p].step = i;
            }
        t->buckets = buckets_plan(spans, m->n_params, m->grad, t->comm, cfg->bucket_mb, cfg->first_bucket_mb);
        free(spans);
        vx_log("buckets: %d gradient buckets of up to %g MB (the first up to %g MB), all-reduced during backward\n",
               t->buckets->n, cfg->bucket_mb, cfg->first_bucket_mb);
    }
    vx_log("run: %s (config written there), %d steps, batch %d x %d accumulation\n", cfg->out_dir, cfg->steps,
           cfg->batch_size, cfg->grad_accum);
}

int train_run(Config *cfg, const char *config_name, const char *resume_path) {
    Trainer t = {.cfg = cfg};
    open_run(&t, config_name, resume_path);
    Model *m = t.m;
    const Backend *be = t.be;
    const int rank0 = t.comm->rank == 0;

    /* Held-out volumes (rank 0 validates): the validation set, whose first image_samples are also shown. */
    long vol = m->tensors[m->t_input].count / m->batch;
    t.n_shown = cfg->image_every > 0 ? cfg->image_samples : 0;
    t.n_held = rank0 ? (cfg->val_samples > t.n_shown ? cfg->val_samples : t.n_shown) : 0;
    t.val = vx_malloc((size_t)(t.n_held ? t.n_held : 1) * vol * sizeof(float));
    phantom_batch((uint64_t)cfg->seed ^ VAL_SEED_SALT, cfg, t.n_held, 0, t.val);

    const int64_t micro_global = (int64_t)m->batch * t.comm->world;
    loader_start(&t.loader, cfg, m->batch, t.st.next_sample + (int64_t)t.comm->rank * m->batch, micro_global, be);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);

    ProfileWindow prof = {0};
    if (cfg->profile[0] && rank0) config_profile_window(cfg, &prof.first, &prof.last); /* rank 0's trace */
    double t_start = vx_now(), ms_window = 0, wait_window = 0, comm_window = 0;
    long window_steps = 0;
    int exit_code = 0;
    if (t.st.step == 0 && rank0) { /* the untrained baseline that later validations improve on */
        if (cfg->val_samples > 0) validate_and_log(&t, 0);
        log_images(t.tb, m, cfg, t.val, t.n_shown, 0);
    }
    while (t.st.step < cfg->steps) {
        const int64_t step1 = t.st.step + 1;
        profile_step_begin(&prof, cfg, &t.rt, step1);
        char step_name[40];
        snprintf(step_name, sizeof step_name, "ProfilerStep#%ld", (long)step1); /* PyTorch's name for a step */
        trace_range_push(step_name, "user_annotation");
        StepResult r;
        train_step(&t, &r);
        trace_range_pop(); /* ProfilerStep */
        ms_window += r.ms;
        wait_window += r.wait_s;
        comm_window += r.comm_wait_ms;
        window_steps++;

        const int last = t.st.step == cfg->steps;
        if (rank0 && (t.st.step % cfg->log_every == 0 || last))
            log_progress(&t, &r, ms_window, wait_window, comm_window, window_steps);
        if (t.st.step % cfg->log_every == 0 || last) {
            ms_window = wait_window = comm_window = 0;
            window_steps = 0;
        }
        /* Validation, images, histograms, checkpoints and trace writing happen between the timer marks, so they
         * stay out of the step time; they are rank 0's, and none holds a collective. */
        if (rank0) {
            if (cfg->val_samples > 0 && (every(cfg->val_every, t.st.step) || last)) validate_and_log(&t, t.st.step);
            if (every(cfg->image_every, t.st.step)) log_images(t.tb, m, cfg, t.val, t.n_shown, t.st.step);
            if (t.tb && every(cfg->hist_every, t.st.step)) train_log_histograms(t.tb, m, t.st.step);
            if (every(cfg->ckpt_every, t.st.step) || last) save_checkpoint(cfg, m, &t.st);
        }
        profile_step_end(&prof, be, t.st.step, 0);
        if (r.stop && !last) { /* every rank saw the same flag in the step's all-reduce */
            vx_log("stopping on signal %d after step %ld\n", stop_requested ? (int)stop_requested : SIGTERM,
                   (long)t.st.step);
            if (rank0 && !every(cfg->ckpt_every, t.st.step)) save_checkpoint(cfg, m, &t.st);
            exit_code = VX_EXIT_SIGNAL;
            break;
        }
    }
    profile_step_end(&prof, be, t.st.step, 1);
    double total = vx_now() - t_start;
    vx_log("done: %ld steps in %.1f s\n", (long)t.st.step, total);
    /* nobody leaves while a rank still writes: the others would see it vanish */
    comm_wait(t.comm, comm_barrier(t.comm, "the end of the run"), NULL);
    loader_stop(&t.loader);
    train_log_close(t.tb, 0);
    if (t.metrics && fclose(t.metrics) != 0) fs_write_failed("write", "metrics.jsonl in the run directory", errno);
    if (t.samples && fclose(t.samples) != 0) fs_write_failed("write", "samples.tsv in the run directory", errno);
    buckets_free(t.buckets);
    comm_close(t.comm);
    free(t.val);
    runtime_close(&t.rt);
    return exit_code;
}
