/* tb_writer.c: the public event writer API (tb_writer.h): turns each value into a TensorBoard Event message,
 * packs it with protoc-c's generated code straight into the event file's record buffer. */
#include "tb/tb_writer.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/util.h"
#include "tb/event_file.h"
#include "tb/histogram.h"
#include "tb/hparams_content.h"
#include "tb/png_encode.h"
#include "tb/proto/event.pb-c.h"
#include "tb/tag_set.h"

#define DEFAULT_FLUSH_SECS 5.0

/* Tag names and plugin names TensorBoard looks for (tensorboard/plugins/<plugin>/metadata.py). */
#define PLUGIN_SCALARS "scalars"
#define PLUGIN_TEXT "text"
#define PLUGIN_IMAGES "images"
#define PLUGIN_HPARAMS "hparams"
#define HPARAMS_EXPERIMENT_TAG "_hparams_/experiment"
#define HPARAMS_SESSION_START_TAG "_hparams_/session_start_info"
#define HPARAMS_SESSION_END_TAG "_hparams_/session_end_info"

/* A tag's description (tb_writer_describe), written with its first value */
typedef struct {
    char *tag, *text;
} Description;

struct TbWriter {
    EventFile *file;
    TagSet described; /* tags whose plugin metadata was written already */
    Description *desc; /* few: looked up on a tag's first value only */
    size_t n_desc;
    bool hparams_added, session_ended;
};

const char *tb_status_str(int status) {
    switch (status) {
    case TB_OK: return "ok";
    case TB_ERR_ARG: return "invalid argument";
    case TB_ERR_BUSY: return "run directory already has an open TensorBoard writer";
    case TB_ERR_LIMIT: return "too many TensorBoard writers open";
    case TB_ERR_STATE: return "call out of order";
    }
    return status > 0 ? "ok" : "unknown error";
}

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool tag_ok(const char *tag) { return tag && tag[0]; }

static void write_event(TbWriter *w, const Vxtb__Event *ev) {
    size_t n = vxtb__event__get_packed_size(ev);
    uint8_t *dst = event_file_begin_record(w->file, n);
    if (vxtb__event__pack(ev, dst) != n) vx_fatal("protobuf-c packed a different size than it sized");
    event_file_end_record(w->file);
}

/* Writes an Event holding a Summary with the single value v. */
static void write_value(TbWriter *w, int64_t step, double wall_time, Vxtb__Summary__Value *v) {
    Vxtb__Summary summary = VXTB__SUMMARY__INIT;
    summary.n_value = 1;
    summary.value = &v;
    Vxtb__Event ev = VXTB__EVENT__INIT;
    ev.wall_time = wall_time > 0 ? wall_time : wall_now();
    ev.step = step;
    ev.what_case = VXTB__EVENT__WHAT_SUMMARY;
    ev.summary = &summary;
    write_event(w, &ev);
}

int tb_writer_open(TbWriter **out, const char *run_dir, const TbWriterOptions *opts) {
    if (!out || !run_dir || !run_dir[0]) return TB_ERR_ARG;
    double flush_secs = opts && opts->flush_secs > 0 ? opts->flush_secs : DEFAULT_FLUSH_SECS;
    EventFile *file;
    int rc = event_file_open(&file, run_dir, flush_secs);
    if (rc != TB_OK) return rc;
    TbWriter *w = vx_calloc(1, sizeof *w);
    w->file = file;

    /* The first record names the format version; readers use it to recognize an event file. */
    Vxtb__Event ev = VXTB__EVENT__INIT;
    ev.wall_time = wall_now();
    ev.what_case = VXTB__EVENT__WHAT_FILE_VERSION;
    ev.file_version = "brain.Event:2";
    write_event(w, &ev);
    /* Written at once so that TensorBoard sees the run as soon as it exists. */
    event_file_flush(w->file);
    *out = w;
    return TB_OK;
}

int tb_writer_flush(TbWriter *w) {
    if (!w) return TB_ERR_ARG;
    event_file_flush(w->file);
    return TB_OK;
}

