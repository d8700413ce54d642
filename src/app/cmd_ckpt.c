/* cmd_ckpt.c: `voxscale ckpt consolidate`: a sharded checkpoint (ckpt/ckpt_shard.h, written by a run with dist.zero
 * 1 or 2) made one ordinary checkpoint, the file an unsharded run of the same state writes, byte for byte: for
 * `train --resume` anywhere, `probe`, and whatever reads voxscale checkpoints. The model's layout comes from the
 * run's config.json (the sharded checkpoint's run directory, or --config); every shard is verified first (a missing,
 * truncated, corrupted or foreign one is one line naming it, exit 2), and the output is written atomically and
 * never over an existing file unless --overwrite, and never over the files it reads (core/outguard.h). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/commands.h"
#include "app/weights_source.h"
#include "core/config.h"
#include "core/outguard.h"
#include "core/suggest.h"
#include "core/util.h"
#include "ckpt/ckpt.h"
#include "ckpt/ckpt_shard.h"
#include "hw/hw_plan.h"
#include "graph/model.h"

static const char *HELP =
    "usage: voxscale ckpt consolidate SHARDED [--config FILE] [--out FILE] [--overwrite]\n"
    "  SHARDED       a sharded checkpoint: runs/<run>/checkpoints/step_N.zero (its directory or manifest.json)\n"
    "  --config FILE the run's config (default: config.json of the run directory two levels above SHARDED)\n"
    "  --out FILE    the ordinary checkpoint to write (default: SHARDED with .zero replaced by .ckpt); an existing\n"
    "                file is refused (nothing written) unless --overwrite; the files read never are\n";

/* dir of path with n trailing components removed ("a/b/c", 2 -> "a"); "." when nothing is left */
static void up(const char *path, int n, char *out, size_t len) {
    snprintf(out, len, "%s", path);
    for (int i = 0; i < n; i++) {
        size_t l = strlen(out);
        while (l > 1 && out[l - 1] == '/') out[--l] = 0;
        char *slash = strrchr(out, '/');
        if (!slash) {
            snprintf(out, len, ".");
            return;
        }
        *(slash == out ? slash + 1 : slash) = 0;
    }
}

/* The files of the sharded checkpoint (its manifest and shards): inputs no output may replace. */
static void shards_are_inputs(const char *dir) {
    DIR *d = opendir(dir);
    char path[4400];
    for (struct dirent *e; d && (e = readdir(d));) {
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (e->d_name[0] != '.') out_input(path, "the sharded checkpoint");
    }
    if (d) closedir(d);
}

static int consolidate(int argc, char **argv) {
    const char *src = NULL, *config = NULL, *out = NULL;
    int overwrite = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(HELP, stdout);
            return 0;
        }
        if (strcmp(argv[i], "--overwrite") == 0) {
            overwrite = 1;
            continue;
        }
        if ((strcmp(argv[i], "--config") == 0 || strcmp(argv[i], "--out") == 0) && i + 1 < argc) {
            *(strcmp(argv[i], "--config") == 0 ? &config : &out) = argv[i + 1];
            i++;
        } else if (argv[i][0] == '-' || src) {
            char near[32], hint[64];
            suggest_nearest_in_list(argv[i] + strspn(argv[i], "-"), ",config,out,overwrite,help,", near, sizeof near);
            vx_usage_error("ckpt consolidate: unexpected argument \"%s\"%s (see voxscale ckpt --help)", argv[i],
                           suggest_phrase(argv[i][0] == '-' ? near : NULL, "--", hint, sizeof hint));
        } else {
            src = argv[i];
        }
    }
    if (!src) vx_usage_error("ckpt consolidate: name the sharded checkpoint (see voxscale ckpt --help)");
    char dir[4096], cfg_path[4200], out_path[4200];
    struct stat sb;
    if (stat(src, &sb) == 0 && S_ISDIR(sb.st_mode)) snprintf(dir, sizeof dir, "%s", src);
    else up(src, 1, dir, sizeof dir); /* its manifest.json */
    if (!ckpt_is_sharded(src))
        vx_usage_error("%s: not a sharded checkpoint (a step_N.zero directory or its manifest.json)", src);
    if (config) snprintf(cfg_path, sizeof cfg_path, "%s", config);
    else {
        char run[4096];
        up(dir, 2, run, sizeof run);
        snprintf(cfg_path, sizeof cfg_path, "%s/config.json", run);
    }
    if (out) snprintf(out_path, sizeof out_path, "%s", out);
    else {
        char d[4096];
        snprintf(d, sizeof d, "%s", dir);
        size_t l = strlen(d);
        while (l > 1 && d[l - 1] == '/') d[--l] = 0;
        if (l > 5 && strcmp(d + l - 5, ".zero") == 0) d[l - 5] = 0;
        snprintf(out_path, sizeof out_path, "%s.ckpt", d);
    }
    out_input(cfg_path, config ? "--config" : "the run's config.json");
    shards_are_inputs(dir);
    out_claim(out_path, overwrite, "ckpt consolidate --out");
    if (!config && access(cfg_path, F_OK) != 0) /* (config_load's line said "check the path given to --config") */
        vx_usage_error("ckpt consolidate: no config.json of its run at %s (two levels above %s; a sharded checkpoint is "
                       "read with its run's config); give it with --config FILE", cfg_path, dir);
    Config cfg;
    config_load(&cfg, cfg_path);
    ModelOptions opt = hw_model_options(&cfg.train);
    opt.precision = "off"; /* the layout of the parameters does not depend on the compute type */
    Model *m = model_build(&cfg.model, &opt, 1, backend_cpu());
    ckpt_set_reader("SHARDED", "consolidate another checkpoint");
    uint64_t fp, count;
    if (config && ckpt_sharded_peek(dir, &fp, &count)) { /* another model: which parameter differs, not the counts */
        char run[4096], beside[4200], desc[4200];
        up(dir, 2, run, sizeof run);
        snprintf(beside, sizeof beside, "%s/config.json", run);
        snprintf(desc, sizeof desc, "--config %s", config);
        weights_check_ckpt_model(dir, fp, count, m, beside, desc, "drop --config to read it with its run's "
                                 "config.json, or give the config it was trained with");
    }
    ShardedCkpt sc;
    ckpt_sharded_read(dir, m, 0, &sc);
    CkptContent content;
    ckpt_sharded_content(&sc, m, &content);
    size_t len;
    unsigned char *bytes = ckpt_bytes(&content, &len);
    out_write(out_path, bytes, len, overwrite, "ckpt consolidate --out");
    free(bytes);
    printf("consolidated: %s (step %lld, %d shards of ZeRO-%d, %llu parameters) -> %s\n", dir,
           (long long)sc.header.step, sc.world, sc.zero, (unsigned long long)sc.header.param_count, out_path);
    ckpt_content_free(&content);
    ckpt_sharded_free(&sc);
    model_free(m);
    return 0;
}

int cmd_ckpt(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "consolidate") == 0) return consolidate(argc - 1, argv + 1);
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(HELP, stdout);
        return 0;
    }
    if (argc >= 2)
        cli_unknown_command("ckpt: ", argv[1], (const CliCommand[]){{"consolidate", NULL, NULL}}, 1, "subcommand",
                            "expected `ckpt consolidate SHARDED` (see voxscale ckpt --help)");
    vx_usage_error("ckpt: expected `ckpt consolidate SHARDED` (see voxscale ckpt --help)");
}
