/* op.c: the registry's lookups over a Backend (backend.h): an op's sub-table by id, and the common supports()
 * answers. Every sub-table begins with its OpHead, so a pointer to the table is a pointer to its head. */
#include "common/backend.h"
#include "common/op.h"

const OpHead *backend_op(const Backend *be, OpId id) {
    switch (id) {
#define VX_OP(name, Type) \
    case OPID_##name: return (const OpHead *)be->name;
#include "ops.def"
#undef VX_OP
    default: return NULL;
    }
}

int backend_supports(const Backend *be, OpId id, int fn, DType dt) {
    const OpHead *h = backend_op(be, id);
    return h && h->supports && h->supports(fn, dt);
}

int op_supports_f32(int fn, DType dt) {
    (void)fn;
    return dt == DT_F32;
}

int op_supports_all_types(int fn, DType dt) {
    (void)fn;
    return dt == DT_F32 || dt == DT_BF16 || dt == DT_F16;
}
