/* upconv_phase_spec.c: the phase decomposition's entries in the op spec table (common/op_spec.h), with float64
 * references written from the definition of nearest x2 + 3x3x3 convolution, not from the phase tables: the weights'
 * reference sums, for each phase and tap, the 3x3x3 taps whose upsampled input is that tap's input voxel; the
 * shuffle's reads the z element of the phase a voxel's parities name. A case's shape is an UpconvPhaseShape in
 * KernelCase.params. */
#include "common/op_spec.h"
#include "upconv_phase/upconv_phase.h"

/* the backend's table of this op, as the entries receive it */
static const UpconvPhaseOps *table(const OpHead *ops) { return (const UpconvPhaseOps *)(const void *)ops; }

static UpconvPhaseShape shape_of(const KernelCase *k) {
    UpconvPhaseShape s;
    kernel_case_get_params(k, &s, sizeof s);
    s.dtype = k->dtype;
    return s;
}

/* Along one axis, output voxel 2i+a with 3x3x3 tap kd reads upsampled position 2i+a+kd-1, i.e. input voxel
 * floor((2i+a+kd-1)/2) = i + floor((a+kd-1)/2); phase a's 2-tap convolution (padding 1) at output i+a reads input
 * voxels i+a-1+t for t = 0, 1. So tap kd belongs to phase tap t when a-1+t == floor((a+kd-1)/2). */
static int covers(int a, int t, int kd) {
    const int v = a + kd - 1, fl = v < 0 ? -1 : v / 2;
    return a - 1 + t == fl;
}

static void w_setup(KernelCase *k, const OpHead *ops) {
    const UpconvPhaseShape s = shape_of(k);
    op_spec_bufs(k, 4, (long[]){upconv_phase_weight_count(&s), s.c_out, upconv_phase_phase_weight_count(&s), 8L * s.c_out},
                 (KernelBufRole[]){KB_IN, KB_IN, KB_OUT, KB_OUT}, 0x4, 0);
}
static void w_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const UpconvPhaseShape s = shape_of(k);
    table(ops)->weights(&s, b[0], b[1], b[2], b[3]);
}
static void w_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const UpconvPhaseShape s = shape_of(k);
    const int co = s.c_out, ci = s.c_in;
    for (long i = 0; i < upconv_phase_phase_weight_count(&s); i++) {
        const int c = (int)(i % ci), t = (int)(i / ci % 8), o = (int)(i / ci / 8 % co), p = (int)(i / ci / 8 / co);
        double sum = 0;
        for (int kd = 0; kd < 3; kd++)
            for (int kh = 0; kh < 3; kh++)
                for (int kw = 0; kw < 3; kw++)
                    if (covers(p >> 2, t >> 2, kd) && covers(p >> 1 & 1, t >> 1 & 1, kh) && covers(p & 1, t & 1, kw))
                        sum += in[0][((((long)o * 3 + kd) * 3 + kh) * 3 + kw) * ci + c];
        ref[2][i] = sum;
    }
    for (long i = 0; i < 8L * co; i++) ref[3][i] = in[1][i % co];
}

static void f_setup(KernelCase *k, const OpHead *ops) {
    const UpconvPhaseShape s = shape_of(k);
    op_spec_bufs(k, 4, (long[]){upconv_phase_phase_weight_count(&s), 8L * s.c_out, upconv_phase_weight_count(&s), s.c_out},
                 (KernelBufRole[]){KB_IN, KB_IN, KB_OUT, KB_OUT}, 0, 0xC);
}
static void f_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const UpconvPhaseShape s = shape_of(k);
    table(ops)->fold(&s, b[0], b[1], b[2], b[3], k->beta);
}
static void f_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const UpconvPhaseShape s = shape_of(k);
    const int co = s.c_out, ci = s.c_in;
    for (long i = 0; i < upconv_phase_weight_count(&s); i++) {
        const int c = (int)(i % ci), kw = (int)(i / ci % 3), kh = (int)(i / ci / 3 % 3), kd = (int)(i / ci / 9 % 3);
        const int o = (int)(i / ci / 27);
        double sum = 0;
        for (int p = 0; p < 8; p++)
            for (int t = 0; t < 8; t++)
                if (covers(p >> 2, t >> 2, kd) && covers(p >> 1 & 1, t >> 1 & 1, kh) && covers(p & 1, t & 1, kw))
                    sum += in[0][(((long)p * co + o) * 8 + t) * ci + c];
        ref[2][i] = sum;
    }
    for (int o = 0; o < co; o++) {
        double sum = 0;
        for (int p = 0; p < 8; p++) sum += in[1][(long)p * co + o];
        ref[3][o] = sum;
    }
}

