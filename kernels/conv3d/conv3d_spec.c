/* conv3d_spec.c: the convolution's entries in the op spec table (common/op_spec.h): buffers, call, work and a
 * float64 reference computed directly from conv3d.h's definition, for the op tests and `bench kernels`. */
#include <math.h>
#include <string.h>

#include "common/op_spec.h"
#include "conv3d/conv3d.h"

/* the backend's table of this op, as the entries receive it */
static const Conv3dOps *table(const OpHead *ops) { return (const Conv3dOps *)(const void *)ops; }
/* the case's shape (KernelCase.params) */
static Conv3dShape shape_of(const KernelCase *k) {
    Conv3dShape s;
    kernel_case_get_params(k, &s, sizeof s);
    return s;
}

/* The case's shape in its storage type and math: bf16 math where either the shape (a model's node, bench kernels)
 * or the case (the op tests' bf16 variant) asks it; the case then says it, for the tolerance (op_check.c). */
static Conv3dShape setup_shape(KernelCase *k) {
    Conv3dShape s = shape_of(k);
    s.dtype = k->dtype;
    s.bf16_math = s.bf16_math || k->bf16_math;
    k->bf16_math = s.bf16_math;
    kernel_case_set_params(k, &s, sizeof s);
    return s;
}

static long conv_x_index(const Conv3dShape *s, int n, int d, int h, int w, int c) {
    return ((((long)n * s->d + d) * s->h + h) * s->w + w) * s->c_in + c;
}
static long conv_y_index(const Conv3dShape *s, int n, int d, int h, int w, int c) {
    return ((((long)n * s->od + d) * s->oh + h) * s->ow + w) * s->c_out + c;
}
static long conv_w_index(const Conv3dShape *s, int co, int kd, int kh, int kw, int ci) {
    return ((((long)co * s->k[0] + kd) * s->k[1] + kh) * s->k[2] + kw) * s->c_in + ci;
}

static void conv_fwd_setup(KernelCase *k, const OpHead *ops) {
    Conv3dShape sv = setup_shape(k), *s = &sv;
    op_spec_bufs(k, 4, (long[]){conv3d_input_count(s), conv3d_weight_count(s), s->c_out, conv3d_output_count(s)},
         (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_OUT}, 0xB, 0);
    k->flops = conv3d_forward_flops(s);
    k->workspace = table(ops)->workspace_bytes(s);
}
static void conv_fwd_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const Conv3dShape s = shape_of(k);
    table(ops)->forward(&s, b[0], b[1], b[2], NULL, b[3], ws);
}
/* with the fused residual (the ResBlock's skip): buffers x w b r y */
static void conv_fwd_add_setup(KernelCase *k, const OpHead *ops) {
    Conv3dShape sv = setup_shape(k), *s = &sv;
    op_spec_bufs(k, 5, (long[]){conv3d_input_count(s), conv3d_weight_count(s), s->c_out, conv3d_output_count(s),
                        conv3d_output_count(s)},
         (KernelBufRole[]){KB_IN, KB_IN, KB_IN, KB_IN, KB_OUT}, 0x1B, 0);
    k->flops = conv3d_forward_flops(s);
    k->workspace = table(ops)->workspace_bytes(s);
}
static void conv_fwd_add_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const Conv3dShape s = shape_of(k);
    table(ops)->forward(&s, b[0], b[1], b[2], b[3], b[4], ws);
}
static void conv_fwd_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const Conv3dShape sv = shape_of(k), *s = &sv;
    const int y = k->nbuf - 1; /* the output: after the residual when there is one */
    for (long i = 0; i < k->buf_count[y]; i += stride) {
        long t = i;
        const int co = (int)(t % s->c_out); t /= s->c_out;
        const int ow = (int)(t % s->ow); t /= s->ow;
        const int oh = (int)(t % s->oh); t /= s->oh;
        const int od = (int)(t % s->od), n = (int)(t / s->od);
        double acc = in[2][co];
        for (int kd = 0; kd < s->k[0]; kd++)
            for (int kh = 0; kh < s->k[1]; kh++)
                for (int kw = 0; kw < s->k[2]; kw++) {
                    const int id = od * s->stride[0] - s->pad[0] + kd, ih = oh * s->stride[1] - s->pad[1] + kh,
                              iw = ow * s->stride[2] - s->pad[2] + kw;
                    if (id < 0 || id >= s->d || ih < 0 || ih >= s->h || iw < 0 || iw >= s->w) continue;
                    const float *x = in[0] + conv_x_index(s, n, id, ih, iw, 0);
                    const float *w = in[1] + conv_w_index(s, co, kd, kh, kw, 0);
                    for (int ci = 0; ci < s->c_in; ci++) acc += (double)x[ci] * w[ci];
                }
        ref[y][i] = y == 4 ? acc + in[3][i] : acc;
    }
}

