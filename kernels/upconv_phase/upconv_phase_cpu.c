/* upconv_phase_cpu.c: the float32 CPU parts of the phase decomposition of nearest x2 + 3x3x3 convolution
 * (upconv_phase.h). The threads split output rows; every sum runs in the header's fixed order, so the bits do not
 * depend on the thread count. */
#include <string.h>

#include "common/cpu_op.h"
#include "upconv_phase/upconv_phase.h"

#define UP_PAR_MIN 32768L /* elements below which a loop stays on one thread */

long upconv_phase_weight_count(const UpconvPhaseShape *s) { return (long)s->c_out * 27 * s->c_in; }
long upconv_phase_phase_weight_count(const UpconvPhaseShape *s) { return 8L * s->c_out * 8 * s->c_in; }
long upconv_phase_z_count(const UpconvPhaseShape *s) {
    return (long)s->n * (s->d + 1) * (s->h + 1) * (s->w + 1) * 8 * s->c_out;
}
long upconv_phase_y_count(const UpconvPhaseShape *s) { return 8L * s->n * s->d * s->h * s->w * s->c_out; }

static void weights_cpu(const UpconvPhaseShape *s, const float *w, const float *b, float *pw, float *pb) {
    const int co = s->c_out, ci = s->c_in;
    const long rows = 8L * co * 8; /* (phase, o, tap) rows of ci */
#pragma omp parallel for schedule(static) if (rows * ci >= UP_PAR_MIN)
    for (long r = 0; r < rows; r++) {
        const int t = (int)(r % 8), o = (int)(r / 8 % co), p = (int)(r / 8 / co);
        const int a = p >> 2, e = p >> 1 & 1, f = p & 1, ti = t >> 2, tj = t >> 1 & 1, tk = t & 1;
        float *dst = pw + r * ci;
        for (int c = 0; c < ci; c++) dst[c] = 0.0f;
        for (int kd = upconv_phase_tap_lo(a, ti); kd <= upconv_phase_tap_hi(a, ti); kd++)
            for (int kh = upconv_phase_tap_lo(e, tj); kh <= upconv_phase_tap_hi(e, tj); kh++)
                for (int kw = upconv_phase_tap_lo(f, tk); kw <= upconv_phase_tap_hi(f, tk); kw++) {
                    const float *src = w + (((long)o * 3 + kd) * 3 + kh) * 3 * ci + (long)kw * ci;
                    for (int c = 0; c < ci; c++) dst[c] += src[c];
                }
    }
    if (b && pb)
        for (int p = 0; p < 8; p++) memcpy(pb + (long)p * co, b, (size_t)co * sizeof(float));
}

static void fold_cpu(const UpconvPhaseShape *s, const float *dpw, const float *dpb, float *dw, float *db, float beta) {
    const int co = s->c_out, ci = s->c_in;
    const long rows = (long)co * 27; /* (o, kd, kh, kw) rows of ci */
#pragma omp parallel for schedule(static) if (rows * ci * 8 >= UP_PAR_MIN)
    for (long r = 0; r < rows; r++) {
        const int kw = (int)(r % 3), kh = (int)(r / 3 % 3), kd = (int)(r / 9 % 3), o = (int)(r / 27);
        float *dst = dw + r * ci;
        for (int c = 0; c < ci; c++) {
            float acc = 0.0f;
            for (int p = 0; p < 8; p++) {
                const int t = upconv_phase_tap_of(p >> 2, kd) * 4 + upconv_phase_tap_of(p >> 1 & 1, kh) * 2 +
                              upconv_phase_tap_of(p & 1, kw);
                acc += dpw[(((long)p * co + o) * 8 + t) * ci + c];
            }
            dst[c] = beta != 0.0f ? beta * dst[c] + acc : acc;
        }
    }
    if (db && dpb)
        for (int o = 0; o < co; o++) {
            float acc = 0.0f;
            for (int p = 0; p < 8; p++) acc += dpb[(long)p * co + o];
            db[o] = beta != 0.0f ? beta * db[o] + acc : acc;
        }
}

