/* tb_sample.c: test tool for the TensorBoard and trace writers (used by tests/integration/test_tensorboard.py).
 *   tb_sample write <logdir>   writes the run <logdir>/sample (scalars, images, histograms, text, hparams) and a
 *                              profiler trace, and prints as JSON exactly what it wrote, for the test to compare
 *                              with what TensorBoard reads back.
 *   tb_sample read <file>      reads an event file with our strict TFRecord reader and prints how many records
 *                              were good, where the good part ends and why reading stopped. */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "tb/tb_writer.h"
#include "tb/tfrecord.h"
#include "trace/trace.h"

static void check(int rc, const char *what) {
    if (rc < 0) vx_fatal("%s failed: %s", what, tb_status_str(rc));
}

/* A JSON number that reads back as exactly v (cJSON's own printing only round-trips approximately). */
static cJSON *exact_number(double v) {
    char buf[64];
    snprintf(buf, sizeof buf, "%.17g", v);
    return cJSON_CreateRaw(buf);
}

/* Appends [step, value] to out.scalars[tag], with value rounded to float32 as TensorBoard stores it. */
static void note_scalar(cJSON *scalars, const char *tag, long step, double value) {
    cJSON *series = cJSON_GetObjectItemCaseSensitive(scalars, tag);
    if (!series) series = cJSON_AddArrayToObject(scalars, tag);
    cJSON *point = cJSON_CreateArray();
    cJSON_AddItemToArray(point, cJSON_CreateNumber((double)step));
    cJSON_AddItemToArray(point, exact_number((double)(float)value));
    cJSON_AddItemToArray(series, point);
}

static void scalar(TbWriter *w, cJSON *scalars, const char *tag, long step, double value) {
    check(tb_writer_add_scalar(w, tag, step, value, TB_WALL_TIME_NOW), "add_scalar");
    note_scalar(scalars, tag, step, value);
}

/* The test recomputes these pixels: value = (5x + 11y + 60c + 3*step) mod 256. */
static void image(TbWriter *w, cJSON *images, const char *tag, long step, int width, int height, int channels) {
    uint8_t *px = vx_malloc((size_t)width * height * channels);
    for (int y = 0; y < height; y++)
        for (int x = 0; x < width; x++)
            for (int c = 0; c < channels; c++)
                px[((size_t)y * width + x) * channels + c] = (uint8_t)((5 * x + 11 * y + 60 * c + 3 * step) & 255);
    check(tb_writer_add_image(w, tag, step, px, width, height, channels), "add_image");
    free(px);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "tag", tag);
    cJSON_AddNumberToObject(o, "step", (double)step);
    cJSON_AddNumberToObject(o, "width", width);
    cJSON_AddNumberToObject(o, "height", height);
    cJSON_AddNumberToObject(o, "channels", channels);
    cJSON_AddItemToArray(images, o);
}

static void histogram(TbWriter *w, cJSON *histos, cJSON *scalars, const char *tag, long step, int n_bad) {
    enum { N = 1000 };
    float v[N];
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < N; i++) {
        v[i] = (float)sin(0.37 * i + step) * (float)(1 + step) + (i % 10 == 0 ? 1e-7f * (float)i : 0.0f);
        if (i < n_bad) v[i] = (i % 3 == 0) ? NAN : (i % 3 == 1 ? INFINITY : -INFINITY);
        if (isfinite(v[i])) {
            lo = fmin(lo, v[i]);
            hi = fmax(hi, v[i]);
        }
    }
    int64_t nonfinite = tb_writer_add_histogram(w, tag, step, v, N);
    check((int)(nonfinite < 0 ? nonfinite : 0), "add_histogram");
    if (nonfinite != n_bad) vx_fatal("add_histogram counted %lld non-finite values, expected %d", (long long)nonfinite, n_bad);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "tag", tag);
    cJSON_AddNumberToObject(o, "step", (double)step);
    cJSON_AddNumberToObject(o, "count", N);
    cJSON_AddNumberToObject(o, "nonfinite", (double)nonfinite);
    cJSON_AddItemToObject(o, "min", exact_number(lo));
    cJSON_AddItemToObject(o, "max", exact_number(hi));
    cJSON_AddItemToArray(histos, o);
    /* Mirrors the writer's documented rule: "<tag>/nonfinite" from the first non-finite value on. */
    char nf[256];
    snprintf(nf, sizeof nf, "%s/nonfinite", tag);
    if (nonfinite > 0 || cJSON_GetObjectItemCaseSensitive(scalars, nf)) note_scalar(scalars, nf, step, (double)nonfinite);
}

