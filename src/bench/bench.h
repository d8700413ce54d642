/* bench.h: `voxscale bench step` (training-step throughput), `bench kernels` (every op checked, then timed against
 * the machine's ceilings) and `bench gemm` (the GEMM ceiling); the command line that reaches them is
 * src/app/cmd_bench.c. */
#pragma once
#include "core/config.h"

typedef struct {
    int iters, warmup;       /* timed steps and warm-up steps; -1: the defaults (5 and 1) */
    const char *results_dir; /* NULL: results */
    const char *config_path; /* names the result files: step_<config stem>.json */
} BenchStepOptions;

/* Times full training steps of cfg on one fixed batch and writes <results>/<device>/step_<config>.json and .md.
 * Returns the exit code. */
int bench_step(Config *cfg, const BenchStepOptions *o);
/* Prints this machine's BLAS sgemm rate at a square and at the convolutions' GEMM shapes. */
int bench_gemm(void);

/* CUDA builds: GFLOP/s of cuBLAS SGEMM n x n x n (TF32 tensor cores when allow_tf32), fastest of 10 runs. */
double bench_cublas_sgemm_gflops(int n, int allow_tf32);

typedef struct {
    const char *results_dir; /* NULL: results */
    const char *config_path; /* names the result files: kernels_<config stem>.json */
    const char *ops;         /* comma-separated op names (kernel_ops.c's table); NULL: every op */
    double budget_ms;        /* timing per case; <= 0: 200 ms */
    int max_reps;            /* timed calls per case at most; <= 0: 200 */
} BenchKernelsOptions;

/* Checks every op the config's model calls, at each of its shapes, against a float64 reference, then times it and
 * rates it against the ceilings measured in the same run; writes <results>/<device>/kernels_<config>.json and .md.
 * Returns 0, or 1 when an op's check failed (after writing the report). */
int bench_kernels(Config *cfg, const BenchKernelsOptions *o);

/* CUDA builds: device-to-device copy GB/s (bytes read + written) and the GPU's L2 size in bytes. */
double bench_cuda_copy_gbps(size_t bytes);
size_t bench_cuda_l2_bytes(void);