/* y row (b, z, y, x) of the upsampled grid <- z row (b, z/2 + a, y/2 + e, x/2 + f), phase (a, e, f) = parities */
static void shuffle_cpu(const UpconvPhaseShape *s, const float *z, float *y) {
    const int co = s->c_out, D = 2 * s->d, H = 2 * s->h, W = 2 * s->w;
    const long rows = (long)s->n * D * H * W;
#pragma omp parallel for schedule(static) if (rows * co >= UP_PAR_MIN)
    for (long r = 0; r < rows; r++) {
        const int x = (int)(r % W), yy = (int)(r / W % H), zz = (int)(r / ((long)W * H) % D);
        const long b = r / ((long)W * H * D);
        const int a = zz & 1, e = yy & 1, f = x & 1, p = a * 4 + e * 2 + f;
        const long zr = ((b * (s->d + 1) + zz / 2 + a) * (s->h + 1) + yy / 2 + e) * (s->w + 1) + x / 2 + f;
        memcpy(y + r * co, z + (zr * 8 + p) * co, (size_t)co * sizeof(float));
    }
}

static void unshuffle_cpu(const UpconvPhaseShape *s, const float *dy, float *dz) {
    const int co = s->c_out, D = s->d + 1, H = s->h + 1, W = s->w + 1;
    const long rows = (long)s->n * D * H * W;
#pragma omp parallel for schedule(static) if (rows * 8 * co >= UP_PAR_MIN)
    for (long r = 0; r < rows; r++) {
        const int x = (int)(r % W), yy = (int)(r / W % H), zz = (int)(r / ((long)W * H) % D);
        const long b = r / ((long)W * H * D);
        for (int p = 0; p < 8; p++) {
            const int a = p >> 2, e = p >> 1 & 1, f = p & 1;
            const int i = zz - a, j = yy - e, k = x - f; /* the input voxel this phase output belongs to */
            float *dst = dz + (r * 8 + p) * co;
            if (i < 0 || i >= s->d || j < 0 || j >= s->h || k < 0 || k >= s->w) {
                memset(dst, 0, (size_t)co * sizeof(float));
                continue;
            }
            const long yr = ((b * 2 * s->d + 2 * i + a) * 2 * s->h + 2 * j + e) * 2L * s->w + 2 * k + f;
            memcpy(dst, dy + yr * co, (size_t)co * sizeof(float));
        }
    }
}

/* ---- the CPU backend's table (ops.def): float32 only -------------------------------------------------------- */

static void cpu_weights(const UpconvPhaseShape *s, const float *w, const float *b, void *pw, float *pb) {
    cpu_need_f32(s->dtype, "upconv_phase_weights");
    weights_cpu(s, w, b, pw, pb);
}
static void cpu_fold(const UpconvPhaseShape *s, const float *dpw, const float *dpb, float *dw, float *db, float beta) {
    fold_cpu(s, dpw, dpb, dw, db, beta);
}
static void cpu_shuffle(const UpconvPhaseShape *s, const void *z, void *y) {
    cpu_need_f32(s->dtype, "upconv_phase_shuffle");
    shuffle_cpu(s, z, y);
#ifdef VX_TEST_SLOW_PERCENT
    /* A test build's deliberate slowdown (`make VX_TEST_SLOW=20`, tests/integration/test_regress_gate.py): about
     * VX_TEST_SLOW_PERCENT percent of the output once more, the same values again: the first sample's first depth
     * slabs, shuffled as a 1-sample input of that depth (its rows are the first rows of z and y). */
    UpconvPhaseShape again = *s;
    again.n = 1;
    again.d = (int)((long)s->n * s->d * VX_TEST_SLOW_PERCENT / 100);
    if (again.d > s->d) again.d = s->d;
    if (again.d > 0) shuffle_cpu(&again, z, y);
#endif
}
static void cpu_unshuffle(const UpconvPhaseShape *s, const void *dy, void *dz) {
    cpu_need_f32(s->dtype, "upconv_phase_unshuffle");
    unshuffle_cpu(s, dy, dz);
}
const UpconvPhaseOps upconv_phase_ops_cpu = {{op_supports_f32}, cpu_weights, cpu_fold, cpu_shuffle, cpu_unshuffle};
