/* kernel_ops.c: the table of ops `bench kernels` and the op tests check (kernel_ops.h): for each op its buffers,
 * its call through the backend, its work, and its float64 reference; and the cases a model calls them with. */
#include "bench/kernel_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "rng.h"

/* n buffers with their counts and roles; bit b of act: buffer b holds the case's storage type (else float32); bit b
 * of accum: output b takes the case's beta (1 adds to it, which makes it read as well as written). */
static void bufs(KernelCase *k, int n, const long *count, const KernelBufRole *role, unsigned act, unsigned accum) {
    k->nbuf = n;
    double bytes = 0;
    for (int b = 0; b < n; b++) {
        k->buf_count[b] = count[b];
        k->act[b] = (act >> b) & 1u;
        k->accum[b] = (accum >> b) & 1u;
        k->role[b] = k->accum[b] && k->beta != 0.0f ? KB_INOUT : role[b];
        bytes += (double)(k->act[b] ? dtype_size(k->dtype) : 4) * count[b] * (k->role[b] == KB_INOUT ? 2 : 1);
    }
    k->bytes = bytes;
}

/* ---- convolutions ----------------------------------------------------------------------------------------- */

static long conv_x_index(const Conv3dShape *s, int n, int d, int h, int w, int c) {
    return ((((long)n * s->d + d) * s->h + h) * s->w + w) * s->c_in + c;
}
static long conv_y_index(const Conv3dShape *s, int n, int d, int h, int w, int c) {
    return ((((long)n * s->od + d) * s->oh + h) * s->ow + w) * s->c_out + c;
}
static long conv_w_index(const Conv3dShape *s, int co, int kd, int kh, int kw, int ci) {
    return ((((long)co * s->k + kd) * s->k + kh) * s->k + kw) * s->c_in + ci;
}

static void conv_fwd_setup(KernelCase *k, const Backend *be) {
    Conv3dShape *s = &k->conv;
    s->dtype = k->dtype;
    bufs(k, 4, (long[]){conv3d_input_count(s), conv3d_weight_count(s), s->c_out, conv3d_output_count(s)},
         (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_OUT}, 0xB, 0);
    k->flops = conv3d_forward_flops(s);
    k->workspace = be->conv3d_workspace_bytes(s);
}
static void conv_fwd_run(const Backend *be, const KernelCase *k, void *const *b, void *ws) {
    be->conv3d_forward(&k->conv, b[0], b[1], b[2], NULL, b[3], ws);
}
/* with the fused residual (the ResBlock's skip): buffers x w b r y */
static void conv_fwd_add_setup(KernelCase *k, const Backend *be) {
    Conv3dShape *s = &k->conv;
    s->dtype = k->dtype;
    bufs(k, 5, (long[]){conv3d_input_count(s), conv3d_weight_count(s), s->c_out, conv3d_output_count(s),
                        conv3d_output_count(s)},
         (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_IN, KB_OUT}, 0x1B, 0);
    k->flops = conv3d_forward_flops(s);
    k->workspace = be->conv3d_workspace_bytes(s);
}
static void conv_fwd_add_run(const Backend *be, const KernelCase *k, void *const *b, void *ws) {
    be->conv3d_forward(&k->conv, b[0], b[1], b[2], b[3], b[4], ws);
}
static void conv_fwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const Conv3dShape *s = &k->conv;
    const int y = k->nbuf - 1; /* the output: after the residual when there is one */
    for (long i = 0; i < k->buf_count[y]; i += stride) {
        long t = i;
        const int co = (int)(t % s->c_out); t /= s->c_out;
        const int ow = (int)(t % s->ow); t /= s->ow;
        const int oh = (int)(t % s->oh); t /= s->oh;
        const int od = (int)(t % s->od), n = (int)(t / s->od);
        double acc = in[2][co];
        for (int kd = 0; kd < s->k; kd++)
            for (int kh = 0; kh < s->k; kh++)
                for (int kw = 0; kw < s->k; kw++) {
                    const int id = od * s->stride - s->pad + kd, ih = oh * s->stride - s->pad + kh,
                              iw = ow * s->stride - s->pad + kw;
                    if (id < 0 || id >= s->d || ih < 0 || ih >= s->h || iw < 0 || iw >= s->w) continue;
                    const float *x = in[0] + conv_x_index(s, n, id, ih, iw, 0);
                    const float *w = in[1] + conv_w_index(s, co, kd, kh, kw, 0);
                    for (int ci = 0; ci < s->c_in; ci++) acc += (double)x[ci] * w[ci];
                }
        ref[y][i] = y == 4 ? acc + in[3][i] : acc;
    }
}

