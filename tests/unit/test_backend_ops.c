/* test_backend_ops.c: every op of the table (kernels/<op>/<op>_spec.c, registered in kernels/backend/ops.def), at every case of op_cases.c, on every backend
 * this machine can run (the CPU always; CUDA when a GPU is usable, else a "skipped:" line says why) and in
 * every storage type the backend supports for the op (backend.h's supports()), against the float64 reference:
 * float32 to the op's tolerance (TF32 off), bfloat16 and float16 to op_check.c's wider bounds. Outputs a call
 * overwrites start as NaN; beta-1 outputs start with values of their own and must end as those plus the result.
 * One cmocka test per (backend, op) keeps the report short and names what failed; every failing case is printed.
 * `test_backend_ops --list` prints the test names, `test_backend_ops PATTERN...` runs those matching a shell pattern
 * (ci/gpu.sh runs the CUDA ones one per process). With VX_REQUIRE_GPU=1 a missing GPU is a failure, not a skip.
 * For the sanitizers (compute-sanitizer runs 10-100x slower): VX_OP_TYPES=f32,bf16 keeps those storage types,
 * VX_OP_SMALL=1 the cases small enough for the host emulation. VX_OP_SKIP_SHAPES="label,label" leaves out the cases
 * with those shape labels (ci/gpu.sh: the attention case cuDNN's backward does not take, under VX_ATTN_CUDA=cudnn).
 * The CPU's convolutions run four times: as chosen by measurement, im2col forced, oneDNN forced, and oneDNN's bf16
 * kernels forced under bf16 math (float32 storage, the CPU's train.precision bf16), held to the bf16 tolerance and
 * required to show bf16's rounding somewhere (an error above 1e-4 in at least one case of the op: float32 math
 * never comes near it), so that a path that quietly computed in float32 fails; on a CPU without AVX512-BF16 or
 * AMX-BF16 that variant prints "skipped:" with what the CPU lacks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "conv3d/conv3d_cpu_select.h"
#include "common/cpu_isa.h"
#include "op_cases.h"
#include "require_gpu.h"

typedef struct {
    const Backend *be;
    int op;
    int conv_mode; /* the CPU's convolutions: CONV_MODE_AUTO (chosen by measurement), or one path forced */
    int bf16_math; /* the cases' convolutions or products computed in bf16 (the CPU's bf16 math) */
} Target;

/* VX_OP_TYPES (a comma list of dtype names) allows dt; unset: every type */
static int type_wanted(DType dt) {
    const char *e = getenv("VX_OP_TYPES");
    if (!e || !*e) return 1;
    const char *name = dtype_name(dt);
    const size_t n = strlen(name);
    for (const char *p = e; *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ','))
        if (strncmp(p, name, n) == 0 && (p[n] == ',' || p[n] == 0)) return 1;
    return 0;
}

/* VX_OP_SKIP_SHAPES (a comma list of shape labels) leaves out the case labelled shape */
static int shape_skipped(const char *shape) {
    const char *e = getenv("VX_OP_SKIP_SHAPES");
    const size_t n = strlen(shape);
    for (const char *p = e; p && *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ','))
        if (strcspn(p, ",") == n && strncmp(p, shape, n) == 0) return 1;
    return 0;
}

/* Runs every case of op t->op on backend t->be in each storage type it supports; fails when one case does. */
static void run_op(void **state) {
    const Target *t = *state;
    int n_cases, n_ops, failed = 0, run = 0;
    double worst = 0;
    const OpTestCase *cases = op_test_cases(&n_cases);
    const KernelOp *ops = kernel_ops(&n_ops);
    const char *small = getenv("VX_OP_SMALL");
    if (t->be == backend_cpu()) conv3d_cpu_set_mode(t->conv_mode);
    for (int c = 0; c < n_cases; c++) {
        if (kernel_op_find(cases[c].op) != t->op) continue;
        if (small && strcmp(small, "1") == 0 && !cases[c].emu) continue;
        if (shape_skipped(cases[c].k.shape)) continue;
        for (int dt = 0; dt < DT_COUNT; dt++) {
            if (!kernel_op_supported(t->be, t->op, (DType)dt) || !type_wanted((DType)dt)) continue;
            char why[512];
            run++;
            double err = 0;
            if (!op_test_case_check_math(&cases[c], c, (DType)dt, t->bf16_math, t->be, &err, why, sizeof why)) {
                print_error("%s\n", why);
                failed++;
            }
            if (err > worst) worst = err;
        }
    }
    if (t->bf16_math) {
        printf("%s: worst error %.3g across the cases (bf16 math; float32's bound is 1e-4)\n", ops[t->op].name, worst);
        if (!(worst > 1e-4)) print_error("%s: no case shows bf16 rounding: did bf16 math run?\n", ops[t->op].name);
        assert_true(worst > 1e-4);
    }
    if (t->be == backend_cpu()) conv3d_cpu_set_mode(CONV_MODE_AUTO);
    if (run == 0) print_error("%s on %s: no case ran\n", ops[t->op].name, t->be->name);
    assert_true(run > 0);
    assert_int_equal(failed, 0);
}

