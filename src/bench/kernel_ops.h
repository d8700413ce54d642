/* kernel_ops.h: the ops `voxscale bench kernels` checks and times, one table entry per op of backend.h, and the
 * cases (op + shape) a config's model calls them with. The driver is src/bench/kernels.c.
 *
 * An entry knows its buffers (count and role of each), runs the op through a `const Backend *`, states its work
 * (FLOPs for the convolutions, bytes read + written for the rest), and computes a float64 reference of its outputs
 * from the same float32 inputs: convolutions at every `stride`-th output element (their references cost a full
 * reduction per element), every other op at every element. A new op is one entry here. */
#pragma once
#include <stddef.h>

#include "backend.h"
#include "model/model.h"

enum { KOP_MAX_BUFS = 9 };

typedef enum { KB_IN = 0, KB_OUT = 1, KB_INOUT = 2 } KernelBufRole;

typedef struct {
    int op; /* index into kernel_ops() */
    char shape[96];
    Conv3dShape conv;  /* conv3d_* */
    GroupNormShape gn; /* groupnorm_* */
    LatentShape lat;   /* latent_* */
    int dims[5];       /* upsample2x_*: n, d, h, w, c of the input */
    long count;        /* elementwise ops, loss, adamw, sumsq */
    int nbuf;
    long buf_count[KOP_MAX_BUFS];       /* floats */
    KernelBufRole role[KOP_MAX_BUFS];
    double flops, bytes;                /* per call: arithmetic (2 per multiply-add) and bytes read + written */
    size_t workspace;                   /* bytes of backend workspace (convolutions) */
} KernelCase;

typedef struct {
    const char *name;  /* "conv3d_forward", ... what --ops and VX_TEST_* name */
    int compute_bound; /* 1: rated in GFLOP/s against the GEMM ceiling; 0: in GB/s against the copy ceiling */
    double tolerance;  /* largest accepted max|got - ref| / max|ref| per output buffer (float32 math, CPU) */
    /* fills nbuf, buf_count, role, flops, bytes (and workspace through be) from the shape fields */
    void (*setup)(KernelCase *k, const Backend *be);
    /* one call of the op on backend buffers buf[0..nbuf) */
    void (*run)(const Backend *be, const KernelCase *k, float *const *buf, void *workspace);
    /* float64 reference of every output buffer (role KB_OUT/KB_INOUT) from the host inputs in[]: ref[b] has
     * buf_count[b] entries; entries not computed (see `stride`) are left NaN and not compared. INOUT buffers'
     * inputs are in[b] as they were before the call. */
    void (*reference)(const KernelCase *k, const float *const *in, double *const *ref, long stride);
    /* fills host input buffer b with values this op is well-defined on (NULL: uniform in [-1, 1]) */
    void (*fill)(const KernelCase *k, int b, float *host, long count, unsigned seed);
} KernelOp;

/* The table, and its length. */
const KernelOp *kernel_ops(int *n);
/* Index of the op named `name`, or -1. */
int kernel_op_find(const char *name);
/* Every distinct (op, shape) the model m calls on a training step, in forward-then-backward order, plus the loss,
 * AdamW and sumsq over the flat parameter buffer. Returns the count; *out is malloc'd. */
int kernel_cases_of_model(const Model *m, const Backend *be, KernelCase **out);
