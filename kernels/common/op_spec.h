/* op_spec.h: what an entry of the op spec table is: each op folder's <op>_spec.c lists its functions' entries,
 * and backend/spec_table.c joins the registered ops' lists into the one table (backend/ops.def) that `voxscale bench
 * kernels` checks and times and the op tests (tests/unit/test_backend_ops.c, and tests/tools/cuda_emu under the host
 * emulation) check on every backend and storage type against float64. The drivers are src/bench/kernels.c (bench,
 * with the cases a model calls: src/bench/kernel_cases.c) and backend/op_check.c (the check both share).
 *
 * An entry knows its buffers (count, role, and whether each holds activations of the case's storage type or
 * float32), runs the op through the backend's table of its op (`ops`, a pointer to the op's <Name>Ops), states its work (FLOPs for the convolutions, bytes read +
 * written for the rest), and computes a float64 reference of its outputs from the same inputs (rounded to the
 * storage type first, so the reference sees exactly what the op sees): convolutions at every `stride`-th output
 * element (their references cost a full reduction per element), every other op at every element. Outputs the case's
 * beta adds to (accum) are checked as their old value plus the fresh result. A new op's entries live in its folder's
 * <op>_spec.c; its shape struct travels in KernelCase.params (kernel_case_set_params), so this header knows no op. */
#pragma once
#include <stddef.h>

#include <math.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/op.h"
#include "common/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { KOP_MAX_BUFS = 9, KCASE_PARAMS_BYTES = 128 };

typedef enum { KB_IN = 0, KB_OUT = 1, KB_INOUT = 2 } KernelBufRole;

typedef struct {
    int op; /* index into kernel_ops() */
    char shape[96];
    DType dtype;       /* storage of the activation buffers (act) */
    float beta;        /* 0: outputs are overwritten (poisoned with NaN first); 1: the accum outputs add to theirs */
    int bf16_math;     /* convolutions: computed in bf16 on float32 storage (the CPU's bf16, conv3d.h): held to a
                          bf16 tolerance (op_check.c) */
    /* the op's own shape struct (Conv3dShape, GroupNormShape, LatentShape, ...) as bytes: set and read with
     * kernel_case_set_params / kernel_case_get_params */
    unsigned char params[KCASE_PARAMS_BYTES];
    int dims[5];       /* upsample2x_*: n, d, h, w, c of the input; augment: d, h, w, c */
    long count;        /* elementwise ops, loss, adamw, sumsq, normal_fill; augment: the code */
    int nbuf;
    long buf_count[KOP_MAX_BUFS];       /* elements */
    KernelBufRole role[KOP_MAX_BUFS];
    unsigned char act[KOP_MAX_BUFS];    /* 1: of dtype (an activation or its gradient); 0: float32 */
    unsigned char accum[KOP_MAX_BUFS];  /* 1: an output that beta 1 adds to */
    double flops, bytes;                /* per call: arithmetic (2 per multiply-add) and bytes read + written */
    size_t workspace;                   /* bytes of backend workspace (convolutions) */
} KernelCase;

typedef struct {
    const char *name;  /* "conv3d_forward", ... what --ops and VX_TEST_* name */
    int fn;            /* which function of its op (the op header's enum): what supports() is asked about */
    int compute_bound; /* 1: rated in GFLOP/s against the GEMM ceiling; 0: in GB/s against the copy ceiling */
    double tolerance;  /* largest accepted max|got - ref| / max|ref| per output buffer in float32 (op_check.c
                          widens it for 16-bit storage and TF32) */
    /* fills nbuf, buf_count, role, act, accum, flops, bytes (and workspace, asking `ops`) from the shape fields;
     * ops is the backend's table of this op (const <Name>Ops *) */
    void (*setup)(KernelCase *k, const OpHead *ops);
    /* one call of the op on backend buffers buf[0..nbuf), through the backend's table of this op */
    void (*run)(const OpHead *ops, const KernelCase *k, void *const *buf, void *workspace);
    /* float64 reference of every output buffer (role KB_OUT/KB_INOUT) from the host inputs in[] (beta 0: the fresh
     * result; the checker adds the old values of accum outputs): ref[b] has buf_count[b] entries; entries not
     * computed (see `stride`) are left NaN and not compared. INOUT buffers' inputs are in[b] as before the call. */
    void (*reference)(const KernelCase *k, const float *const *in, double *const *ref, long stride);
    /* fills host input buffer b with values this op is well-defined on (NULL: uniform in [-1, 1]) */
    void (*fill)(const KernelCase *k, int b, float *host, long count, unsigned seed);
} KernelOp;

/* ---- for the <op>_spec.c files ---------------------------------------------------------------------------- */

/* n buffers with their counts and roles; bit b of act: buffer b holds the case's storage type (else float32); bit b
 * of accum: output b takes the case's beta (1 adds to it, which makes it read as well as written). Sets k->bytes. */
void op_spec_bufs(KernelCase *k, int n, const long *count, const KernelBufRole *role, unsigned act, unsigned accum);
/* An op's shape struct into case k's params, and back (bytes <= KCASE_PARAMS_BYTES). */
void kernel_case_set_params(KernelCase *k, const void *params, size_t bytes);
void kernel_case_get_params(const KernelCase *k, void *params, size_t bytes);
/* The loss scale the loss and latent ops read from backend memory (a power of two, as the trainer's): 4, so a
 * backend that ignored it fails the check. */
#define OP_SPEC_LOSS_SCALE 4.0f
static inline double op_spec_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
/* uniform in [-1, 1), a pure function of (seed, b, i) */
static inline void op_spec_uniform_fill(float *h, long count, unsigned seed, int b) {
    for (long i = 0; i < count; i++) h[i] = 2.0f * vx_uniform01(vx_hash3(seed, (uint64_t)b, (uint64_t)i)) - 1.0f;
}

#ifdef __cplusplus
}
#endif
