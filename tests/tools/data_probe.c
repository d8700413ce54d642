/* data_probe.c: the data pipeline's pieces one at a time, for tests/integration/test_data.py to check against
 * nibabel and numpy. Every mode writes float32 arrays raw (native byte order) and one line of JSON on stdout:
 *   volume PATH CHANNELS OUT.raw [MIN_H MIN_W]   a decoded volume: {"dims": [d, h, w, c]}, or {"error": why}
 *                                         (exit 2); with MIN_H MIN_W read at least that large (a JPEG's DCT scaling)
 *   affine IN.raw H W C DEG SCALE TX TY PAD OUT.raw   data.affine's transform of a float32 [h][w][c] image with
 *                                         the given angle (degrees), zoom, shift (pixels) and padding value
 *   resize PATH CHANNELS MODE H W OUT.raw a 2-D image read whole and resized as data.resize MODE does for an
 *                                         H x W input (data/resize.h): {"dims": [...]}
 *   val CONFIG J OUT.raw                  validation volume j of CONFIG's dataset at its input size
 *   train CONFIG FIRST COUNT AUGMENT OUT.raw   training samples FIRST.. (AUGMENT 1: flips and rotations applied)
 *                                         {"codes": [...]} their augmentation codes
 *   stats CONFIG SAMPLES                  reads SAMPLES training samples in order: the cache's counters
 *   rate CONFIG N                         decodes every training volume N times through the dataset with no
 *                                         cache: {"volumes_per_s": ...} */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/util.h"
#include "data/dataset.h"
#include "data/affine.h"
#include "data/resize.h"
#include <math.h>
#include "data/volume.h"

static void write_raw(const char *path, const float *v, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(v, sizeof(float), n, f) != n || fclose(f) != 0) vx_fatal("cannot write %s", path);
}

/* The dataset of a whole config: its data section, at its model's input size and channels, seeded by train.seed. */
static Dataset *dataset_of(const Config *cfg) {
    const ModelConfig *m = &cfg->model;
    return dataset_open(&cfg->data, cfg->train.seed, m->in_channels, m->input_size, m->input_size, 0);
}

/* Floats of one volume at the config's input size. */
static size_t volume_floats(const Config *cfg) {
    const ModelConfig *m = &cfg->model;
    return (size_t)m->input_size[0] * m->input_size[1] * m->input_size[2] * m->in_channels;
}

static Dataset *open_ds(const char *config, Config *cfg) {
    config_load(cfg, config);
    return dataset_of(cfg);
}