static void conv_bwd_data_setup(KernelCase *k, const Backend *be) {
    Conv3dShape *s = &k->conv;
    s->dtype = k->dtype;
    bufs(k, 3, (long[]){conv3d_output_count(s), conv3d_weight_count(s), conv3d_input_count(s)},
         (KernelBufRole[]){KB_IN, KB_IN, KB_OUT}, 0x7, 0x4);
    k->flops = conv3d_forward_flops(s);
    k->workspace = be->conv3d_workspace_bytes(s);
}
static void conv_bwd_data_run(const Backend *be, const KernelCase *k, void *const *b, void *ws) {
    be->conv3d_backward_data(&k->conv, b[0], b[1], b[2], k->beta, ws);
}
static void conv_bwd_data_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const Conv3dShape *s = &k->conv;
    for (long i = 0; i < k->buf_count[2]; i += stride) {
        long t = i;
        const int ci = (int)(t % s->c_in); t /= s->c_in;
        const int x = (int)(t % s->w); t /= s->w;
        const int y = (int)(t % s->h); t /= s->h;
        const int z = (int)(t % s->d), n = (int)(t / s->d);
        double acc = 0;
        for (int kd = 0; kd < s->k; kd++)
            for (int kh = 0; kh < s->k; kh++)
                for (int kw = 0; kw < s->k; kw++) {
                    const int nd = z + s->pad - kd, nh = y + s->pad - kh, nw = x + s->pad - kw;
                    if (nd < 0 || nh < 0 || nw < 0 || nd % s->stride || nh % s->stride || nw % s->stride) continue;
                    const int od = nd / s->stride, oh = nh / s->stride, ow = nw / s->stride;
                    if (od >= s->od || oh >= s->oh || ow >= s->ow) continue;
                    const float *dy = in[0] + conv_y_index(s, n, od, oh, ow, 0);
                    for (int co = 0; co < s->c_out; co++) acc += (double)dy[co] * in[1][conv_w_index(s, co, kd, kh, kw, ci)];
                }
        ref[2][i] = acc;
    }
}

static void conv_bwd_filter_setup(KernelCase *k, const Backend *be) {
    Conv3dShape *s = &k->conv;
    s->dtype = k->dtype;
    /* x dy act; dw dbias the float32 master gradients */
    bufs(k, 4, (long[]){conv3d_input_count(s), conv3d_output_count(s), conv3d_weight_count(s), s->c_out},
         (KernelBufRole[]){KB_IN, KB_IN, KB_OUT, KB_OUT}, 0x3, 0xC);
    k->flops = conv3d_forward_flops(s);
    k->workspace = be->conv3d_workspace_bytes(s);
}
static void conv_bwd_filter_run(const Backend *be, const KernelCase *k, void *const *b, void *ws) {
    be->conv3d_backward_filter(&k->conv, b[0], b[1], b[2], b[3], k->beta, ws);
}
static void conv_bwd_filter_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const Conv3dShape *s = &k->conv;
    for (long i = 0; i < k->buf_count[2]; i += stride) {
        long t = i;
        const int ci = (int)(t % s->c_in); t /= s->c_in;
        const int kw = (int)(t % s->k); t /= s->k;
        const int kh = (int)(t % s->k); t /= s->k;
        const int kd = (int)(t % s->k), co = (int)(t / s->k);
        double acc = 0;
        for (int n = 0; n < s->n; n++)
            for (int od = 0; od < s->od; od++)
                for (int oh = 0; oh < s->oh; oh++)
                    for (int ow = 0; ow < s->ow; ow++) {
                        const int id = od * s->stride - s->pad + kd, ih = oh * s->stride - s->pad + kh,
                                  iw = ow * s->stride - s->pad + kw;
                        if (id < 0 || id >= s->d || ih < 0 || ih >= s->h || iw < 0 || iw >= s->w) continue;
                        acc += (double)in[0][conv_x_index(s, n, id, ih, iw, ci)] * in[1][conv_y_index(s, n, od, oh, ow, co)];
                    }
        ref[2][i] = acc;
    }
    for (int co = 0; co < s->c_out; co++) ref[3][co] = 0;
    for (long i = 0; i < k->buf_count[1]; i++) ref[3][i % s->c_out] += in[1][i];
}

/* ---- GroupNorm (k->gn.silu: fused with the SiLU after it, ops groupnorm_silu_*) ---------------------------- */

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

static void gn_fwd_setup(KernelCase *k, const Backend *be) {
    GroupNormShape *s = &k->gn;
    s->dtype = k->dtype;
    const long x = (long)s->n * s->spatial * s->c, st = (long)s->n * s->groups;
    bufs(k, 6, (long[]){x, s->c, s->c, x, st, st}, (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_OUT, KB_OUT, KB_OUT},
         0x9, 0);
}
static void gn_fwd_run(const Backend *be, const KernelCase *k, void *const *b, void *ws) {
    be->groupnorm_forward(&k->gn, b[0], b[1], b[2], b[3], b[4], b[5]);
}
static void gn_fwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const GroupNormShape *s = &k->gn;
    const int cpg = s->c / s->groups;
    for (int n = 0; n < s->n; n++)
        for (int g = 0; g < s->groups; g++) {
            double sum = 0, sq = 0;
            const double cnt = (double)s->spatial * cpg;
            for (long p = 0; p < s->spatial; p++)
                for (int j = 0; j < cpg; j++) {
                    const double v = in[0][((long)n * s->spatial + p) * s->c + g * cpg + j];
                    sum += v;
                }
            const double mean = sum / cnt;
            for (long p = 0; p < s->spatial; p++)
                for (int j = 0; j < cpg; j++) {
                    const double v = in[0][((long)n * s->spatial + p) * s->c + g * cpg + j] - mean;
                    sq += v * v;
                }
            const double rstd = 1.0 / sqrt(sq / cnt + s->eps);
            ref[4][n * s->groups + g] = mean, ref[5][n * s->groups + g] = rstd;
            for (long p = 0; p < s->spatial; p++)
                for (int j = 0; j < cpg; j++) {
                    const int c = g * cpg + j;
                    const long i = ((long)n * s->spatial + p) * s->c + c;
                    const double pre = (in[0][i] - mean) * rstd * in[1][c] + in[2][c];
                    ref[3][i] = s->silu ? pre * sigmoid(pre) : pre;
                }
        }
}

