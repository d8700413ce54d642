/* main.c: the voxscale command line: train, detect, env, bench, probe, export, predict, ckpt, and --version. Each
 * subcommand parses its own flags; bad flags are one line and exit 2 (naming the nearest known one), `--help` works
 * everywhere, and `voxscale --help` lists every command and subcommand from the tables that dispatch them. */
#include <getopt.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/cli.h"
#include "app/commands.h"
#include "app/launcher_settings.h"
#include "app/probe.h"
#include "app/resume_config.h"
#include "app/version.h"
#include "common/cpu_isa.h"
#include "core/config.h"
#include "core/stop_signal.h"
#include "core/util.h"
#include "hw/hw.h"
#include "train/runtime.h"
#include "train/train.h"
#include "train/train_plan.h"
#include "train/zero_plan.h"
#include "parallel/launch.h"


static const char *TRAIN_HELP =
    "usage: voxscale train [--config FILE] [options]\n"
    "  --config FILE       JSON config (default " DEFAULT_CONFIG "); `--help-config` lists its keys\n"
    "  --steps N           optimizer steps in total (train.steps)\n"
    "  --batch-size N      volumes per micro-batch; 0 = the largest that fits (train.batch_size)\n"
    "  --lr X              peak learning rate (train.lr)\n"
    "  --device D          auto | cpu | cuda (train.device)\n"
    "  --seed N            seed of weights, data and noise (train.seed)\n"
    "  --threads N         CPU threads, 0 = all cores (train.threads)\n"
    "  --out DIR           run directory (output.dir); default runs/<config>-<time>\n"
    "  --resume CKPT       continue exactly from a checkpoint written by train, with its run's config.json (a\n"
    "                      --config that differs from it is refused; --set changes a key on purpose)\n"
    "  --init-from FILE    start from a safetensors file's weights, matched by name (train.init_from; voxscale\n"
    "                      export, or bench/reference/convert_pth.py for a PyTorch state_dict)\n"
    "  --init-allow P,..   glob patterns of the keys that may differ from it: missing, unexpected or of another\n"
    "                      shape, they keep their fresh values (train.init_allow; e.g. \"fc.*\" for a new head)\n"
    "  --profile A:B       write a profiler trace of optimizer steps A..B to <run>/traces/ (output.profile)\n"
    "  --deterministic     deterministic GPU algorithms only (train.deterministic=1)\n"
    "  --amp P             bf16 | fp16 | off: mixed precision on a GPU (train.precision; default auto: bf16 on a GPU,\n"
    "                      float32 on the CPU); fp16 turns on dynamic loss scaling (train.loss_scale); bf16 with\n"
    "                      --device cpu: bf16 math in the convolutions on CPUs with AVX512-BF16 or AMX, float32 storage\n"
    "  --compile           capture the training step in CUDA Graphs and replay it (train.compile=1; on GPU ranks\n"
    "                      the NCCL all-reduces too; the CPU steps eagerly); losses are read back one step late\n"
    "  --checkpoint-activations  recompute each block's inside in backward instead of keeping it (ResBlocks,\n"
    "                      residual blocks, dense layers, transformer blocks): less activation memory for about one\n"
    "                      more forward of the blocks (train.checkpoint_activations=1)\n"
    "  --gpus N|all        one rank per GPU of this machine, started by train itself (dist.gpus); with\n"
    "                      --device cpu, N CPU ranks. Under mpirun, srun or torchrun the ranks come from them\n"
    "  --lr-scaling S      none | linear | sqrt: lr x f(ranks) when the batch is per rank (train.lr_scaling)\n"
    "  --zero N            0 | 1 | 2 | auto: shard AdamW's state (1) and the gradients too (2) over the ranks\n"
    "                      (dist.zero, ZeRO); auto: the cheapest mode the memory plan fits\n"
    "  --deepspeed-config FILE  a DeepSpeed ds_config.json: zero_optimization.stage and offload_optimizer.device,\n"
    "                      fp16/bf16.enabled, gradient_accumulation_steps, gradient_clipping and the batch sizes\n"
    "                      become the keys above (\"auto\" keeps ours); a flag that contradicts it is refused\n"
    "  --set KEY=VALUE     set any config key, e.g. --set train.ckpt_every=100 (repeatable)\n"
    "  --help-config       list every config key with its default\n"
    "Under accelerate launch, its ACCELERATE_* settings (mixed precision, cpu, dynamo, gradient accumulation,\n"
    "DeepSpeed's zero stage, offload and clipping) are read the same way; docs/distributed-and-zero.md lists them.\n";

