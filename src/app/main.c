/* main.c: the voxscale command line: train, detect, bench, probe. Each subcommand parses its own flags; bad flags
 * are one line and exit 2, `--help` works everywhere. */
#include <getopt.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>

#include "app/cli.h"
#include "app/commands.h"
#include "app/probe.h"
#include "core/config.h"
#include "core/util.h"
#include "model/hw.h"
#include "train/runtime.h"
#include "train/train.h"

static void usage_main(FILE *out) {
    fprintf(out,
            "usage: voxscale <command> [options]\n"
            "commands:\n"
            "  train    train the 3D autoencoder of a config (voxscale train --help)\n"
            "  detect   show CPUs, RAM and GPUs, and the device and batch size train would choose\n"
            "  bench    benchmarks: `bench step` (training step), `bench gemm` (the machine's GEMM ceiling)\n"
            "  probe    write one step's inputs, noise, parameters, losses and gradients for the PyTorch check\n");
}

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
    "  --resume CKPT       continue exactly from a checkpoint written by train\n"
    "  --profile A:B       write a profiler trace of optimizer steps A..B to <run>/traces/ (output.profile)\n"
    "  --deterministic     deterministic GPU algorithms only (train.deterministic=1)\n"
    "  --set KEY=VALUE     set any config key, e.g. --set train.ckpt_every=100 (repeatable)\n"
    "  --help-config       list every config key with its default\n";

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
    cli_parse(argc, argv, &a, TRAIN_HELP, ",config,steps,batch-size,lr,device,seed,threads,out,resume,set,help-config,profile,deterministic,");
    char stem[128];
    config_stem(a.config_path, stem, sizeof stem);
    return train_run(&a.cfg, stem, a.resume);
}

static int cmd_detect(int argc, char **argv) {
    static const char *help = "usage: voxscale detect [--config FILE] [--device D] [--batch-size N]\n"
                              "  shows CPUs, RAM, GPUs and what `train` would choose for the config\n";
    CliArgs a;
    cli_parse(argc, argv, &a, help, ",config,device,batch-size,threads,set,");
    HwInfo hw;
    hw_detect(&hw);
    hw_print(&hw);
    printf("train would use (config %s):\n", a.config_path);
    Runtime rt;
    runtime_open(&rt, &a.cfg, 1);
    printf("batch size: %d per micro-batch\n", a.cfg.batch_size);
    runtime_close(&rt);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage_main(stderr);
        return VX_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage_main(stdout);
        return 0;
    }
    if (strcmp(cmd, "train") == 0) return cmd_train(argc - 1, argv + 1);
    if (strcmp(cmd, "detect") == 0) return cmd_detect(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0) return cmd_bench(argc - 1, argv + 1);
    if (strcmp(cmd, "probe") == 0) return probe_main(argc - 1, argv + 1);
    vx_usage_error("unknown command \"%s\"; commands: train, detect, bench, probe (voxscale --help)", cmd);
}
