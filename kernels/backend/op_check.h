/* op_check.h: one case of the op spec table (op_spec.h) run once on a backend and checked against its float64
 * reference: what `bench kernels` does before timing a case and what the op tests do for every backend, storage type
 * and case. The inputs are seeded, rounded to the case's storage type where they hold activations (so the reference
 * sees exactly what the op sees), and copied into buffers that start `offset` elements past an allocation (1: not
 * 16-byte aligned, so the vector paths are refused and the scalar ones run); outputs the op overwrites are filled
 * with NaN first (a beta-0 write must not read them), outputs it adds to hold values of their own. */
#pragma once
#include "backend/spec_table.h"

typedef struct {
    int ok;
    double err, tol; /* the worst output buffer's max|got - ref| / max|ref|, and the bound it was held to */
    char detail[200];
} KernelCheck;

/* The tolerance case k is held to on a backend: the op's float32 one, widened for 16-bit storage (the outputs are
 * rounded to 8 or 11 significant bits), for the CPU's bf16 math (k->bf16_math: inputs rounded to 8 bits) and for
 * TF32 convolutions on a GPU (tf32: they are allowed). */
double kernel_check_tolerance(const KernelCase *k, int tf32);
/* Runs case k once on be and checks it. corrupt_first_output: add an error to the first output before comparing
 * (VX_TEST_WRONG_OP: proves the check can fail). */
void kernel_check_case(const Backend *be, const KernelCase *k, int offset, unsigned seed, double tol,
                       int corrupt_first_output, KernelCheck *out);
/* Host inputs of case k as kernel_check_case makes them: IN/INOUT buffers filled (rounded to the storage type where
 * act), OUT ones zero; buffers of buf_count floats each (caller frees each and the array). */
float **kernel_case_inputs(const KernelCase *k, unsigned seed);
/* Copies host float buffer h into backend buffer dev of case k's buffer b (converting to the storage type where act). */
void kernel_case_upload(const Backend *be, const KernelCase *k, int b, const float *h, void *dev);
/* Bytes of buffer b of case k. */
size_t kernel_case_bytes(const KernelCase *k, int b);
