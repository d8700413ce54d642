/* config.h: the run configuration, read from JSON and validated strictly against one schema table.
 * Every key has a type, a range and a default; an unknown key, a wrong type or an out-of-range value is one line
 * naming the file and the key (exit 2). The same table writes the resolved config back out and applies the
 * command-line overrides, so the three can never disagree. */
#pragma once
#include <stdint.h>
#include <stdio.h>

#define CONFIG_MAX_LEVELS 6
#define CONFIG_STR 256
#define CONFIG_MAX_STAGES 8

/* One stage of a progressive run (train.stages): its own input size, length, batch and learning rate; the weights
 * carry over from the stage before (the autoencoder is fully convolutional), the optimizer restarts. */
typedef struct {
    int input_size[3];
    int steps;      /* or, when 0, epochs passes over the training set (turned into steps at the start) */
    double epochs;
    int batch_size; /* per rank */
    double lr;
} Stage;

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
    char pad_input_channels[CONFIG_STR]; /* "auto" | "on" | "off": conv_in's input channels padded to a multiple of 8 */
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
    int fuse;                /* 1: each GroupNorm and the SiLU after it run as one fused op */
    int checkpoint_activations; /* 1: ResBlock activations recomputed in backward instead of kept */
    char precision[CONFIG_STR]; /* "auto" | "bf16" | "fp16" | "off": activation storage (runtime resolves auto) */
    char loss_scale[CONFIG_STR]; /* "auto" | "dynamic" | "off" */
    double loss_scale_init;
    int loss_scale_growth_interval;
    int compile;                /* 1: the step is captured in a CUDA Graph and replayed */
    Stage stages[CONFIG_MAX_STAGES]; /* train.stages; n_stages = 0: one stage, the keys above */
    int n_stages;
    /* data */
    char data_source[CONFIG_STR]; /* "phantom" | "csv" | "dir" */
    double data_noise;
    int prefetch;
    char data_csv[CONFIG_STR];      /* source csv: the manifest */
    char data_dir[CONFIG_STR];      /* source dir: the folder */
    char data_glob[CONFIG_STR];     /* source dir: which entries are volumes */
    char data_path_column[CONFIG_STR], data_split_column[CONFIG_STR];
    double data_val_fraction;       /* held out by a seeded draw when there is no split column */
    char data_normalize[CONFIG_STR]; /* "percentile" | "zscore" | "none" */
    double data_clip_low, data_clip_high; /* percentiles of the percentile normalisation */
    int data_pad;                   /* pad volumes smaller than the input (else: an error) */
    int data_augment;               /* random flips and 90-degree rotations in training */
    double data_cache_rate, data_replace_rate, data_cache_max_gib;
    int data_workers;               /* decoding threads; 0 = from the core count */
    int data_skip_bad;              /* skip unreadable volumes with a warning instead of exit 2 */
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
/* Stage i of train.stages with what it inherits filled in (input size, batch, lr from the keys above). */
Stage config_stage(const Config *cfg, int i);
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
