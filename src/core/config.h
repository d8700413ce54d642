/* config.h: the run configuration, read from JSON and validated strictly against one schema table.
 * Every key has a type, a range and a default; an unknown key, a wrong type or an out-of-range value is one line
 * naming the file and the key (exit 2). The same table writes the resolved config back out and applies the
 * command-line overrides, so the three can never disagree. */
#pragma once
#include <stdint.h>
#include <stdio.h>

#define CONFIG_MAX_LEVELS 6
#define CONFIG_STR 256

typedef struct {
    /* model */
    int input_size[3]; /* D, H, W */
    int in_channels;
    int channels[CONFIG_MAX_LEVELS];
    int levels; /* number of entries in channels */
    int res_blocks;
    int norm_groups;
    int latent_channels;
    double kl_weight;
    char loss[CONFIG_STR]; /* "l1" | "mse" */
    double logvar_min, logvar_max;
    double norm_eps;
    /* train */
    int steps;
    int batch_size; /* per rank, per micro-batch; 0 = the largest that fits (automatic) */
    int global_batch; /* samples per optimizer step over all ranks and micro-batches; 0 = batch_size x ranks x accum */
    int grad_accum;
    double lr, min_lr;
    int warmup_steps;
    double weight_decay, beta1, beta2, adam_eps;
    double grad_clip; /* 0 = off */
    char lr_scaling[CONFIG_STR]; /* "none" | "linear" | "sqrt": lr x f(ranks) when the batch is given per rank */
    int64_t seed;
    int log_every, val_every, val_samples, ckpt_every;
    char device[CONFIG_STR]; /* "auto" | "cpu" | "cuda" */
    int threads;             /* CPU threads, 0 = all cores */
    int deterministic;       /* GPU: deterministic algorithms only */
    int tf32;                /* GPU: TF32 tensor cores allowed in float32 convolutions */
    /* data */
    char data_source[CONFIG_STR]; /* "phantom" */
    double data_noise;
    int prefetch;
    /* output */
    char out_dir[CONFIG_STR]; /* the run directory; "" = runs/<config name>-<time> */
    int tensorboard;          /* write event files */
    int image_every, image_samples, hist_every; /* TensorBoard intervals (0 = off) */
    double flush_secs;
    char profile[CONFIG_STR]; /* "START:END" or "" */
    int sample_log;           /* write samples.tsv: the global samples each micro-batch read */
    /* dist */
    char gpus[CONFIG_STR]; /* "" = one process; "N" or "all" = train --gpus: one rank per GPU of this machine */
    double dist_timeout_s;  /* the watchdog's deadline for one collective */
    double bucket_mb, first_bucket_mb; /* gradient buckets all-reduced during backward */
} Config;

/* Loads and validates `path` (defaults first, then the file). Exits 2 on any bad input. */
void config_load(Config *cfg, const char *path);
/* The same from text already in memory (len bytes, not necessarily NUL-terminated); `origin` names it in errors.
 * The config reader's fuzz target enters here. */
void config_parse_text(Config *cfg, const char *text, size_t len, const char *origin);
/* Fills every key with its default. */
void config_defaults(Config *cfg);
/* Sets one key ("train.steps") from a command-line string; `origin` names the flag in the error message. */
void config_set(Config *cfg, const char *key, const char *value, const char *origin);
/* 1 if "section.key" names a config key. */
int config_has_key(const char *dotted);
/* Cross-key checks (groups divide channels, input divisible by the downsampling factor, ...). */
void config_validate(const Config *cfg, const char *origin);
/* The resolved config as pretty JSON (caller frees). */
char *config_to_json(const Config *cfg);
/* Writes config_to_json to path (atomically). */
void config_write(const Config *cfg, const char *path);
/* Parses output.profile "START:END" (1-based optimizer steps, inclusive); 0 when empty or malformed. */
int config_profile_window(const Config *cfg, int *start, int *end);
/* A hash of the keys that decide the parameter layout, stored in checkpoints to refuse another model. */
uint64_t config_model_fingerprint(const Config *cfg);
/* Lists every key with its default and meaning (for --help-config). */
void config_print_help(FILE *out);
