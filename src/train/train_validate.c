/* train_validate.c: what rank 0 does with the held-out volumes during a run: validation (ae3d and vit3d: L1 and PSNR
 * of the reconstructions; vit3d_diffusion: its losses at fixed draws; a head: its loss and the task's figures),
 * reported on stdout, in metrics.jsonl and TensorBoard, with the best checkpoints it keeps, and the autoencoder's
 * mid-slice pictures. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fsutil.h"
#include "core/stop_signal.h"
#include "core/util.h"
#include "data/labels.h"
#include "elementwise/elementwise.h"
#include "trace/trace.h"
#include "train/trainer.h"

/* Classes (labels) whose AUROC the HParams dashboard lists beside the macro figure: one column each there, so a
 * head of hundreds of classes keeps its per-class curves in the scalars alone */
#define HPARAM_CLASSES 32

/* The scalar tags a run's validation logs (val/<figure>: the family's and task's figures, as validate_head,
 * validate_diffusion and trainer_validate write them), after train/loss: the HParams dashboard's metrics. */
static int hparam_metrics(const Config *cfg, char (*tags)[40], int max) {
    const ModelConfig *m = &cfg->model;
    const char *task = m->head.task;
    const char *figures[4] = {0};
    int n = 0, classes = 0;
    if (!config_family_has_head(m->family)) {
        const int diffusion = strcmp(m->family, "vit3d_diffusion") == 0;
        figures[0] = diffusion ? "loss" : "l1";
        figures[1] = diffusion ? "projection" : "psnr";
    } else {
        figures[0] = "loss";
        if (strcmp(task, "classification") == 0) figures[1] = "accuracy";
        if (strcmp(task, "classification") == 0 || strcmp(task, "multilabel") == 0) {
            figures[2] = "auroc";
            classes = m->head.num_classes < HPARAM_CLASSES ? m->head.num_classes : HPARAM_CLASSES;
        }
        if (strcmp(task, "survival") == 0) figures[1] = "cindex";
    }
    snprintf(tags[n++], sizeof tags[0], "train/loss");
    for (int i = 0; i < 4 && cfg->train.val_samples > 0; i++)
        if (figures[i] && n < max) snprintf(tags[n++], sizeof tags[0], "val/%s", figures[i]);
    for (int c = 0; c < classes && cfg->train.val_samples > 0 && n < max; c++)
        snprintf(tags[n++], sizeof tags[0], "val/auroc_%s_%d", strcmp(task, "multilabel") == 0 ? "label" : "class", c);
    return n;
}

TrainLog *trainer_open_log(const Trainer *t, const char *config_json) {
    char tags[8 + HPARAM_CLASSES][40];
    const char *ptrs[8 + HPARAM_CLASSES];
    const int n = hparam_metrics(t->cfg, tags, 8 + HPARAM_CLASSES);
    for (int i = 0; i < n; i++) ptrs[i] = tags[i];
    return train_log_open(&t->cfg->output, config_json, ptrs, n);
}

/* Keeps the best checkpoints by the figure train.best_metric names (config_best_metric; loss and l1: lower is
 * better): in a staged run each stage's checkpoints/stage_<k>_best.ckpt (the stages' models differ in size, for vit3d
 * in layout too), and checkpoints/best.ckpt, the best of the last stage (of the run when it has one stage), which is
 * the final config's model: what export and predict read with the run's config.json. A validation on the stage's
 * first step (the untrained baseline before step 1) is no candidate. */
static void keep_best(Trainer *t, int64_t step, const char *const *names, const float *values, int n) {
    const char *best = config_best_metric(t->cfg, NULL);
    double v = NAN;
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], best) == 0) v = values[i];
    const double score = strcmp(best, "loss") == 0 || strcmp(best, "l1") == 0 ? -v : v; /* higher is better */
    if (step <= t->stages[t->stage].first_step || !isfinite(score) || !(score > t->best_metric)) return;
    t->best_metric = score;
    if (t->n_stages > 1) {
        char name[48];
        snprintf(name, sizeof name, "stage_%d_best.ckpt", t->stage);
        trainer_save_checkpoint(t, name);
    }
    if (t->stage == t->n_stages - 1) trainer_save_checkpoint(t, "best.ckpt");
}

/* A validation's figures (names and values), kept for keep_best until the trained weights are back (train.ema_eval:
 * a best checkpoint holds the trained weights and their average, never the average in the weights' place) */
typedef struct {
    const char *names[4];
    float values[4];
    int n;
} Figures;

static void figures_set(Figures *f, const char *const *names, const float *values, int n) {
    for (int i = 0; i < n; i++) f->names[i] = names[i], f->values[i] = values[i];
    f->n = n;
}

