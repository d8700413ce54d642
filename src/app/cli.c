/* cli.c: the flags every subcommand shares, mapped onto config keys (see cli.h); a mistyped flag or key is answered
 * with the nearest known one (core/suggest.h). */
#include "app/cli.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/suggest.h"
#include "core/util.h"

/* Flags shared by train, detect, bench and probe: each maps onto a config key. */
enum { OPT_CONFIG = 1000, OPT_STEPS, OPT_BATCH, OPT_LR, OPT_DEVICE, OPT_SEED, OPT_THREADS, OPT_OUT, OPT_RESUME,
       OPT_SET, OPT_HELP_CONFIG, OPT_WARMUP, OPT_RESULTS, OPT_ITERS, OPT_HELP, OPT_PROFILE,
       OPT_DETERMINISTIC, OPT_GPUS, OPT_LR_SCALING, OPT_OPS, OPT_BUDGET_MS, OPT_REPS, OPT_CKPT_ACT, OPT_AMP,
       OPT_COMPILE, OPT_CKPT, OPT_WEIGHTS, OPT_DATA, OPT_INIT_FROM, OPT_INIT_ALLOW, OPT_ZERO, OPT_ATT_TOKENS,
       OPT_SAMPLE_STEPS, OPT_SAMPLE_SEED, OPT_OVERWRITE, OPT_VERBOSE, OPT_DS_CONFIG };
static const struct option COMMON_OPTS[] = {
    {"config", required_argument, 0, OPT_CONFIG}, {"steps", required_argument, 0, OPT_STEPS},
    {"batch-size", required_argument, 0, OPT_BATCH}, {"lr", required_argument, 0, OPT_LR},
    {"device", required_argument, 0, OPT_DEVICE}, {"seed", required_argument, 0, OPT_SEED},
    {"threads", required_argument, 0, OPT_THREADS}, {"out", required_argument, 0, OPT_OUT},
    {"resume", required_argument, 0, OPT_RESUME}, {"set", required_argument, 0, OPT_SET},
    {"help-config", no_argument, 0, OPT_HELP_CONFIG}, {"warmup", required_argument, 0, OPT_WARMUP},
    {"results", required_argument, 0, OPT_RESULTS}, {"iters", required_argument, 0, OPT_ITERS}, {"help", no_argument, 0, OPT_HELP},
    {"profile", required_argument, 0, OPT_PROFILE}, {"deterministic", no_argument, 0, OPT_DETERMINISTIC},
    {"gpus", required_argument, 0, OPT_GPUS}, {"lr-scaling", required_argument, 0, OPT_LR_SCALING},
    {"ops", required_argument, 0, OPT_OPS}, {"budget-ms", required_argument, 0, OPT_BUDGET_MS},
    {"reps", required_argument, 0, OPT_REPS}, {"checkpoint-activations", no_argument, 0, OPT_CKPT_ACT},
    {"amp", required_argument, 0, OPT_AMP}, {"compile", no_argument, 0, OPT_COMPILE},
    {"ckpt", required_argument, 0, OPT_CKPT}, {"weights", required_argument, 0, OPT_WEIGHTS},
    {"data", required_argument, 0, OPT_DATA}, {"init-from", required_argument, 0, OPT_INIT_FROM},
    {"init-allow", required_argument, 0, OPT_INIT_ALLOW}, {"zero", required_argument, 0, OPT_ZERO},
    {"attention-tokens", required_argument, 0, OPT_ATT_TOKENS},
    {"sample-steps", required_argument, 0, OPT_SAMPLE_STEPS}, {"sample-seed", required_argument, 0, OPT_SAMPLE_SEED},
    {"overwrite", no_argument, 0, OPT_OVERWRITE}, {"verbose", no_argument, 0, OPT_VERBOSE},
    {"deepspeed-config", required_argument, 0, OPT_DS_CONFIG}, {0, 0, 0, 0}};

/* A non-negative integer flag value, or exit 2. */
static int cli_count(const char *s, const char *flag) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == 0 || *end != 0 || v < 0 || v > 1000000) vx_usage_error("%s %s: expected a whole number 0..1000000", flag, s);
    return (int)v;
}