static void write_trace(const char *run_dir, cJSON *out) {
    if (trace_begin(run_dir, 0) != TRACE_OK) vx_fatal("trace_begin failed");
    trace_set_thread_name("main");
    for (int step = 0; step < 3; step++) {
        trace_range_push("train_step", "step");
        trace_range_push("forward", "cpu_op");
        trace_range_push("conv3d", "cpu_op");
        double t0 = trace_now_us();
        trace_range_pop();
        trace_range_pop();
        trace_range_push("backward", "cpu_op");
        trace_range_pop();
        trace_range_pop();
        /* A device kernel as CUDA events or CUPTI would report it: pid = device, tid = stream. */
        trace_add_complete("conv3d_fwd_kernel", "kernel", t0 + 1.0, 2.5, 0, 7, 100 + step);
    }
    if (trace_end() != TRACE_OK) vx_fatal("trace_end failed");
    cJSON_AddStringToObject(out, "trace_file", trace_last_file());
}

static int cmd_write(const char *logdir) {
    char run_dir[4096];
    snprintf(run_dir, sizeof run_dir, "%s/sample", logdir);
    TbWriter *w;
    check(tb_writer_open(&w, run_dir, NULL), "tb_writer_open");

    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "run", "sample");
    cJSON_AddStringToObject(out, "run_dir", run_dir);
    cJSON_AddStringToObject(out, "event_file", tb_writer_path(w));
    cJSON *scalars = cJSON_AddObjectToObject(out, "scalars");
    cJSON *images = cJSON_AddArrayToObject(out, "images");
    cJSON *histos = cJSON_AddArrayToObject(out, "histograms");
    cJSON *texts = cJSON_AddArrayToObject(out, "texts");

    TbHParam hp[] = {TB_HPARAM_NUM("lr", 3e-4), TB_HPARAM_NUM("batch_size", 4), TB_HPARAM_NUM("dropout", 0),
                     TB_HPARAM_STR("optimizer", "adamw"), TB_HPARAM_BOOL("amp", false),
                     TB_HPARAM_BOOL("ema", true)};
    const char *metrics[] = {"loss/train", "loss/val"};
    check(tb_writer_add_hparams(w, hp, sizeof hp / sizeof hp[0], metrics, 2), "add_hparams");
    cJSON *hj = cJSON_AddObjectToObject(out, "hparams");
    for (size_t i = 0; i < sizeof hp / sizeof hp[0]; i++) {
        if (hp[i].type == TB_HPARAM_TYPE_NUMBER) cJSON_AddItemToObject(hj, hp[i].name, exact_number(hp[i].number));
        else if (hp[i].type == TB_HPARAM_TYPE_STRING) cJSON_AddStringToObject(hj, hp[i].name, hp[i].string);
        else cJSON_AddBoolToObject(hj, hp[i].name, hp[i].boolean);
    }
    cJSON *mj = cJSON_AddArrayToObject(out, "metrics");
    for (int i = 0; i < 2; i++) cJSON_AddItemToArray(mj, cJSON_CreateString(metrics[i]));

    for (long step = 0; step < 20; step++) {
        scalar(w, scalars, "loss/train", step, 1.0 / (1.0 + 0.1 * (double)step) - 0.3);
        scalar(w, scalars, "lr", step, step < 5 ? 3e-4 * (double)(step + 1) / 5.0 : 3e-4);
        if (step % 5 == 4) scalar(w, scalars, "loss/val", step, 0.9 - 0.01 * (double)step);
    }
    scalar(w, scalars, "grad_norm", 0, 0.0); /* exact zero, negative value and a large step */
    scalar(w, scalars, "grad_norm", 1, -2.5);
    scalar(w, scalars, "grad_norm", 1000000, 123456.789);

    image(w, images, "recon/rgb", 0, 32, 24, 3);
    image(w, images, "recon/rgb", 5, 32, 24, 3);
    image(w, images, "input/slice", 0, 16, 16, 1);

    histogram(w, histos, scalars, "weights/conv1", 0, 0);
    histogram(w, histos, scalars, "weights/conv1", 1, 7);
    histogram(w, histos, scalars, "weights/conv1", 2, 0);

    const char *md = "**voxscale** sample run \xe2\x80\x94 3D autoencoder\n\n| key | value |\n|---|---|\n| lr | 3e-4 |";
    check(tb_writer_add_text(w, "notes", 0, md), "add_text");
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "tag", "notes");
    cJSON_AddNumberToObject(t, "step", 0);
    cJSON_AddStringToObject(t, "text", md);
    cJSON_AddItemToArray(texts, t);

    check(tb_writer_close(w), "tb_writer_close");
    write_trace(run_dir, out);

    char *s = cJSON_Print(out);
    puts(s);
    free(s);
    cJSON_Delete(out);
    return 0;
}

static int cmd_read(const char *path) {
    TfRecordScan s;
    if (tfrecord_scan_file(path, NULL, NULL, &s) != 0) vx_usage_error("cannot read %s", path);
    printf("{\"records\": %zu, \"good_bytes\": %zu, \"file_bytes\": %zu, \"stop\": \"%s\"}\n", s.records,
           s.good_bytes, s.file_bytes, tfrecord_status_name(s.stop));
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "write") == 0) return cmd_write(argv[2]);
    if (argc == 3 && strcmp(argv[1], "read") == 0) return cmd_read(argv[2]);
    vx_usage_error("usage: tb_sample write <logdir> | tb_sample read <event file>");
}
