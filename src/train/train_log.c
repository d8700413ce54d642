/* train_log.c: TensorBoard logging of a training run (see train_log.h). */
#include "train/train_log.h"

#include <cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "tb/tb_writer.h"
#include "train/volume_tiles.h"

struct TrainLog {
    TbWriter *w;
    int images_described; /* images/sample_<i> tags below this have their description */
};

static void check(int rc, const char *what) {
    if (rc < 0) vx_fatal("TensorBoard %s failed: %s", what, tb_status_str(rc));
}

/* The resolved config as a markdown table, and every key as an hparam (lists as their JSON text), with the metrics
 * the HParams dashboard shows next to them. */
static void log_config(TrainLog *l, const char *json, const char *const *metrics, int n_metrics) {
    cJSON *root = cJSON_Parse(json);
    size_t cap = 4096, len = 0;
    char *md = vx_malloc(cap);
    len += (size_t)snprintf(md, cap, "| key | value |\n|---|---|\n");
    size_t keys = 0, n = 0; /* every key an hparam: the arrays sized by the config (a fixed 128 dropped the last) */
    for (const cJSON *sec = root->child; sec; sec = sec->next)
        for (const cJSON *kv = sec->child; kv; kv = kv->next) keys++;
    TbHParam *hp = vx_malloc((keys ? keys : 1) * sizeof *hp);
    char **texts = vx_malloc((keys ? keys : 1) * sizeof *texts);
    for (const cJSON *sec = root->child; sec; sec = sec->next)
        for (const cJSON *kv = sec->child; kv; kv = kv->next) {
            char name[96], *text = cJSON_PrintUnformatted(kv);
            snprintf(name, sizeof name, "%s.%s", sec->string, kv->string);
            while (len + strlen(name) + strlen(text) + 16 > cap) md = realloc(md, cap *= 2);
            len += (size_t)snprintf(md + len, cap - len, "| %s | `%s` |\n", name, text);
            texts[n] = text;
            char *hp_name = strdup(name);
            if (cJSON_IsNumber(kv)) hp[n] = TB_HPARAM_NUM(hp_name, kv->valuedouble);
            else hp[n] = TB_HPARAM_STR(hp_name, cJSON_IsString(kv) ? kv->valuestring : text);
            n++;
        }
    check(tb_writer_add_text(l->w, "config", 0, md), "text");
    check(tb_writer_add_hparams(l->w, hp, n, metrics, (size_t)n_metrics), "hparams");
    for (size_t i = 0; i < n; i++) {
        free((char *)hp[i].name);
        free(texts[i]);
    }
    free(hp);
    free(texts);
    free(md);
    cJSON_Delete(root);
}

TrainLog *train_log_open(const OutputConfig *cfg, const char *config_json, const char *const *metrics, int n_metrics) {
    if (!cfg->tensorboard) return NULL;
    TrainLog *l = vx_calloc(1, sizeof *l);
    TbWriterOptions o = {.flush_secs = cfg->flush_secs};
    int rc = tb_writer_open(&l->w, cfg->dir, &o);
    if (rc == TB_ERR_BUSY)
        vx_usage_error("%s: another process is writing TensorBoard events there; give this run its own --out",
                       cfg->dir);
    check(rc, "open");
    log_config(l, config_json, metrics, n_metrics);
    tb_writer_flush(l->w);
    return l;
}

const char *train_log_path(const TrainLog *l) { return l ? tb_writer_path(l->w) : ""; }

void train_log_scalar(TrainLog *l, const char *tag, int64_t step, double value) {
    if (l) check(tb_writer_add_scalar(l->w, tag, step, value, TB_WALL_TIME_NOW), "scalar");
}

void train_log_images(TrainLog *l, const int size[3], int c, const float *inputs, const float *recons, int count,
                      int64_t step) {
    if (!l) return;
    int d = size[0], h = size[1], w = size[2], width, height;
    long vol = (long)d * h * w * c;
    tiles_size(d, h, w, &width, &height);
    uint8_t *pixels = vx_malloc((size_t)width * height);
    for (int i = 0; i < count; i++) {
        char tag[32];
        snprintf(tag, sizeof tag, "images/sample_%d", i);
        if (i >= l->images_described) { /* the rows and columns named, as TensorBoard shows a tag's description */
            char text[512];
            snprintf(text, sizeof text, "Held-out volume %d (the validation crop, channel 0), at a fixed [0, 1] scale "
                     "so steps compare. **Rows**, top to bottom: input, reconstruction, |input - reconstruction| x %g. "
                     "**Columns**, left to right: axial (mid-depth slice), coronal (mid-height), sagittal "
                     "(mid-width).", i, (double)TILES_ERROR_GAIN);
            check(tb_writer_describe(l->w, tag, text), "image description");
            l->images_described = i + 1;
        }
        tiles_mid_slices(inputs + i * vol, recons + i * vol, d, h, w, c, pixels);
        check(tb_writer_add_image(l->w, tag, step, pixels, width, height, 1), "image");
    }
    free(pixels);
}

void train_log_param_group(const char *name, char *group, int len) {
    /* Keep two dot-separated parts, three under encoder.down / decoder.up (the resolution level). */
    int keep = strncmp(name, "encoder.down.", 13) == 0 || strncmp(name, "decoder.up.", 11) == 0 ? 3 : 2, dots = 0;
    const char *p = name;
    while (*p && !(*p == '.' && ++dots == keep)) p++;
    snprintf(group, (size_t)len, "%.*s", (int)(p - name), name);
}

void train_log_histograms(TrainLog *l, const Model *m, const float *grads, int64_t step) {
    if (!l) return;
    size_t bytes = (size_t)m->param_floats * sizeof(float);
    float *host[2] = {vx_malloc(bytes), vx_malloc(bytes)};
    m->be->copy_to_host(host[0], m->param, bytes);
    if (grads) memcpy(host[1], grads, bytes);
    else m->be->copy_to_host(host[1], m->grad, bytes);
    float *values = vx_malloc(bytes);
    static const char *const KIND[2] = {"weights", "grads"};
    /* Each parameter's group once; then each group (in order of first appearance) gathered for both kinds. */
    char (*group)[96] = vx_malloc((size_t)m->n_params * sizeof *group);
    for (int i = 0; i < m->n_params; i++) train_log_param_group(m->params[i].name, group[i], sizeof group[i]);
    char *done = vx_calloc((size_t)m->n_params, 1);
    for (int i = 0; i < m->n_params; i++) {
        if (done[i]) continue;
        for (int k = 0; k < 2; k++) {
            size_t n = 0;
            for (int j = i; j < m->n_params; j++) {
                if (strcmp(group[i], group[j]) != 0) continue;
                memcpy(values + n, host[k] + m->params[j].offset, (size_t)m->params[j].count * sizeof(float));
                n += (size_t)m->params[j].count;
                done[j] = 1;
            }
            char tag[128];
            snprintf(tag, sizeof tag, "%s/%s", KIND[k], group[i]);
            int64_t rc = tb_writer_add_histogram(l->w, tag, step, values, n);
            if (rc < 0) check((int)rc, "histogram");
        }
    }
    free(group);
    free(done);
    free(values);
    free(host[0]);
    free(host[1]);
}

void train_log_close(TrainLog *l, int failed) {
    if (!l) return;
    if (failed) check(tb_writer_end_session(l->w, TB_SESSION_FAILURE), "session end");
    check(tb_writer_close(l->w), "close");
    free(l);
}
