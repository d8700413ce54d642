/* backend_double.h: a test double of a GPU's backend for planning without one: the CPU's table, with every op's
 * supports() answering yes for every storage type, as a GPU's does (the planner then sizes bf16/fp16 models with
 * the CPU's workspace figures). Every registered op is covered through ops.def and the generated ops_all.h. */
#pragma once
#include "backend/backend.h"
#include "backend/ops_all.h"

static int backend_double_all_types(int fn, DType dt) {
    (void)fn, (void)dt;
    return 1;
}
#define VX_OP(name, Type) static Type name##_double;
#include "backend/ops.def"
#undef VX_OP
static inline Backend gpu_double(void) {
    Backend b = *backend_cpu();
#define VX_OP(name, Type)                                   \
    name##_double = *b.name;                                \
    name##_double.head.supports = backend_double_all_types; \
    b.name = &name##_double;
#include "backend/ops.def"
#undef VX_OP
    return b;
}
