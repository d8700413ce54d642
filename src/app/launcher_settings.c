/* launcher_settings.c: accelerate's ACCELERATE_* variables read into config keys, and every launcher setting
 * (these and a ds_config.json's, deepspeed_config.c) checked against the command line's flags (see
 * launcher_settings.h). The variables' names and values are the ones accelerate 0.2x's launcher writes
 * (accelerate/utils/launch.py: prepare_simple_launcher_cmd_env, prepare_multi_gpu_env, prepare_deepspeed_cmd_env)
 * and its DeepSpeedPlugin reads (accelerate/utils/dataclasses.py). */
#include "app/launcher_settings.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/util.h"
#include "parallel/launch.h"

/* accelerate's own reading of a flag (strtobool): 1, 0, or -1 for anything else. */
static int accel_bool(const char *v) {
    static const char *yes[] = {"y", "yes", "t", "true", "on", "1"}, *no[] = {"n", "no", "f", "false", "off", "0"};
    for (int i = 0; i < 6; i++) {
        if (strcasecmp(v, yes[i]) == 0) return 1;
        if (strcasecmp(v, no[i]) == 0) return 0;
    }
    return -1;
}

static const char *env_or_null(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static int env_flag(const char *name) {
    const char *v = env_or_null(name);
    if (!v) return 0;
    const int b = accel_bool(v);
    if (b < 0) vx_usage_error("%s=%s: expected true or false (as accelerate launch writes it)", name, v);
    return b;
}

/* A whole number lo..hi from a variable, or exit 2 naming it. */
static long env_count(const char *name, const char *v, long lo, long hi) {
    char *end;
    const long n = strtol(v, &end, 10);
    if (*end || end == v || n < lo || n > hi) vx_usage_error("%s=%s: expected a whole number %ld..%ld", name, v, lo, hi);
    return n;
}

static LauncherSetting *add_env(LauncherSettings *ls, const char *var, const char *said, const char *key,
                                const char *flag, const char *value) {
    LauncherSetting *s = launcher_setting_add(ls, key, flag, value);
    snprintf(s->origin, sizeof s->origin, "%s=%s (accelerate launch)", var, getenv(var));
    snprintf(s->what, sizeof s->what, "accelerate: %s", said);
    return s;
}

/* accelerate's DynamoBackend names (0.21 and later): any of them asks for a compiled step, ours is --compile. */
static const char *DYNAMO[] = {"EAGER", "AOT_EAGER", "INDUCTOR", "AOT_TS_NVFUSER", "NVPRIMS_NVFUSER", "CUDAGRAPHS",
                               "OFI", "FX2TRT", "ONNXRT", "TENSORRT", "IPEX", "TVM", "NVFUSER", "AOT_NVFUSER",
                               "AOT_CUDAGRAPHS", "TORCHXLA_TRACE_ONCE", "HPU_BACKEND"};

static void accelerate_deepspeed(LauncherSettings *ls, const char **ds_config_file) {
    char said[96];
    const char *file = env_or_null("ACCELERATE_DEEPSPEED_CONFIG_FILE");
    if (file && strcasecmp(file, "none") != 0) *ds_config_file = file;
    const char *v = env_or_null("ACCELERATE_DEEPSPEED_ZERO_STAGE");
    if (v) {
        const long stage = env_count("ACCELERATE_DEEPSPEED_ZERO_STAGE", v, 0, 3);
        if (stage == 3)
            vx_usage_error("ACCELERATE_DEEPSPEED_ZERO_STAGE=3: voxscale has no ZeRO-3 (sharded parameters); use "
                           "--zero_stage 2 (gradients and optimizer state sharded) or 1");
        snprintf(said, sizeof said, "deepspeed zero stage %ld", stage);
        add_env(ls, "ACCELERATE_DEEPSPEED_ZERO_STAGE", said, "dist.zero", "--zero", v);
    } else if (!*ds_config_file) {
        /* accelerate's DeepSpeedPlugin defaults to stage 2 when --use_deepspeed names none: what such a user gets
         * from accelerate, so also here; an explicit --zero overrides it (said in a line) */
        LauncherSetting *s = launcher_setting_add(ls, "dist.zero", "--zero", "2");
        snprintf(s->origin, sizeof s->origin, "ACCELERATE_USE_DEEPSPEED=true without a zero stage (accelerate's default 2)");
        snprintf(s->what, sizeof s->what, "accelerate: deepspeed without --zero_stage (its default: stage 2)");
        s->weak = 1;
    }
    if ((v = env_or_null("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE"))) {
        if (strcasecmp(v, "none") != 0 && strcasecmp(v, "cpu") != 0)
            vx_usage_error("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE=%s: voxscale offloads the optimizer to "
                           "the cpu or not at all (none); nvme is not supported", v);
        snprintf(said, sizeof said, "deepspeed offload optimizer %s", strcasecmp(v, "cpu") == 0 ? "cpu" : "none");
        add_env(ls, "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", said, "dist.offload_optimizer", NULL,
                strcasecmp(v, "cpu") == 0 ? "cpu" : "none");
    }
    if ((v = env_or_null("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE")) && strcasecmp(v, "none") != 0)
        vx_usage_error("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE=%s: parameter offload is ZeRO-3's, which voxscale "
                       "has not; drop --offload_param_device", v);
    if ((v = env_or_null("ACCELERATE_GRADIENT_CLIPPING")) && strcasecmp(v, "none") != 0) {
        char *end;
        const double clip = strtod(v, &end);
        if (*end || end == v || !(clip >= 0))
            vx_usage_error("ACCELERATE_GRADIENT_CLIPPING=%s: expected a number >= 0 (the gradient norm's limit) or "
                           "none", v);
        snprintf(said, sizeof said, "gradient clipping %s", v);
        add_env(ls, "ACCELERATE_GRADIENT_CLIPPING", said, "train.grad_clip", NULL, v);
    }
}

void launcher_settings_accelerate(LauncherSettings *ls, const char **ds_config_file) {
    *ds_config_file = NULL;
    char said[96];
    const char *v = env_or_null("ACCELERATE_MIXED_PRECISION");
    if (v) {
        static const char *ours[][2] = {{"no", "off"}, {"fp16", "fp16"}, {"bf16", "bf16"}};
        int k = -1;
        for (int i = 0; i < 3; i++)
            if (strcasecmp(v, ours[i][0]) == 0) k = i;
        if (k < 0 && strcasecmp(v, "fp8") == 0)
            vx_usage_error("ACCELERATE_MIXED_PRECISION=fp8: voxscale has no fp8 training; launch with "
                           "--mixed_precision bf16 or fp16");
        if (k < 0)
            vx_usage_error("ACCELERATE_MIXED_PRECISION=%s: unknown mixed precision; accelerate's are no, fp16, bf16 "
                           "(and fp8, which voxscale has not)", v);
        snprintf(said, sizeof said, "mixed precision %s", ours[k][0]);
        /* accelerate writes "no" whenever --mixed_precision is not given, so "no" cannot tell a user's float32 from
         * accelerate's default: an explicit --amp overrides it (said in a line), as a script's own
         * Accelerator(mixed_precision=...) overrides it in accelerate */
        add_env(ls, "ACCELERATE_MIXED_PRECISION", said, "train.precision", "--amp", ours[k][1])->weak = k == 0;
    }
    if (env_flag("ACCELERATE_USE_CPU")) add_env(ls, "ACCELERATE_USE_CPU", "use cpu", "train.device", "--device", "cpu");
    if ((v = env_or_null("ACCELERATE_DYNAMO_BACKEND")) && strcasecmp(v, "no") != 0) {
        int known = 0;
        for (size_t i = 0; i < sizeof DYNAMO / sizeof *DYNAMO; i++) known |= strcasecmp(v, DYNAMO[i]) == 0;
        if (!known)
            vx_usage_error("ACCELERATE_DYNAMO_BACKEND=%s: not one of accelerate's dynamo backends (NO, EAGER, "
                           "INDUCTOR, ...); any backend but NO is voxscale's --compile", v);
        snprintf(said, sizeof said, "dynamo backend %s", v);
        add_env(ls, "ACCELERATE_DYNAMO_BACKEND", said, "train.compile", "--compile", "1");
    }
    if ((v = env_or_null("ACCELERATE_GRADIENT_ACCUMULATION_STEPS"))) {
        env_count("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", v, 1, 1024);
        snprintf(said, sizeof said, "gradient accumulation steps %s", v);
        add_env(ls, "ACCELERATE_GRADIENT_ACCUMULATION_STEPS", said, "train.grad_accum", NULL, v);
    }
    if (env_flag("ACCELERATE_USE_FSDP"))
        vx_usage_error("ACCELERATE_USE_FSDP=true: voxscale has no FSDP (sharded parameters); launch with "
                       "--use_deepspeed --zero_stage 2 for sharded gradients and optimizer state");
    /* accelerate reads its DeepSpeed plugin's variables only with --use_deepspeed; so do we */
    if (env_flag("ACCELERATE_USE_DEEPSPEED")) accelerate_deepspeed(ls, ds_config_file);
}

/* Two values of one key agree: the same text, or the same number ("1.0" and "1"). */
static int same_value(const char *a, const char *b) {
    if (strcasecmp(a, b) == 0) return 1;
    char *ea, *eb;
    const double x = strtod(a, &ea), y = strtod(b, &eb);
    return *a && *b && !*ea && !*eb && x == y;
}

/* "--amp bf16", "--compile", "--set train.grad_accum=4": the flag a setting stands for. */
static void as_flag(const LauncherSetting *s, char *out, size_t len) {
    if (!s->flag) snprintf(out, len, "--set %s=%s", s->key, s->value);
    else if (strcmp(s->key, "train.compile") == 0) snprintf(out, len, "%s", s->flag);
    else snprintf(out, len, "%s %s", s->flag, s->value);
}

/* The command line's flag i as the user wrote it: "--amp fp16", "--set train.grad_accum=4". */
static void given(const CliArgs *a, int i, char *out, size_t len) {
    if (strcmp(a->set_flags[i], "--set") == 0) snprintf(out, len, "--set %s=%s", a->set_keys[i], a->set_values[i]);
    else snprintf(out, len, "%s %s", a->set_flags[i], a->set_values[i]);
}

static void apply(CliArgs *a, LauncherSettings *ls, int print) {
    int taken[LAUNCHER_MAX_SETTINGS] = {0};
    for (int k = 0; k < ls->n; k++) {
        const LauncherSetting *s = &ls->s[k];
        char as[128];
        as_flag(s, as, sizeof as);
        int e = -1; /* the command line's last flag of this key: the one in force */
        for (int i = 0; i < a->n_cmdline; i++)
            if (strcmp(a->set_keys[i], s->key) == 0) e = i;
        if (e >= 0 && strcasecmp(a->set_values[e], "auto") != 0) {
            char flag[160];
            given(a, e, flag, sizeof flag);
            if (same_value(a->set_values[e], s->value)) {
                if (print) vx_log("%s = %s, as the command line says\n", s->what, as);
            } else if (s->weak) {
                if (print) vx_log("%s: %s on the command line wins\n", s->what, flag);
            } else {
                vx_usage_error("%s asks for %s but the command line says %s; drop one of them", s->origin, as, flag);
            }
            continue;
        }
        int dup = 0; /* a setting of the same key from another source: both must agree */
        for (int j = 0; j < k && !dup; j++) {
            if (!taken[j] || strcmp(ls->s[j].key, s->key) != 0) continue;
            if (!same_value(ls->s[j].value, s->value)) {
                if (!s->weak) /* (weak settings come last: launcher_settings_take) */
                    vx_usage_error("%s contradicts %s (%s %s); make them agree", s->origin, ls->s[j].origin,
                                   s->key, ls->s[j].value);
                if (print) vx_log("%s: %s wins\n", s->what, ls->s[j].what);
            }
            dup = 1;
        }
        if (dup) continue;
        if (a->n_set >= 64) vx_usage_error("too many options");
        a->set_keys[a->n_set] = s->key;
        a->set_values[a->n_set] = s->value;
        a->set_flags[a->n_set++] = s->origin; /* the config's own errors then name the variable or file */
        taken[k] = 1;
        if (print) vx_log("%s -> %s\n", s->what, as);
    }
}

void launcher_settings_take(CliArgs *a) {
    static LauncherSettings ls; /* a's set_values point into it for the rest of the run */
    const char *accel_file;
    memset(&ls, 0, sizeof ls);
    launcher_settings_accelerate(&ls, &accel_file);
    DistEnv env;
    dist_detect(&env);
    /* the ranks a ds_config's train_batch_size counts: the launcher's, or train --gpus N's own */
    int world = env.world;
    for (int i = 0; i < a->n_cmdline; i++)
        if (strcmp(a->set_keys[i], "dist.gpus") == 0 && world == 1 && atoi(a->set_values[i]) > 1)
            world = atoi(a->set_values[i]);
    /* weak settings go last, so that a real one of another source is taken first */
    if (accel_file) launcher_settings_deepspeed(&ls, accel_file, world);
    if (a->deepspeed_config) launcher_settings_deepspeed(&ls, a->deepspeed_config, world);
    static LauncherSettings ordered;
    memset(&ordered, 0, sizeof ordered);
    memcpy(ordered.notes, ls.notes, sizeof ls.notes);
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < ls.n; k++)
            if (ls.s[k].weak == pass) ordered.s[ordered.n++] = ls.s[k];
    ls = ordered;
    /* a spawned rank's parent (train --gpus) has printed them already */
    const int print = env.rank == 0 && strcmp(env.launcher, "spawn") != 0;
    if (print && ls.notes[0]) vx_log("%s", ls.notes);
    apply(a, &ls, print);
}