void cli_refuse_local_rank(const char *cmd, const char *arg) {
    /* what `deepspeed` (and torch.distributed.launch) put before a program's own arguments unless told not to */
    if (strncmp(arg, "--local_rank", 12) == 0 || strncmp(arg, "--local-rank", 12) == 0)
        vx_usage_error("%s%s%s is what the deepspeed launcher adds to a program's arguments; start voxscale with "
                       "`deepspeed --no_python --no_local_rank ...` (each rank's place comes from LOCAL_RANK)",
                       cmd, *cmd ? ": " : "", arg);
}

/* The flag argv[optind - 1] that getopt_long refused: one known to this command that lacks its value, or an unknown
 * one, answered with the nearest this command takes. */
static void bad_option(const char *cmd, const char *arg, const char *allowed) {
    char name[64], near[64], hint[96];
    snprintf(name, sizeof name, "%s", arg + strspn(arg, "-"));
    name[strcspn(name, "=")] = 0;
    if (strchr(arg, '=') == NULL && strncmp(arg, "--", 2) == 0)
        for (const struct option *o = COMMON_OPTS; o->name; o++)
            if (strcmp(o->name, name) == 0 && o->has_arg == required_argument)
                vx_usage_error("%s: --%s needs a value (see --help)", cmd, name);
    cli_refuse_local_rank(cmd, arg);
    char list[1024];
    snprintf(list, sizeof list, "%shelp,", allowed);
    suggest_nearest_in_list(name, list, near, sizeof near);
    vx_usage_error("%s: unknown option %s%s (see --help)", cmd, arg, suggest_phrase(near, "--", hint, sizeof hint));
}

void cli_unknown_command(const char *prefix, const char *word, const CliCommand *table, int n, const char *what,
                         const char *hint) {
    const char *names[32];
    for (int i = 0; i < n && i < 32; i++) names[i] = table[i].name;
    char phrase[96];
    suggest_phrase(suggest_nearest(word, names, n < 32 ? n : 32), "", phrase, sizeof phrase);
    vx_usage_error("%sunknown %s \"%s\"%s; %s", prefix, what, word, phrase, hint);
}

void cli_apply_overrides(const CliArgs *a, Config *cfg) {
    for (int i = 0; i < a->n_set; i++) config_set(cfg, a->set_keys[i], a->set_values[i], a->set_flags[i]);
}

void cli_parse(int argc, char **argv, CliArgs *a, const char *help, const char *allowed) {
    cli_parse_from(argc, argv, a, help, allowed, NULL);
}

void cli_parse_from(int argc, char **argv, CliArgs *a, const char *help, const char *allowed, CliConfigSource source) {
    cli_parse_flags(argc, argv, a, help, allowed);
    cli_load_config(a, source);
}

