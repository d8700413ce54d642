// bias_test.cpp: conv3d_cuda.cu's bias and dbias kernels under the host emulation (run.sh) against plain loops.
#include <cuda_runtime.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include "conv3d.h"
void emu_add_bias(const Conv3dShape *s, const float *bias, float *y);
void emu_bias_grad(const Conv3dShape *s, const float *dy, float *dbias, float beta);
void emu_poison_scratch(void);
int main() {
    int fails = 0;
    const int cases[][6] = {{3, 5, 7, 9, 5, 0}, {2, 4, 4, 4, 12, 0}, {2, 4, 4, 4, 12, 1}, {1, 3, 3, 3, 1, 0}, {2, 30, 30, 30, 8, 0}, {1, 2, 2, 2, 300, 0}, {1, 2, 3, 2, 1036, 0}};
    for (auto &cs : cases) {
        Conv3dShape s = conv3d_shape(cs[0], cs[1], cs[2], cs[3], 2, cs[4], 1, 1, 0);
        const long P = (long)s.n * s.od * s.oh * s.ow, c = s.c_out, off = cs[5];
        void *ym = nullptr;
        if (posix_memalign(&ym, 64, 4 * (size_t)(P * c + off))) abort();
        float *y = (float *)ym + off, *b = (float *)malloc(4 * c), *db = (float *)malloc(4 * c);
        for (long i = 0; i < P * c; i++) y[i] = (float)((i * 7919) % 1000) / 1000.0f;
        for (long j = 0; j < c; j++) b[j] = j * 0.25f, db[j] = 1.0f;
        double *ref = (double *)calloc(c, 8);
        for (long i = 0; i < P * c; i++) ref[i % c] += y[i];
        emu_poison_scratch();
        emu_bias_grad(&s, y, db, 1.0f);
        for (long j = 0; j < c; j++) if (fabs(db[j] - (1.0 + ref[j])) > 1e-4 * (1 + fabs(ref[j]))) { printf("FAIL dbias %ld\n", j); fails++; break; }
        for (long j = 0; j < c; j++) db[j] = NAN;
        emu_bias_grad(&s, y, db, 0.0f);
        for (long j = 0; j < c; j++) if (!(fabs(db[j] - ref[j]) <= 1e-4 * (1 + fabs(ref[j])))) { printf("FAIL dbias0 %ld\n", j); fails++; break; }
        float *y0 = (float *)malloc(4 * P * c); memcpy(y0, y, 4 * P * c);
        emu_add_bias(&s, b, y);
        for (long i = 0; i < P * c; i++) if (y[i] != y0[i] + b[i % c]) { printf("FAIL bias at %ld\n", i); fails++; break; }
        printf("case c=%ld P=%ld off=%ld done\n", c, P, off);
    }
    printf("%d failures\n", fails);
    return fails;
}
