/* cli.h: command-line parsing shared by the subcommands. Flags that mirror a config key (--steps, --lr, ...) and
 * --set KEY=VALUE are applied after the config file, in command-line order, through the config's own validation;
 * an unknown flag or a flag the subcommand does not take is one line and exit 2. */
#pragma once
#include "core/config.h"

#define DEFAULT_CONFIG "configs/default.json"

typedef struct {
    const char *config_path, *resume, *results_dir;
    int warmup, iters; /* bench: -1 when not given */
    const char *ops;   /* bench kernels --ops: NULL when not given */
    const char *attention_tokens; /* bench kernels --attention-tokens: NULL when not given */
    int budget_ms, reps; /* bench kernels: -1 when not given */
    int sample_seed;     /* predict --sample-seed (a sampler's noise; train.seed must stay the checkpoint's): -1 */
    const char *steps_flag; /* "--steps" or "--set" when the command line set train.steps, else NULL */
    const char *ckpt, *weights, *data, *out; /* export and predict: --ckpt, --weights, --data, --out (or NULL) */
    int config_given;                  /* --config was on the command line */
    int overwrite;                     /* --overwrite: the outputs the user named may replace files (not inputs) */
    Config cfg;
} CliArgs;

/* Where a subcommand's config comes from when --config is not given (export and predict: beside the checkpoint, or
 * in the weights file's metadata): fills cfg (defaults included) or exits 2 saying why; NULL: DEFAULT_CONFIG. */
typedef void (*CliConfigSource)(const CliArgs *a, Config *cfg);

/* `allowed` lists the long option names this subcommand takes, as ",name,name,". Prints `help` for --help. */
void cli_parse(int argc, char **argv, CliArgs *a, const char *help, const char *allowed);
/* The same with the config taken from `source` unless --config is given. */
void cli_parse_from(int argc, char **argv, CliArgs *a, const char *help, const char *allowed, CliConfigSource source);
