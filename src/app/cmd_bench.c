/* cmd_bench.c: `voxscale bench step|kernels|allreduce|scaling|gemm`: the flags of each benchmark, then src/bench runs it. */
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

int cmd_bench(int argc, char **argv) {
    vx_verbose = 1; /* a benchmark's record says everything it ran on: the full plan */
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs("usage: voxscale bench step|kernels|allreduce|scaling|gemm [options]  (voxscale bench step --help)\n", argc < 2 ? stderr : stdout);
        return argc < 2 ? VX_EXIT_USAGE : 0;
    }
    if (strcmp(argv[1], "step") == 0) return cmd_bench_step(argc - 1, argv + 1);
    if (strcmp(argv[1], "kernels") == 0) return cmd_bench_kernels(argc - 1, argv + 1);
    if (strcmp(argv[1], "allreduce") == 0) return cmd_bench_allreduce(argc - 1, argv + 1);
    if (strcmp(argv[1], "scaling") == 0) return cmd_bench_scaling(argc - 1, argv + 1);
    if (strcmp(argv[1], "gemm") == 0) return cmd_bench_gemm(argc - 1, argv + 1);
    vx_usage_error("bench: unknown benchmark \"%s\"; choose step, kernels, allreduce, scaling or gemm", argv[1]);
}