const char *tb_writer_path(const TbWriter *w) { return w ? event_file_path(w->file) : NULL; }

int tb_writer_describe(TbWriter *w, const char *tag, const char *description) {
    if (!w || !tag_ok(tag) || !description) return TB_ERR_ARG;
    if (tag_set_contains(&w->described, tag)) return TB_ERR_STATE; /* its first value went without it */
    for (size_t i = 0; i < w->n_desc; i++)
        if (strcmp(w->desc[i].tag, tag) == 0) {
            free(w->desc[i].text);
            w->desc[i].text = strdup(description);
            return TB_OK;
        }
    w->desc = realloc(w->desc, (w->n_desc + 1) * sizeof *w->desc);
    if (!w->desc) vx_fatal("out of memory for a TensorBoard tag's description");
    w->desc[w->n_desc++] = (Description){strdup(tag), strdup(description)};
    return TB_OK;
}

/* The description tb_writer_describe gave tag, or NULL */
static char *description_of(const TbWriter *w, const char *tag) {
    for (size_t i = 0; i < w->n_desc; i++)
        if (strcmp(w->desc[i].tag, tag) == 0) return w->desc[i].text;
    return NULL;
}

int tb_writer_close(TbWriter *w) {
    if (!w) return TB_ERR_ARG;
    if (w->hparams_added && !w->session_ended) tb_writer_end_session(w, TB_SESSION_SUCCESS);
    event_file_close(w->file);
    tag_set_free(&w->described);
    for (size_t i = 0; i < w->n_desc; i++) {
        free(w->desc[i].tag);
        free(w->desc[i].text);
    }
    free(w->desc);
    free(w);
    return TB_OK;
}

/* Metadata naming the plugin that owns a tag; content is the plugin's serialized version-0 data, i.e. empty. */
typedef struct {
    Vxtb__SummaryMetadata meta;
    Vxtb__SummaryMetadata__PluginData plugin;
} PluginMeta;

static Vxtb__SummaryMetadata *plugin_meta(PluginMeta *m, const char *plugin, Vxtb__DataClass data_class,
                                          const uint8_t *content, size_t content_len) {
    vxtb__summary_metadata__init(&m->meta);
    vxtb__summary_metadata__plugin_data__init(&m->plugin);
    m->plugin.plugin_name = (char *)plugin;
    m->plugin.content.data = (uint8_t *)content;
    m->plugin.content.len = content_len;
    m->meta.plugin_data = &m->plugin;
    m->meta.data_class = data_class;
    return &m->meta;
}

/* A tag's first value: the description given to tb_writer_describe, if any, into its metadata (TensorBoard keeps the
 * first value's metadata of a tag; data_compat carries a legacy image's or histogram's description over) */
static void describe(const TbWriter *w, const char *tag, Vxtb__SummaryMetadata *meta) {
    char *text = description_of(w, tag);
    if (text) meta->summary_description = text;
}

int tb_writer_add_scalar(TbWriter *w, const char *tag, int64_t step, double value, double wall_time) {
    if (!w || !tag_ok(tag)) return TB_ERR_ARG;
    Vxtb__Summary__Value v = VXTB__SUMMARY__VALUE__INIT;
    v.tag = (char *)tag;
    v.value_case = VXTB__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
    v.simple_value = (float)value;
    /* As tf.summary does: the plugin metadata rides on a tag's first value only; readers keep the first. */
    PluginMeta m;
    if (tag_set_insert(&w->described, tag)) {
        v.metadata = plugin_meta(&m, PLUGIN_SCALARS, VXTB__DATA_CLASS__DATA_CLASS_SCALAR, NULL, 0);
        describe(w, tag, v.metadata);
    }
    write_value(w, step, wall_time, &v);
    return TB_OK;
}

