/* spec_table.h: every registered op's spec entries (common/op_spec.h) in one table, in ops.def's order: what
 * `bench kernels` (src/bench/kernels.c) and the op tests (backend/op_check.h) iterate over, and how they find an
 * entry by name and ask a backend whether it runs it. */
#pragma once
#include "backend/backend.h"
#include "common/op_spec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The table and its length. */
const KernelOp *kernel_ops(int *n);
/* Index of the entry named `name`, or -1. */
int kernel_op_find(const char *name);
/* Sets k's op by name and fills its buffers from its shape (the entry's setup, given be's table of the op); exits on
 * an unknown name. */
void kernel_case_setup(KernelCase *k, const char *op, const Backend *be);
/* Backend be's table of the op entry `op` belongs to: what the entry's setup and run are given. */
const OpHead *kernel_op_table(const Backend *be, int op);
/* 1 when backend be runs entry op (an index of kernel_ops()) in storage type dt. */
int kernel_op_supported(const Backend *be, int op, DType dt);

#ifdef __cplusplus
}
#endif