static void gn_bwd_setup(KernelCase *k, const Backend *be) {
    GroupNormShape *s = &k->gn;
    s->dtype = k->dtype;
    const long x = (long)s->n * s->spatial * s->c, st = (long)s->n * s->groups;
    /* dy x gamma beta mean rstd -> dx dgamma dbeta (beta is read only when the SiLU is fused) */
    bufs(k, 9, (long[]){x, x, s->c, s->c, st, st, x, s->c, s->c},
         (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_IN, KB_IN, KB_IN, KB_OUT, KB_OUT, KB_OUT}, 0x43, 0x1C0);
}
static void gn_bwd_run(const Backend *be, const KernelCase *k, void *const *b, void *ws) {
    be->groupnorm_backward(&k->gn, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], k->beta, k->beta);
}
/* The statistics are inputs here (gn_fill makes plausible ones); the gradient is the exact derivative for them:
 * xhat = (x - mean) rstd, dx = rstd (g dy - mean(g dy) - xhat mean(g dy xhat)) over the group, where dy is the
 * normalised value's gradient: the incoming one, or through the fused SiLU dz * silu'(xhat gamma + beta). */
static void gn_bwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const GroupNormShape *s = &k->gn;
    const int cpg = s->c / s->groups;
    for (int c = 0; c < s->c; c++) ref[7][c] = ref[8][c] = 0;
    for (int n = 0; n < s->n; n++)
        for (int g = 0; g < s->groups; g++) {
            const double mean = in[4][n * s->groups + g], rstd = in[5][n * s->groups + g];
            const double cnt = (double)s->spatial * cpg;
            double a = 0, b = 0;
            for (int pass = 0; pass < 2; pass++)
                for (long p = 0; p < s->spatial; p++)
                    for (int j = 0; j < cpg; j++) {
                        const int c = g * cpg + j;
                        const long i = ((long)n * s->spatial + p) * s->c + c;
                        const double xhat = (in[1][i] - mean) * rstd;
                        double dy = in[0][i];
                        if (s->silu) {
                            const double pre = xhat * in[2][c] + in[3][c], sg = sigmoid(pre);
                            dy *= sg * (1 + pre * (1 - sg));
                        }
                        const double gdy = (double)in[2][c] * dy;
                        if (pass == 0) {
                            a += gdy, b += gdy * xhat;
                            ref[7][c] += dy * xhat, ref[8][c] += dy;
                        } else {
                            ref[6][i] = rstd * (gdy - a / cnt - xhat * b / cnt);
                        }
                    }
        }
}
static void gn_bwd_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    for (long i = 0; i < count; i++) {
        const double u = vx_uniform01(vx_hash3(seed, (uint64_t)b, (uint64_t)i));
        h[i] = b == 4 ? (float)(0.2 * u - 0.1) : b == 5 ? (float)(0.5 + 1.5 * u) : (float)(2 * u - 1);
    }
}

/* ---- elementwise, upsample ------------------------------------------------------------------------------- */

static void unary_setup(KernelCase *k, const Backend *be) {
    bufs(k, 2, (long[]){k->count, k->count}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x3, 0);
}
static void binary_setup(KernelCase *k, const Backend *be) {
    bufs(k, 3, (long[]){k->count, k->count, k->count}, (KernelBufRole[]){KB_IN, KB_IN, KB_OUT}, 0x7, 0);
}
/* x, dy -> dx (beta) */
static void binary_grad_setup(KernelCase *k, const Backend *be) {
    bufs(k, 3, (long[]){k->count, k->count, k->count}, (KernelBufRole[]){KB_IN, KB_IN, KB_OUT}, 0x7, 0x4);
}
static void silu_fwd_run(const Backend *be, const KernelCase *k, void *const *b, void *ws) {
    be->silu_forward(k->dtype, k->count, b[0], b[1]);
}
static void silu_fwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    for (long i = 0; i < k->count; i++) ref[1][i] = in[0][i] * sigmoid(in[0][i]);
}
static void silu_bwd_run(const Backend *be, const KernelCase *k, void *const *b, void *ws) {
    be->silu_backward(k->dtype, k->count, b[0], b[1], b[2], k->beta);
}
static void silu_bwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    for (long i = 0; i < k->count; i++) {
        const double s = sigmoid(in[0][i]);
        ref[2][i] = in[1][i] * s * (1 + in[0][i] * (1 - s));
    }
}
static void add_run(const Backend *be, const KernelCase *k, void *const *b, void *ws) {
    be->add_forward(k->dtype, k->count, b[0], b[1], b[2]);
}
static void add_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    for (long i = 0; i < k->count; i++) ref[2][i] = (double)in[0][i] + in[1][i];
}
static void accumulate_setup(KernelCase *k, const Backend *be) {
    bufs(k, 2, (long[]){k->count, k->count}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x3, 0x2);
}
static void accumulate_run(const Backend *be, const KernelCase *k, void *const *b, void *ws) {
    be->accumulate(k->dtype, k->count, b[0], b[1], k->beta);
}
static void accumulate_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    for (long i = 0; i < k->count; i++) ref[1][i] = in[0][i];
}
/* cast: float32 -> the storage type (cast_to) and back (cast_from); exact: the reference rounds as dtype.h does */
static void cast_to_setup(KernelCase *k, const Backend *be) {
    bufs(k, 2, (long[]){k->count, k->count}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x2, 0);
}
static void cast_from_setup(KernelCase *k, const Backend *be) {
    bufs(k, 2, (long[]){k->count, k->count}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x1, 0);
}
static void cast_to_run(const Backend *be, const KernelCase *k, void *const *b, void *ws) {
    be->cast(k->count, DT_F32, b[0], k->dtype, b[1]);
}
static void cast_from_run(const Backend *be, const KernelCase *k, void *const *b, void *ws) {
    be->cast(k->count, k->dtype, b[0], DT_F32, b[1]);
}
static void cast_to_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    for (long i = 0; i < k->count; i++) ref[1][i] = dtype_round(k->dtype, in[0][i]);
}
static void cast_from_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    for (long i = 0; i < k->count; i++) ref[1][i] = in[0][i]; /* already of dtype's values */
}
/* spans float16's range: subnormals, normals, and beyond 65504 (infinity) */
static void cast_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    for (long i = 0; i < count; i++) {
        const double u = vx_uniform01(vx_hash3(seed, (uint64_t)b, (uint64_t)i));
        const double mag = exp2(-30.0 + 48.0 * u); /* 2^-30 .. 2^18 */
        h[i] = (float)((i & 1) ? -mag : mag);
    }
}

