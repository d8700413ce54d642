/* weights_source.c: the config of a checkpoint or a weights file (see weights_source.h). */
#include "app/weights_source.h"

#include <libgen.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/outguard.h"
#include "core/safetensors.h"
#include "core/util.h"
#include "model/ckpt.h"

#define META_CONFIG "voxscale.config"

void weights_config_beside(const char *ckpt, char *out, size_t len) {
    char tmp[CONFIG_STR * 2];
    snprintf(tmp, sizeof tmp, "%s", ckpt);
    char *folder = dirname(tmp); /* runs/x/checkpoints */
    char up[CONFIG_STR * 2];
    snprintf(up, sizeof up, "%s", folder);
    snprintf(out, len, "%s/config.json", dirname(up));
}

void weights_config_source(const CliArgs *a, Config *cfg) {
    char p[300];
    if (a->ckpt) {
        char path[CONFIG_STR * 2 + 16];
        weights_config_beside(a->ckpt, path, sizeof path);
        FILE *f = fopen(path, "r");
        if (!f)
            vx_usage_error("%s: no config.json of its run at %s (a checkpoint is read with the config it was trained "
                           "with); give it with --config FILE", vx_escape(a->ckpt, p, sizeof p), path);
        fclose(f);
        out_input(path, "the run's config.json");
        config_load(cfg, path);
        return;
    }
    if (a->weights) {
        StFile f;
        st_read(a->weights, (size_t)1 << 40, &f);
        const char *text = st_meta(&f, META_CONFIG);
        if (!text)
            vx_usage_error("%s: no voxscale config in its metadata (a file converted from PyTorch, or written by "
                           "another tool): give the model's config with --config FILE", f.origin);
        char origin[600];
        snprintf(origin, sizeof origin, "%s (its metadata's %s)", f.origin, META_CONFIG);
        config_parse_text(cfg, text, strlen(text), origin);
        st_free(&f);
        return;
    }
    vx_usage_error("give the trained model with --ckpt CHECKPOINT or --weights FILE.safetensors (see --help)");
}

void weights_ckpt_stage(Config *cfg, const char *ckpt, const char *who) {
    if (cfg->train.n_stages < 2) return;
    CkptHeader h; /* its model fingerprint, read unverified: ckpt_read then verifies the whole file against it */
    const size_t need = offsetof(CkptHeader, model_fingerprint) + sizeof h.model_fingerprint;
    FILE *f = fopen(ckpt, "rb");
    if (!f) return;
    const size_t got = fread(&h, 1, need, f);
    fclose(f);
    if (got != need || memcmp(h.magic, CKPT_MAGIC, sizeof h.magic) != 0 ||
        h.model_fingerprint == config_model_fingerprint(&cfg->model))
        return;
    for (int k = 0; k < cfg->train.n_stages; k++) {
        const Stage st = config_stage(&cfg->train, cfg->model.input_size, k);
        ModelConfig mc = cfg->model;
        memcpy(mc.input_size, st.input_size, sizeof mc.input_size);
        if (config_model_fingerprint(&mc) != h.model_fingerprint) continue;
        const int *fin = cfg->model.input_size;
        char p[300];
        vx_log("%s: %s is a checkpoint of stage %d of its run's train.stages (input %dx%dx%d), whose model is not "
               "the final config's (%dx%dx%d: %s's positions follow the input size); read at stage %d's size\n", who,
               vx_escape(ckpt, p, sizeof p), k, st.input_size[0], st.input_size[1], st.input_size[2], fin[0], fin[1],
               fin[2], cfg->model.family, k);
        memcpy(cfg->model.input_size, st.input_size, sizeof cfg->model.input_size);
        return;
    }
}
