/* cpu_gemm_bf16.h: the CPU's bf16 products on float32 storage (train.precision bf16 on a CPU: a math mode, as TF32 is
 * on a GPU): A and B rounded to bf16 (round to nearest even), products summed in float32, C float32. oneDNN's matmul
 * primitive runs them (its brgemm kernels: AMX tiles, or AVX512-BF16 dot products).
 *
 * Where it pays: a bf16 dot product (vdpbf16ps) does twice a float32 FMA's multiply-adds per instruction, but an
 * Intel core without AMX issues it at half the FMA's rate: on the 2-core Emerald Rapids VM with AVX512-BF16 and no
 * AMX, one thread, inputs already bf16, oneDNN 2.6.3's bf16 matmul ran 78-86 GFLOP/s against 121-157 for its float32
 * one on the transformer's job shapes (256x512x512 NT, 256x512x2048 NT, 512x512x256 NN). AMX tiles multiply bf16 at
 * 8-16x AVX-512's float32 rate. So the GEMMs take bf16 math where oneDNN runs AMX kernels, and stay float32
 * elsewhere; VX_GEMM_BF16=on|off overrides (tests and comparisons). */
#pragma once
#include <stddef.h>
#include <stdint.h>

/* 1 when the GEMMs of a model with bf16 math run in bf16 here (see above); else 0 with why (one line). */
int cpu_gemm_bf16_chosen(char *why, size_t why_len);
/* y[i] = x[i] rounded to bf16 (dtype.h's dtype_f32_to_bf16: nearest even, NaN stays NaN), over OpenMP threads when
 * n is large. Whether this CPU runs bf16 at all: cpu_isa_bf16_runs (cpu_isa.h). */
void cpu_round_to_bf16(const float *x, uint16_t *y, long n);
/* Row-major C [m][n] = alpha * op(A) op(B) + beta * C (cpu_sgemm's meaning) with A and B in bf16, float32
 * accumulation; beta 0 does not read C. Runs on the calling thread (called from each job of a parallel region). */
void cpu_gemm_bf16(int ta, int tb, int m, int n, int k, float alpha, const uint16_t *A, int lda, const uint16_t *B,
                   int ldb, float beta, float *C, int ldc);