/* A validation a SIGINT/SIGTERM cut short (evaluate.h): its figures are of part of the set, and none is logged;
 * the run stops after its next step, with a checkpoint. */
static int stopped(int64_t step) {
    if (!stop_signal_requested()) return 0;
    vx_log("val  %5ld | stopped by %s: left unfinished, nothing logged\n", (long)step,
           stop_signal_name(stop_signal_requested()));
    return 1;
}

/* A head's figures printed after "val  <step>" (its per-class AUROC: the first few of them, in brackets) */
#define SHOWN_CLASSES 8

/* A head's validation: its loss and the task's figures (each class's or label's AUROC too), on stdout, in
 * metrics.jsonl and TensorBoard, and the best checkpoints (keep_best). A figure the set leaves undefined (AUROC
 * without a positive, C without a comparable pair) is not logged; a non-finite loss ends the run as a diverged one
 * (exit 4), as the autoencoder's L1 does. */
static void validate_head(Trainer *t, int64_t step, Figures *fig) {
    trace_range_push("validation", "user_annotation");
    HeadValResult vr = evaluate_head(t->m, &t->held);
    trace_range_pop();
    if (stopped(step)) {
        free(vr.auroc_class);
        return;
    }
    if (!isfinite(vr.loss)) trainer_diverged(t, step, "the validation loss", vr.loss);
    const char *names[4] = {"loss", "accuracy", "auroc", "cindex"};
    const float values[4] = {vr.loss, vr.accuracy, vr.auroc, vr.cindex};
    char line[512] = "";
    fprintf(t->metrics, "{\"step\": %ld", (long)step);
    for (int i = 0; i < 4; i++) {
        if (!isfinite(values[i])) continue;
        char tag[32];
        snprintf(tag, sizeof tag, "val/%s", names[i]);
        train_log_scalar(t->tb, tag, step, values[i]);
        fprintf(t->metrics, ", \"val_%s\": %.9g", names[i], values[i]);
        snprintf(line + strlen(line), sizeof line - strlen(line), " | %s %.4f", names[i], values[i]);
    }
    const char *per = t->m->task == TASK_MULTILABEL ? "label" : "class";
    char shown[SHOWN_CLASSES * 8 + 8] = "";
    for (int c = 0; c < vr.classes; c++) {
        const float v = vr.auroc_class[c];
        if (c < SHOWN_CLASSES) /* (an undefined one shows as nan here only) */
            snprintf(shown + strlen(shown), sizeof shown - strlen(shown), " %.4f", v);
        if (!isfinite(v)) continue;
        char tag[48];
        snprintf(tag, sizeof tag, "val/auroc_%s_%d", per, c);
        train_log_scalar(t->tb, tag, step, v);
        fprintf(t->metrics, ", \"val_auroc_%s_%d\": %.9g", per, c, v);
    }
    if (vr.classes)
        snprintf(line + strlen(line), sizeof line - strlen(line), " (per %s%s%s)", per, shown,
                 vr.classes > SHOWN_CLASSES ? " ..." : "");
    int five[5];
    if (t->m->task == TASK_MULTILABEL && strcmp(t->cfg->data.source, "phantom") != 0 &&
        labels_competition(&t->cfg->data, five)) {
        /* CheXpert's competition figure: the mean AUROC over its five labels (NaN when one is undefined) */
        double sum = 0;
        for (int f = 0; f < 5; f++) sum += five[f] < vr.classes ? vr.auroc_class[five[f]] : NAN;
        if (isfinite(sum)) {
            train_log_scalar(t->tb, "val/auroc_chexpert5", step, (float)(sum / 5));
            fprintf(t->metrics, ", \"val_auroc_chexpert5\": %.9g", sum / 5);
            snprintf(line + strlen(line), sizeof line - strlen(line), " | auroc of CheXpert's 5 %.4f", sum / 5);
        }
    }
    free(vr.auroc_class);
    fprintf(t->metrics, "}\n");
    if (fflush(t->metrics) != 0) fs_write_failed("write", "metrics.jsonl in the run directory", errno);
    vx_log("val  %5ld%s (%d held-out volumes%s)\n", (long)step, line, vr.n, step == 0 ? ", before training" : "");
    figures_set(fig, names, values, 4);
}

