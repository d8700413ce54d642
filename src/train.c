/* train.c: the training loop (see train.h). One optimizer step:
 *   for each of grad_accum micro-batches: copy the loader's batch in, forward (noise stream = micro-batch index),
 *   loss and backward (loss gradient scaled by 1/grad_accum, parameter gradients accumulated after the first);
 *   then global gradient norm -> clip factor -> fused AdamW with the step's learning rate. */
#include "train.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"
#include "data.h"
#include "fsutil.h"
#include "runtime.h"
#include "schedule.h"
#include "tb/tb_writer.h"
#include "trace/gpu_activity.h"
#include "trace/trace.h"
#include "train_log.h"
#include "util.h"

#define VAL_SEED_SALT 0x7A11DA7Eull /* held-out volumes come from a different stream than training ones */

static volatile sig_atomic_t stop_requested = 0;
static void on_signal(int sig) {
    stop_requested = sig;
    tb_writer_flush_all_on_signal(); /* records so far are on disk even if a second signal kills us */
}

typedef struct {
    float l1, psnr;
} ValResult;

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

/* Validates after `step` optimizer steps and reports it on stdout and in metrics.jsonl. */
static void validate_and_log(Model *m, const float *val_host, int count, int64_t step, FILE *metrics, TrainLog *tb) {
    trace_range_push("validation", "user_annotation");
    ValResult vr = validate(m, val_host, count);
    trace_range_pop();
    train_log_scalar(tb, "val/l1", step, vr.l1);
    train_log_scalar(tb, "val/psnr", step, vr.psnr);
    vx_log("val  %5ld | l1 %.6f | psnr %.2f dB (%d held-out volumes%s)\n", (long)step, vr.l1, vr.psnr, count,
           step == 0 ? ", before training" : "");
    fprintf(metrics, "{\"step\": %ld, \"val_l1\": %.9g, \"val_psnr\": %.9g}\n", (long)step, vr.l1, vr.psnr);
    fflush(metrics);
}

static void format_eta(double seconds, char *out, size_t len) {
    long s = (long)(seconds + 0.5);
    if (s >= 3600) snprintf(out, len, "%ldh%02ldm", s / 3600, (s / 60) % 60);
    else if (s >= 60) snprintf(out, len, "%ldm%02lds", s / 60, s % 60);
    else snprintf(out, len, "%lds", s);
}

static void make_run_dir(Config *cfg, const char *config_name) {
    if (cfg->out_dir[0] == 0) {
        char stamp[32];
        time_t now = time(NULL);
        strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime(&now));
        snprintf(cfg->out_dir, sizeof cfg->out_dir, "runs/%s-%s", config_name, stamp);
    }
    char path[CONFIG_STR + 32];
    snprintf(path, sizeof path, "%s/checkpoints", cfg->out_dir);
    fs_mkdirs(path);
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
        const HwGpu *g = &rt->hw.gpus[0];
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

