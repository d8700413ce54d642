/* cli.h: command-line parsing shared by the subcommands. Flags that mirror a config key (--steps, --lr, ...) and
 * --set KEY=VALUE are applied after the config file, in command-line order, through the config's own validation;
 * an unknown flag or a flag the subcommand does not take is one line and exit 2, naming the nearest flag the command
 * takes when one is near. -v / --verbose (every command) prints the full plan (core/util.h's vx_verbose). */
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
    /* the flags that set config keys (--steps, --set K=V, ...), in command-line order: applied after the config file
     * (cli_apply_overrides), and again to another config a command compares with it (train --resume) */
    int n_set;
    const char *set_keys[64], *set_values[64], *set_flags[64];
    int n_cmdline; /* how many of them the command line gave; after them come a launcher's (app/launcher_settings.h) */
    const char *deepspeed_config; /* train --deepspeed-config FILE: NULL when not given */
    Config cfg;
} CliArgs;

/* Where a subcommand's config comes from when --config is not given (export and predict: beside the checkpoint, or
 * in the weights file's metadata): fills cfg (defaults included) or exits 2 saying why; NULL: DEFAULT_CONFIG. */
typedef void (*CliConfigSource)(const CliArgs *a, Config *cfg);

/* A command (or a subcommand of bench, ckpt): its name, what it does in one line, and its entry point (argv[0] is
 * its name). main.c and cmd_bench.c keep the tables. */
typedef struct {
    const char *name, *what;
    int (*run)(int argc, char **argv);
} CliCommand;
/* Exit 2 naming `deepspeed --no_local_rank` when arg is the --local_rank=N that launcher adds (cmd: the command it
 * came to, "" before one); returns for any other arg. */
void cli_refuse_local_rank(const char *cmd, const char *arg);
/* A command line's unknown (sub)command, as one line and exit 2: `what` names the table ("command", "benchmark"),
 * `hint` what to do; the nearest name of the table is suggested. */
__attribute__((noreturn)) void cli_unknown_command(const char *prefix, const char *word, const CliCommand *table, int n,
                                                   const char *what, const char *hint);

/* Applies a's config-key flags to cfg, in command-line order, through the config's own validation. */
void cli_apply_overrides(const CliArgs *a, Config *cfg);
/* `allowed` lists the long option names this subcommand takes, as ",name,name,". Prints `help` for --help. */
void cli_parse(int argc, char **argv, CliArgs *a, const char *help, const char *allowed);
/* The same with the config taken from `source` unless --config is given. */
void cli_parse_from(int argc, char **argv, CliArgs *a, const char *help, const char *allowed, CliConfigSource source);
/* cli_parse_from in its two halves, for train, which adds a launcher's settings in between: the flags alone (every
 * key checked), then the config (file or `source`, the flags applied, validated). */
void cli_parse_flags(int argc, char **argv, CliArgs *a, const char *help, const char *allowed);
void cli_load_config(CliArgs *a, CliConfigSource source);
