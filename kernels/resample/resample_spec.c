/* resample_spec.c: trilinear resampling's entry in the op spec table (common/op_spec.h), with a float64 reference
 * written from the interpolation's definition, not the kernels' code: per axis a dense [out][in] table of weights
 * (each output cell's two neighbours), then the separable sum along W, H and D in double. A case's input is
 * dims = {n, in0, in1, in2, c} (as upsample2x_*'s) and its output grid the int[3] in KernelCase.params. */
#include <math.h>
#include <stdlib.h>

#include "common/op_spec.h"
#include "core/util.h"
#include "resample/resample.h"

static const ResampleOps *table(const OpHead *ops) { return (const ResampleOps *)(const void *)ops; }
static void grids(const KernelCase *k, int in[3], int out[3]) {
    kernel_case_get_params(k, out, 3 * sizeof(int));
    for (int a = 0; a < 3; a++) in[a] = k->dims[1 + a];
}
static long voxels(const int g[3]) { return (long)g[0] * g[1] * g[2]; }

/* w [out][in]: output cell o's centre, (o + 1/2) in/out input cells from the edge, clamped to the first centre;
 * the two cells around it share 1 by distance (the last cell is its own upper neighbour) */
static double *axis_weights(int in, int out) {
    double *w = vx_malloc(sizeof(double) * (size_t)in * out);
    for (long e = 0; e < (long)in * out; e++) w[e] = 0;
    for (int o = 0; o < out; o++) {
        const double s = fmax((o + 0.5) * in / out - 0.5, 0.0);
        const int lo = (int)floor(s), hi = lo + 1 < in ? lo + 1 : lo;
        w[(long)o * in + lo] += 1.0 - (s - lo);
        w[(long)o * in + hi] += s - lo;
    }
    return w;
}

static void setup(KernelCase *k, const OpHead *ops) {
    int in[3], out[3];
    grids(k, in, out);
    const long n = k->dims[0], c = k->dims[4];
    op_spec_bufs(k, 2, (long[]){n * voxels(in) * c, n * voxels(out) * c}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x3, 0);
}
static void run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    int in[3], out[3];
    grids(k, in, out);
    table(ops)->forward(k->dtype, k->dims[0], in, out, k->dims[4], b[0], b[1]);
}
static void reference(const KernelCase *k, const float *const *x, double *const *ref, long stride) {
    int in[3], out[3];
    grids(k, in, out);
    const int n = k->dims[0], c = k->dims[4];
    double *wd = axis_weights(in[0], out[0]), *wh = axis_weights(in[1], out[1]), *ww = axis_weights(in[2], out[2]);
    /* t1 [in0][in1][out2][c] (W resampled), t2 [in0][out1][out2][c] (then H), per sample; then D into ref */
    double *t1 = vx_malloc(sizeof(double) * (size_t)in[0] * in[1] * out[2] * c);
    double *t2 = vx_malloc(sizeof(double) * (size_t)in[0] * out[1] * out[2] * c);
    for (int b = 0; b < n; b++) {
        const float *xb = x[0] + (long)b * voxels(in) * c;
        double *yb = ref[1] + (long)b * voxels(out) * c;
        for (long r = 0; r < (long)in[0] * in[1]; r++)
            for (int o = 0; o < out[2]; o++)
                for (int j = 0; j < c; j++) {
                    double a = 0;
                    for (int i = 0; i < in[2]; i++) a += ww[(long)o * in[2] + i] * xb[(r * in[2] + i) * c + j];
                    t1[(r * out[2] + o) * c + j] = a;
                }
        const long row2 = (long)out[2] * c; /* one (d, h) row of t1 and t2 */
        for (int d = 0; d < in[0]; d++)
            for (int o = 0; o < out[1]; o++)
                for (long e = 0; e < row2; e++) {
                    double a = 0;
                    for (int i = 0; i < in[1]; i++) a += wh[(long)o * in[1] + i] * t1[((long)d * in[1] + i) * row2 + e];
                    t2[((long)d * out[1] + o) * row2 + e] = a;
                }
        const long plane = (long)out[1] * row2; /* one d plane of t2 and y */
        for (int o = 0; o < out[0]; o++)
            for (long e = 0; e < plane; e++) {
                double a = 0;
                for (int i = 0; i < in[0]; i++) a += wd[(long)o * in[0] + i] * t2[(long)i * plane + e];
                yb[(long)o * plane + e] = a;
            }
    }
    free(t2);
    free(t1);
    free(ww);
    free(wh);
    free(wd);
}

/* ---- the entry (registered through kernels/backend/ops.def) ---------------------------------------------------- */

const KernelOp resample_specs[] = {
    {"resample_trilinear", RESAMPLE_FORWARD, 0, 1e-6, setup, run, reference, NULL},
};
const int resample_specs_count = sizeof resample_specs / sizeof resample_specs[0];
