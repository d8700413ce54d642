/* predict_family.c: the families' outputs of `voxscale predict` (see predict_family.h). */
#include "app/predict_family.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/stop_signal.h"
#include "core/util.h"
#include "data/nifti_write.h"
#include "graph/diffusion_sample.h"
#include "train/metrics.h"

/* Whether the model's outputs for one volume are finite; if not, why names the volume: predict writes nothing of
 * such a volume (NaN probabilities from weights that overflow were written with exit 0), and ends with exit 4. */
static int finite_outputs(const PredictItem *it, const float *v, long n, const char *what, char *why, size_t why_len) {
    for (long j = 0; j < n; j++)
        if (!isfinite(v[j])) {
            snprintf(why, why_len, "%s: the model's %s for it is not finite (%g at element %ld): the weights overflow "
                     "on this input (check them, or the input's scale and data.normalize); nothing is written",
                     it->path, what, (double)v[j], j);
            return 0;
        }
    return 1;
}

/* ---- resnet3d: a head's predictions --------------------------------------------------------------------------- */

static int head_floats(const Model *m) { return m->tensors[m->t_out].dims.c; }

static void head_header(const Model *m, FILE *f) {
    const int k = head_floats(m);
    if (m->task == TASK_SURVIVAL) {
        fputs(",risk", f);
        return;
    }
    const char *name = m->task == TASK_REGRESSION ? "value" : "prob";
    for (int i = 0; i < k; i++) fprintf(f, ",%s_%d", name, i);
    if (m->task == TASK_CLASSIFICATION) fputs(",class", f);
}

/* the outputs as the task reads them: softmax probabilities, sigmoid ones (metrics.h's: the bytes the trainer's
 * validation computes accuracy and AUROC from), the values, the risk score */
static int head_batch(const PredictBatch *b, float *rows, char *why, size_t why_len) {
    const Model *m = b->m;
    const int k = head_floats(m);
    float *out = vx_malloc((size_t)m->batch * k * sizeof(float));
    model_tensor_to_host(m, m->t_out, out);
    if (m->task == TASK_CLASSIFICATION || m->task == TASK_MULTILABEL)
        metric_probabilities(out, b->used, k, m->task == TASK_MULTILABEL, rows);
    else
        memcpy(rows, out, (size_t)b->used * k * sizeof(float));
    free(out);
    for (int i = 0; i < b->used; i++)
        if (!finite_outputs(&b->items[i], rows + (long)i * k, k, "output", why, why_len)) return -1;
    return 1;
}

static void head_format(const Model *m, const PredictItem *it, const float *row, FILE *f) {
    (void)it;
    const int k = head_floats(m);
    int best = 0;
    for (int c = 0; c < k; c++) {
        fprintf(f, ",%.9g", row[c]);
        if (row[c] > row[best]) best = c;
    }
    if (m->task == TASK_CLASSIFICATION) fprintf(f, ",%d", best);
}

/* ---- ae3d: reconstructions and latents ------------------------------------------------------------------------ */

static const char *const AE_FILES[] = {"_recon.nii.gz", "_mu.nii.gz", NULL};

static int ae_floats(const Model *m) {
    (void)m;
    return 2; /* L1, PSNR */
}

static void ae_header(const Model *m, FILE *f) {
    (void)m;
    fputs(",l1,psnr,reconstruction,latent_mean", f);
}