/* pad_channels: count rows of dims[0] channels -> dims[1] channels (zero-padded or sliced), from float32 to the
 * storage type (pad_channels_to: the first conv's input and weights) and back (pad_channels_from); beta 1 adds to
 * the output (the sliced weight gradient across micro-batches) */
static void pad_to_setup(KernelCase *k, const Backend *be) {
    bufs(k, 2, (long[]){k->count * k->dims[0], k->count * k->dims[1]}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x2, 0x2);
}
static void pad_from_setup(KernelCase *k, const Backend *be) {
    bufs(k, 2, (long[]){k->count * k->dims[0], k->count * k->dims[1]}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x1, 0x2);
}
static void pad_to_run(const Backend *be, const KernelCase *k, void *const *b, void *ws) {
    be->pad_channels(k->count, DT_F32, k->dims[0], b[0], k->dtype, k->dims[1], b[1], k->beta);
}
static void pad_from_run(const Backend *be, const KernelCase *k, void *const *b, void *ws) {
    be->pad_channels(k->count, k->dtype, k->dims[0], b[0], DT_F32, k->dims[1], b[1], k->beta);
}
static void pad_ref(const KernelCase *k, const float *const *in, double *const *ref, DType to) {
    const int cf = k->dims[0], ct = k->dims[1];
    for (long r = 0; r < k->count; r++)
        for (int c = 0; c < ct; c++) ref[1][r * ct + c] = c < cf ? dtype_round(to, in[0][r * cf + c]) : 0.0;
}
static void pad_to_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    pad_ref(k, in, ref, k->dtype);
}
static void pad_from_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    pad_ref(k, in, ref, DT_F32); /* the input already holds values of the storage type */
}

static long up_in_count(const KernelCase *k) {
    return (long)k->dims[0] * k->dims[1] * k->dims[2] * k->dims[3] * k->dims[4];
}
static void up_fwd_setup(KernelCase *k, const Backend *be) {
    bufs(k, 2, (long[]){up_in_count(k), 8 * up_in_count(k)}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x3, 0);
}
static void up_bwd_setup(KernelCase *k, const Backend *be) {
    bufs(k, 2, (long[]){8 * up_in_count(k), up_in_count(k)}, (KernelBufRole[]){KB_IN, KB_OUT}, 0x3, 0x2);
}
static void up_fwd_run(const Backend *be, const KernelCase *k, void *const *b, void *ws) {
    be->upsample2x_forward(k->dtype, k->dims[0], k->dims[1], k->dims[2], k->dims[3], k->dims[4], b[0], b[1]);
}
static void up_bwd_run(const Backend *be, const KernelCase *k, void *const *b, void *ws) {
    be->upsample2x_backward(k->dtype, k->dims[0], k->dims[1], k->dims[2], k->dims[3], k->dims[4], b[0], b[1], k->beta);
}
/* index of output voxel (n, z, y, x, c) of the 2x grid, and of its input voxel */
static void up_pairs(const KernelCase *k, long o, long *i) {
    const int d = k->dims[1], h = k->dims[2], w = k->dims[3], c = k->dims[4];
    long t = o;
    const int ch = (int)(t % c); t /= c;
    const int x = (int)(t % (2 * w)); t /= 2 * w;
    const int y = (int)(t % (2 * h)); t /= 2 * h;
    const int z = (int)(t % (2 * d)), n = (int)(t / (2 * d));
    *i = ((((long)n * d + z / 2) * h + y / 2) * w + x / 2) * c + ch;
}
static void up_fwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    for (long o = 0; o < 8 * up_in_count(k); o++) {
        long i;
        up_pairs(k, o, &i);
        ref[1][o] = in[0][i];
    }
}
static void up_bwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    for (long i = 0; i < up_in_count(k); i++) ref[1][i] = 0;
    for (long o = 0; o < 8 * up_in_count(k); o++) {
        long i;
        up_pairs(k, o, &i);
        ref[1][i] += in[0][o];
    }
}

/* ---- loss, latent ----------------------------------------------------------------------------------------- */

/* The loss scale the loss and latent ops read from backend memory (a power of two, as the trainer's): 4 here, so a
 * backend that ignored it fails the check. */
static const float LOSS_SCALE = 4.0f;
static void uniform_fill(float *h, long count, unsigned seed, int b, const KernelCase *k) {
    for (long i = 0; i < count; i++) h[i] = 2.0f * vx_uniform01(vx_hash3(seed, (uint64_t)b, (uint64_t)i)) - 1.0f;
}