static int main_argc;
static char **main_argv; /* the whole command line: `train --gpus N` starts its ranks with it */

/* How many ranks `train --gpus` (dist.gpus) starts here and on what (`device`: train.device): 0 when the ranks
 * come from a launcher or there is one process. Says why when --gpus all finds no GPU (one CPU process then). */
static int spawn_count(const DistConfig *cfg, const char *device, const DistEnv *env, int *on_gpu) {
    *on_gpu = 0;
    if (!cfg->gpus[0]) return 0;
    if (env->world > 1 || strcmp(env->launcher, "single") != 0) {
        if (env->rank == 0 && strcmp(env->launcher, "spawn") != 0) /* (a spawned rank: --gpus made it) */
            vx_log("launch: --gpus %s (dist.gpus) is ignored: the %d ranks come from %s\n", cfg->gpus, env->world,
                   env->launcher);
        return 0;
    }
    HwInfo hw;
    hw_detect(&hw);
    const int cpu = strcmp(device, "cpu") == 0, all = strcmp(cfg->gpus, "all") == 0;
    if (cpu) {
        if (all) vx_usage_error("--gpus all --device cpu: say how many CPU ranks to start, e.g. --gpus 2");
        const int n = atoi(cfg->gpus);
        /* each CPU rank is a process with its threads: more than the cores only slows every one of them down (and
         * --gpus 1000 really started 1000) */
        if (n > hw.cores)
            vx_usage_error("--gpus %d --device cpu: %d CPU ranks on %d core(s); start at most one rank per core "
                           "(--gpus %d), or share cores on purpose under mpirun --oversubscribe", n, n, hw.cores,
                           hw.cores);
        return n;
    }
    const int n = all ? hw.n_gpus : atoi(cfg->gpus);
    if (hw.n_gpus == 0) {
        if (all && strcmp(device, "auto") == 0) {
            vx_log("launch: --gpus all found no GPU (%s); training in one process on the CPU\n", hw.gpu_reason);
            return 0;
        }
        vx_usage_error("--gpus %s: no usable GPU (%s); use --device cpu to start CPU ranks", cfg->gpus, hw.gpu_reason);
    }
    const char *shared = getenv("NCCL_MULTI_RANK_GPU_ENABLE"); /* NCCL >= 2.30: ranks may share a GPU */
    if (n > hw.n_gpus && !(shared && strcmp(shared, "1") == 0))
        vx_usage_error("--gpus %d: only %d GPU(s) are visible (CUDA_VISIBLE_DEVICES, nvidia-smi -L); with NCCL 2.30 "
                       "or newer, NCCL_MULTI_RANK_GPU_ENABLE=1 lets ranks share them", n, hw.n_gpus);
    *on_gpu = 1;
    return n;
}

/* "configs/ae3d-64.json" -> "ae3d-64", for the run directory name. */
static void config_stem(const char *path, char *out, size_t len) {
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s", path);
    snprintf(out, len, "%s", basename(tmp));
    char *dot = strrchr(out, '.');
    if (dot) *dot = 0;
}

