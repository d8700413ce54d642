/* cpu_gemm.h: the float32 GEMM every CPU kernel calls, on kernels that match it.
 *
 * OpenBLAS picks its kernels from a table of CPUs it knows: 0.3.21 (Debian 12) does not know Emerald Rapids and falls
 * back to its Prescott (SSE3) kernels there, 4x slower than the CPU can go, without a word. So the GEMMs go through
 * OpenBLAS only where the kernels it chose (openblas_get_corename()) are of the CPU's own vector width (AVX-512,
 * AVX2, AVX, SSE), and otherwise through oneDNN's sgemm, which generates its code for the running CPU; the choice
 * and any mismatch are in cpu_gemm_describe(), which the device: line prints. VX_GEMM=openblas|onednn forces one
 * (tests, comparisons).
 * Also oneDNN's sgemm where oneDNN runs its AMX kernels (cpu_isa_amx_runs: Sapphire Rapids and later) although
 * OpenBLAS's SkylakeX kernels match the CPU's width: on a 2-core AMX Xeon (2026-12-01) oneDNN 2.6.3's sgemm ran the
 * transformer's single-threaded GEMM jobs (256x512x384 NT, 256x384x1536 NN, ...) 3-27% faster than OpenBLAS 0.3.21's
 * SkylakeX kernels, the same at 2048^3, and a vit3d-diffusion-64 step 17% faster (630 against 756 ms, medians of 5
 * alternated rounds). The float32 arithmetic is AVX-512 FMAs either way (AMX has no float32 product); only the
 * kernels' blocking differs, and with it the bits. */
#pragma once
#include <stddef.h>

#include "common/cpu_isa.h"

/* 1 when the GEMMs run on oneDNN's sgemm (OpenBLAS's kernels are older than the CPU, oneDNN runs AMX kernels here, or
 * VX_GEMM=onednn). */
int cpu_gemm_uses_onednn(void);
/* "OpenBLAS 0.3.21, Cooperlake kernels (AVX-512)" or "oneDNN 2.6.3 sgemm (avx512_core_bf16): OpenBLAS 0.3.21 would
 * run its Prescott (SSE) kernels on this AVX-512 CPU" */
void cpu_gemm_describe(char *buf, size_t len);

/* "OpenBLAS Cooperlake" or "oneDNN sgemm": the GEMM kernels in a word or two (keys of measured choices). */
const char *cpu_gemm_kernels(void);

/* Row-major C [m][n] = alpha * op(A) op(B) + beta * C, op = transpose where ta/tb are 1 (cblas_sgemm's meaning).
 * Inside an OpenMP parallel region it runs on the calling thread (both libraries do so there). */
void cpu_sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda, const float *B, int ldb,
               float beta, float *C, int ldc);
/* Row-major y [m] = beta*y + op(A) x, A [rows][cols] (cblas_sgemv's meaning, incy 1). */
void cpu_sgemv(int ta, int rows, int cols, float alpha, const float *A, int lda, const float *x, int incx, float beta,
               float *y);
/* Every GEMM of the section single-threaded, for a call whose OpenMP threads each run their own GEMMs (or which runs
 * them all on the calling thread): OpenBLAS's own thread pool off; oneDNN runs on the calling thread inside an active
 * parallel region by itself, and outside one cpu_sgemm sets OpenMP's team to one thread for its call. Returns what
 * cpu_gemm_serial_end restores; sections nest. */
int cpu_gemm_serial_begin(void);
void cpu_gemm_serial_end(int saved);