/* pred (act), target (float32, the model's input), loss, dpred (act), loss_scale [1] */
static void loss_setup(KernelCase *k, const Backend *be) {
    bufs(k, 5, (long[]){k->count, k->count, 1, k->count, 1}, (KernelBufRole[]){KB_IN, KB_IN, KB_OUT, KB_OUT, KB_IN},
         0x9, 0);
}
static void loss_run_kind(const Backend *be, const KernelCase *k, void *const *b, ReconLoss kind) {
    be->recon_loss(kind, k->dtype, k->count, b[0], b[1], b[2], b[3], 1.0f, b[4]);
}
static void loss_l1_run(const Backend *be, const KernelCase *k, void *const *b, void *ws) { loss_run_kind(be, k, b, LOSS_L1); }
static void loss_mse_run(const Backend *be, const KernelCase *k, void *const *b, void *ws) { loss_run_kind(be, k, b, LOSS_MSE); }
static void loss_ref_kind(const KernelCase *k, const float *const *in, double *const *ref, int l1) {
    double sum = 0;
    const double g = (double)in[4][0] / (double)k->count;
    for (long i = 0; i < k->count; i++) {
        const double d = (double)in[0][i] - in[1][i];
        sum += l1 ? fabs(d) : d * d;
        ref[3][i] = l1 ? g * ((d > 0) - (d < 0)) : g * 2 * d;
    }
    ref[2][0] = sum / (double)k->count;
}
static void loss_l1_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) { loss_ref_kind(k, in, ref, 1); }
static void loss_mse_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) { loss_ref_kind(k, in, ref, 0); }
static void loss_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    if (b == 4) h[0] = LOSS_SCALE;
    else uniform_fill(h, count, seed, b, k);
}

static const float KL_SCALE = 1e-3f;
static long lat_count(const KernelCase *k) { return (long)k->lat.n * k->lat.count_per_sample; }
/* mu logvar (act) eps (float32) -> z (act) kl */
static void lat_fwd_setup(KernelCase *k, const Backend *be) {
    const long c = lat_count(k);
    k->lat.dtype = k->dtype;
    bufs(k, 5, (long[]){c, c, c, c, 1}, (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_OUT, KB_OUT}, 0xB, 0);
}
/* mu logvar (act) eps (float32) dz (act) loss_scale [1] -> dmu dlogvar (act) */
static void lat_bwd_setup(KernelCase *k, const Backend *be) {
    const long c = lat_count(k);
    k->lat.dtype = k->dtype;
    bufs(k, 7, (long[]){c, c, c, c, 1, c, c}, (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_IN, KB_IN, KB_OUT, KB_OUT},
         0x6B, 0);
}
static void lat_fwd_run(const Backend *be, const KernelCase *k, void *const *b, void *ws) {
    be->latent_forward(&k->lat, b[0], b[1], b[2], b[3], b[4]);
}
static void lat_bwd_run(const Backend *be, const KernelCase *k, void *const *b, void *ws) {
    be->latent_backward(&k->lat, b[0], b[1], b[2], b[3], KL_SCALE, b[4], b[5], b[6]);
}
static double clampd(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }
static void lat_fwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    double kl = 0;
    for (long i = 0; i < lat_count(k); i++) {
        const double lv = clampd(in[1][i], k->lat.logvar_min, k->lat.logvar_max), mu = in[0][i];
        ref[3][i] = mu + exp(0.5 * lv) * in[2][i];
        kl += 0.5 * (mu * mu + exp(lv) - 1 - lv);
    }
    ref[4][0] = kl / k->lat.n;
}
static void lat_bwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const double n = k->lat.n, kls = (double)KL_SCALE * in[4][0];
    for (long i = 0; i < lat_count(k); i++) {
        const double raw = in[1][i], lv = clampd(raw, k->lat.logvar_min, k->lat.logvar_max), dz = in[3][i];
        ref[5][i] = dz + kls * in[0][i] / n;
        const int inside = raw >= k->lat.logvar_min && raw <= k->lat.logvar_max;
        ref[6][i] = inside ? dz * in[2][i] * 0.5 * exp(0.5 * lv) + kls * 0.5 * (exp(lv) - 1) / n : 0;
    }
}
static void lat_bwd_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    if (b == 4) h[0] = LOSS_SCALE;
    else uniform_fill(h, count, seed, b, k);
}

/* ---- noise, augmentation ---------------------------------------------------------------------------------- */

/* offset (a uint64 in two float32 slots of backend memory) -> out */
static const uint64_t NOISE_SEED = 42, NOISE_STREAM = 7, NOISE_OFFSET = 777;
static void normal_setup(KernelCase *k, const Backend *be) {
    bufs(k, 2, (long[]){2, k->count}, (KernelBufRole[]){KB_IN, KB_OUT}, 0, 0);
}
static void normal_run(const Backend *be, const KernelCase *k, void *const *b, void *ws) {
    be->normal_fill(k->count, NOISE_SEED, NOISE_STREAM, b[0], b[1]);
}
static void normal_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    for (long i = 0; i < k->count; i++) ref[1][i] = vx_normal(NOISE_SEED, NOISE_STREAM, NOISE_OFFSET + (uint64_t)i);
}
static void normal_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    memcpy(h, &NOISE_OFFSET, sizeof NOISE_OFFSET);
}

static long aug_count(const KernelCase *k) { return (long)k->dims[0] * k->dims[1] * k->dims[2] * k->dims[3]; }
static void aug_setup(KernelCase *k, const Backend *be) {
    bufs(k, 2, (long[]){aug_count(k), aug_count(k)}, (KernelBufRole[]){KB_IN, KB_OUT}, 0, 0);
}
static void aug_run(const Backend *be, const KernelCase *k, void *const *b, void *ws) {
    be->augment(k->dims[0], k->dims[1], k->dims[2], k->dims[3], (uint32_t)k->count, b[0], b[1]);
}
/* augment.h's definition read directly: the source of output voxel (z, j, i) is found by undoing the flips, giving
 * (j', i'), then the rotation: k = 0 (j', i'), 1 (i', n-1-j'), 2 (h-1-j', w-1-i'), 3 (n-1-i', j'), n = h = w */
