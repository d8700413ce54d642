/* kernel_cases.h: the cases of the op spec table (kernels/common/op_spec.h) a config's model calls: what
 * `bench kernels` checks and times. */
#pragma once
#include "backend/spec_table.h"
#include "graph/model.h"

/* Every distinct (op, shape) the model m calls on a training step, in forward-then-backward order, plus the loss,
 * AdamW and sumsq over the flat parameter buffer, in the model's storage type, sorted by op (the table's order).
 * Returns the count; *out is malloc'd. */
int kernel_cases_of_model(const Model *m, const Backend *be, KernelCase **out);

/* The reference shapes of attention (issue 21: a GEMM-bound op's rate at 512, 4096 and 32768 tokens, whatever the
 * model's own sizes): self-attention of tokens[i] tokens, batch 1, one head, head dim 64, forward and backward, in
 * storage type dt, added to the n cases in *cases (realloc'd) and sorted in with them. Returns the new count. */
int kernel_cases_add_attention(KernelCase **cases, int n, const Backend *be, const int *tokens, int n_tokens, DType dt);