static int cmd_train(int argc, char **argv) {
    CliArgs a;
    cli_parse_flags(argc, argv, &a, TRAIN_HELP,
                    ",config,steps,batch-size,lr,device,seed,threads,out,resume,set,help-config,profile,deterministic,"
                    "checkpoint-activations,gpus,lr-scaling,amp,compile,init-from,init-allow,zero,deepspeed-config,");
    launcher_settings_take(&a); /* accelerate's variables, --deepspeed-config: before the config is validated */
    cli_load_config(&a, resume_config_source);
    resume_config_check(&a);
    /* train.stages set the run's length (their sum): a --steps beside them was silently ignored; refused, since
     * which stage it should shorten is anyone's guess */
    if (a.steps_flag && a.cfg.train.n_stages)
        vx_usage_error("%s train.steps = %d: train.stages set the run's length (the sum of their steps); change the "
                       "stages' steps or epochs instead (--set train.stages=...), or drop the stages "
                       "(--set train.stages=[])", a.steps_flag, a.cfg.train.steps);
    DistEnv env;
    dist_detect(&env);
    int on_gpu;
    const int n = spawn_count(&a.cfg.dist, a.cfg.train.device, &env, &on_gpu);
    if (n > 1) {
        vx_log("launch: %d ranks started by train --gpus %s, one process per %s\n", n, a.cfg.dist.gpus,
               on_gpu ? "GPU (NCCL)" : "CPU rank (tcp)");
        return dist_spawn(n, on_gpu, main_argc, main_argv);
    }
    char stem[128];
    config_stem(a.config_path, stem, sizeof stem);
    return train_run(&a.cfg, stem, a.resume);
}

static int cmd_detect(int argc, char **argv) {
    static const char *help = "usage: voxscale detect [--config FILE] [--device D] [--batch-size N] [--checkpoint-activations]\n"
                              "                       [--amp P] [--gpus N|all] [--zero N] [--set K=V]\n"
                              "  shows CPUs, RAM, GPUs and what `train` would choose for the config (the hardware plan):\n"
                              "  device, ranks, precision, per-rank batch, accumulation for train.global_batch, activation\n"
                              "  checkpointing, the planned memory against the device's, and the bytes per rank of every data-parallel\n"
                              "  mode (DDP, ZeRO-1, ZeRO-2, offload) with dist.zero auto's choice\n";
    CliArgs a;
    vx_verbose = 1; /* detect shows the whole plan */
    cli_parse(argc, argv, &a, help, ",config,device,batch-size,checkpoint-activations,threads,set,gpus,lr-scaling,amp,zero,");
    HwInfo hw;
    hw_detect(&hw);
    hw_print(&hw);
    printf("train would use (config %s):\n", a.config_path);
    DistEnv env;
    dist_detect(&env);
    int on_gpu;
    const int spawned = spawn_count(&a.cfg.dist, a.cfg.train.device, &env, &on_gpu);
    const int world = spawned > 1 ? spawned : env.world;
    TrainConfig *train = &a.cfg.train;
    const double lr_scale = train_plan_ranks(train, world);
    Runtime rt;
    runtime_open_rank(&rt, &a.cfg.model, train, 1, env.local_rank, world > 1 ? world : 1, world);
    char who[160];
    if (spawned > 1) snprintf(who, sizeof who, "%d ranks started by train --gpus %.16s, one per %s", spawned, a.cfg.dist.gpus,
                              on_gpu ? "GPU" : "CPU rank");
    else dist_describe(&env, who, sizeof who);
    printf("launch: %s\n", who);
    printf("batch size: %d per micro-batch per rank x %d rank(s) x %d accumulation = %ld samples per step; lr x %.3g\n",
           train->batch_size, world, train->grad_accum, (long)train->batch_size * world * train->grad_accum, lr_scale);
    fflush(stdout);
    const int local = spawned > 1 ? spawned : env.local_world, held = train->val_samples;
    const double other = train_host_other_bytes(&rt, rt.model, held, a.cfg.data.prefetch, 0.0);
    zero_plan_choose(&rt, &a.cfg.dist, world > 1 ? world : 1, local, other, 1); /* every mode's bytes; auto's choice */
    if (train->n_stages > 0) { /* train.stages: each stage's own plan (its size, batch, checkpointing) */
        static StagePlan st[CONFIG_MAX_STAGES];
        const int n = train_stages(&a.cfg.model, train, 0, world > 1 ? world : 1, st);
        for (int k = 0; k < n; k++) {
            HwPlan p;
            char why[400], line[700];
            const int *size = st[k].model.input_size;
            if (!hw_plan(&st[k].model, &st[k].train, rt.be, &rt.dev, world > 1 ? world : 1, &p, why, sizeof why)) {
                printf("stage %d/%d: input %dx%dx%d: nothing fits: %s\n", k + 1, n, size[0], size[1], size[2], why);
                continue;
            }
            hw_plan_describe(&p, &rt.dev, &st[k].train, line, sizeof line);
            printf("stage %d/%d: input %dx%dx%d: %s\n", k + 1, n, size[0], size[1], size[2], line);
        }
    }
    runtime_close(&rt);
    return 0;
}

