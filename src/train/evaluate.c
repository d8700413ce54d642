/* evaluate.c: building the held-out set and validating on it (see evaluate.h). */
#include "train/evaluate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/stop_signal.h"
#include "core/util.h"
#include "train/metrics.h"

void heldout_build(HeldOut *h, Dataset *ds, const Model *m, int val_samples, int shown) {
    memset(h, 0, sizeof *h);
    const long vol = m->tensors[m->t_input].count / m->batch;
    const int want_shown = shown;
    int want = val_samples > want_shown ? val_samples : want_shown;
    const int have = dataset_val_count(ds);
    if (have >= 0 && want > have) want = have;
    h->vols = vx_malloc((size_t)(want ? want : 1) * vol * sizeof(float));
    const int L = dataset_labels(ds), V = dataset_views(ds);
    if (L) h->labels = vx_malloc((size_t)(want ? want : 1) * L * sizeof(float));
    if (V) h->views = vx_malloc((size_t)(want ? want : 1) * V * sizeof(float));
    for (int j = 0; h->count < want && (have < 0 || j < have); j++)
        if (dataset_val_sample(ds, j, h->vols + (long)h->count * vol, V ? h->views + (long)h->count * V : NULL)) {
            if (L) dataset_val_labels(ds, j, h->labels + (long)h->count * L);
            h->count++;
        }
    h->val = val_samples < h->count ? val_samples : h->count;
    h->shown = want_shown < h->count ? want_shown : h->count;
}

void heldout_free(HeldOut *h) {
    free(h->labels);
    free(h->views);
    free(h->vols);
    memset(h, 0, sizeof *h);
}

/* The given views of held-out volumes start..start+used-1 (zeros after them in a partial batch), before a forward. */
static void set_views(Model *m, const float *views, int start, int used) {
    if (!views) return;
    const long per = m->tensors[m->t_views].count / m->batch;
    float *batch = vx_calloc((size_t)m->batch * per, sizeof(float));
    memcpy(batch, views + (long)start * per, (size_t)used * per * sizeof(float));
    model_set_views(m, batch);
    free(batch);
}

float *evaluate_reconstruct(Model *m, const float *vols, const float *views, int count) {
    long per_batch = m->tensors[m->t_input].count, vol = per_batch / m->batch;
    float *recon = vx_calloc((size_t)(count ? count : 1) * vol, sizeof(float));
    float *batch = vx_calloc((size_t)per_batch, sizeof(float));
    float *out = vx_malloc((size_t)per_batch * sizeof(float));
    for (int start = 0; start < count && !stop_signal_requested(); start += m->batch) { /* (a stop: see evaluate.h) */
        int used = count - start < m->batch ? count - start : m->batch;
        memcpy(batch, vols + (long)start * vol, (size_t)used * vol * sizeof(float));
        m->be->copy_to_device(model_tensor(m, m->t_input), batch, (size_t)per_batch * sizeof(float));
        set_views(m, views, start, used);
        model_forward(m, 0);
        model_tensor_to_host(m, m->t_recon, out);
        memcpy(recon + (long)start * vol, out, (size_t)used * vol * sizeof(float));
    }
    free(out);
    free(batch);
    return recon;
}

/* Test hook: VX_TEST_VAL_DUMP=DIR writes each validation's inputs and reconstructions (float32, [count][D][H][W][C])
 * to DIR/val_input.bin and DIR/val_recon.bin (a diffusion model's inputs only: recon NULL), the last validation's
 * staying: what tests/integration/test_predict.py compares `voxscale predict`'s output with, and the validation
 * phantoms test_predict_diffusion.py samples from. */
static void test_dump(const float *vols, const float *recon, long n) {
    const char *dir = getenv("VX_TEST_VAL_DUMP");
    if (!dir || !*dir) return;
    const float *what[2] = {vols, recon};
    static const char *const NAME[2] = {"val_input.bin", "val_recon.bin"};
    for (int k = 0; k < (recon ? 2 : 1); k++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, NAME[k]);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(what[k], sizeof(float), (size_t)n, f) != (size_t)n) vx_fatal("VX_TEST_VAL_DUMP: %s", path);
        fclose(f);
    }
}

ValResult evaluate(Model *m, const HeldOut *h) {
    const long n = h->val * (m->tensors[m->t_input].count / m->batch);
    float *recon = evaluate_reconstruct(m, h->vols, h->views, h->val);
    test_dump(h->vols, recon, n);
    double l1 = 0, se = 0;
    for (long i = 0; i < n; i++) {
        const double d = (double)recon[i] - (double)h->vols[i];
        l1 += fabs(d);
        se += d * d;
    }
    free(recon);
    const double mse = n ? se / (double)n : 0;
    /* PSNR against a peak of 1.0: the phantoms, and files normalised by percentile, live in [0, 1] */
    return (ValResult){.l1 = n ? (float)(l1 / (double)n) : 0.0f,
                       .psnr = (float)(10.0 * log10(1.0 / (mse > 1e-20 ? mse : 1e-20)))};
}

/* far above any training sample index, so no validation draw repeats a training one */
#define VAL_FIRST_SAMPLE (1ull << 62)

