/* resume_config.c: the config a resumed run runs with (see resume_config.h). */
#include "app/resume_config.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fsutil.h"
#include "core/util.h"

void resume_config_path(const char *ckpt, char *out, size_t len) {
    char tmp[CONFIG_STR * 2];
    snprintf(tmp, sizeof tmp, "%s", ckpt);
    size_t n = strlen(tmp);
    while (n > 1 && tmp[n - 1] == '/') tmp[--n] = 0;
    const char *base = strrchr(tmp, '/') ? strrchr(tmp, '/') + 1 : tmp;
    char *dir = strcmp(base, "manifest.json") == 0 ? dirname(tmp) : tmp; /* a sharded checkpoint's manifest */
    char up[CONFIG_STR * 2];
    snprintf(up, sizeof up, "%s", dirname(dir)); /* runs/r/checkpoints */
    snprintf(out, len, "%s/config.json", dirname(up));
}

/* 1 when the run's config.json beside ckpt can be read (path into out) */
static int run_config(const char *ckpt, char *out, size_t len) {
    resume_config_path(ckpt, out, len);
    char why[160];
    int is_dir = 0;
    return fs_input_kind(out, 0, &is_dir, why, sizeof why) && !is_dir;
}

void resume_config_source(const CliArgs *a, Config *cfg) {
    if (!a->resume) {
        config_load(cfg, DEFAULT_CONFIG);
        return;
    }
    char path[CONFIG_STR * 2 + 16], p[300];
    if (!run_config(a->resume, path, sizeof path))
        vx_usage_error("--resume %s: no config.json of its run at %s (a run resumes with the config it was trained "
                       "with); give that config with --config FILE", vx_escape(a->resume, p, sizeof p), path);
    config_load(cfg, path);
    vx_log("resume: config %s (the run's config.json beside the checkpoint's folder)\n", path);
}

/* Keys a resumed run may change, which the comparison leaves out: where and how fast it runs, how long, how often it
 * logs, validates and checkpoints, its outputs, its sharding and launch (a checkpoint resumes into any), the batch
 * split (resumed at another batch or accumulation, it reads on from the next unseen sample), what the hardware plan
 * and --amp auto resolve, and what only a fresh run or a sampler reads. What remains is what the run computes: the
 * model, the data, the optimizer, the seed. `asked` is --config's. */
static int may_differ(const char *key, const Config *asked) {
    static const char *const FREE[] = {
        "output.", "dist.", "train.steps", "train.log_every", "train.val_every", "train.val_samples",
        "train.ckpt_every", "train.best_metric", "train.device", "train.threads", "train.deterministic", "train.tf32",
        "train.compile", "train.fuse", "train.checkpoint_activations", "train.batch_size", "train.grad_accum",
        "train.init_from", "train.init_allow", "data.prefetch", "data.workers", "data.cache_max_gib",
        "model.pad_input_channels", "diffusion.sample_steps", "diffusion.timestep_spacing"};
    for (size_t i = 0; i < sizeof FREE / sizeof *FREE; i++) {
        const size_t n = strlen(FREE[i]);
        if (FREE[i][n - 1] == '.' ? strncmp(key, FREE[i], n) == 0 : strcmp(key, FREE[i]) == 0) return 1;
    }
    if (strcmp(key, "train.precision") == 0) return strcmp(asked->train.precision, "auto") == 0;
    if (strcmp(key, "train.loss_scale") == 0) return strcmp(asked->train.loss_scale, "auto") == 0;
    return 0;
}

void resume_config_check(const CliArgs *a) {
    char path[CONFIG_STR * 2 + 16];
    if (!a->resume || !a->config_given || !run_config(a->resume, path, sizeof path)) return;
    Config run;
    config_load(&run, path);
    cli_apply_overrides(a, &run); /* the flags change both alike: only the files' difference counts */
    char first[400] = "", others[300] = "";
    int n = 0;
    for (int i = 0; i < config_key_count(); i++) {
        char key[96];
        config_key_name(i, key, sizeof key);
        if (may_differ(key, &a->cfg)) continue;
        char *here = config_key_json(&a->cfg, i), *there = config_key_json(&run, i);
        if (strcmp(here, there) != 0) {
            char h[120], t[120];
            if (n == 0)
                snprintf(first, sizeof first, "%s is %s there, %s here", key, vx_escape(there, t, sizeof t),
                         vx_escape(here, h, sizeof h));
            else if (strlen(others) + strlen(key) + 3 < sizeof others)
                snprintf(others + strlen(others), sizeof others - strlen(others), "%s%s", n > 1 ? ", " : "", key);
            n++;
        }
        free(here);
        free(there);
    }
    if (n == 0) return;
    char more[340] = "";
    if (n > 1) snprintf(more, sizeof more, " (and %d more: %s)", n - 1, others);
    vx_usage_error("--config %s differs from the run's config.json (%s): %s%s; resume without --config to run with "
                   "the run's own, or change a key on purpose with --set KEY=VALUE", a->config_path, path, first, more);
}