static void aug_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const int d = k->dims[0], h = k->dims[1], w = k->dims[2], c = k->dims[3];
    const uint32_t code = (uint32_t)k->count;
    const int turns = (int)(code >> AUGMENT_ROT_SHIFT) & 3;
    for (int z = 0; z < d; z++)
        for (int j = 0; j < h; j++)
            for (int i = 0; i < w; i++) {
                const int zs = code & AUGMENT_FLIP_Z ? d - 1 - z : z;
                const int jf = code & AUGMENT_FLIP_Y ? h - 1 - j : j, if_ = code & AUGMENT_FLIP_X ? w - 1 - i : i;
                const int sj = turns == 0 ? jf : turns == 1 ? if_ : turns == 2 ? h - 1 - jf : h - 1 - if_;
                const int si = turns == 0 ? if_ : turns == 1 ? h - 1 - jf : turns == 2 ? w - 1 - if_ : jf;
                for (int ch = 0; ch < c; ch++)
                    ref[1][(((long)z * h + j) * w + i) * c + ch] = in[0][(((long)zs * h + sj) * w + si) * c + ch];
            }
}

/* ---- optimizer -------------------------------------------------------------------------------------------- */

static const OptimConfig ADAMW_CFG = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
static const double ADAMW_LR = 1e-3;
static const int64_t ADAMW_T = 3;
static const float ADAMW_GS = 0.5f; /* clip / loss scale */
enum { STATE_FLOATS = (sizeof(OptimState) + 3) / 4 };
/* p g m v (float32), the optimizer state (OptimState's bytes), and with a 16-bit storage type the parameters'
 * low-precision copy (act) */
static void adamw_setup(KernelCase *k, const Backend *be) {
    const long c = k->count;
    const int lp = k->dtype != DT_F32;
    bufs(k, 5 + lp, (long[]){c, c, c, c, STATE_FLOATS, c},
         (KernelBufRole[]){KB_INOUT, KB_IN, KB_INOUT, KB_INOUT, KB_IN, KB_OUT}, lp ? 0x20 : 0, 0);
    k->bytes -= STATE_FLOATS * 4.0;
}
static void adamw_run(const Backend *be, const KernelCase *k, void *const *b, void *ws) {
    be->adamw(k->count, b[0], b[1], b[2], b[3], b[4], k->dtype, k->nbuf > 5 ? b[5] : NULL);
}
static void adamw_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const OptimConfig *a = &ADAMW_CFG;
    const double bc1 = 1 - pow(a->beta1, (double)ADAMW_T), bc2 = 1 - pow(a->beta2, (double)ADAMW_T);
    for (long i = 0; i < k->count; i++) {
        const double g = (double)in[1][i] * ADAMW_GS;
        double p = in[0][i] * (1 - ADAMW_LR * a->weight_decay);
        const double m = a->beta1 * in[2][i] + (1 - a->beta1) * g, v = a->beta2 * in[3][i] + (1 - a->beta2) * g * g;
        p -= ADAMW_LR * (m / bc1) / (sqrt(v / bc2) + a->eps);
        ref[0][i] = p, ref[2][i] = m, ref[3][i] = v;
        if (k->nbuf > 5) ref[5][i] = p;
    }
}
static void adamw_fill(const KernelCase *k, int b, float *h, long count, unsigned seed) {
    if (b == 4) { /* what optim_prepare leaves for update t */
        OptimState st = {.lr = ADAMW_LR, .loss_scale = 1.0f, .adam_step = ADAMW_T, .clip = 1.0f};
        st.c = adamw_consts(&ADAMW_CFG, ADAMW_LR, ADAMW_T, ADAMW_GS);
        memset(h, 0, (size_t)count * sizeof(float));
        memcpy(h, &st, sizeof st);
        return;
    }
    for (long i = 0; i < count; i++) {
        const double u = vx_uniform01(vx_hash3(seed, (uint64_t)b, (uint64_t)i));
        h[i] = b == 3 ? (float)(1e-4 * u) : (float)(2 * u - 1); /* v >= 0 */
    }
}
static void sumsq_setup(KernelCase *k, const Backend *be) {
    bufs(k, 2, (long[]){k->count, 1}, (KernelBufRole[]){KB_IN, KB_OUT}, 0, 0);
}
static void sumsq_run(const Backend *be, const KernelCase *k, void *const *b, void *ws) {
    be->sumsq(k->count, b[0], b[1]);
}
static void sumsq_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    double s = 0;
    for (long i = 0; i < k->count; i++) s += (double)in[0][i] * in[0][i];
    ref[1][0] = s;
}

/* ---- the table -------------------------------------------------------------------------------------------- */

/* Tolerances: float32 results against float64, relative to the largest reference value of the buffer. The
 * convolutions sum up to k^3 c_in products per element (TF32 on a GPU is checked with its own bound, kernel_check.c);
 * the reductions (GroupNorm, loss, KL, sumsq) sum up to a few million values in float32 pieces. */