static int ae_batch(const PredictBatch *b, float *rows, char *why, size_t why_len) {
    Model *m = b->m;
    const Dims in = m->tensors[m->t_input].dims, z = m->tensors[m->t_mu].dims;
    const long vol = (long)in.d * in.h * in.w * in.c, lat = (long)z.d * z.h * z.w * z.c;
    float *recon = vx_malloc((size_t)in.n * vol * sizeof(float)), *mu = vx_malloc((size_t)z.n * lat * sizeof(float));
    model_tensor_to_host(m, m->t_recon, recon);
    model_tensor_to_host(m, m->t_mu, mu);
    int ok = 1;
    for (int i = 0; i < b->used && ok; i++)
        if (!finite_outputs(&b->items[i], recon + i * vol, vol, "reconstruction", why, why_len) ||
            !finite_outputs(&b->items[i], mu + i * lat, lat, "latent mean", why, why_len))
            ok = -1;
    for (int i = 0; i < b->used && ok > 0; i++) {
        const float *x = b->inputs + i * vol, *y = recon + i * vol;
        double l1 = 0, se = 0;
        for (long j = 0; j < vol; j++) {
            const double d = (double)y[j] - (double)x[j];
            l1 += fabs(d);
            se += d * d;
        }
        const double mse = se / (double)vol;
        rows[2 * i] = (float)(l1 / (double)vol); /* what the trainer's validation reports, per volume */
        rows[2 * i + 1] = (float)(10.0 * log10(1.0 / (mse > 1e-20 ? mse : 1e-20)));
        const PredictItem *it = &b->items[i];
        char path[CONFIG_STR * 3];
        const NiftiGrid crop = {{it->off[2], it->off[1], it->off[0]}, 1}; /* x, y, z = w, h, d */
        snprintf(path, sizeof path, "%s/%s%s", b->out_dir, it->stem, AE_FILES[0]);
        ok = nifti_write_float(path, it->path, y, in.d, in.h, in.w, in.c, &crop, b->overwrite, why, why_len);
        /* latent voxel i sits over crop voxel f*i: the encoder's stride-2 convolutions with "same" padding */
        const NiftiGrid coarse = {{it->off[2], it->off[1], it->off[0]}, in.d / z.d};
        snprintf(path, sizeof path, "%s/%s%s", b->out_dir, it->stem, AE_FILES[1]);
        if (ok)
            ok = nifti_write_float(path, it->path, mu + i * lat, z.d, z.h, z.w, z.c, &coarse, b->overwrite, why,
                                   why_len);
    }
    free(recon);
    free(mu);
    return ok;
}

static void ae_format(const Model *m, const PredictItem *it, const float *row, FILE *f) {
    (void)m;
    fprintf(f, ",%.9g,%.9g,%s%s,%s%s", row[0], row[1], it->stem, AE_FILES[0], it->stem, AE_FILES[1]);
}

/* ---- vit3d_diffusion: volumes sampled from the input's two views --------------------------------------------- */

enum { DIFF_DRR_MSE, DIFF_MEAN_DRR_MSE, DIFF_MSE, DIFF_MEAN_MSE, DIFF_FLOATS };
static const char *const DIFF_FILES[] = {"_sample.nii.gz", NULL};

static int diff_floats(const Model *m) {
    (void)m;
    return DIFF_FLOATS;
}

static void diff_header(const Model *m, FILE *f) {
    (void)m;
    fputs(",drr_mse,mean_volume_drr_mse,mse,mean_volume_mse,sample", f);
}

static double mse_of(const float *a, const float *b, long n) {
    double se = 0;
    for (long j = 0; j < n; j++) {
        const double d = (double)a[j] - (double)b[j];
        se += d * d;
    }
    return n ? se / (double)n : 0;
}

/* The input's views rendered with training's DRR, DDIM from them in diffusion.sample_steps steps (the noise keyed by
 * train.seed and the volume's place in the input list), the sample written as NIfTI on the input's crop grid, and
 * how well the sample's own DRRs match the views, beside the baseline of the constant volume at the input crop's mean
 * intensity (what knowing only its mean gives; it is told that mean, which the sampler is not) */
