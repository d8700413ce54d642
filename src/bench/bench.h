/* bench.h: `voxscale bench step` (training-step throughput), `bench kernels` (every op checked, then timed against
 * the machine's ceilings) and `bench gemm` (the GEMM ceiling); the command line that reaches them is
 * src/app/cmd_bench.c. */
#pragma once
#include "core/config.h"

typedef struct {
    int iters, warmup;       /* timed steps and warm-up steps; -1: the defaults (5 and 1) */
    const char *results_dir; /* NULL: results */
    const char *config_path; /* names the result files: step_<config stem>.json */
    int overwrite;           /* --overwrite: existing result files are replaced (else refused before the run) */
} BenchStepOptions;

/* Times full training steps of cfg on one fixed batch and writes <results>/<device>/step_<config>.json and .md.
 * Returns the exit code. */
int bench_step(Config *cfg, const BenchStepOptions *o);
typedef struct {
    const char *results_dir; /* NULL: results */
    const char *config_path; /* names the result file: data_<config stem>.json */
    int epochs;              /* timed passes (0: 2); the loader's threads are data.workers' (0: the cores) */
    int overwrite;
} BenchDataOptions;

/* Times the loader over the config's files (data_rate.c): decode and transforms, the cache off. */
int bench_data(Config *cfg, const BenchDataOptions *o);
/* Prints this machine's BLAS sgemm rate at a square and at the convolutions' GEMM shapes. */
int bench_gemm(void);

/* CUDA builds: GFLOP/s of cuBLAS SGEMM n x n x n (TF32 tensor cores when allow_tf32), fastest of 10 runs. */
double bench_cublas_sgemm_gflops(int n, int allow_tf32);

typedef struct {
    const char *results_dir; /* NULL: results */
    const char *config_path; /* names the result files: kernels_<config stem>.json */
    const char *ops;         /* comma-separated op names (the op spec table, kernels/common/op_spec.h); NULL: every op */
    double budget_ms;        /* timing per case; <= 0: 200 ms */
    int max_reps;            /* timed calls per case at most; <= 0: 200 */
    const char *attention_tokens; /* "T,T,...": self-attention cases b1 h1 TxT d64 besides the model's ("0": none);
                                   * NULL: 512 and 4096 when the model calls attention, else none */
    int overwrite;                /* --overwrite: existing result files are replaced (else refused before the run) */
} BenchKernelsOptions;

/* Checks every op the config's model calls, at each of its shapes, against a float64 reference, then times it and
 * rates it against the ceilings measured in the same run; writes <results>/<device>/kernels_<config>.json and .md.
 * Returns 0, or 1 when an op's check failed (after writing the report). */
int bench_kernels(Config *cfg, const BenchKernelsOptions *o);

/* CUDA builds: device-to-device copy GB/s (bytes read + written) and the GPU's L2 size in bytes. */
double bench_cuda_copy_gbps(size_t bytes);
size_t bench_cuda_l2_bytes(void);

typedef struct {
    double min_bytes, max_bytes, factor; /* nccl-tests' -b -e -f: 8 B .. 256 MiB, x2 */
    int iters, warmup;                   /* per size; -1: 20 (5 from 64 MiB) and 2 */
    const char *device;                  /* "auto", "cpu", "cuda" */
    const char *results_dir;             /* NULL: results */
    int overwrite;                       /* --overwrite: existing result files are replaced (else refused first) */
} BenchAllreduceOptions;

/* The all-reduce of the ranks this process is one of (dist_detect), swept over sizes in nccl-tests' layout, with
 * the alpha-beta fit; rank 0 writes <results>/<device>/allreduce_<n>ranks.json and .md. Exit 1 on a wrong sum. */
int bench_allreduce(const BenchAllreduceOptions *o);

typedef struct {
    int counts[16], n_counts;    /* --gpus 1,2,4,8 */
    int weak, strong;            /* --mode weak|strong|both */
    const char *config_path;
    int steps;                   /* trainer steps per measured run (the first two are warm-up) */
    const char *interconnect;    /* "measured" or a preset: h100-nvlink, pcie4, ib400 */
    int measure_max;             /* rank counts up to this are run; 0: the GPUs present, or 4 CPU ranks */
    const char *results_dir;
    const char *sets[32];        /* --set K=V passed to the measured runs */
    int n_sets;
    int overwrite;               /* --overwrite: existing result files are replaced (else refused before the runs) */
} BenchScalingOptions;

/* Weak and strong scaling of the trainer: measured up to measure_max ranks, projected beyond from a one-rank
 * timeline and the all-reduce model; writes <results>/<device>/scaling_<config>.{json,md} and _tb/; the chart,
 * charts/scaling_<config>.{png,svg}, is drawn by bench/report/report.py. */
int bench_scaling(Config *cfg, const BenchScalingOptions *o);
