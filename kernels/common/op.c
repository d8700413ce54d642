/* op.c: the supports() answers most op tables give (see op.h). */
#include "common/op.h"

int op_supports_f32(int fn, DType dt) {
    (void)fn;
    return dt == DT_F32;
}

int op_supports_all_types(int fn, DType dt) {
    (void)fn;
    return dt == DT_F32 || dt == DT_BF16 || dt == DT_F16;
}