int main(int argc, char **argv) {
    if (argc >= 5 && strcmp(argv[1], "volume") == 0) {
        Volume v;
        char why[512];
        const int at_least = argc >= 7;
        if (!(at_least ? volume_read_at_least(argv[2], atoi(argv[3]), atoi(argv[5]), atoi(argv[6]), &v, why, sizeof why)
                       : volume_read(argv[2], atoi(argv[3]), &v, why, sizeof why))) {
            char safe[2048];
            printf("{\"error\": \"%s\"}\n", vx_escape(why, safe, sizeof safe));
            return 2;
        }
        write_raw(argv[4], v.v, (size_t)v.d * v.h * v.w * v.c);
        printf("{\"dims\": [%d, %d, %d, %d]}\n", v.d, v.h, v.w, v.c);
        volume_free(&v);
        return 0;
    }
    if (argc >= 8 && strcmp(argv[1], "resize") == 0) {
        Volume v, r;
        char why[512];
        if (!volume_read(argv[2], atoi(argv[3]), &v, why, sizeof why)) {
            char safe[2048];
            printf("{\"error\": \"%s\"}\n", vx_escape(why, safe, sizeof safe));
            return 2;
        }
        int oh, ow;
        resize_target(argv[4], v.h, v.w, atoi(argv[5]), atoi(argv[6]), &oh, &ow);
        resize_image(&v, oh, ow, &r);
        write_raw(argv[7], r.v, (size_t)r.d * r.h * r.w * r.c);
        printf("{\"dims\": [%d, %d, %d, %d]}\n", r.d, r.h, r.w, r.c);
        volume_free(&v);
        volume_free(&r);
        return 0;
    }
    if (argc >= 12 && strcmp(argv[1], "affine") == 0) {
        const int h = atoi(argv[3]), w = atoi(argv[4]), c = atoi(argv[5]);
        const size_t n = (size_t)h * w * c;
        float *in = vx_malloc(n * sizeof(float)), *out = vx_malloc(n * sizeof(float));
        FILE *f = fopen(argv[2], "rb");
        if (!f || fread(in, sizeof(float), n, f) != n) vx_fatal("cannot read %s", argv[2]);
        fclose(f);
        const AffineParams p = {.angle = atof(argv[6]) * M_PI / 180.0, .scale = atof(argv[7]), .tx = atof(argv[8]),
                                .ty = atof(argv[9])};
        affine_apply(in, h, w, c, &p, (float)atof(argv[10]), out);
        write_raw(argv[11], out, n);
        printf("{\"dims\": [1, %d, %d, %d]}\n", h, w, c);
        free(in);
        free(out);
        return 0;
    }
    Config cfg;
    if (argc >= 5 && strcmp(argv[1], "val") == 0) {
        Dataset *ds = open_ds(argv[2], &cfg);
        const size_t n = volume_floats(&cfg);
        float *out = vx_malloc(n * sizeof(float));
        const int ok = dataset_val_sample(ds, atoi(argv[3]), out, NULL);
        write_raw(argv[4], out, n);
        printf("{\"ok\": %d}\n", ok);
        dataset_close(ds);
        free(out);
        return 0;
    }
    if (argc >= 7 && strcmp(argv[1], "train") == 0) {
        Dataset *ds = open_ds(argv[2], &cfg);
        const size_t n = volume_floats(&cfg);
        const long first = atol(argv[3]), count = atol(argv[4]);
        float *out = vx_malloc(n * (size_t)count * sizeof(float));
        printf("{\"codes\": [");
        for (long i = 0; i < count; i++) {
            dataset_train_sample(ds, first + i, atoi(argv[5]), out + n * (size_t)i, NULL, NULL);
            printf("%s%u", i ? ", " : "", dataset_augment_code(ds, first + i));
        }
        printf("]}\n");
        write_raw(argv[6], out, n * (size_t)count);
        dataset_close(ds);
        free(out);
        return 0;
    }
    if (argc >= 4 && (strcmp(argv[1], "stats") == 0 || strcmp(argv[1], "rate") == 0)) {
        const int rate = strcmp(argv[1], "rate") == 0;
        config_load(&cfg, argv[2]);
        if (rate) cfg.data.cache_rate = 0; /* every sample decodes its volume */
        Dataset *ds = dataset_of(&cfg);
        const size_t n = volume_floats(&cfg);
        float *out = vx_malloc(n * sizeof(float));
        const long samples = rate ? atol(argv[3]) * dataset_epoch_samples(ds) : atol(argv[3]);
        const double t0 = vx_now();
        for (long i = 0; i < samples; i++) dataset_train_sample(ds, i, 1, out, NULL, NULL);
        const double dt = vx_now() - t0;
        const DatasetStats s = dataset_stats(ds);
        printf("{\"samples\": %ld, \"epoch\": %lld, \"hits\": %ld, \"misses\": %ld, \"decoded\": %ld, \"evicted\": %ld, "
               "\"skipped\": %ld, \"epochs\": %ld, \"seconds\": %.6f, \"volumes_per_s\": %.3f}\n", samples,
               (long long)dataset_epoch_samples(ds), s.hits, s.misses, s.decoded, s.evicted, s.skipped,
               s.epochs_entered, dt, samples / (dt > 0 ? dt : 1e-9));
        dataset_close(ds);
        free(out);
        return 0;
    }
    fprintf(stderr, "usage: data_probe volume PATH CHANNELS OUT [MIN_H MIN_W] | resize PATH CHANNELS MODE H W OUT | val CONFIG J OUT | train CONFIG FIRST COUNT AUGMENT "
                    "OUT | stats CONFIG SAMPLES | rate CONFIG N\n");
    return 2;
}
