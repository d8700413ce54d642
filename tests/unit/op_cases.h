/* op_cases.h: the op tests' one list of cases: every op of the table (kernels/<op>/<op>_spec.c, registered in kernels/backend/ops.def) at shapes chosen to
 * reach its edges (odd sizes, channel counts 1, 3, 5, 12, 20 and more than 1024, stride 1 and 2, multi-block
 * reductions, counts that are not a multiple of 4), with beta 0 and 1 where the op takes it, on aligned and
 * misaligned buffers. tests/unit/test_backend_ops.c runs them on the CPU and CUDA backends, and
 * tests/tools/cuda_emu on the CUDA kernels under the host emulation, each in every storage type the backend supports
 * for the op. A new op or shape is one line here. */
#pragma once
#include "backend/spec_table.h"

typedef struct {
    KernelCase k; /* op, shape fields and beta set; buffers set up per backend and storage type */
    const char *op;
    int offset;   /* buffers start this many elements past an allocation (1: the scalar paths) */
    int emu;      /* under the host emulation too: 1 in every storage type, 2 in float32 only (its many blocks are
                     slow to emulate), 0 not */
} OpTestCase;

/* The list (static storage) and its length. */
const OpTestCase *op_test_cases(int *n);
/* "op dtype shape beta offset": a case's name in failure messages. */
void op_test_case_name(const OpTestCase *c, DType dt, char *out, size_t len);
/* Runs case c (index: its seed) in storage type dt on be through kernel_check_case at the op's tolerance (TF32
 * off). Returns 1 when it passed; else 0 with "name on backend: error E > T: detail" in why. */
int op_test_case_check(const OpTestCase *c, int index, DType dt, const Backend *be, char *why, size_t why_len);
/* The same with the case's bf16_math set (a convolution computed in bf16 on float32 storage, the CPU's bf16: held to
 * the bf16 tolerance); *err (may be NULL) receives the error found, passed or not. */
int op_test_case_check_math(const OpTestCase *c, int index, DType dt, int bf16_math, const Backend *be, double *err,
                            char *why, size_t why_len);