DiffValResult evaluate_diffusion(Model *m, const HeldOut *h) {
    DiffValResult r = {.loss = NAN, .projection = NAN, .n = h->val};
    const long per_batch = m->tensors[m->t_input].count, vol = per_batch / m->batch;
    test_dump(h->vols, NULL, (long)h->val * vol);
    float *batch = vx_calloc((size_t)per_batch, sizeof(float));
    double *diff = vx_malloc((size_t)m->batch * sizeof(double)), *proj = vx_malloc((size_t)m->batch * sizeof(double));
    double loss = 0, projection = 0;
    for (int start = 0; start < h->val && !stop_signal_requested(); start += m->batch) { /* every volume: a partial
                                                                                           * last batch's own too */
        const int used = h->val - start < m->batch ? h->val - start : m->batch;
        memcpy(batch, h->vols + (long)start * vol, (size_t)used * vol * sizeof(float));
        if (used < m->batch) memset(batch + (long)used * vol, 0, (size_t)(m->batch - used) * vol * sizeof(float));
        m->be->copy_to_device(model_tensor(m, m->t_input), batch, (size_t)per_batch * sizeof(float));
        model_set_first_sample(m, VAL_FIRST_SAMPLE + (uint64_t)start);
        set_views(m, h->views, start, used);
        model_forward(m, 0);
        model_loss(m);
        model_diffusion_sample_losses(m, used, diff, proj); /* (the batch's losses would count the padding) */
        for (int b = 0; b < used; b++) {
            loss += diff[b];
            projection += proj[b];
        }
    }
    if (r.n > 0) {
        r.loss = (float)(loss / r.n);
        r.projection = (float)(projection / r.n);
    }
    free(proj);
    free(diff);
    free(batch);
    return r;
}

/* The head's loss over the whole set, from the logits, as the task's PyTorch loss with reduction "mean" over every
 * sample (metrics.h): no partial batch left out and no padding counted, whatever the batch and the ranks. */
static double head_set_loss(const Model *m, const float *logits, const float *labels, int n, int k) {
    const ConfigList *cw = &m->cfg.head.class_weights, *pw = &m->cfg.head.pos_weight;
    float w[CONFIG_MAX_LIST];
    switch (m->task) {
    case TASK_CLASSIFICATION:
        for (int c = 0; c < cw->n; c++) w[c] = (float)cw->v[c]; /* (the float32 weights training uses) */
        return metric_cross_entropy(logits, labels, n, k, cw->n ? w : NULL);
    case TASK_MULTILABEL:
        for (int c = 0; c < pw->n; c++) w[c] = (float)pw->v[c];
        return metric_bce(logits, labels, n, k, pw->n ? w : NULL);
    case TASK_SURVIVAL: return metric_cox_loss(logits, labels, n);
    default: return metric_mse(logits, labels, (long)n * k);
    }
}

HeadValResult evaluate_head(Model *m, const HeldOut *h) {
    HeadValResult r = {.loss = NAN, .accuracy = NAN, .auroc = NAN, .cindex = NAN, .n = h->val};
    const long per_batch = m->tensors[m->t_input].count, vol = per_batch / m->batch;
    const int k = m->tensors[m->t_out].dims.c;
    float *logits = vx_calloc((size_t)(h->val ? h->val : 1) * k, sizeof(float));
    float *batch = vx_calloc((size_t)per_batch, sizeof(float)), *out = vx_malloc((size_t)m->batch * k * sizeof(float));
    for (int start = 0; start < h->val && !stop_signal_requested(); start += m->batch) { /* the last batch's empty
                                                                                           * slots hold zeros */
        const int used = h->val - start < m->batch ? h->val - start : m->batch;
        memcpy(batch, h->vols + (long)start * vol, (size_t)used * vol * sizeof(float));
        if (used < m->batch) memset(batch + (long)used * vol, 0, (size_t)(m->batch - used) * vol * sizeof(float));
        m->be->copy_to_device(model_tensor(m, m->t_input), batch, (size_t)per_batch * sizeof(float));
        model_forward(m, 0);
        model_tensor_to_host(m, m->t_out, out);
        memcpy(logits + (long)start * k, out, (size_t)used * k * sizeof(float));
    }
    if (h->val > 0) r.loss = (float)head_set_loss(m, logits, h->labels, h->val, k);
    const int multilabel = m->task == TASK_MULTILABEL;
    if (m->task == TASK_CLASSIFICATION || multilabel) { /* from the probabilities predict writes */
        float *probs = vx_malloc((size_t)(h->val ? h->val : 1) * k * sizeof(float));
        double *per = vx_malloc((size_t)k * sizeof(double));
        metric_probabilities(logits, h->val, k, multilabel, probs);
        if (!multilabel) r.accuracy = (float)metric_accuracy(probs, h->labels, h->val, k);
        r.auroc = (float)metric_auroc_ovr(probs, h->labels, h->val, k, multilabel, per);
        r.classes = k;
        r.auroc_class = vx_malloc((size_t)k * sizeof(float));
        for (int c = 0; c < k; c++) r.auroc_class[c] = (float)per[c];
        free(per);
        free(probs);
    }
    if (m->task == TASK_SURVIVAL) r.cindex = (float)metric_cindex(logits, h->labels, h->val);
    free(out);
    free(batch);
    free(logits);
    return r;
}