static void s_setup(KernelCase *k, const OpHead *ops) {
    const UpconvPhaseShape s = shape_of(k);
    op_spec_bufs(k, 2, (long[]){upconv_phase_z_count(&s), upconv_phase_y_count(&s)}, (KernelBufRole[]){KB_IN, KB_OUT},
                 0x3, 0);
}
static void s_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const UpconvPhaseShape s = shape_of(k);
    table(ops)->shuffle(&s, b[0], b[1]);
}
/* where y element i (the upsampled output) comes from in z: phase (z%2, y%2, x%2)'s output at input voxel (z/2, y/2,
 * x/2) sits at z row (z/2 + z%2, y/2 + y%2, x/2 + x%2); the shuffle's definition, read by both references */
static long z_of_y(const UpconvPhaseShape *s, long i) {
    const int co = s->c_out, D = 2 * s->d, H = 2 * s->h, W = 2 * s->w;
    const int o = (int)(i % co);
    const long r = i / co;
    const int x = (int)(r % W), y = (int)(r / W % H), z = (int)(r / ((long)W * H) % D);
    const long b = r / ((long)W * H * D);
    const long zr = ((b * (s->d + 1) + z / 2 + z % 2) * (s->h + 1) + y / 2 + y % 2) * (s->w + 1) + x / 2 + x % 2;
    return (zr * 8 + (z % 2) * 4 + (y % 2) * 2 + x % 2) * co + o;
}

static void s_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const UpconvPhaseShape s = shape_of(k);
    for (long i = 0; i < upconv_phase_y_count(&s); i++) ref[1][i] = in[0][z_of_y(&s, i)];
}

static void u_setup(KernelCase *k, const OpHead *ops) {
    const UpconvPhaseShape s = shape_of(k);
    op_spec_bufs(k, 2, (long[]){upconv_phase_y_count(&s), upconv_phase_z_count(&s)}, (KernelBufRole[]){KB_IN, KB_OUT},
                 0x3, 0);
}
static void u_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const UpconvPhaseShape s = shape_of(k);
    table(ops)->unshuffle(&s, b[0], b[1]);
}
/* the transpose of the shuffle: zero everywhere, then every dy element added where the shuffle took it from */
static void u_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const UpconvPhaseShape s = shape_of(k);
    for (long i = 0; i < upconv_phase_z_count(&s); i++) ref[1][i] = 0.0;
    for (long i = 0; i < upconv_phase_y_count(&s); i++) ref[1][z_of_y(&s, i)] += in[0][i];
}

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp upconv_phase_specs[] = {
    {"upconv_phase_weights", UPCONV_PHASE_WEIGHTS, 0, 1e-6, w_setup, w_run, w_ref, NULL},
    {"upconv_phase_fold", UPCONV_PHASE_FOLD, 0, 1e-6, f_setup, f_run, f_ref, NULL},
    {"upconv_phase_shuffle", UPCONV_PHASE_SHUFFLE, 0, 1e-6, s_setup, s_run, s_ref, NULL},
    {"upconv_phase_unshuffle", UPCONV_PHASE_UNSHUFFLE, 0, 1e-6, u_setup, u_run, u_ref, NULL},
};
const int upconv_phase_specs_count = sizeof upconv_phase_specs / sizeof upconv_phase_specs[0];
