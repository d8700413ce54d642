/* spec_table.c: the op spec table assembled from every registered op's entries (kernels/backend/ops.def, each op
 * folder's <op>_spec.c), and its lookups (see spec_table.h). */
#include "backend/spec_table.h"

#include <pthread.h>
#include <string.h>

#include "core/util.h"

#define VX_OP(name, Type) extern const KernelOp name##_specs[]; extern const int name##_specs_count;
#include "backend/ops.def"
#undef VX_OP

static KernelOp *g_table;
static OpId *g_ids; /* the registered op each entry belongs to */
static int g_n;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void assemble(void) {
    int n = 0;
#define VX_OP(name, Type) n += name##_specs_count;
#include "backend/ops.def"
#undef VX_OP
    g_table = vx_malloc((size_t)n * sizeof *g_table);
    g_ids = vx_malloc((size_t)n * sizeof *g_ids);
#define VX_OP(name, Type)                                                                    \
    memcpy(g_table + g_n, name##_specs, (size_t)name##_specs_count * sizeof *g_table); \
    for (int i = 0; i < name##_specs_count; i++) g_ids[g_n + i] = OPID_##name;         \
    g_n += name##_specs_count;
#include "backend/ops.def"
#undef VX_OP
}

const KernelOp *kernel_ops(int *n) {
    pthread_once(&g_once, assemble);
    *n = g_n;
    return g_table;
}

int kernel_op_find(const char *name) {
    int n;
    const KernelOp *ops = kernel_ops(&n);
    for (int i = 0; i < n; i++)
        if (strcmp(ops[i].name, name) == 0) return i;
    return -1;
}

void kernel_case_setup(KernelCase *k, const char *op, const Backend *be) {
    int n;
    const KernelOp *ops = kernel_ops(&n);
    k->op = kernel_op_find(op);
    VX_CHECK(k->op >= 0, "kernel ops: no op named %s in the table", op);
    ops[k->op].setup(k, kernel_op_table(be, k->op));
}

int kernel_op_supported(const Backend *be, int op, DType dt) {
    int n;
    const KernelOp *ops = kernel_ops(&n);
    return op >= 0 && op < n && backend_supports(be, g_ids[op], ops[op].fn, dt);
}


const OpHead *kernel_op_table(const Backend *be, int op) {
    int n;
    kernel_ops(&n);
    VX_CHECK(op >= 0 && op < n, "kernel ops: entry %d is outside the table (0..%d)", op, n - 1);
    return backend_op(be, g_ids[op]);
}