void cli_parse_flags(int argc, char **argv, CliArgs *a, const char *help, const char *allowed) {
    memset(a, 0, sizeof *a);
    a->config_path = DEFAULT_CONFIG;
    a->warmup = a->iters = a->budget_ms = a->reps = a->sample_seed = -1; /* -1: the subcommand's default */
    const char **keys = a->set_keys, **vals = a->set_values, **flags = a->set_flags;
    int n = 0, opt;
    opterr = 0;
    optind = 0; /* GNU getopt: 0 re-initializes it fully (1 would keep a pointer into the previous argv) */
    int index;
    while ((index = -1, opt = getopt_long(argc, argv, "hv", COMMON_OPTS, &index)) != -1) {
        const char *key = NULL;
        /* getopt_long sets index only for long options; the allowed list names those (--help is everyone's). */
        if (index >= 0 && opt != OPT_HELP && opt != OPT_VERBOSE) {
            char name[40];
            snprintf(name, sizeof name, ",%s,", COMMON_OPTS[index].name);
            if (!strstr(allowed, name))
                vx_usage_error("%s: option --%s is not one of this command's (see --help)", argv[0], COMMON_OPTS[index].name);
        }
        switch (opt) {
        case 'h':
        case OPT_HELP: fputs(help, stdout); vx_exit(0);
        case OPT_HELP_CONFIG: config_print_help(stdout); vx_exit(0);
        case OPT_CONFIG: a->config_path = optarg, a->config_given = 1; break;
        case OPT_CKPT: a->ckpt = optarg; break;
        case OPT_WEIGHTS: a->weights = optarg; break;
        case OPT_DATA: a->data = optarg; break;
        case OPT_INIT_FROM: key = "train.init_from"; break;
        case OPT_INIT_ALLOW: key = "train.init_allow"; break;
        case OPT_RESUME: a->resume = optarg; break;
        case OPT_RESULTS: a->results_dir = optarg; break;
        case OPT_WARMUP: a->warmup = cli_count(optarg, "--warmup"); break;
        case OPT_ITERS: a->iters = cli_count(optarg, "--iters"); break;
        case OPT_OPS: a->ops = optarg; break;
        case OPT_ATT_TOKENS: a->attention_tokens = optarg; break;
        case OPT_BUDGET_MS: a->budget_ms = cli_count(optarg, "--budget-ms"); break;
        case OPT_SAMPLE_SEED: a->sample_seed = cli_count(optarg, "--sample-seed"); break;
        case OPT_REPS: a->reps = cli_count(optarg, "--reps"); break;
        case OPT_OVERWRITE: a->overwrite = 1; break;
        case OPT_DS_CONFIG: a->deepspeed_config = optarg; break;
        case 'v':
        case OPT_VERBOSE: vx_verbose = 1; break;
        case OPT_STEPS: key = "train.steps"; break;
        case OPT_BATCH: key = "train.batch_size"; break;
        case OPT_LR: key = "train.lr"; break;
        case OPT_DEVICE: key = "train.device"; break;
        case OPT_SEED: key = "train.seed"; break;
        case OPT_THREADS: key = "train.threads"; break;
        case OPT_OUT: key = "output.dir", a->out = optarg; break;
        case OPT_PROFILE: key = "output.profile"; break;
        case OPT_DETERMINISTIC: key = "train.deterministic"; optarg = "1"; break;
        case OPT_CKPT_ACT: key = "train.checkpoint_activations"; optarg = "1"; break;
        case OPT_AMP: key = "train.precision"; break;
        case OPT_COMPILE: key = "train.compile"; optarg = "1"; break;
        case OPT_GPUS: key = "dist.gpus"; break;
        case OPT_LR_SCALING: key = "train.lr_scaling"; break;
        case OPT_ZERO: key = "dist.zero"; break;
        case OPT_SAMPLE_STEPS: key = "diffusion.sample_steps"; break;
        case OPT_SET: {
            static char buf[64][128];
            const char *eq = strchr(optarg, '=');
            if (!eq || eq == optarg || (size_t)(eq - optarg) >= sizeof buf[0] || n >= 64)
                vx_usage_error("--set %s: expected KEY=VALUE, e.g. --set train.ckpt_every=100", optarg);
            snprintf(buf[n], sizeof buf[n], "%.*s", (int)(eq - optarg), optarg);
            keys[n] = buf[n];
            vals[n] = eq + 1;
            flags[n++] = "--set";
            break;
        }
        default: bad_option(argv[0], argv[optind - 1], allowed);
        }
        if (key) {
            static char flag_names[64][40]; /* "--steps": error messages name the flag, not its value */
            if (n >= 64) vx_usage_error("too many options");
            snprintf(flag_names[n], sizeof flag_names[n], "--%s", COMMON_OPTS[index].name);
            keys[n] = key;
            vals[n] = optarg;
            flags[n] = flag_names[n];
            n++;
        }
    }
    if (optind < argc) vx_usage_error("%s: unexpected argument \"%s\" (see --help)", argv[0], argv[optind]);
    a->n_set = n;
    for (int i = 0; i < n; i++) { /* every key checked before any config is read */
        if (!config_has_key(keys[i])) {
            char section[64], near[128], hint[160];
            const char *dot = strchr(keys[i], '.');
            snprintf(section, sizeof section, "%.*s", dot ? (int)(dot - keys[i]) : 0, keys[i]);
            if (dot) config_suggest(section, dot + 1, near, sizeof near);
            else suggest_phrase(NULL, "", near, sizeof near);
            vx_usage_error("%s %s: no config key \"%s\"%s (see --help-config)", flags[i], keys[i], keys[i],
                           suggest_phrase(near, "", hint, sizeof hint));
        }
        if (strcmp(keys[i], "train.steps") == 0) a->steps_flag = flags[i];
    }
    a->n_cmdline = n;
}

void cli_load_config(CliArgs *a, CliConfigSource source) {
    if (source && !a->config_given) source(a, &a->cfg);
    else config_load(&a->cfg, a->config_path);
    cli_apply_overrides(a, &a->cfg);
    config_validate(&a->cfg, "command line");
}