static void conv_bwd_data_setup(KernelCase *k, const OpHead *ops) {
    Conv3dShape sv = setup_shape(k), *s = &sv;
    op_spec_bufs(k, 3, (long[]){conv3d_output_count(s), conv3d_weight_count(s), conv3d_input_count(s)},
         (KernelBufRole[]){KB_IN, KB_IN, KB_OUT}, 0x7, 0x4);
    k->flops = conv3d_forward_flops(s);
    k->workspace = table(ops)->workspace_bytes(s);
}
static void conv_bwd_data_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const Conv3dShape s = shape_of(k);
    table(ops)->backward_data(&s, b[0], b[1], b[2], k->beta, ws);
}
static void conv_bwd_data_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const Conv3dShape sv = shape_of(k), *s = &sv;
    for (long i = 0; i < k->buf_count[2]; i += stride) {
        long t = i;
        const int ci = (int)(t % s->c_in); t /= s->c_in;
        const int x = (int)(t % s->w); t /= s->w;
        const int y = (int)(t % s->h); t /= s->h;
        const int z = (int)(t % s->d), n = (int)(t / s->d);
        double acc = 0;
        for (int kd = 0; kd < s->k[0]; kd++)
            for (int kh = 0; kh < s->k[1]; kh++)
                for (int kw = 0; kw < s->k[2]; kw++) {
                    const int nd = z + s->pad[0] - kd, nh = y + s->pad[1] - kh, nw = x + s->pad[2] - kw;
                    if (nd < 0 || nh < 0 || nw < 0 || nd % s->stride[0] || nh % s->stride[1] || nw % s->stride[2])
                        continue;
                    const int od = nd / s->stride[0], oh = nh / s->stride[1], ow = nw / s->stride[2];
                    if (od >= s->od || oh >= s->oh || ow >= s->ow) continue;
                    const float *dy = in[0] + conv_y_index(s, n, od, oh, ow, 0);
                    for (int co = 0; co < s->c_out; co++) acc += (double)dy[co] * in[1][conv_w_index(s, co, kd, kh, kw, ci)];
                }
        ref[2][i] = acc;
    }
}

static void conv_bwd_filter_setup(KernelCase *k, const OpHead *ops) {
    Conv3dShape sv = setup_shape(k), *s = &sv;
    /* x dy act; dw dbias the float32 master gradients */
    op_spec_bufs(k, 4, (long[]){conv3d_input_count(s), conv3d_output_count(s), conv3d_weight_count(s), s->c_out},
         (KernelBufRole[]){KB_IN, KB_IN, KB_OUT, KB_OUT}, 0x3, 0xC);
    k->flops = conv3d_forward_flops(s);
    k->workspace = table(ops)->workspace_bytes(s);
}
static void conv_bwd_filter_run(const OpHead *ops, const KernelCase *k, void *const *b, void *ws) {
    const Conv3dShape s = shape_of(k);
    table(ops)->backward_filter(&s, b[0], b[1], b[2], b[3], k->beta, ws);
}
static void conv_bwd_filter_ref(const KernelCase *k, const float *const *in, double *const *ref, long stride) {
    const Conv3dShape sv = shape_of(k), *s = &sv;
    for (long i = 0; i < k->buf_count[2]; i += stride) {
        long t = i;
        const int ci = (int)(t % s->c_in); t /= s->c_in;
        const int kw = (int)(t % s->k[2]); t /= s->k[2];
        const int kh = (int)(t % s->k[1]); t /= s->k[1];
        const int kd = (int)(t % s->k[0]), co = (int)(t / s->k[0]);
        double acc = 0;
        for (int n = 0; n < s->n; n++)
            for (int od = 0; od < s->od; od++)
                for (int oh = 0; oh < s->oh; oh++)
                    for (int ow = 0; ow < s->ow; ow++) {
                        const int id = od * s->stride[0] - s->pad[0] + kd, ih = oh * s->stride[1] - s->pad[1] + kh,
                                  iw = ow * s->stride[2] - s->pad[2] + kw;
                        if (id < 0 || id >= s->d || ih < 0 || ih >= s->h || iw < 0 || iw >= s->w) continue;
                        acc += (double)in[0][conv_x_index(s, n, id, ih, iw, ci)] * in[1][conv_y_index(s, n, od, oh, ow, co)];
                    }
        ref[2][i] = acc;
    }
    for (int co = 0; co < s->c_out; co++) ref[3][co] = 0;
    for (long i = 0; i < k->buf_count[1]; i++) ref[3][i % s->c_out] += in[1][i];
}

/* ---- the entries (registered through kernels/backend/ops.def) -------------------------------------------------- */

const KernelOp conv3d_specs[] = {
    {"conv3d_forward", CONV3D_FORWARD, 1, 1e-4, conv_fwd_setup, conv_fwd_run, conv_fwd_ref, NULL},
    {"conv3d_forward_add", CONV3D_FORWARD, 1, 1e-4, conv_fwd_add_setup, conv_fwd_add_run, conv_fwd_ref,
     NULL},
    {"conv3d_backward_data", CONV3D_BACKWARD_DATA, 1, 1e-4, conv_bwd_data_setup, conv_bwd_data_run,
     conv_bwd_data_ref, NULL},
    {"conv3d_backward_filter", CONV3D_BACKWARD_FILTER, 1, 1e-4, conv_bwd_filter_setup,
     conv_bwd_filter_run, conv_bwd_filter_ref, NULL},
};
const int conv3d_specs_count = sizeof conv3d_specs / sizeof conv3d_specs[0];