static const KernelOp OPS[] = {
    {"conv3d_forward", BOP_CONV3D_FORWARD, 1, 1e-4, conv_fwd_setup, conv_fwd_run, conv_fwd_ref, NULL},
    {"conv3d_forward_add", BOP_CONV3D_FORWARD, 1, 1e-4, conv_fwd_add_setup, conv_fwd_add_run, conv_fwd_ref, NULL},
    {"conv3d_backward_data", BOP_CONV3D_BACKWARD_DATA, 1, 1e-4, conv_bwd_data_setup, conv_bwd_data_run,
     conv_bwd_data_ref, NULL},
    {"conv3d_backward_filter", BOP_CONV3D_BACKWARD_FILTER, 1, 1e-4, conv_bwd_filter_setup, conv_bwd_filter_run,
     conv_bwd_filter_ref, NULL},
    {"groupnorm_forward", BOP_GROUPNORM_FORWARD, 0, 1e-5, gn_fwd_setup, gn_fwd_run, gn_fwd_ref, NULL},
    {"groupnorm_backward", BOP_GROUPNORM_BACKWARD, 0, 1e-4, gn_bwd_setup, gn_bwd_run, gn_bwd_ref, gn_bwd_fill},
    {"groupnorm_silu_forward", BOP_GROUPNORM_FORWARD, 0, 1e-5, gn_fwd_setup, gn_fwd_run, gn_fwd_ref, NULL},
    {"groupnorm_silu_backward", BOP_GROUPNORM_BACKWARD, 0, 1e-4, gn_bwd_setup, gn_bwd_run, gn_bwd_ref, gn_bwd_fill},
    {"silu_forward", BOP_SILU_FORWARD, 0, 1e-6, unary_setup, silu_fwd_run, silu_fwd_ref, NULL},
    {"silu_backward", BOP_SILU_BACKWARD, 0, 1e-6, binary_grad_setup, silu_bwd_run, silu_bwd_ref, NULL},
    {"upsample2x_forward", BOP_UPSAMPLE2X_FORWARD, 0, 0, up_fwd_setup, up_fwd_run, up_fwd_ref, NULL},
    {"upsample2x_backward", BOP_UPSAMPLE2X_BACKWARD, 0, 1e-6, up_bwd_setup, up_bwd_run, up_bwd_ref, NULL},
    {"add_forward", BOP_ADD_FORWARD, 0, 1e-7, binary_setup, add_run, add_ref, NULL},
    {"accumulate", BOP_ACCUMULATE, 0, 1e-7, accumulate_setup, accumulate_run, accumulate_ref, NULL},
    {"cast_to", BOP_CAST, 0, 0, cast_to_setup, cast_to_run, cast_to_ref, cast_fill},
    {"cast_from", BOP_CAST, 0, 0, cast_from_setup, cast_from_run, cast_from_ref, cast_fill},
    /* 1e-7: exact but for beta 1's one float32 rounding of old + new */
    {"pad_channels_to", BOP_PAD_CHANNELS, 0, 1e-7, pad_to_setup, pad_to_run, pad_to_ref, NULL},
    {"pad_channels_from", BOP_PAD_CHANNELS, 0, 1e-7, pad_from_setup, pad_from_run, pad_from_ref, NULL},
    {"recon_loss_l1", BOP_RECON_LOSS, 0, 1e-5, loss_setup, loss_l1_run, loss_l1_ref, loss_fill},
    {"recon_loss_mse", BOP_RECON_LOSS, 0, 1e-5, loss_setup, loss_mse_run, loss_mse_ref, loss_fill},
    {"latent_forward", BOP_LATENT_FORWARD, 0, 1e-5, lat_fwd_setup, lat_fwd_run, lat_fwd_ref, NULL},
    {"latent_backward", BOP_LATENT_BACKWARD, 0, 1e-5, lat_bwd_setup, lat_bwd_run, lat_bwd_ref, lat_bwd_fill},
    {"normal_fill", BOP_NORMAL_FILL, 0, 1e-6, normal_setup, normal_run, normal_ref, normal_fill},
    {"augment", BOP_AUGMENT, 0, 0, aug_setup, aug_run, aug_ref, NULL},
    {"adamw", BOP_ADAMW, 0, 1e-6, adamw_setup, adamw_run, adamw_ref, adamw_fill},
    {"sumsq", BOP_SUMSQ, 0, 1e-6, sumsq_setup, sumsq_run, sumsq_ref, NULL},
};
enum { N_OPS = sizeof OPS / sizeof OPS[0] };

const KernelOp *kernel_ops(int *n) {
    *n = N_OPS;
    return OPS;
}

int kernel_op_find(const char *name) {
    for (int i = 0; i < N_OPS; i++)
        if (strcmp(OPS[i].name, name) == 0) return i;
    return -1;
}

void kernel_case_setup(KernelCase *k, const char *op, const Backend *be) {
    k->op = kernel_op_find(op);
    VX_CHECK(k->op >= 0, "kernel ops: no op named %s in the table", op);
    OPS[k->op].setup(k, be);
}

/* ---- the cases of a model --------------------------------------------------------------------------------- */

typedef struct {
    KernelCase *v;
    int n, cap;
    const Backend *be;
} CaseList;

static void add_case(CaseList *l, KernelCase k, const char *op) {
    k.op = kernel_op_find(op);
    VX_CHECK(k.op >= 0, "bench kernels: no op named %s in the table", op);
    for (int i = 0; i < l->n; i++)
        if (l->v[i].op == k.op && strcmp(l->v[i].shape, k.shape) == 0) return;
    kernel_case_setup(&k, op, l->be);
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 32;
        l->v = realloc(l->v, (size_t)l->cap * sizeof *l->v);
        VX_CHECK(l->v != NULL, "out of memory listing kernel cases");
    }
    l->v[l->n++] = k;
}

