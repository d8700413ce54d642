/* bench_util.h: helpers the benchmarks share (src/bench/bench_util.c). */
#pragma once
#include <cJSON.h>
#include <stddef.h>

#include "train/runtime.h"

/* Median of v[n] (sorts v). */
double bench_median(double *v, int n);
/* Median GFLOP/s of this machine's BLAS sgemm C[m][n] = A[m][k] B[k][n]^T (one warm-up, 5 timed). */
double bench_sgemm_gflops(int m, int n, int k);
/* "AMD EPYC" at AVX-512 BF16 on 2 cores -> "cpu-amd-epyc-avx512-bf16-2c" (the level cpu_isa_level() dispatched at,
 * VX_CPU_ISA's cap included); a GPU's name on CUDA: the results/ folder name of this run's device. */
void bench_device_slug(const Runtime *rt, char *out, size_t len);
/* The CPU's part of it, from a hardware description (the benchmarks that open no runtime: allreduce, data). */
void bench_cpu_slug(const HwInfo *hw, char *out, size_t len);
/* The same folding of any name ("NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3"); out may be name. */
void bench_slugify(const char *name, char *out, size_t len);
/* What CPU results were measured on at the instruction level (issue 41: figures of an AVX2 and an AVX-512 machine
 * must not be read as one): "AVX2 (VX_CPU_ISA=avx2 on a CPU with AVX-512); GEMM: OpenBLAS 0.3.21, Haswell kernels
 * (AVX2)", the dispatched level and the GEMM kernels. bench_isa: that on the CPU backend, "" on a GPU (the device
 * names it). */
void bench_cpu_isa(char *out, size_t len);
void bench_isa(const Runtime *rt, char *out, size_t len);
/* A config path's stem, the name its result files carry (configs/test/tiny.json -> tiny): its file name without the
 * last extension. */
void bench_config_stem(const char *config_path, char *out, size_t len);
/* The commit the results belong to: VX_COMMIT when set, else the one this binary was built from (build_version). */
void bench_build_commit(char *out, size_t len);
/* <results_root or "results">/<device slug>, created. */
void bench_results_dir(const Runtime *rt, const char *results_root, char *out, size_t len);
/* Before a benchmark runs: exits 2 when dir/name (one of its result files) exists, unless overwrite (--overwrite):
 * results are replaced only when asked, as every output is (core/outguard.h). */
void bench_claim_result(const char *dir, const char *name, int overwrite);
/* Writes j, printed, to dir/name atomically (over an existing file only with overwrite), and frees j. */
void bench_write_json(const char *dir, const char *name, cJSON *j, int overwrite);
/* Writes text to dir/name the same way. */
void bench_write_text(const char *dir, const char *name, const char *text, size_t len, int overwrite);
/* memcpy split over the OpenMP threads: the copy ceiling's and its probe's way of copying. */
void bench_parallel_copy(void *dst, const void *src, size_t bytes);
/* The last `most` bytes of a child's log in `out`: what a message shows before its scratch folder is removed. */
void bench_log_tail(const char *path, size_t most, char *out, size_t len);
/* The 1-minute load average (/proc/loadavg), NAN where unreadable: on a shared machine, what else was running. */
double bench_load_average(void);