int tb_writer_add_image(TbWriter *w, const char *tag, int64_t step, const uint8_t *pixels, int width, int height,
                        int channels) {
    if (!w || !tag_ok(tag)) return TB_ERR_ARG;
    uint8_t *png;
    size_t png_len;
    if (tb_png_encode(pixels, width, height, channels, &png, &png_len) != 0) return TB_ERR_ARG;
    Vxtb__Summary__Image img = VXTB__SUMMARY__IMAGE__INIT;
    img.width = width;
    img.height = height;
    img.colorspace = channels; /* Summary.Image: 1 grayscale, 3 RGB */
    img.encoded_image_string.data = png;
    img.encoded_image_string.len = png_len;
    Vxtb__Summary__Value v = VXTB__SUMMARY__VALUE__INIT;
    v.tag = (char *)tag;
    v.value_case = VXTB__SUMMARY__VALUE__VALUE_IMAGE;
    v.image = &img;
    /* A described image names its plugin and data class too: TensorBoard's data server takes metadata with a data
     * class as it is (description included), and synthesises its own, without one, for a bare legacy image */
    PluginMeta m;
    if (description_of(w, tag) && tag_set_insert(&w->described, tag)) {
        v.metadata = plugin_meta(&m, PLUGIN_IMAGES, VXTB__DATA_CLASS__DATA_CLASS_BLOB_SEQUENCE, NULL, 0);
        describe(w, tag, v.metadata);
    }
    write_value(w, step, TB_WALL_TIME_NOW, &v);
    free(png);
    return TB_OK;
}

int64_t tb_writer_add_histogram(TbWriter *w, const char *tag, int64_t step, const float *values, size_t count) {
    if (!w || !tag_ok(tag) || !values || count == 0) return TB_ERR_ARG;
    TbHistogram h;
    if (tb_histogram_build(&h, values, count) != 0) return TB_ERR_ARG;
    Vxtb__HistogramProto hp = VXTB__HISTOGRAM_PROTO__INIT;
    hp.min = h.min;
    hp.max = h.max;
    hp.num = h.num;
    hp.sum = h.sum;
    hp.sum_squares = h.sum_squares;
    hp.n_bucket_limit = h.n_buckets;
    hp.bucket_limit = h.limits;
    hp.n_bucket = h.n_buckets;
    hp.bucket = h.counts;
    Vxtb__Summary__Value v = VXTB__SUMMARY__VALUE__INIT;
    v.tag = (char *)tag;
    v.value_case = VXTB__SUMMARY__VALUE__VALUE_HISTO;
    v.histo = &hp;
    double wall = wall_now();
    write_value(w, step, wall, &v);
    size_t nonfinite = h.nonfinite;
    tb_histogram_free(&h);

    /* A NaN or Inf in weights or gradients is news, so it gets its own scalar from the first one on; logging
     * zeros before that would add a flat line per histogram to the scalars dashboard. */
    char nf_tag[512];
    int len = snprintf(nf_tag, sizeof nf_tag, "%s/nonfinite", tag);
    if (len > 0 && (size_t)len < sizeof nf_tag && (nonfinite > 0 || tag_set_contains(&w->described, nf_tag)))
        tb_writer_add_scalar(w, nf_tag, step, (double)nonfinite, wall);
    return (int64_t)nonfinite;
}

int tb_writer_add_text(TbWriter *w, const char *tag, int64_t step, const char *markdown) {
    if (!w || !tag_ok(tag) || !markdown) return TB_ERR_ARG;
    /* The text plugin reads a DT_STRING tensor; a scalar one (shape []) shows as a single paragraph. */
    ProtobufCBinaryData text = {.len = strlen(markdown), .data = (uint8_t *)markdown};
    Vxtb__TensorShapeProto shape = VXTB__TENSOR_SHAPE_PROTO__INIT;
    Vxtb__TensorProto tensor = VXTB__TENSOR_PROTO__INIT;
    tensor.dtype = VXTB__DATA_TYPE__DT_STRING;
    tensor.tensor_shape = &shape;
    tensor.n_string_val = 1;
    tensor.string_val = &text;
    Vxtb__Summary__Value v = VXTB__SUMMARY__VALUE__INIT;
    v.tag = (char *)tag;
    v.value_case = VXTB__SUMMARY__VALUE__VALUE_TENSOR;
    v.tensor = &tensor;
    PluginMeta m;
    if (tag_set_insert(&w->described, tag))
        v.metadata = plugin_meta(&m, PLUGIN_TEXT, VXTB__DATA_CLASS__DATA_CLASS_TENSOR, NULL, 0);
    write_value(w, step, TB_WALL_TIME_NOW, &v);
    return TB_OK;
}

