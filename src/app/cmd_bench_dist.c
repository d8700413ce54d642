/* cmd_bench_dist.c: the flags of `voxscale bench allreduce` (nccl-tests' names: -b -e -f -n -w) and `voxscale bench
 * scaling`; src/bench/allreduce.c and scaling.c run them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/cli.h"
#include "app/commands.h"
#include "bench/bench.h"
#include "core/suggest.h"
#include "core/util.h"

static const char *ALLREDUCE_HELP =
    "usage: voxscale bench allreduce [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-n ITERS] [-w WARMUP]\n"
    "                                [--device auto|cpu|cuda] [--results DIR] [--overwrite]\n"
    "  the all-reduce of the ranks present (mpirun -np N voxscale bench allreduce; NCCL on GPU ranks), from -b to -e\n"
    "  bytes (default 8 to 256M; K, M, G suffixes) by -f (default 2), in nccl-tests' columns, with the alpha-beta\n"
    "  ring fit; rank 0 writes DIR/<device>/allreduce_<n>ranks.json and .md (DIR defaults to results; existing ones\n"
    "  are refused before the sweep unless --overwrite is given)\n";

/* "256M" -> bytes, or exit 2 naming the flag */
static double parse_bytes(const char *flag, const char *v) {
    char *end;
    double x = strtod(v, &end);
    const double unit = *end == 'K' || *end == 'k' ? 1024.0 : *end == 'M' || *end == 'm' ? 1048576.0
                        : *end == 'G' || *end == 'g' ? 1073741824.0 : 1.0;
    if (unit > 1) end++;
    if (end == v || *end != 0 || !(x > 0) || x * unit > 4.0 * 1073741824.0)
        vx_usage_error("bench allreduce %s %s: expected a size in bytes from 1 to 4G (K, M, G suffixes allowed)", flag, v);
    return x * unit;
}

static int parse_int(const char *flag, const char *v, int lo, int hi) {
    char *end;
    long x = strtol(v, &end, 10);
    if (end == v || *end != 0 || x < lo || x > hi)
        vx_usage_error("bench %s %s: expected a whole number from %d to %d", flag, v, lo, hi);
    return (int)x;
}

int cmd_bench_allreduce(int argc, char **argv) {
    BenchAllreduceOptions o = {.min_bytes = 8, .max_bytes = 256.0 * 1048576, .factor = 2, .iters = -1, .warmup = -1,
                               .device = "auto"};
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            fputs(ALLREDUCE_HELP, stdout);
            return 0;
        }
        if (!strcmp(f, "--overwrite")) {
            o.overwrite = 1;
            continue;
        }
        if (i + 1 >= argc) vx_usage_error("bench allreduce: %s needs a value (see --help)", f);
        const char *v = argv[++i];
        if (!strcmp(f, "-b") || !strcmp(f, "--minbytes")) o.min_bytes = parse_bytes(f, v);
        else if (!strcmp(f, "-e") || !strcmp(f, "--maxbytes")) o.max_bytes = parse_bytes(f, v);
        else if (!strcmp(f, "-f") || !strcmp(f, "--stepfactor")) o.factor = parse_int(f, v, 2, 1024);
        else if (!strcmp(f, "-n") || !strcmp(f, "--iters")) o.iters = parse_int(f, v, 1, 100000);
        else if (!strcmp(f, "-w") || !strcmp(f, "--warmup_iters") || !strcmp(f, "--warmup"))
            o.warmup = parse_int(f, v, 0, 100000);
        else if (!strcmp(f, "--device")) {
            if (strcmp(v, "auto") && strcmp(v, "cpu") && strcmp(v, "cuda"))
                vx_usage_error("bench allreduce --device %s: choose auto, cpu or cuda", v);
            o.device = v;
        } else if (!strcmp(f, "--results")) o.results_dir = v;
        else {
            char near[32], hint[64];
            suggest_nearest_in_list(f + strspn(f, "-"), ",minbytes,maxbytes,stepfactor,iters,warmup_iters,warmup,"
                                    "device,results,overwrite,help,", near, sizeof near);
            vx_usage_error("bench allreduce: unknown option %s%s (see --help)", f,
                           suggest_phrase(near, "--", hint, sizeof hint));
        }
    }
    if (o.min_bytes > o.max_bytes) vx_usage_error("bench allreduce: -b %.0f is above -e %.0f", o.min_bytes, o.max_bytes);
    return bench_allreduce(&o);
}

