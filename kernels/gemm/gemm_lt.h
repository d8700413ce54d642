/* gemm_lt.h: the cuBLASLt path of gemm_cuda.cu (gemm_lt.cu): cuBLASLt loaded with dlopen on first use, as bench
 * loads cuBLAS (the binary links no cuBLAS), a matmul descriptor per call, the algorithm cached per shape. nvcc only;
 * the host emulation (tests/tools/cuda_emu) has no cuBLASLt and answers 0, so the own kernel runs there. */
#pragma once
#include <stdint.h>

#include "gemm/gemm.h"

#ifdef __cplusplus
extern "C" { /* C linkage: the host emulation's stand-in (emu_ops.cpp) defines it from inside an extern "C" block */
#endif

/* Runs s on cuBLASLt and returns 1, or returns 0 having enqueued nothing when cuBLASLt is not loaded (VX_GEMM_OWN=1
 * turns it off, a missing library is said once on stderr), offers no algorithm for the shape, types and alignment,
 * or lacks the epilogue: GELU and DGELU are cuBLASLt's in their tanh form only; for the erf form *pending is set to
 * 1 and the plain product (with beta) is what cuBLASLt leaves in C, the caller applying bias and epilogue after. */
/* The alignment cuBLASLt's heuristic is told of a matrix (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES): the
 * largest power of two dividing its address, at most 256. Left at its default, 256, the heuristic may choose an
 * algorithm that cublasLtMatmul then refuses for a matrix aligned less: a bf16 weight in the parameters' 16-bit copy
 * starts at a multiple of MODEL_PARAM_ALIGN (64) elements, 128 bytes. NULL: 256. */
static inline uint32_t gemm_lt_alignment(const void *p) {
    uint32_t a = 256;
    while (a > 1 && ((uintptr_t)p & (a - 1))) a >>= 1;
    return a;
}

int gemm_lt_matmul(const GemmShape *s, const void *a, const void *b, const float *bias, void *c, void *aux, float beta,
                   int *pending);

#ifdef __cplusplus
}
#endif
