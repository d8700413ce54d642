/* op_spec.c: the op spec table assembled from every registered op's entries (kernels/ops.def, each op folder's
 * <op>_spec.c), its lookups, and the buffer helper the entries share (see op_spec.h). */
#include "common/op_spec.h"

#include <pthread.h>
#include <string.h>

#include "core/util.h"

#define VX_OP(name, Type) extern const KernelOp name##_specs[]; extern const int name##_specs_count;
#include "ops.def"
#undef VX_OP

static KernelOp *g_table;
static int g_n;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void assemble(void) {
    int n = 0;
#define VX_OP(name, Type) n += name##_specs_count;
#include "ops.def"
#undef VX_OP
    g_table = vx_malloc((size_t)n * sizeof *g_table);
#define VX_OP(name, Type)                                                                    \
    memcpy(g_table + g_n, name##_specs, (size_t)name##_specs_count * sizeof *g_table); \
    g_n += name##_specs_count;
#include "ops.def"
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
    ops[k->op].setup(k, be);
}

int kernel_op_supported(const Backend *be, int op, DType dt) {
    int n;
    const KernelOp *ops = kernel_ops(&n);
    return op >= 0 && op < n && backend_supports(be, ops[op].op, ops[op].fn, dt);
}

void op_spec_bufs(KernelCase *k, int n, const long *count, const KernelBufRole *role, unsigned act, unsigned accum) {
    k->nbuf = n;
    double bytes = 0;
    for (int b = 0; b < n; b++) {
        k->buf_count[b] = count[b];
        k->act[b] = (act >> b) & 1u;
        k->accum[b] = (accum >> b) & 1u;
        k->role[b] = k->accum[b] && k->beta != 0.0f ? KB_INOUT : role[b];
        bytes += (double)(k->act[b] ? dtype_size(k->dtype) : 4) * count[b] * (k->role[b] == KB_INOUT ? 2 : 1);
    }
    k->bytes = bytes;
}
