/* weights_source.c: the config of a checkpoint or a weights file (see weights_source.h). */
#include "app/weights_source.h"

#include <libgen.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "core/fsutil.h"
#include "core/outguard.h"
#include "core/safetensors.h"
#include "core/util.h"
#include "ckpt/ckpt.h"
#include "hw/hw_plan.h"
#include "ckpt/weights.h"

#define META_CONFIG "voxscale.config"

void weights_config_beside(const char *ckpt, char *out, size_t len) {
    char tmp[CONFIG_STR * 2];
    snprintf(tmp, sizeof tmp, "%s", ckpt);
    char *folder = dirname(tmp); /* runs/x/checkpoints */
    char up[CONFIG_STR * 2];
    snprintf(up, sizeof up, "%s", folder);
    snprintf(out, len, "%s/config.json", dirname(up));
}

/* Weights of a cascade's stage (export wrote that stage's network and volume as the model section, and every
 * stage's network in train.stages): the model section with the earlier stages' networks it is conditioned on. */
static void cascade_stage_of_model(Config *cfg) {
    for (int k = cfg->train.n_stages - 1; k >= 0; k--) {
        ModelConfig mc;
        config_stage_model(&cfg->model, &cfg->train, k, &mc);
        if (mc.cascade_n > 0 && memcmp(mc.input_size, cfg->model.input_size, sizeof mc.input_size) == 0 &&
            config_same_network(&mc.vit, &cfg->model.vit)) {
            cfg->model = mc;
            return;
        }
    }
}

void weights_config_source(const CliArgs *a, Config *cfg) {
    char p[300];
    if (a->ckpt) {
        char why[200];
        int is_dir = 0; /* the checkpoint itself first: a missing one was reported as a missing config.json */
        if (!fs_input_kind(a->ckpt, 0, &is_dir, why, sizeof why))
            vx_usage_error("%s: %s; check the path given to --ckpt", vx_escape(a->ckpt, p, sizeof p), why);
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
        cascade_stage_of_model(cfg);
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
        ModelConfig mc;
        config_stage_model(&cfg->model, &cfg->train, k, &mc); /* its size, network and cascade */
        if (config_model_fingerprint(&mc) != h.model_fingerprint) continue;
        const int *fin = cfg->model.input_size;
        char p[300];
        if (mc.cascade_n > 0) /* a cascade's stage: its network and the earlier ones, which its checkpoint holds */
            vx_log("%s: %s is a checkpoint of stage %d of its run's train.stages (input %dx%dx%d), a cascade of %d "
                   "networks; read as that stage's model\n", who, vx_escape(ckpt, p, sizeof p), k, st.input_size[0],
                   st.input_size[1], st.input_size[2], mc.cascade_n + 1);
        else
            vx_log("%s: %s is a checkpoint of stage %d of its run's train.stages (input %dx%dx%d), whose model is not "
                   "the final config's (%dx%dx%d: %s's positions follow the input size); read at stage %d's size\n",
                   who, vx_escape(ckpt, p, sizeof p), k, st.input_size[0], st.input_size[1], st.input_size[2], fin[0],
                   fin[1], fin[2], cfg->model.family, k);
        cfg->model = mc;
        return;
    }
}

/* "[8, 1, 3, 3, 3]": parameter i's shape as PyTorch holds it */
static void shape_text(const Model *m, int i, char *out, size_t len) {
    int64_t shape[5];
    const int nd = weights_torch_shape(m, &m->params[i], shape);
    st_shape_text(shape, nd, out, len);
}

void weights_check_ckpt_model(const char *ckpt, uint64_t fingerprint, uint64_t param_count, const Model *m,
                              const char *run_config, const char *config_desc, const char *instead) {
    if (fingerprint == config_model_fingerprint(&m->cfg) && param_count == (uint64_t)m->param_count) return;
    if (!run_config || access(run_config, R_OK) != 0) return; /* (the reader's own line: counts and fingerprints) */
    Config rc;
    config_load(&rc, run_config);
    if (config_model_fingerprint(&rc.model) != fingerprint) return; /* its run's config does not describe it either */
    ModelOptions opt = hw_model_options(&rc.train);
    opt.precision = "off"; /* (the parameters' layout does not depend on the compute type) */
    Model *r = model_build(&rc.model, &opt, 1, backend_cpu());
    char p[300], what[600] = "";
    for (int i = 0; i < r->n_params || i < m->n_params; i++) {
        char a[96] = "none", b[96] = "none";
        if (i < r->n_params) shape_text(r, i, a, sizeof a);
        if (i < m->n_params) shape_text(m, i, b, sizeof b);
        const char *na = i < r->n_params ? r->params[i].name : "", *nb = i < m->n_params ? m->params[i].name : "";
        if (strcmp(na, nb) == 0 && strcmp(a, b) == 0) continue;
        if (strcmp(na, nb) == 0)
            snprintf(what, sizeof what, "parameter \"%s\" is %s in it, %s in the model %s describes", na, a, b,
                     config_desc);
        else
            snprintf(what, sizeof what, "its parameter %d is \"%s\" %s, the model's of %s \"%s\" %s", i,
                     i < r->n_params ? na : "(none)", a, config_desc, i < m->n_params ? nb : "(none)", b);
        break;
    }
    Config given = rc; /* the same names and shapes (model.norm_groups, say): the first model key that differs */
    given.model = m->cfg;
    for (int k = 0; !what[0] && k < config_key_count(); k++) {
        char name[96];
        config_key_name(k, name, sizeof name);
        if (strncmp(name, "model.", 6) != 0) continue;
        char *x = config_key_json(&rc, k), *y = config_key_json(&given, k);
        if (strcmp(x, y) != 0)
            snprintf(what, sizeof what, "the same parameter names and shapes, but %s is %.80s in its run's config "
                     "and %.80s in %s", name, x, y, config_desc);
        free(x);
        free(y);
    }
    if (!what[0]) snprintf(what, sizeof what, "its model section differs from the one %s gives", config_desc);
    const long n = m->param_count;
    model_free(r);
    vx_usage_error("%s: a checkpoint of another model than %s: %s (%llu parameters in it, %ld in that model; its run's "
                   "%s describes it); %s", vx_escape(ckpt, p, sizeof p), config_desc, what,
                   (unsigned long long)param_count, n, run_config, instead);
}

void weights_check_ckpt_config(const CliArgs *a, const Model *m) {
    if (!a->ckpt || !a->config_given) return; /* (without --config the config is the run's own) */
    CkptHeader h;
    const size_t need = CKPT_V1_HEADER_BYTES;
    FILE *f = fopen(a->ckpt, "rb");
    if (!f) return;
    const size_t got = fread(&h, 1, need, f);
    fclose(f);
    if (got != need || memcmp(h.magic, CKPT_MAGIC, sizeof h.magic) != 0) return; /* (ckpt_read says what it is) */
    char beside[CONFIG_STR * 2 + 16], desc[CONFIG_STR + 16];
    weights_config_beside(a->ckpt, beside, sizeof beside);
    snprintf(desc, sizeof desc, "--config %s", a->config_path);
    weights_check_ckpt_model(a->ckpt, h.model_fingerprint, h.param_count, m, beside, desc,
                             "drop --config to read it with its run's config.json, or give the config it was trained "
                             "with");
}
