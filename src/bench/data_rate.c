/* data_rate.c: `voxscale bench data`: how fast the loader turns a config's files into training samples (decode,
 * data.resize, normalisation, crop or pad: everything but the step), with the cache off so every sample is decoded,
 * on data.workers threads, as training's loader runs them. One untimed pass over the files first (the page cache
 * warm, as the baseline's), then --iters timed passes; images per second and milliseconds per image per
 * worker, into <results>/<device>/data_<config>.json. What bench/reference/cxr_loader.py measures for PyTorch
 * (PIL decode, torchvision's Resize, a DataLoader with as many workers) over the same files. */
#include <cJSON.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "bench/bench.h"
#include "bench/bench_util.h"
#include "common/cpu_isa.h"
#include "core/fsutil.h"
#include "core/util.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "hw/hw.h"

/* Seconds the loader takes to deliver the next `batches` batches */
static double consume(Loader *l, long batches) {
    const double t0 = vx_now();
    for (long b = 0; b < batches; b++) {
        loader_next(l);
        loader_release(l);
    }
    return vx_now() - t0;
}

int bench_data(Config *cfg, const BenchDataOptions *o) {
    if (strcmp(cfg->data.source, "phantom") == 0)
        vx_usage_error("bench data times reading files: set data.source csv (data.csv) or dir (data.dir)");
    cfg->data.cache_rate = 0; /* every sample decoded: the loader's work, not the cache's */
    const ModelConfig *m = &cfg->model;
    HwInfo hw;
    hw_detect(&hw);
    const int workers = cfg->data.workers > 0 ? cfg->data.workers : hw.cores;
    const int epochs = o->epochs > 0 ? o->epochs : 2, batch = cfg->train.batch_size;
    char dir[1024], stem[256], name[300], slug[300];
    bench_cpu_slug(&hw, slug, sizeof slug);
    snprintf(dir, sizeof dir, "%s/%s", o->results_dir ? o->results_dir : "results", slug);
    bench_config_stem(o->config_path, stem, sizeof stem);
    snprintf(name, sizeof name, "data_%s.json", stem);
    fs_mkdirs(dir);
    bench_claim_result(dir, name, o->overwrite);

    Dataset *ds = dataset_open(&cfg->data, cfg->train.seed, m->in_channels, m->input_size, m->input_size, 1);
    const long images = dataset_epoch_samples(ds), per_epoch = (images + batch - 1) / batch;
    const long volume = (long)m->input_size[0] * m->input_size[1] * m->input_size[2] * m->in_channels;
    Loader l;
    loader_start(&l, ds, batch, volume, 0, batch, 2 * workers, workers, 0, backend_cpu());
    consume(&l, per_epoch); /* the warm-up pass: the files in the page cache, the workers started */
    const double secs = consume(&l, per_epoch * epochs);
    loader_stop(&l);
    dataset_close(ds);
    const double rate = (double)per_epoch * epochs * batch / secs;
    vx_log("bench data: %ld images (%d x %d x %d, data.resize %s) x %d epochs on %d workers: %.1f images/s, %.2f ms "
           "per image per worker\n", images, m->input_size[0], m->input_size[1], m->input_size[2], cfg->data.resize,
           epochs, workers, rate, 1e3 * workers / rate);

    char isa[512], commit[64];
    bench_cpu_isa(isa, sizeof isa);
    bench_build_commit(commit, sizeof commit);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "config", stem);
    cJSON_AddStringToObject(j, "framework", "voxscale");
    cJSON_AddStringToObject(j, "commit", commit);
    cJSON_AddStringToObject(j, "cpu", hw.cpu_model);
    cJSON_AddStringToObject(j, "isa", isa);
    cJSON_AddNumberToObject(j, "cores", hw.cores);
    cJSON_AddNumberToObject(j, "workers", workers);
    cJSON_AddNumberToObject(j, "images", (double)images);
    cJSON_AddNumberToObject(j, "epochs", epochs);
    cJSON_AddNumberToObject(j, "batch", batch);
    cJSON *size = cJSON_AddArrayToObject(j, "input_size");
    for (int a = 0; a < 3; a++) cJSON_AddItemToArray(size, cJSON_CreateNumber(m->input_size[a]));
    cJSON_AddStringToObject(j, "resize", cfg->data.resize);
    cJSON_AddStringToObject(j, "normalize", cfg->data.normalize);
    cJSON_AddNumberToObject(j, "seconds", secs);
    cJSON_AddNumberToObject(j, "images_per_s", rate);
    cJSON_AddNumberToObject(j, "ms_per_image_per_worker", 1e3 * workers / rate);
    bench_write_json(dir, name, j, o->overwrite);
    printf("bench data: wrote %s/%s\n", dir, name);
    return 0;
}
