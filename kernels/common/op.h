/* op.h: what every op's sub-table starts with (kernels/<op>/<op>.h defines `<Name>Ops { OpHead head; ... }`,
 * registered in kernels/backend/ops.def), and the supports() answers most tables give. */
#pragma once
#include "common/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct OpHead {
    /* 1 when the backend runs the op's function `fn` (the op header's enum) with activations of type dt (for
     * optim's adamw: the low-precision parameter copy; for elementwise's cast and pad_channels: either side).
     * Functions without an activation type answer for DT_F32 only. */
    int (*supports)(int fn, DType dt);
} OpHead;

/* float32 only (the CPU reference), or every storage type (CUDA's activation ops). */
int op_supports_f32(int fn, DType dt);
int op_supports_all_types(int fn, DType dt);

#ifdef __cplusplus
}
#endif
