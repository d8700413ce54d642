/* cmd_bench.c: `voxscale bench step|kernels|allreduce|scaling|gemm|data`: the flags of each benchmark, then src/bench runs it. */
#include <stdio.h>
#include <string.h>

#include "app/cli.h"
#include "app/commands.h"
#include "bench/bench.h"
#include "core/util.h"

static const char *STEP_HELP =
    "usage: voxscale bench step [--config FILE] [--iters N] [--warmup N] [--batch-size N] [--threads N]\n"
    "                           [--device D] [--amp P] [--compile] [--results DIR] [--set K=V] [--overwrite]\n"
    "  times full training steps as train runs them (the config's precision; --compile: CUDA Graphs) on one fixed\n"
    "  batch (default 5 timed after 1 warm-up), then a few eager steps phase by phase and per layer (convolutions,\n"
    "  the other ops, the optimizer), and writes DIR/<device>/step_<config>.json and .md (DIR defaults to results);\n"
    "  existing ones are refused before anything runs unless --overwrite is given\n";

static int cmd_bench_step(int argc, char **argv) {
    CliArgs a;
    cli_parse(argc, argv, &a, STEP_HELP,
              ",config,iters,warmup,batch-size,threads,device,results,set,seed,deterministic,checkpoint-activations,"
              "amp,compile,overwrite,");
    const BenchStepOptions o = {.iters = a.iters, .warmup = a.warmup, .results_dir = a.results_dir,
                                 .config_path = a.config_path, .overwrite = a.overwrite};
    return bench_step(&a.cfg, &o);
}

static const char *KERNELS_HELP =
    "usage: voxscale bench kernels [--config FILE] [--ops A,B,...] [--budget-ms N] [--reps N] [--batch-size N]\n"
    "                              [--threads N] [--device D] [--amp P] [--results DIR] [--set K=V]\n"
    "                              [--attention-tokens T,T,...] [--overwrite]\n"
    "  checks every op the config's model calls, at each of its shapes, against a float64 reference, then times\n"
    "  it (median over --budget-ms per case, default 200, at most --reps calls, default 200) against ceilings\n"
    "  measured in the same run; writes DIR/<device>/kernels_<config>.json and .md (existing ones are refused\n"
    "  before anything runs unless --overwrite is given). Exit 1 when a check fails.\n"
    "  Attention is also measured at the reference shapes of issue 21, self-attention of T tokens, batch 1, one\n"
    "  head, head dim 64: T = 512 and 4096 for a model that calls attention (vit3d), else none; --attention-tokens\n"
    "  sets the list for any model (e.g. 512,4096,32768; 0: none).\n";

static int cmd_bench_kernels(int argc, char **argv) {
    CliArgs a;
    cli_parse(argc, argv, &a, KERNELS_HELP,
              ",config,ops,budget-ms,reps,batch-size,threads,device,results,set,seed,deterministic,"
              "checkpoint-activations,amp,attention-tokens,overwrite,");
    const BenchKernelsOptions o = {.results_dir = a.results_dir, .config_path = a.config_path, .ops = a.ops,
                                   .budget_ms = a.budget_ms, .max_reps = a.reps,
                                   .attention_tokens = a.attention_tokens, .overwrite = a.overwrite};
    return bench_kernels(&a.cfg, &o);
}

static int cmd_bench_gemm(int argc, char **argv) {
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: voxscale bench gemm\n  sgemm GFLOP/s of this machine's BLAS at a square and at conv shapes\n");
        return 0;
    }
    if (argc > 1) vx_usage_error("bench gemm: unexpected argument \"%s\" (see --help)", argv[1]);
    return bench_gemm();
}

static const char *DATA_HELP =
    "usage: voxscale bench data --config FILE [--iters N] [--results DIR] [--set K=V] [--overwrite]\n"
    "  times the loader over the config's files (data.source csv or dir): decode, data.resize, normalisation, crop\n"
    "  or pad, on data.workers threads (--set data.workers=N; 0: the cores), the cache off so every image is\n"
    "  decoded; one untimed pass, then N timed passes (default 2); writes DIR/<device>/data_<config>.json\n"
    "  (bench/reference/cxr_loader.py measures PyTorch's DataLoader over the same files)\n";

static int cmd_bench_data(int argc, char **argv) {
    CliArgs a;
    cli_parse(argc, argv, &a, DATA_HELP, ",config,iters,results,set,overwrite,");
    const BenchDataOptions o = {.results_dir = a.results_dir, .config_path = a.config_path,
                                .epochs = a.iters > 0 ? a.iters : 0, .overwrite = a.overwrite};
    return bench_data(&a.cfg, &o);
}

const CliCommand BENCH_COMMANDS[] = {
    {"step", "time full training steps of a config, then its phases and layers", cmd_bench_step},
    {"kernels", "check every op of a config's model against float64, then time it against the ceilings",
     cmd_bench_kernels},
    {"allreduce", "the all-reduce of the ranks present, in nccl-tests' columns, with the alpha-beta fit",
     cmd_bench_allreduce},
    {"scaling", "weak and strong scaling of the trainer on 1..N ranks, measured and projected", cmd_bench_scaling},
    {"gemm", "this machine's sgemm GFLOP/s, the GEMM ceiling", cmd_bench_gemm},
    {"data", "the loader's images/s over a config's files: decode and transforms, the cache off", cmd_bench_data},
};
const int N_BENCH_COMMANDS = (int)(sizeof BENCH_COMMANDS / sizeof BENCH_COMMANDS[0]);

int cmd_bench(int argc, char **argv) {
    vx_verbose = 1; /* a benchmark's record says everything it ran on: the full plan */
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        FILE *out = argc < 2 ? stderr : stdout;
        fputs("usage: voxscale bench <benchmark> [options]  (voxscale bench <benchmark> --help: its options)\n", out);
        for (int i = 0; i < N_BENCH_COMMANDS; i++)
            fprintf(out, "  bench %-10s %s\n", BENCH_COMMANDS[i].name, BENCH_COMMANDS[i].what);
        return argc < 2 ? VX_EXIT_USAGE : 0;
    }
    for (int i = 0; i < N_BENCH_COMMANDS; i++)
        if (strcmp(argv[1], BENCH_COMMANDS[i].name) == 0) return BENCH_COMMANDS[i].run(argc - 1, argv + 1);
    cli_unknown_command("bench: ", argv[1], BENCH_COMMANDS, N_BENCH_COMMANDS, "benchmark",
                        "choose step, kernels, allreduce, scaling or gemm");
}