static const char *SCALING_HELP =
    "usage: voxscale bench scaling [--gpus 1,2,4,8] [--mode weak|strong|both] [--config FILE] [--steps N]\n"
    "                              [--interconnect measured|h100-nvlink|pcie4|ib400] [--measure-max N]\n"
    "                              [--batch-size N] [--device D] [--results DIR] [--set K=V] [--overwrite]\n"
    "  weak (fixed batch per rank) and strong (fixed global batch) scaling of the trainer: rank counts up to\n"
    "  --measure-max (default: the GPUs present, or 4 CPU ranks) are run (mpirun on CPU ranks), the others\n"
    "  projected from a measured one-rank step and the all-reduce model (the fit of bench allreduce, or the\n"
    "  --interconnect preset); the model's error is printed beside every measured count. Writes\n"
    "  DIR/<device>/scaling_<config>.json, .md, scaling_<config>_tb/ (TensorBoard, step = ranks) and the chart\n"
    "  DIR/<device>/charts/scaling_<config>.png and .svg (drawn by bench/report/report.py); an existing\n"
    "  scaling_<config>.json or .md is refused before the runs unless --overwrite is given\n";

int cmd_bench_scaling(int argc, char **argv) {
    BenchScalingOptions o = {.counts = {1, 2, 4, 8}, .n_counts = 4, .weak = 1, .strong = 1, .steps = 8,
                             .interconnect = "measured"};
    /* our own flags out first; the rest (config, batch size, device, results, --set) go to cli_parse */
    char **rest = vx_malloc((size_t)(argc + 1) * sizeof *rest);
    int nrest = 0;
    rest[nrest++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        const int has = i + 1 < argc;
        if (!strcmp(f, "--gpus") && has) {
            o.n_counts = 0;
            char buf[256];
            snprintf(buf, sizeof buf, "%s", argv[++i]);
            for (char *sv = NULL, *t = strtok_r(buf, ",", &sv); t; t = strtok_r(NULL, ",", &sv)) {
                char *end;
                const long v = strtol(t, &end, 10);
                if (*end || v < 1 || v > 1024 || o.n_counts == 16)
                    vx_usage_error("bench scaling --gpus %s: expected up to 16 rank counts from 1 to 1024, e.g. 1,2,4,8",
                                   argv[i]);
                o.counts[o.n_counts++] = (int)v;
            }
            if (o.counts[0] != 1) vx_usage_error("bench scaling --gpus %s: the list must start with 1 (the baseline)", argv[i]);
        } else if (!strcmp(f, "--mode") && has) {
            const char *v = argv[++i];
            if (!strcmp(v, "weak")) o.strong = 0;
            else if (!strcmp(v, "strong")) o.weak = 0;
            else if (strcmp(v, "both")) vx_usage_error("bench scaling --mode %s: choose weak, strong or both", v);
        } else if (!strcmp(f, "--interconnect") && has) {
            const char *v = argv[++i];
            if (strcmp(v, "measured") && strcmp(v, "h100-nvlink") && strcmp(v, "pcie4") && strcmp(v, "ib400"))
                vx_usage_error("bench scaling --interconnect %s: choose measured, h100-nvlink, pcie4 or ib400", v);
            o.interconnect = v;
        } else if (!strcmp(f, "--steps") && has) {
            o.steps = parse_int(f, argv[++i], 4, 100000);
        } else if (!strcmp(f, "--measure-max") && has) {
            o.measure_max = parse_int(f, argv[++i], 1, 1024);
        } else {
            if (!strcmp(f, "--set") && has && o.n_sets < 32) o.sets[o.n_sets++] = argv[i + 1];
            rest[nrest++] = argv[i];
        }
    }
    rest[nrest] = NULL;
    CliArgs a;
    cli_parse(nrest, rest, &a, SCALING_HELP, ",config,batch-size,device,results,set,threads,overwrite,");
    o.config_path = a.config_path;
    o.results_dir = a.results_dir;
    o.overwrite = a.overwrite;
    const int rc = bench_scaling(&a.cfg, &o);
    free(rest);
    return rc;
}
