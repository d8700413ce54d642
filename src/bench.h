/* bench.h: `voxscale bench step` (training-step throughput) and `voxscale bench gemm` (the GEMM ceiling). */
#pragma once

int bench_main(int argc, char **argv);

/* CUDA builds: GFLOP/s of cuBLAS SGEMM n x n x n (TF32 tensor cores when allow_tf32), fastest of 10 runs. */
double bench_cublas_sgemm_gflops(int n, int allow_tf32);
