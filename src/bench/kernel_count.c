/* kernel_count.c: `bench kernels` under callgrind, for ci/regress's instruction counts (VX_KERNELS_CALLGRIND=1).
 * Each case the model calls runs once as a warm-up (oneDNN generates its code, pages are touched) and once between
 * callgrind's client requests: instrumentation on, counters zeroed, the call, a dump named "case <op> <shape>",
 * instrumentation off. So `valgrind --tool=callgrind --instr-atstart=no` writes one dump per case holding that call's
 * instructions alone, and everything else (setup, the reference, other cases) runs uninstrumented. An instruction
 * count does not move with a neighbour's load, as times on a shared VM do; outside valgrind the requests are a few
 * no-op instructions. No check, ceiling or timing runs in this mode (the normal run does those). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else /* built without valgrind's headers (the Docker image's build stage): the mode runs, counting nothing */
#define CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_ZERO_STATS
#define CALLGRIND_DUMP_STATS_AT(name) ((void)(name))
#define CALLGRIND_STOP_INSTRUMENTATION
#define RUNNING_ON_VALGRIND 0
#endif

#include "backend/op_check.h"
#include "backend/spec_table.h"
#include "bench/kernel_count.h"
#include "core/util.h"

int bench_kernels_count_mode(void) {
    const char *e = getenv("VX_KERNELS_CALLGRIND");
    return e && strcmp(e, "1") == 0;
}

void bench_kernels_count(const Backend *be, const KernelCase *cases, int n, const int *want) {
    int n_ops;
    const KernelOp *ops = kernel_ops(&n_ops);
    int counted = 0;
    for (int c = 0; c < n; c++) {
        const KernelCase *k = &cases[c];
        const KernelOp *op = &ops[k->op];
        if (!want[k->op]) continue;
        float **host = kernel_case_inputs(k, 1234u + (unsigned)c);
        void *bufs[KOP_MAX_BUFS];
        for (int b = 0; b < k->nbuf; b++) {
            bufs[b] = be->alloc(kernel_case_bytes(k, b));
            kernel_case_upload(be, k, b, host[b], bufs[b]);
        }
        void *ws = k->workspace ? be->alloc(k->workspace) : NULL;
        const OpHead *table = kernel_op_table(be, k->op);
        op->run(table, k, bufs, ws); /* warm-up */
        char name[200];
        snprintf(name, sizeof name, "case %s %s", op->name, k->shape);
        CALLGRIND_START_INSTRUMENTATION;
        CALLGRIND_ZERO_STATS;
        op->run(table, k, bufs, ws);
        CALLGRIND_DUMP_STATS_AT(name);
        CALLGRIND_STOP_INSTRUMENTATION;
        vx_log("counted: %s\n", name);
        counted++;
        if (ws) be->release(ws);
        for (int b = 0; b < k->nbuf; b++) be->release(bufs[b]), free(host[b]);
        free(host);
    }
    vx_log("counted %d cases (%s)\n", counted, RUNNING_ON_VALGRIND ? "under valgrind" : "not under valgrind: no counts");
}