/* Writes one "_hparams_/..." summary: the payload is the plugin content; the tensor is the empty float
 * tensor the hparams plugin writes as a placeholder (NULL_TENSOR in its metadata.py). */
static void write_hparams_summary(TbWriter *w, const char *tag, uint8_t *content, size_t content_len,
                                  double wall_time) {
    Vxtb__TensorShapeProto__Dim dim = VXTB__TENSOR_SHAPE_PROTO__DIM__INIT; /* size 0 */
    Vxtb__TensorShapeProto__Dim *dims = &dim;
    Vxtb__TensorShapeProto shape = VXTB__TENSOR_SHAPE_PROTO__INIT;
    shape.n_dim = 1;
    shape.dim = &dims;
    Vxtb__TensorProto tensor = VXTB__TENSOR_PROTO__INIT;
    tensor.dtype = VXTB__DATA_TYPE__DT_FLOAT;
    tensor.tensor_shape = &shape;
    PluginMeta m;
    Vxtb__Summary__Value v = VXTB__SUMMARY__VALUE__INIT;
    v.tag = (char *)tag;
    v.metadata = plugin_meta(&m, PLUGIN_HPARAMS, VXTB__DATA_CLASS__DATA_CLASS_TENSOR, content, content_len);
    v.value_case = VXTB__SUMMARY__VALUE__VALUE_TENSOR;
    v.tensor = &tensor;
    write_value(w, 0, wall_time, &v);
    free(content);
}

int tb_writer_add_hparams(TbWriter *w, const TbHParam *params, size_t n_params, const char *const *metric_tags,
                          size_t n_metrics) {
    if (!w || !params || n_params == 0 || (n_metrics && !metric_tags)) return TB_ERR_ARG;
    if (w->hparams_added) return TB_ERR_STATE;
    for (size_t i = 0; i < n_params; i++) {
        const TbHParam *p = &params[i];
        if (!tag_ok(p->name)) return TB_ERR_ARG;
        if (p->type != TB_HPARAM_TYPE_NUMBER && p->type != TB_HPARAM_TYPE_STRING && p->type != TB_HPARAM_TYPE_BOOL)
            return TB_ERR_ARG;
        if (p->type == TB_HPARAM_TYPE_STRING && !p->string) return TB_ERR_ARG;
        for (size_t j = 0; j < i; j++)
            if (strcmp(params[j].name, p->name) == 0) return TB_ERR_ARG;
    }
    for (size_t i = 0; i < n_metrics; i++)
        if (!tag_ok(metric_tags[i])) return TB_ERR_ARG;

    double now = wall_now();
    size_t len;
    uint8_t *exp = hparams_pack_experiment(params, n_params, metric_tags, n_metrics, now, &len);
    write_hparams_summary(w, HPARAMS_EXPERIMENT_TAG, exp, len, now);
    uint8_t *start = hparams_pack_session_start(params, n_params, now, &len);
    write_hparams_summary(w, HPARAMS_SESSION_START_TAG, start, len, now);
    w->hparams_added = true;
    return TB_OK;
}

int tb_writer_end_session(TbWriter *w, TbSessionStatus status) {
    if (!w || (status != TB_SESSION_SUCCESS && status != TB_SESSION_FAILURE && status != TB_SESSION_RUNNING))
        return TB_ERR_ARG;
    if (!w->hparams_added || w->session_ended) return TB_ERR_STATE;
    double now = wall_now();
    size_t len;
    uint8_t *end = hparams_pack_session_end(status, now, &len);
    write_hparams_summary(w, HPARAMS_SESSION_END_TAG, end, len, now);
    w->session_ended = true;
    return TB_OK;
}
