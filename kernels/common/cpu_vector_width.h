/* cpu_vector_width.h: VX_CPU_WIDE, for a CPU function whose loops gcc should vectorise at the widest width the build
 * has (512 bits where AVX-512 is enabled; nothing changes on an AVX2 or older build).
 * Why: gcc 12 tunes every AVX-512 target it knows to prefer 256-bit vectors in the loops it vectorises itself (the
 * intrinsic kernels choose their own width). Where a loop is compute-bound in the inline exp (exp_cpu.h), half-width
 * vectors do half the work an instruction: attention's column softmax was a fifth of the tile path's forward
 * (vit3d-diffusion-64's 512-token self-attention, perf), and with 512-bit vectors the forward took 2.89-2.98 against
 * 3.23 ms (2-core AMX Xeon, one process per build, alternated). Not the whole build: the normal fill's 64-bit
 * hashing ran slower at 512 bits there (q_sample 4.4 against 3.9 ms a step).
 * The bits are the same at either width: these loops are elementwise or keep their sums in the order written (gcc
 * vectorises no float reduction without -ffast-math), so a wider vector only does more elements at once.
 * noinline: inlined into a caller of the default width, the function's loops were vectorised there, at 256 bits; so
 * mark functions called once per tile or block of rows, not per element. */
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define VX_CPU_WIDE __attribute__((target("prefer-vector-width=512"), noinline))
#else
#define VX_CPU_WIDE /* clang and other targets: their default width */
#endif
