/* bench.h: `voxscale bench step` (training-step throughput) and `voxscale bench gemm` (the GEMM ceiling). */
#pragma once

int bench_main(int argc, char **argv);