/* Every command, in --help's order (bench's subcommands come from cmd_bench.c's table, ckpt's one here). */
static const CliCommand COMMANDS[] = {
    {"train", "train a model of a config: ae3d (the 3-D autoencoder), resnet3d, densenet, vit3d or vit3d_diffusion",
     cmd_train},
    {"detect", "show CPUs, RAM and GPUs, and the device, batch and memory plan train would choose", cmd_detect},
    {"env", "this build, its libraries, this machine and the plan, in one block to paste into a bug report", cmd_env},
    {"bench", NULL, cmd_bench},
    {"probe", "write one step's inputs, noise, parameters, losses and gradients for the PyTorch check", probe_main},
    {"export", "a checkpoint's weights as safetensors, in MONAI's / PyTorch's names and layouts", cmd_export},
    {"predict", "apply a trained model to volumes: predictions.csv, reconstructions and latents, or samples",
     cmd_predict},
    {"ckpt", NULL, cmd_ckpt},
};
#define N_COMMANDS (int)(sizeof COMMANDS / sizeof COMMANDS[0])

static void usage_main(FILE *out) {
    fprintf(out, "usage: voxscale <command> [options]   (voxscale <command> --help: its options)\n"
                 "       voxscale --version             the version, build and library versions\n"
                 "commands:\n");
    for (int i = 0; i < N_COMMANDS; i++) {
        if (strcmp(COMMANDS[i].name, "bench") == 0)
            for (int k = 0; k < N_BENCH_COMMANDS; k++)
                fprintf(out, "  bench %-13s %s\n", BENCH_COMMANDS[k].name, BENCH_COMMANDS[k].what);
        else if (strcmp(COMMANDS[i].name, "ckpt") == 0)
            fprintf(out, "  %-19s %s\n", "ckpt consolidate", "a sharded (dist.zero) checkpoint made one ordinary "
                    "checkpoint");
        else fprintf(out, "  %-19s %s\n", COMMANDS[i].name, COMMANDS[i].what);
    }
    fprintf(out, "every command: --help (its options), -v / --verbose (the full plan; a run writes it to plan.txt)\n");
}

int main(int argc, char **argv) {
    stop_signal_start(); /* before any thread exists: each inherits SIGINT and SIGTERM blocked (core/stop_signal.h) */
    main_argc = argc;
    main_argv = argv;
    if (argc < 2) {
        usage_main(stderr);
        return VX_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage_main(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0 || strcmp(cmd, "version") == 0) {
        version_print(stdout, "");
        return 0;
    }
    (void)cpu_isa(); /* a bad VX_CPU_ISA is refused before any command writes or prints anything */
    for (int i = 0; i < N_COMMANDS; i++)
        if (strcmp(cmd, COMMANDS[i].name) == 0) return COMMANDS[i].run(argc - 1, argv + 1);
    cli_refuse_local_rank("", cmd);
    if (cmd[0] == '-')
        cli_unknown_command("", cmd, (const CliCommand[]){{"--help", NULL, NULL}, {"--version", NULL, NULL}}, 2,
                            "option", "give a command first (voxscale --help lists them)");
    cli_unknown_command("", cmd, COMMANDS, N_COMMANDS, "command",
                        "commands: train, detect, env, bench, probe, export, predict, ckpt (voxscale --help)");
}
