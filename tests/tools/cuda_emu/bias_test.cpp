// bias_test.cpp: conv3d_cuda.cu's own kernels under the host emulation (run.sh) against plain loops, in every storage
// type: the bias add with the fused residual (y = (y + bias) + r, rounded once to the storage type), the bias
// gradient (a deterministic reduction into float32, beta 0 into NaN and beta 1), and the float32 accumulation of a
// low-precision weight gradient; pointwise shapes, and per-axis ones (conv3d_shape_3d: a 1x3x3 conv on a depth-1
// volume, MONAI's stem k 7 stride 1x2x2), whose output positions and weight counts follow the per-axis sizes.
#include <cuda_runtime.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include "conv3d/conv3d.h"
#include "common/dtype.h"
void emu_add_bias(const Conv3dShape *s, const float *bias, const void *residual, void *y);
void emu_bias_grad(const Conv3dShape *s, const void *dy, float *dbias, float beta);
void emu_dw_accumulate(const Conv3dShape *s, const void *lp, float *dw, float beta);
void emu_poison_scratch(void);

static void *buf(size_t bytes, long off_bytes) { // no slack after the end: ASan sees any overrun
    void *m = nullptr;
    if (posix_memalign(&m, 64, bytes + (size_t)off_bytes)) abort();
    return (char *)m + off_bytes;
}

int main() {
    int fails = 0;
    // n, d, h, w, c_out, offset, kernel (0: 1x1x1, 1: 1x3x3 pad 0x1x1, 2: 7x7x7 stride 1x2x2 pad 3x3x3)
    const int cases[][7] = {{3, 5, 7, 9, 5, 0, 0}, {2, 4, 4, 4, 12, 0, 0}, {2, 4, 4, 4, 12, 1, 0}, {1, 3, 3, 3, 1, 0, 0},
                            {2, 30, 30, 30, 8, 0, 0}, {1, 2, 2, 2, 300, 0, 0}, {1, 2, 3, 2, 1036, 0, 0},
                            {2, 1, 9, 7, 12, 1, 1}, {2, 5, 9, 8, 8, 0, 2}};
    const int kk[3][3][3] = {{{1, 1, 1}, {1, 1, 1}, {0, 0, 0}}, {{1, 3, 3}, {1, 1, 1}, {0, 1, 1}},
                             {{7, 7, 7}, {1, 2, 2}, {3, 3, 3}}};
    for (int dt = 0; dt < DT_COUNT; dt++)
        for (auto &cs : cases) {
            const int(*kind)[3] = kk[cs[6]];
            Conv3dShape s = conv3d_shape_3d(cs[0], cs[1], cs[2], cs[3], 2, cs[4], kind[0], kind[1], kind[2]);
            s.dtype = (DType)dt;
            const long P = (long)s.n * s.od * s.oh * s.ow, c = s.c_out, n = P * c, off = cs[5];
            const size_t es = dtype_size(s.dtype);
            void *y = buf(n * es, off * (long)es), *r = buf(n * es, 0);
            float *b = (float *)malloc(4 * c), *db = (float *)malloc(4 * c), *yv = (float *)malloc(4 * n);
            for (long i = 0; i < n; i++) {
                dtype_store(s.dtype, y, i, (float)((i * 7919) % 1000) / 1000.0f);
                dtype_store(s.dtype, r, i, (float)((i * 104729) % 997) / 997.0f - 0.5f);
                yv[i] = dtype_load(s.dtype, y, i);
            }
            for (long j = 0; j < c; j++) b[j] = j * 0.25f, db[j] = 1.0f;
            double *ref = (double *)calloc(c, 8);
            for (long i = 0; i < n; i++) ref[i % c] += yv[i];
            const double tol = dt == DT_F32 ? 1e-4 : 1e-3; // the sums are in double; only the final float rounds
            emu_poison_scratch();
            emu_bias_grad(&s, y, db, 1.0f);
            for (long j = 0; j < c; j++)
                if (fabs(db[j] - (1.0 + ref[j])) > tol * (1 + fabs(ref[j]))) { printf("FAIL dbias %s %ld\n", dtype_name(s.dtype), j); fails++; break; }
            for (long j = 0; j < c; j++) db[j] = NAN;
            emu_bias_grad(&s, y, db, 0.0f);
            for (long j = 0; j < c; j++)
                if (!(fabs(db[j] - ref[j]) <= tol * (1 + fabs(ref[j])))) { printf("FAIL dbias0 %s %ld\n", dtype_name(s.dtype), j); fails++; break; }
            emu_add_bias(&s, b, r, y);
            for (long i = 0; i < n; i++) {
                const float want = dtype_round(s.dtype, (yv[i] + b[i % c]) + dtype_load(s.dtype, r, i));
                if (dtype_load(s.dtype, y, i) != want) { printf("FAIL bias+residual %s at %ld\n", dtype_name(s.dtype), i); fails++; break; }
            }
            // the weight gradient's accumulation: dw = beta*dw + lp, in float32
            const long nw = conv3d_weight_count(&s);
            void *lp = buf(nw * es, 0);
            float *dw = (float *)buf(nw * 4, 0);
            for (long i = 0; i < nw; i++) dtype_store(s.dtype, lp, i, 0.001f * (float)(i % 37) - 0.01f), dw[i] = NAN;
            emu_dw_accumulate(&s, lp, dw, 0.0f);
            for (long i = 0; i < nw; i++)
                if (dw[i] != dtype_load(s.dtype, lp, i)) { printf("FAIL dw beta 0 %s at %ld\n", dtype_name(s.dtype), i); fails++; break; }
            emu_dw_accumulate(&s, lp, dw, 1.0f);
            for (long i = 0; i < nw; i++)
                if (dw[i] != 2.0f * dtype_load(s.dtype, lp, i)) { printf("FAIL dw beta 1 %s at %ld\n", dtype_name(s.dtype), i); fails++; break; }
            printf("case %s c=%ld P=%ld off=%ld weights=%ld done\n", dtype_name(s.dtype), c, P, off, nw);
        }
    printf("%d failures\n", fails);
    return fails;
}