int train_run(Config *cfg, const char *config_name, const char *resume_path) {
    Runtime rt;
    runtime_open(&rt, cfg, 1);
    Model *m = rt.model;
    const Backend *be = rt.be;
    model_allocate(m);
    make_run_dir(cfg, config_name);
    char path[CONFIG_STR + 64];
    snprintf(path, sizeof path, "%s/config.json", cfg->out_dir);
    config_write(cfg, path);
    snprintf(path, sizeof path, "%s/metrics.jsonl", cfg->out_dir);
    FILE *metrics = fopen(path, "a");
    if (!metrics) vx_fatal("cannot open %s; check that the run directory is writable", path);
    TrainLog *tb = train_log_open(cfg);
    if (tb) vx_log("tensorboard: %s (tensorboard --logdir %s)\n", train_log_path(tb), cfg->out_dir);

    CkptState st = {0};
    model_init_params(m, (uint64_t)cfg->seed);
    if (resume_path) {
        ckpt_load(resume_path, m, &st);
        vx_log("resumed: %s at step %ld\n", resume_path, (long)st.step);
    }
    vx_log("run: %s (config written there), %d steps, batch %d x %d accumulation\n", cfg->out_dir, cfg->steps,
           cfg->batch_size, cfg->grad_accum);

    /* Held-out volumes: the validation set, whose first image_samples volumes are also the ones shown. */
    long vol = m->tensors[m->t_input].count / m->batch;
    int n_shown = cfg->image_every > 0 ? cfg->image_samples : 0;
    int n_held = cfg->val_samples > n_shown ? cfg->val_samples : n_shown;
    float *val = vx_malloc((size_t)(n_held ? n_held : 1) * vol * sizeof(float));
    phantom_batch((uint64_t)cfg->seed ^ VAL_SEED_SALT, cfg, n_held, 0, val);

    Loader loader;
    loader_start(&loader, cfg, m->batch, st.next_sample / m->batch, be);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);

    ProfileWindow prof = {0};
    if (cfg->profile[0]) config_profile_window(cfg, &prof.first, &prof.last);
    size_t batch_bytes = (size_t)m->tensors[m->t_input].count * sizeof(float);
    double t_start = vx_now(), ms_window = 0, wait_window = 0;
    long window_steps = 0;
    int exit_code = 0;
    if (st.step == 0) { /* the untrained baseline that later validations improve on */
        if (cfg->val_samples > 0) validate_and_log(m, val, cfg->val_samples, 0, metrics, tb);
        log_images(tb, m, cfg, val, n_shown, 0);
    }
    while (st.step < cfg->steps) {
        int64_t step1 = st.step + 1;
        profile_step_begin(&prof, cfg, &rt, step1);
        char step_name[40];
        snprintf(step_name, sizeof step_name, "ProfilerStep#%ld", (long)step1); /* PyTorch's name for a step */
        trace_range_push(step_name, "user_annotation");
        be->timer_mark(0); /* CUDA: an event on the compute stream; the step is timed on the device's clock */
        double lr = schedule_lr(cfg, st.step);
        double loss = 0, recon = 0, kl = 0;
        double wait_before = loader.wait_seconds;
        for (int micro = 0; micro < cfg->grad_accum; micro++) {
            trace_range_push("data wait", "dataloader");
            const float *batch = loader_next(&loader);
            trace_range_pop();
            trace_range_push("upload batch", "user_annotation");
            be->upload_async(model_tensor(m, m->t_input), batch, batch_bytes); /* pinned slot, copy stream */
            trace_range_pop();
            /* The noise of micro-batch k is stream k: independent of where a run was resumed. */
            model_forward(m, 1, (uint64_t)(st.next_sample / m->batch));
            model_backward(m, 1.0f / (float)cfg->grad_accum, micro == 0 ? 0.0f : 1.0f);
            Losses l = model_read_losses(m); /* waits for this micro-batch's device work */
            be->upload_wait();
            loader_release(&loader); /* only now may the loader refill the slot */
            loss += l.total / cfg->grad_accum;
            recon += l.recon / cfg->grad_accum;
            kl += l.kl / cfg->grad_accum;
            st.next_sample += m->batch;
        }
        wait_window += loader.wait_seconds - wait_before;
        if (!isfinite(loss)) {
            train_log_close(tb, 1);
            vx_fatal("loss became %g at step %ld; lower train.lr or set train.grad_clip", loss, (long)step1);
        }
        trace_range_push("optimizer", "optimizer");
        double gnorm = sqrt(model_grad_sumsq(m));
        float clip = 1.0f;
        if (cfg->grad_clip > 0 && gnorm > cfg->grad_clip) clip = (float)(cfg->grad_clip / (gnorm + 1e-6));
        AdamWParams a = {.lr = (float)lr, .beta1 = (float)cfg->beta1, .beta2 = (float)cfg->beta2,
                         .eps = (float)cfg->adam_eps, .weight_decay = (float)cfg->weight_decay, .grad_scale = clip,
                         .step = step1};
        be->adamw(m->param_floats, m->param, m->grad, m->adam_m, m->adam_v, &a);
        be->timer_mark(1);
        ms_window += be->timer_elapsed_ms(0, 1); /* waits for the device: the step range covers its work */
        trace_range_pop();
        trace_range_pop(); /* ProfilerStep */
        st.step++;
        window_steps++;
        st.loss_ema = st.step == 1 ? loss : 0.9 * st.loss_ema + 0.1 * loss;

        int last = st.step == cfg->steps;
        if (st.step % cfg->log_every == 0 || last) {
            double dt = ms_window / 1e3 / window_steps;
            double sps = (double)m->batch * cfg->grad_accum / dt, wait_ms = wait_window * 1e3 / window_steps;
            char eta[32];
            format_eta(dt * (cfg->steps - st.step), eta, sizeof eta);
            vx_log("step %5ld/%d | loss %.6f (recon %.6f kl %.3f) | lr %.3e | grad norm %.4f | %.2f samples/s | "
                   "%.0f ms/step | data wait %.1f ms | eta %s\n",
                   (long)st.step, cfg->steps, loss, recon, kl, lr, gnorm, sps, dt * 1e3, wait_ms, eta);
            /* metrics.jsonl and TensorBoard get the same float32 values (9 digits print a float32 exactly). */
            static const char *const KEYS[] = {"loss", "recon", "kl", "lr", "grad_norm", "samples_per_s", "step_ms",
                                               "data_wait_ms", "peak_mib"};
            static const char *const TAGS[] = {"train/loss", "train/recon", "train/kl", "lr", "grad_norm",
                                               "perf/samples_per_s", "perf/step_ms", "perf/data_wait_ms",
                                               "memory/peak_mib"};
            float values[] = {(float)loss, (float)recon, (float)kl, (float)lr, (float)gnorm, (float)sps,
                              (float)(dt * 1e3), (float)wait_ms, (float)(be->peak_bytes() / 1048576.0)};
            fprintf(metrics, "{\"step\": %ld", (long)st.step);
            for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
                fprintf(metrics, ", \"%s\": %.9g", KEYS[i], values[i]);
                train_log_scalar(tb, TAGS[i], st.step, values[i]);
            }
            fprintf(metrics, "}\n");
            fflush(metrics);
            ms_window = 0;
            wait_window = 0;
            window_steps = 0;
        }
        /* Validation, images, histograms, checkpoints and trace writing happen between the timer marks, so they
         * stay out of the step time. */
        if (cfg->val_samples > 0 && (every(cfg->val_every, st.step) || last))
            validate_and_log(m, val, cfg->val_samples, st.step, metrics, tb);
        if (every(cfg->image_every, st.step)) log_images(tb, m, cfg, val, n_shown, st.step);
        if (tb && every(cfg->hist_every, st.step)) train_log_histograms(tb, m, st.step);
        if (every(cfg->ckpt_every, st.step) || last) save_checkpoint(cfg, m, &st);
        profile_step_end(&prof, be, st.step, 0);
        if (stop_requested && !last) {
            vx_log("stopping on signal %d after step %ld\n", (int)stop_requested, (long)st.step);
            if (!every(cfg->ckpt_every, st.step)) save_checkpoint(cfg, m, &st);
            exit_code = 130;
            break;
        }
    }
    profile_step_end(&prof, be, st.step, 1);
    double total = vx_now() - t_start;
    vx_log("done: %ld steps in %.1f s\n", (long)st.step, total);
    loader_stop(&loader);
    train_log_close(tb, 0);
    fclose(metrics);
    free(val);
    runtime_close(&rt);
    return exit_code;
}
