/* launcher_settings.h: the training settings a launcher hands a rank besides its place in the run (which
 * parallel/launch.h reads): `accelerate launch`'s ACCELERATE_* variables and a DeepSpeed ds_config.json
 * (`train --deepspeed-config FILE`, or accelerate's --deepspeed_config_file). Without this a user asking accelerate
 * for bf16 trained in float32 without a word.
 *
 * Each setting becomes a config key, as a flag would set it, added after the command line's flags:
 *   - a flag or --set of the same key that agrees wins (nothing changes); one that contradicts it is one line naming
 *     both, exit 2 (which of the two the user meant cannot be guessed); an explicit "auto" defers to the launcher;
 *   - two launcher sources that contradict each other (ACCELERATE_MIXED_PRECISION=bf16, ds_config fp16.enabled) are
 *     the same error;
 *   - a value voxscale cannot honour (fp8, ZeRO stage 3, nvme offload) or does not know is exit 2 naming where it
 *     came from;
 *   - rank 0 prints one line per setting taken: "accelerate: mixed precision bf16 -> --amp bf16".
 * The config's own validation then applies as for any flag (bf16 on a CPU without AVX512-BF16 or AMX is refused
 * there, by name, never trained in float32). docs/distributed-and-zero.md has the table of every variable. */
#pragma once
#include <stdio.h>
#include <string.h>

#include "app/cli.h"
#include "core/util.h"

#define LAUNCHER_MAX_SETTINGS 24

typedef struct {
    const char *key;  /* the config key: "train.precision" */
    char value[64];   /* in the config's words: "bf16" */
    char origin[160]; /* where it came from, for errors: "ACCELERATE_MIXED_PRECISION=bf16" */
    char what[160];   /* the line rank 0 prints, up to the arrow: "accelerate: mixed precision bf16" */
    const char *flag; /* the flag it stands for: "--amp" */
    int weak;         /* a value the launcher writes whether or not the user asked (accelerate's mixed precision
                         "no"): an explicit flag overrides it, said in a line, rather than exit 2 */
} LauncherSetting;

typedef struct {
    LauncherSetting s[LAUNCHER_MAX_SETTINGS];
    int n;
    char notes[1200]; /* lines for rank 0 to print (a ds_config's keys that were not read) */
} LauncherSettings;

/* Appends one setting (exit 2 when there are too many: a launcher source that long is not one of ours). Inline
 * here: deepspeed_config.c adds settings and launcher_settings.c calls deepspeed_config.c's reader, and a function
 * of either called by the other made the two source files a circle (check_layers --objects). */
static inline LauncherSetting *launcher_setting_add(LauncherSettings *ls, const char *key, const char *flag,
                                                    const char *value) {
    if (ls->n >= LAUNCHER_MAX_SETTINGS) vx_usage_error("launcher settings: more than %d", LAUNCHER_MAX_SETTINGS);
    LauncherSetting *s = &ls->s[ls->n++];
    memset(s, 0, sizeof *s);
    s->key = key;
    s->flag = flag;
    snprintf(s->value, sizeof s->value, "%s", value);
    return s;
}

/* The ACCELERATE_* variables of this process's environment, as accelerate 0.2x's `accelerate launch` sets them. */
void launcher_settings_accelerate(LauncherSettings *ls, const char **ds_config_file);
/* A DeepSpeed ds_config.json (deepspeed_config.c): `world` checks train_batch_size against the other batch keys. */
void launcher_settings_deepspeed(LauncherSettings *ls, const char *path, int world);

/* train: the launcher's settings (accelerate's variables, --deepspeed-config) added to a's flags, checked against
 * them as above, and printed on rank 0. Between cli_parse_flags and cli_load_config. */
void launcher_settings_take(CliArgs *a);
