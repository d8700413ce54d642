/* op_spec.c: what the op folders' spec entries share (see op_spec.h): the buffer list and the shape bytes. */
#include "common/op_spec.h"

#include <string.h>

#include "core/util.h"

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

void kernel_case_set_params(KernelCase *k, const void *params, size_t bytes) {
    VX_CHECK(bytes <= sizeof k->params, "an op's shape of %zu bytes does not fit KernelCase.params (%zu)", bytes,
             sizeof k->params);
    memcpy(k->params, params, bytes);
}

void kernel_case_get_params(const KernelCase *k, void *params, size_t bytes) {
    VX_CHECK(bytes <= sizeof k->params, "an op's shape of %zu bytes does not fit KernelCase.params (%zu)", bytes,
             sizeof k->params);
    memcpy(params, k->params, bytes);
}
