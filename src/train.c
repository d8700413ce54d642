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
#include "util.h"

#define VAL_SEED_SALT 0x7A11DA7Eull /* held-out volumes come from a different stream than training ones */

static volatile sig_atomic_t stop_requested = 0;
static void on_signal(int sig) { stop_requested = sig; }

typedef struct {
    float l1, psnr;
} ValResult;

/* Validation: deterministic forward (z = mu) over the held-out volumes, in micro-batches of the model's size. */
static ValResult validate(Model *m, const float *val_host, int count) {
    Tensor *in = &m->tensors[m->t_input];
    long per_batch = in->count;
    long vol = per_batch / m->batch;
    double l1 = 0, se = 0;
    long n = 0;
    float *recon = vx_malloc((size_t)per_batch * sizeof(float));
    float *batch = vx_calloc((size_t)per_batch, sizeof(float));
    for (int start = 0; start < count; start += m->batch) {
        int used = count - start < m->batch ? count - start : m->batch;
        memcpy(batch, val_host + (long)start * vol, (size_t)used * vol * sizeof(float));
        m->be->copy_to_device(model_tensor(m, m->t_input), batch, (size_t)per_batch * sizeof(float));
        model_forward(m, 0, 0);
        m->be->copy_to_host(recon, model_tensor(m, m->t_recon), (size_t)per_batch * sizeof(float));
        for (long i = 0; i < (long)used * vol; i++) {
            double d = (double)recon[i] - (double)batch[i];
            l1 += fabs(d);
            se += d * d;
        }
        n += (long)used * vol;
    }
    free(recon);
    free(batch);
    double mse = se / (double)n;
    /* PSNR against a peak of 1.0: the phantoms' intensities live in [0, 1] up to noise. */
    return (ValResult){.l1 = (float)(l1 / (double)n), .psnr = (float)(10.0 * log10(1.0 / (mse > 1e-20 ? mse : 1e-20)))};
}

/* Validates after `step` optimizer steps and reports it on stdout and in metrics.jsonl. */
static void validate_and_log(Model *m, const float *val_host, int count, int64_t step, FILE *metrics) {
    ValResult vr = validate(m, val_host, count);
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

    CkptState st = {0};
    model_init_params(m, (uint64_t)cfg->seed);
    if (resume_path) {
        ckpt_load(resume_path, m, &st);
        vx_log("resumed: %s at step %ld\n", resume_path, (long)st.step);
    }
    vx_log("run: %s (config written there), %d steps, batch %d x %d accumulation\n", cfg->out_dir, cfg->steps,
           cfg->batch_size, cfg->grad_accum);

    long vol = m->tensors[m->t_input].count / m->batch;
    float *val = vx_malloc((size_t)(cfg->val_samples ? cfg->val_samples : 1) * vol * sizeof(float));
    phantom_batch((uint64_t)cfg->seed ^ VAL_SEED_SALT, cfg, cfg->val_samples, 0, val);

    Loader loader;
    loader_start(&loader, cfg, m->batch, st.next_sample / m->batch);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);

    size_t batch_bytes = (size_t)m->tensors[m->t_input].count * sizeof(float);
    double t_start = vx_now(), t_window = t_start, wait_window = 0;
    long window_steps = 0;
    int exit_code = 0;
    if (cfg->val_samples > 0 && st.step == 0) { /* the untrained baseline that later validations improve on */
        validate_and_log(m, val, cfg->val_samples, 0, metrics);
        t_window = vx_now();
    }
    while (st.step < cfg->steps) {
        double lr = schedule_lr(cfg, st.step);
        double loss = 0, recon = 0, kl = 0;
        double wait_before = loader.wait_seconds;
        for (int micro = 0; micro < cfg->grad_accum; micro++) {
            const float *batch = loader_next(&loader);
            be->copy_to_device(model_tensor(m, m->t_input), batch, batch_bytes);
            loader_release(&loader);
            /* The noise of micro-batch k is stream k: independent of where a run was resumed. */
            model_forward(m, 1, (uint64_t)(st.next_sample / m->batch));
            model_backward(m, 1.0f / (float)cfg->grad_accum, micro == 0 ? 0.0f : 1.0f);
            Losses l = model_read_losses(m);
            loss += l.total / cfg->grad_accum;
            recon += l.recon / cfg->grad_accum;
            kl += l.kl / cfg->grad_accum;
            st.next_sample += m->batch;
        }
        wait_window += loader.wait_seconds - wait_before;
        if (!isfinite(loss))
            vx_fatal("loss became %g at step %ld; lower train.lr or set train.grad_clip", loss, (long)st.step + 1);
        double gnorm = sqrt(model_grad_sumsq(m));
        float clip = 1.0f;
        if (cfg->grad_clip > 0 && gnorm > cfg->grad_clip) clip = (float)(cfg->grad_clip / (gnorm + 1e-6));
        AdamWParams a = {.lr = (float)lr, .beta1 = (float)cfg->beta1, .beta2 = (float)cfg->beta2,
                         .eps = (float)cfg->adam_eps, .weight_decay = (float)cfg->weight_decay, .grad_scale = clip,
                         .step = st.step + 1};
        be->adamw(m->param_count, m->param, m->grad, m->adam_m, m->adam_v, &a);
        st.step++;
        window_steps++;
        st.loss_ema = st.step == 1 ? loss : 0.9 * st.loss_ema + 0.1 * loss;

        int last = st.step == cfg->steps;
        if (st.step % cfg->log_every == 0 || last) {
            be->synchronize();
            double now = vx_now(), dt = (now - t_window) / window_steps;
            double sps = (double)m->batch * cfg->grad_accum / dt;
            char eta[32];
            format_eta(dt * (cfg->steps - st.step), eta, sizeof eta);
            vx_log("step %5ld/%d | loss %.6f (recon %.6f kl %.3f) | lr %.3e | grad norm %.4f | %.2f samples/s | "
                   "%.0f ms/step | data wait %.1f ms | eta %s\n",
                   (long)st.step, cfg->steps, loss, recon, kl, lr, gnorm, sps, dt * 1e3, wait_window * 1e3 / window_steps, eta);
            fprintf(metrics,
                    "{\"step\": %ld, \"loss\": %.9g, \"recon\": %.9g, \"kl\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, "
                    "\"samples_per_s\": %.6g, \"step_ms\": %.6g, \"data_wait_ms\": %.6g}\n",
                    (long)st.step, loss, recon, kl, lr, gnorm, sps, dt * 1e3, wait_window * 1e3 / window_steps);
            fflush(metrics);
            t_window = now;
            wait_window = 0;
            window_steps = 0;
        }
        if (cfg->val_samples > 0 && ((cfg->val_every && st.step % cfg->val_every == 0) || last)) {
            validate_and_log(m, val, cfg->val_samples, st.step, metrics);
            t_window = vx_now(); /* keep validation out of the step time */
        }
        if ((cfg->ckpt_every && st.step % cfg->ckpt_every == 0) || last) save_checkpoint(cfg, m, &st);
        if (stop_requested && !last) {
            vx_log("stopping on signal %d after step %ld\n", (int)stop_requested, (long)st.step);
            if (!(cfg->ckpt_every && st.step % cfg->ckpt_every == 0)) save_checkpoint(cfg, m, &st);
            exit_code = 130;
            break;
        }
    }
    double total = vx_now() - t_start;
    vx_log("done: %ld steps in %.1f s\n", (long)st.step, total);
    loader_stop(&loader);
    fclose(metrics);
    free(val);
    runtime_close(&rt);
    return exit_code;
}
