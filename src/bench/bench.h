/* bench.h: `voxscale bench step` (training-step throughput) and `voxscale bench gemm` (the GEMM ceiling); the
 * command line that reaches them is src/app/cmd_bench.c. */
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