static KernelCase count_case(long count, DType dt) {
    KernelCase k = {.count = count, .dtype = dt};
    snprintf(k.shape, sizeof k.shape, "%ld", count);
    return k;
}

/* rows of c_from channels to c_to (pad_channels_*) */
static KernelCase pad_case(long rows, int c_from, int c_to, DType dt) {
    KernelCase k = {.count = rows, .dims = {c_from, c_to}, .dtype = dt};
    snprintf(k.shape, sizeof k.shape, "%ld x c%d->%d", rows, c_from, c_to);
    return k;
}

int kernel_cases_of_model(const Model *m, const Backend *be, KernelCase **out) {
    CaseList l = {.be = be};
    for (int i = 0; i < m->n_nodes; i++) {
        const Node *nd = &m->nodes[i];
        const Tensor *tx = &m->tensors[nd->in[0]];
        const DType dt = tx->dtype;
        KernelCase k = {.dtype = dt};
        switch (nd->kind) {
        case OP_CONV: {
            const Conv3dShape *s = &nd->conv;
            k.conv = *s;
            snprintf(k.shape, sizeof k.shape, "n%d %dx%dx%d c%d->%d k%d s%d", s->n, s->d, s->h, s->w, s->c_in,
                     s->c_out, s->k, s->stride);
            add_case(&l, k, nd->in[1] >= 0 ? "conv3d_forward_add" : "conv3d_forward");
            if (nd->pad_w >= 0) { /* padded input channels: weights padded, their gradient sliced, the bias's added */
                const int c_w = m->params[nd->weight].shape[4];
                add_case(&l, pad_case(conv3d_weight_count(s) / s->c_in, c_w, s->c_in, dt), "pad_channels_to");
                add_case(&l, pad_case(conv3d_weight_count(s) / s->c_in, s->c_in, c_w, DT_F32), "pad_channels_to");
                add_case(&l, count_case(s->c_out, DT_F32), "accumulate");
            }
            if (tx->grad >= 0) add_case(&l, k, "conv3d_backward_data");
            add_case(&l, k, "conv3d_backward_filter");
            if (nd->in[1] >= 0) { /* the fused residual's gradient: the output's, copied or added to the skip's */
                KernelCase acc = count_case(m->tensors[nd->out].count, dt);
                acc.beta = nd->dx_beta[1];
                add_case(&l, acc, "accumulate");
            }
            break;
        }
        case OP_GROUPNORM:
            k.gn = nd->gn;
            snprintf(k.shape, sizeof k.shape, "n%d %ldx%d g%d", k.gn.n, k.gn.spatial, k.gn.c, k.gn.groups);
            add_case(&l, k, k.gn.silu ? "groupnorm_silu_forward" : "groupnorm_forward");
            add_case(&l, k, k.gn.silu ? "groupnorm_silu_backward" : "groupnorm_backward");
            break;
        case OP_SILU:
            add_case(&l, count_case(tx->count, dt), "silu_forward");
            add_case(&l, count_case(tx->count, dt), "silu_backward");
            break;
        case OP_CAST: {
            const Tensor *ty = &m->tensors[nd->out];
            if (ty->dims.c == tx->dims.c) add_case(&l, count_case(tx->count, ty->dtype), "cast_to");
            else add_case(&l, pad_case(tx->count / tx->dims.c, tx->dims.c, ty->dims.c, ty->dtype), "pad_channels_to");
            break;
        }
        case OP_UPSAMPLE:
            memcpy(k.dims, (int[]){tx->dims.n, tx->dims.d, tx->dims.h, tx->dims.w, tx->dims.c}, sizeof k.dims);
            snprintf(k.shape, sizeof k.shape, "n%d %dx%dx%d c%d", k.dims[0], k.dims[1], k.dims[2], k.dims[3], k.dims[4]);
            add_case(&l, k, "upsample2x_forward");
            add_case(&l, k, "upsample2x_backward");
            break;
        case OP_ADD: {
            add_case(&l, count_case(tx->count, dt), "add_forward");
            KernelCase acc = count_case(tx->count, dt);
            acc.beta = 1.0f; /* the second addend's gradient adds to what is there */
            add_case(&l, acc, "accumulate");
            break;
        }
        case OP_LATENT:
            k.lat = (LatentShape){.n = tx->dims.n, .count_per_sample = tx->count / tx->dims.n,
                                  .logvar_min = (float)m->cfg.logvar_min, .logvar_max = (float)m->cfg.logvar_max,
                                  .dtype = dt};
            snprintf(k.shape, sizeof k.shape, "n%d x%ld", k.lat.n, k.lat.count_per_sample);
            add_case(&l, k, "latent_forward");
            add_case(&l, k, "latent_backward");
            break;
        }
    }
    add_case(&l, count_case(m->tensors[m->t_recon].count, m->dtype),
             strcmp(m->cfg.loss, "mse") == 0 ? "recon_loss_mse" : "recon_loss_l1");
    add_case(&l, count_case(m->param_floats, m->dtype), "adamw"); /* with the low-precision copy in mixed precision */
    add_case(&l, count_case(m->param_floats, DT_F32), "sumsq");
    for (int i = 1; i < l.n; i++) /* stable insertion sort by op: one op's shapes together, in the model's order */
        for (int j = i; j > 0 && l.v[j - 1].op > l.v[j].op; j--) {
            const KernelCase t = l.v[j];
            l.v[j] = l.v[j - 1], l.v[j - 1] = t;
        }
    *out = l.v;
    return l.n;
}
