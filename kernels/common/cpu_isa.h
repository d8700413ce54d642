/* cpu_isa.h: the CPU's vector instruction set as the CPU kernels dispatch on it (cpu_isa.c), and VX_CPU_ISA, the one
 * switch that runs a machine as if it had less: the float32 GEMM's choice (cpu_gemm.h), oneDNN's kernels (its maximum
 * ISA is set before its first use) and the bf16 refusal all follow the capped level, so an AVX-512 machine also runs
 * the AVX2 paths an AVX2 machine would (ci/isa_sweep.sh). OpenBLAS picks its kernels when it loads, before any code of
 * ours runs: a cap below them is refused with the OPENBLAS_CORETYPE to set, never silently half applied. */
#pragma once
#include <stddef.h>

/* the vector tiers that decide the float32 GEMM kernels, in order */
typedef enum { ISA_SSE, ISA_AVX, ISA_AVX2, ISA_AVX512 } CpuVecTier;

typedef struct {
    char model[128];    /* /proc/cpuinfo's model name */
    CpuVecTier tier;    /* the widest float32 vectors the kernels may use (AVX-512: F, BW, VL, DQ) */
    int avx512_bf16;    /* AVX512-BF16 (vdpbf16ps): bf16 dot products with float32 accumulation */
    int amx_bf16;       /* AMX tiles with bf16 */
    /* from cpuid and cpuinfo, then capped by VX_CPU_ISA; VX_CPU_HIDE=avx512_bf16,amx_bf16 clears the last two (tests
     * only: the refusal of train.precision bf16 on a CPU without them is then tested on one with them) */
    char cap[16];       /* VX_CPU_ISA's level when it lowered anything, else "" */
    char full[96];      /* what the CPU itself has, described as cpu_isa_describe does, when capped */
} CpuIsa;

/* The levels VX_CPU_ISA takes, lowest first: avx2 (AVX2 + FMA, oneDNN avx2), avx512 (AVX-512 F/BW/VL/DQ, oneDNN
 * avx512_core), avx512_bf16 (and AVX512-BF16, oneDNN avx512_core_bf16), amx (and AMX-BF16, oneDNN
 * avx512_core_amx). Unset, empty or "native": the CPU's own. A level above the CPU's, an unknown name, or a level
 * below the OpenBLAS kernels already loaded is a usage error (exit 2) naming what to set. */
const CpuIsa *cpu_isa(void);
const char *cpu_tier_name(CpuVecTier t); /* "AVX-512", "AVX2", "AVX", "SSE" */
/* "AVX-512, AVX512-BF16" (and ", AMX-BF16"); capped: "AVX2 (VX_CPU_ISA=avx2 on a CPU with AVX-512, AVX512-BF16)" */
void cpu_isa_describe(char *buf, size_t len);
/* The dispatched level as VX_CPU_ISA names it ("avx2", "avx512", "avx512_bf16", "amx"; "avx" or "sse" below AVX2),
 * after its cap: the level results/<device>/ folders carry, so one VM name on two hosts does not mix their figures */
const char *cpu_isa_level(void);
/* oneDNN's effective ISA as it names it, without "cpu_isa_" ("avx512_core_bf16"), after VX_CPU_ISA's cap */
const char *cpu_isa_onednn_name(void);
/* 1 when bf16 math runs natively here: the CPU (after the cap and VX_CPU_HIDE) has AVX512-BF16 or AMX-BF16 and
 * oneDNN's kernels reach them; else 0 with why (one line; why may be NULL). The convolutions' and the GEMMs' floor. */
int cpu_isa_bf16_runs(char *why, size_t why_len);
/* 1 when oneDNN runs its AMX kernels here: the CPU (after the cap and VX_CPU_HIDE) has AMX-BF16 and oneDNN's
 * effective ISA reaches avx512_core_amx. Where the transformer's GEMMs go to bf16 matmuls under --amp bf16, and the
 * float32 GEMM to oneDNN's sgemm (cpu_gemm.h says why). */
int cpu_isa_amx_runs(void);
/* The tier of an OpenBLAS kernel family ("Cooperlake" -> AVX-512, "Zen" -> AVX2, "Prescott" -> SSE). */
CpuVecTier cpu_gemm_openblas_tier(const char *corename);