/* vit3d_diffusion's validation: the diffusion and projection losses at fixed draws (evaluate_diffusion) */
static void validate_diffusion(Trainer *t, int64_t step, Figures *fig) {
    trace_range_push("validation", "user_annotation");
    const DiffValResult vr = evaluate_diffusion(t->m, &t->held);
    trace_range_pop();
    if (stopped(step)) return;
    if (!isfinite(vr.loss)) trainer_diverged(t, step, "the validation loss", vr.loss);
    train_log_scalar(t->tb, "val/loss", step, vr.loss);
    train_log_scalar(t->tb, "val/projection", step, vr.projection);
    vx_log("val  %5ld | loss %.6f | projection %.6f (%d held-out volumes%s)\n", (long)step, vr.loss, vr.projection,
           vr.n, step == 0 ? ", before training" : "");
    fprintf(t->metrics, "{\"step\": %ld, \"val_loss\": %.9g, \"val_projection\": %.9g}\n", (long)step, vr.loss,
            vr.projection);
    if (fflush(t->metrics) != 0) fs_write_failed("write", "metrics.jsonl in the run directory", errno);
    static const char *const NAMES[2] = {"loss", "projection"};
    figures_set(fig, NAMES, (const float[2]){vr.loss, vr.projection}, 2);
}

/* train.ema_eval: the moving average into the parameters for a validation (on: 1, and back: 0), the trained weights
 * kept aside bit for bit meanwhile; nothing without train.ema_decay */
static void *ema_swap(Trainer *t, void *saved, int on) {
    Model *m = t->m;
    float *ema = model_ema(m);
    if (!ema || !t->cfg->train.ema_eval) return NULL;
    const size_t bytes = (size_t)m->param_floats * sizeof(float);
    if (on) {
        saved = m->be->alloc(bytes);
        m->be->elementwise->accumulate(DT_F32, m->param_floats, m->param, saved, 0.0f);
        m->be->elementwise->accumulate(DT_F32, m->param_floats, ema, m->param, 0.0f);
    } else {
        m->be->elementwise->accumulate(DT_F32, m->param_floats, saved, m->param, 0.0f);
        m->be->synchronize();
        m->be->release(saved);
        saved = NULL;
    }
    model_sync_lp(m);
    return saved;
}

static void validate_family(Trainer *t, int64_t step, Figures *fig);

void trainer_validate(Trainer *t, int64_t step) {
    if (t->held.val == 0) return;
    Figures fig = {.n = 0};
    void *saved = ema_swap(t, NULL, 1);
    validate_family(t, step, &fig);
    ema_swap(t, saved, 0);
    if (fig.n) keep_best(t, step, fig.names, fig.values, fig.n);
}

static void validate_family(Trainer *t, int64_t step, Figures *fig) {
    if (t->m->family == FAMILY_VIT3D_DIFFUSION) {
        validate_diffusion(t, step, fig);
        return;
    }
    if (t->m->t_recon < 0) { /* a head's family; ae3d and vit3d reconstruct */
        validate_head(t, step, fig);
        return;
    }
    trace_range_push("validation", "user_annotation");
    const ValResult vr = evaluate(t->m, &t->held);
    trace_range_pop();
    if (stopped(step)) return;
    if (!isfinite(vr.l1)) trainer_diverged(t, step, "the validation L1", vr.l1);
    train_log_scalar(t->tb, "val/l1", step, vr.l1);
    train_log_scalar(t->tb, "val/psnr", step, vr.psnr);
    vx_log("val  %5ld | l1 %.6f | psnr %.2f dB (%d held-out volumes%s)\n", (long)step, vr.l1, vr.psnr, t->held.val,
           step == 0 ? ", before training" : "");
    fprintf(t->metrics, "{\"step\": %ld, \"val_l1\": %.9g, \"val_psnr\": %.9g}\n", (long)step, vr.l1, vr.psnr);
    if (fflush(t->metrics) != 0) fs_write_failed("write", "metrics.jsonl in the run directory", errno);
    static const char *const NAMES[2] = {"l1", "psnr"};
    figures_set(fig, NAMES, (const float[2]){vr.l1, vr.psnr}, 2);
}

/* Mid-slice images of the first held-out volumes and their reconstructions. */
void trainer_log_images(Trainer *t, int64_t step) {
    /* (the denoiser's output is v or eps, not a picture of the volume: its pictures come from sampling) */
    if (!t->tb || t->held.shown == 0 || t->m->t_recon < 0 || t->m->family == FAMILY_VIT3D_DIFFUSION ||
        stop_signal_requested())
        return;
    trace_range_push("tensorboard images", "user_annotation");
    void *saved = ema_swap(t, NULL, 1);
    float *recon = evaluate_reconstruct(t->m, t->held.vols, t->held.views, t->held.shown);
    ema_swap(t, saved, 0);
    train_log_images(t->tb, t->cur->model.input_size, t->cur->model.in_channels, t->held.vols, recon, t->held.shown,
                     step);
    free(recon);
    trace_range_pop();
}