static int diff_batch(const PredictBatch *b, float *rows, char *why, size_t why_len) {
    Model *m = b->m;
    const Dims in = m->tensors[m->t_input].dims;
    const long vol = (long)in.d * in.h * in.w * in.c, pixels = m->tensors[m->t_views].count / m->batch;
    const size_t all = (size_t)m->batch * vol;
    float *views = vx_malloc((size_t)m->batch * pixels * sizeof(float));
    float *sample_views = vx_malloc((size_t)m->batch * pixels * sizeof(float));
    float *mean_views = vx_malloc((size_t)m->batch * pixels * sizeof(float));
    float *sample = vx_malloc(all * sizeof(float)), *mean = vx_calloc(all, sizeof(float));
    uint64_t *ids = vx_calloc((size_t)m->batch, sizeof(uint64_t));
    for (int i = 0; i < b->used; i++) {
        ids[i] = (uint64_t)b->items[i].index;
        double sum = 0;
        for (long j = 0; j < vol; j++) sum += b->inputs[i * vol + j];
        for (long j = 0; j < vol; j++) mean[i * vol + j] = (float)(sum / (double)vol);
    }
    diffusion_render_views(m, b->inputs, views);
    diffusion_set_views(m, views);
    const int steps = m->cfg.diff.sample_steps;
    diffusion_ddim_sample(m, steps, (uint64_t)m->seed, ids, sample);
    stop_signal_honour("predict", "the files it wrote are taken back"); /* (the samples are unfinished) */
    diffusion_render_views(m, sample, sample_views);
    diffusion_render_views(m, mean, mean_views);
    int ok = 1;
    for (int i = 0; i < b->used && ok; i++)
        if (!finite_outputs(&b->items[i], sample + i * vol, vol, "sampled volume", why, why_len)) ok = -1;
    for (int i = 0; i < b->used && ok > 0; i++) {
        float *r = rows + (long)i * DIFF_FLOATS;
        r[DIFF_DRR_MSE] = (float)mse_of(sample_views + i * pixels, views + i * pixels, pixels);
        r[DIFF_MEAN_DRR_MSE] = (float)mse_of(mean_views + i * pixels, views + i * pixels, pixels);
        r[DIFF_MSE] = (float)mse_of(sample + i * vol, b->inputs + i * vol, vol);
        r[DIFF_MEAN_MSE] = (float)mse_of(mean + i * vol, b->inputs + i * vol, vol);
        const PredictItem *it = &b->items[i];
        vx_log("predict: %s: DDIM %d steps: DRR MSE %.6g against the input's views (the mean volume's %.6g), "
               "volume MSE %.6g (%.6g)\n", it->stem, steps, r[DIFF_DRR_MSE], r[DIFF_MEAN_DRR_MSE], r[DIFF_MSE],
               r[DIFF_MEAN_MSE]);
        char path[CONFIG_STR * 3];
        const NiftiGrid crop = {{it->off[2], it->off[1], it->off[0]}, 1}; /* x, y, z = w, h, d */
        snprintf(path, sizeof path, "%s/%s%s", b->out_dir, it->stem, DIFF_FILES[0]);
        ok = nifti_write_float(path, it->path, sample + i * vol, in.d, in.h, in.w, in.c, &crop, b->overwrite, why,
                               why_len);
    }
    free(ids);
    free(mean);
    free(sample);
    free(mean_views);
    free(sample_views);
    free(views);
    return ok;
}

static void diff_format(const Model *m, const PredictItem *it, const float *row, FILE *f) {
    (void)m;
    for (int k = 0; k < DIFF_FLOATS; k++) fprintf(f, ",%.9g", row[k]);
    fprintf(f, ",%s%s", it->stem, DIFF_FILES[0]);
}

static const char *const NO_FILES[] = {NULL};

static const PredictFamily FAMILIES[] = {
    {"ae3d", ae_floats, ae_header, ae_batch, ae_format, 0, AE_FILES},
    {"resnet3d", head_floats, head_header, head_batch, head_format, 0, NO_FILES},
    {"densenet", head_floats, head_header, head_batch, head_format, 0, NO_FILES},
    {"vit3d_diffusion", diff_floats, diff_header, diff_batch, diff_format, 1, DIFF_FILES},
};

const PredictFamily *predict_family(const Model *m) {
    for (size_t i = 0; i < sizeof FAMILIES / sizeof FAMILIES[0]; i++)
        if (strcmp(FAMILIES[i].family, m->cfg.family) == 0) return &FAMILIES[i];
    /* (vit3d, issue 21's skeleton, reconstructs nothing a user asked for yet: a refusal, not an internal error) */
    vx_usage_error("predict: a %s model has nothing predict writes (it writes ae3d's reconstructions, resnet3d's and "
                   "densenet's predictions and vit3d_diffusion's samples); export its weights with voxscale export instead",
                   m->cfg.family);
}