#define MAX_TESTS 256

int main(int argc, char **argv) {
    int n_ops;
    const KernelOp *ops = kernel_ops(&n_ops);
    static Target targets[MAX_TESTS];
    static char names[MAX_TESTS][80];
    struct CMUnitTest tests[MAX_TESTS];
    int n = 0, listed = argc > 1 && strcmp(argv[1], "--list") == 0;
    /* CUDA: convolutions under float32 math (TF32 off), the tolerance being float32's */
    const BackendOptions strict = {.deterministic = 0, .allow_tf32 = 0};
    backend_cuda_set_options(&strict);
    char why[256];
    const Backend *backends[2] = {backend_cpu(), NULL};
    if (backend_cuda_init(0, why, sizeof why)) backends[1] = backend_cuda();
    else if (!listed) {
        if (vx_require_gpu()) {
            printf("FAILED: no CUDA device (%s), and VX_REQUIRE_GPU=1 turns the skip into a failure\n", why);
            return 1;
        }
        printf("skipped: the CUDA backend's op cases: no CUDA device (%s); the CPU's run\n", why);
    }
    for (int b = 0; b < 2; b++) {
        if (!backends[b] && !listed) continue;
        const char *bname = b == 0 ? "cpu" : "cuda";
        /* the CPU's convolutions four times: as chosen, each path forced (the im2col reference and oneDNN), and
         * oneDNN's bf16 kernels under bf16 math where the CPU has them */
        static const char *const suffix[4] = {"", "_im2col", "_onednn", "_onednn_bf16"};
        static const int mode[4] = {CONV_MODE_AUTO, CONV_MODE_IM2COL, CONV_MODE_ONEDNN, CONV_MODE_ONEDNN};
        char lack[200] = "";
        const int bf16 = b == 0 && backend_cpu()->conv3d->bf16_math(lack, sizeof lack);
        if (b == 0 && !bf16 && !listed) printf("skipped: the CPU's bf16 convolutions: %s\n", lack);
        /* the products (gemm, gemm_gelu, gemm_dgelu) once more in bf16 math where the CPU runs it */
        const int gemm_bf16 = b == 0 && cpu_isa_bf16_runs(lack, sizeof lack);
        if (b == 0 && !gemm_bf16 && !listed) printf("skipped: the CPU's bf16 GEMMs: %s\n", lack);
        for (int op = 0; op < n_ops; op++) {
            const int conv = b == 0 && strncmp(ops[op].name, "conv3d", 6) == 0;
            const int product = b == 0 && strncmp(ops[op].name, "gemm", 4) == 0 && strstr(ops[op].name, "bias") == NULL;
            for (int v = 0; v < (conv ? 3 + (bf16 || listed) : product ? 1 + (gemm_bf16 || listed) : 1) &&
                            n < MAX_TESTS; v++) {
                snprintf(names[n], sizeof names[n], "%s_%s%s", bname, ops[op].name, product && v ? "_bf16" : suffix[v]);
                int wanted = argc <= 1 || listed;
                for (int a = 1; a < argc && !wanted; a++) wanted = fnmatch(argv[a], names[n], 0) == 0;
                if (!wanted) continue;
                if (listed) {
                    printf("%s\n", names[n]);
                    continue;
                }
                targets[n] = (Target){.be = backends[b], .op = op, .conv_mode = product ? CONV_MODE_AUTO : mode[v],
                                      .bf16_math = v == 3 || (product && v == 1)};
                tests[n] = (struct CMUnitTest){.name = names[n], .test_func = run_op, .initial_state = &targets[n]};
                n++;
            }
        }
    }
    if (listed) return 0;
    const int rc = _cmocka_run_group_tests("backend_ops", tests, (size_t)n, NULL, NULL);
    backend_cuda_shutdown();
    return rc;
}
