/* registry.c: the ops of a Backend by id (backend.h): each registered op's sub-table (kernels/backend/ops.def) seen
 * through its head, and whether the backend runs one of its functions in a storage type. Every sub-table begins
 * with its OpHead, so a pointer to the table is a pointer to its head. */
#include "backend/backend.h"

const OpHead *backend_op(const Backend *be, OpId id) {
    switch (id) {
#define VX_OP(name, Type) \
    case OPID_##name: return (const OpHead *)be->name;
#include "backend/ops.def"
#undef VX_OP
    default: return NULL;
    }
}

int backend_supports(const Backend *be, OpId id, int fn, DType dt) {
    const OpHead *h = backend_op(be, id);
    return h && h->supports && h->supports(fn, dt);
}
