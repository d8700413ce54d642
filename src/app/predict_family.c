/* predict_family.c: the families' outputs of `voxscale predict` (see predict_family.h). */
#include "app/predict_family.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "data/nifti_write.h"

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

/* the outputs as the task reads them: softmax probabilities, sigmoid ones, the values, the risk score */
static int head_batch(const PredictBatch *b, float *rows, char *why, size_t why_len) {
    const Model *m = b->m;
    const int k = head_floats(m);
    float *out = vx_malloc((size_t)m->batch * k * sizeof(float));
    model_tensor_to_host(m, m->t_out, out);
    for (int i = 0; i < b->used; i++) {
        const float *o = out + (long)i * k;
        float *r = rows + (long)i * k;
        if (m->task == TASK_CLASSIFICATION) {
            double mx = o[0], sum = 0;
            for (int c = 1; c < k; c++) mx = o[c] > mx ? o[c] : mx;
            for (int c = 0; c < k; c++) sum += exp((double)o[c] - mx);
            for (int c = 0; c < k; c++) r[c] = (float)(exp((double)o[c] - mx) / sum);
        } else if (m->task == TASK_MULTILABEL) {
            for (int c = 0; c < k; c++) r[c] = (float)(1.0 / (1.0 + exp(-(double)o[c])));
        } else {
            memcpy(r, o, (size_t)k * sizeof(float));
        }
    }
    free(out);
    (void)why, (void)why_len;
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
    for (int i = 0; i < b->used && ok; i++) {
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
        snprintf(path, sizeof path, "%s/%s_recon.nii.gz", b->out_dir, it->stem);
        ok = nifti_write_float(path, it->path, y, in.d, in.h, in.w, in.c, &crop, why, why_len);
        /* latent voxel i sits over crop voxel f*i: the encoder's stride-2 convolutions with "same" padding */
        const NiftiGrid coarse = {{it->off[2], it->off[1], it->off[0]}, in.d / z.d};
        snprintf(path, sizeof path, "%s/%s_mu.nii.gz", b->out_dir, it->stem);
        if (ok) ok = nifti_write_float(path, it->path, mu + i * lat, z.d, z.h, z.w, z.c, &coarse, why, why_len);
    }
    free(recon);
    free(mu);
    return ok;
}

static void ae_format(const Model *m, const PredictItem *it, const float *row, FILE *f) {
    (void)m;
    fprintf(f, ",%.9g,%.9g,%s_recon.nii.gz,%s_mu.nii.gz", row[0], row[1], it->stem, it->stem);
}

static const PredictFamily FAMILIES[] = {
    {"ae3d", ae_floats, ae_header, ae_batch, ae_format},
    {"resnet3d", head_floats, head_header, head_batch, head_format},
};

const PredictFamily *predict_family(const Model *m) {
    for (size_t i = 0; i < sizeof FAMILIES / sizeof FAMILIES[0]; i++)
        if (strcmp(FAMILIES[i].family, m->cfg.family) == 0) return &FAMILIES[i];
    vx_fatal("predict: no output writer for model.family %s (app/predict_family.c)", m->cfg.family);
}
