/* kernel_cases.h: the cases of the op spec table (kernels/common/op_spec.h) a config's model calls: what
 * `bench kernels` checks and times. */
#pragma once
#include "backend/spec_table.h"
#include "model/model.h"

/* Every distinct (op, shape) the model m calls on a training step, in forward-then-backward order, plus the loss,
 * AdamW and sumsq over the flat parameter buffer, in the model's storage type, sorted by op (the table's order).
 * Returns the count; *out is malloc'd. */
int kernel_cases_of_model(const Model *m, const Backend *be, KernelCase **out);
