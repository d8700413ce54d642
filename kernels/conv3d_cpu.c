/* conv3d_cpu.c: the float32 CPU 3D convolution of conv3d.h: the shape and count helpers, and forward,
 * backward-data and backward-filter as a gather into a column matrix plus one cblas_sgemm per chunk of rows.
 *
 * Forward (im2col): for output positions P (rows) and K = k^3*c_in (columns),
 *   col[p][((kd*k + kh)*k + kw)*c_in + ci] = x at the input position the tap reads (0 in the padding)
 *   y[P][c_out] = col[P][K] x wt[c_out][K]^T + bias
 * Backward filter: dw[c_out][K] = sum over chunks of dy_chunk^T x col_chunk; dbias = sum over P of dy.
 * Backward data (gather form, race-free): every input position gathers the dy values at the output positions
 * that read it and multiplies them by the filter rearranged to [c_in][taps*c_out]. For stride s > 1 the input
 * positions split into s^3 residue classes (z mod s, y mod s, x mod s); within a class the same taps are valid
 * everywhere, so each class gathers only its own taps (about k^3/s^3 of them) and no multiply-by-zero is done.
 * Taps are ordered from the highest kernel index down, which makes the dy positions they read ascend by one:
 * every (kd, kh) line of taps is then one contiguous run of dy, exactly like a forward im2col line.
 *
 * Rows are processed in chunks sized from the shape alone (conv_chunk_rows), so the workspace stays a few MB and
 * every reduction (dw over chunks, dbias over fixed row blocks) runs in the same order whatever the thread count.
 * The gathers use OpenMP; the GEMMs use OpenBLAS's own threads. 1x1x1 stride-1 pad-0 convolutions skip the
 * gathers: x and dy are already the [P][c] matrices. */
#include <cblas.h>
#include <string.h>

#include "conv3d.h"
#include "util.h"

/* Target size of one chunk's column matrix: small enough to stay in the 2 MB L2 plus L3, large enough for GEMMs
 * of thousands of rows. The row count is clamped to [CONV_CHUNK_MIN_ROWS, CONV_CHUNK_MAX_ROWS]; the unit test
 * uses shapes with more than CONV_CHUNK_MAX_ROWS rows to reach the multi-chunk path whatever the width. */
#define CONV_CHUNK_TARGET_BYTES ((long)4 << 20)
#define CONV_CHUNK_MAX_ROWS 8192L
#define CONV_CHUNK_MIN_ROWS 64L
/* Rows per partial sum of dbias: fixed, so the sum's order does not depend on the thread count. */
#define CONV_BIAS_BLOCK_ROWS 1024L

/* ---- shape helpers ---------------------------------------------------------------------------------------- */

Conv3dShape conv3d_shape(int n, int d, int h, int w, int c_in, int c_out, int k, int stride, int pad) {
    Conv3dShape s = {.n = n, .d = d, .h = h, .w = w, .c_in = c_in, .c_out = c_out, .k = k, .stride = stride,
                     .pad = pad};
    if (n < 1 || d < 1 || h < 1 || w < 1 || c_in < 1 || c_out < 1 || k < 1 || stride < 1 || pad < 0)
        vx_fatal("conv3d: invalid shape n=%d d=%d h=%d w=%d c_in=%d c_out=%d k=%d stride=%d pad=%d", n, d, h, w,
                 c_in, c_out, k, stride, pad);
    s.od = (d + 2 * pad - k) / stride + 1;
    s.oh = (h + 2 * pad - k) / stride + 1;
    s.ow = (w + 2 * pad - k) / stride + 1;
    if (d + 2 * pad < k || h + 2 * pad < k || w + 2 * pad < k)
        vx_fatal("conv3d: kernel %d larger than the padded input %dx%dx%d (pad %d)", k, d, h, w, pad);
    return s;
}

long conv3d_input_count(const Conv3dShape *s) { return (long)s->n * s->d * s->h * s->w * s->c_in; }
long conv3d_output_count(const Conv3dShape *s) { return (long)s->n * s->od * s->oh * s->ow * s->c_out; }
long conv3d_weight_count(const Conv3dShape *s) { return (long)s->c_out * s->k * s->k * s->k * s->c_in; }
double conv3d_forward_flops(const Conv3dShape *s) {
    return 2.0 * s->n * s->od * s->oh * s->ow * (double)s->c_out * s->k * s->k * s->k * s->c_in;
}

/* ---- shared pieces ---------------------------------------------------------------------------------------- */

static int is_pointwise(const Conv3dShape *s) { return s->k == 1 && s->stride == 1 && s->pad == 0; }
static long out_positions(const Conv3dShape *s) { return (long)s->n * s->od * s->oh * s->ow; }
static long in_positions(const Conv3dShape *s) { return (long)s->n * s->d * s->h * s->w; }
static long min_l(long a, long b) { return a < b ? a : b; }

/* Rows per chunk for a column matrix `width` floats wide over `total` rows: a function of the shape only. */
static long conv_chunk_rows(long width, long total) {
    long r = CONV_CHUNK_TARGET_BYTES / (width * (long)sizeof(float));
    if (r < CONV_CHUNK_MIN_ROWS) r = CONV_CHUNK_MIN_ROWS;
    if (r > CONV_CHUNK_MAX_ROWS) r = CONV_CHUNK_MAX_ROWS;
    return min_l(r, total > 0 ? total : 1);
}

/* One row of a column matrix: the tz x ty x tx block of source positions starting at (z0, y0, x0) of one sample
 * src [sd][sh][sw][c], in row-major tap order, c floats per tap, zeros where the position is outside the source.
 * Each (tz, ty) line is one contiguous run of the source, copied with a single memcpy. */
static void gather_row(float *restrict dst, const float *restrict src, int sd, int sh, int sw, int c, int z0,
                       int tz, int y0, int ty, int x0, int tx) {
    const long line = (long)tx * c;
    /* the x taps that land inside the source: [lo, hi) */
    const int lo = x0 < 0 ? -x0 : 0;
    const int hi = x0 + tx > sw ? sw - x0 : tx;
    for (int a = 0; a < tz; a++) {
        const int z = z0 + a;
        if (z < 0 || z >= sd) {
            memset(dst, 0, sizeof(float) * line * ty);
            dst += line * ty;
            continue;
        }
        for (int b = 0; b < ty; b++, dst += line) {
            const int y = y0 + b;
            if (y < 0 || y >= sh || hi <= lo) {
                memset(dst, 0, sizeof(float) * line);
                continue;
            }
            if (lo > 0) memset(dst, 0, sizeof(float) * lo * c);
            memcpy(dst + (long)lo * c, src + (((long)z * sh + y) * sw + x0 + lo) * c, sizeof(float) * (hi - lo) * c);
            if (hi < tx) memset(dst + (long)hi * c, 0, sizeof(float) * (tx - hi) * c);
        }
    }
}

/* Forward im2col of output rows [p0, p0 + rows): col [rows][k^3*c_in]. */
static void im2col(const Conv3dShape *s, const float *x, long p0, long rows, float *col) {
    const long K = (long)s->k * s->k * s->k * s->c_in;
    const long sample = (long)s->d * s->h * s->w * s->c_in;
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++) {
        long p = p0 + r;
        const int ox = (int)(p % s->ow);
        p /= s->ow;
        const int oy = (int)(p % s->oh);
        p /= s->oh;
        const int oz = (int)(p % s->od);
        const long b = p / s->od;
        gather_row(col + r * K, x + b * sample, s->d, s->h, s->w, s->c_in, oz * s->stride - s->pad, s->k,
                   oy * s->stride - s->pad, s->k, ox * s->stride - s->pad, s->k);
    }
}

/* y rows [0, rows) = bias (or 0), so the GEMM can add into them with beta 1. */
static void fill_bias(float *y, long rows, int c, const float *bias) {
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++) {
        float *yr = y + r * c;
        if (bias)
            for (int j = 0; j < c; j++) yr[j] = bias[j];
        else
            for (int j = 0; j < c; j++) yr[j] = 0.0f;
    }
}

/* ---- backward data: residue classes ----------------------------------------------------------------------- */

/* Along one axis, the input positions z = r, r + s, r + 2s, ... of residue r read kernel taps kd with
 * (r + pad - kd) % s == 0, at output position (z + pad - kd) / s. */
typedef struct {
    int count;  /* input positions in the class along this axis */
    int taps;   /* valid taps along this axis */
    int kd_max; /* the largest valid tap: taps are kd_max, kd_max - s, ... (output positions ascending) */
} AxisClass;

static AxisClass axis_class(int r, int size, int k, int stride, int pad) {
    AxisClass a = {.count = r < size ? (size - r + stride - 1) / stride : 0, .taps = 0, .kd_max = -1};
    for (int kd = k - 1; kd >= 0; kd--)
        if (((r + pad - kd) % stride + stride) % stride == 0) {
            if (a.kd_max < 0) a.kd_max = kd;
            a.taps++;
        }
    return a;
}

/* The widest gathered row (taps*c_out) and the most positions over the s^3 classes: they size the workspace. */
static void data_class_extent(const Conv3dShape *s, long *max_width, long *max_rows) {
    *max_width = 0;
    *max_rows = 0;
    for (int rz = 0; rz < s->stride; rz++)
        for (int ry = 0; ry < s->stride; ry++)
            for (int rx = 0; rx < s->stride; rx++) {
                AxisClass az = axis_class(rz, s->d, s->k, s->stride, s->pad);
                AxisClass ay = axis_class(ry, s->h, s->k, s->stride, s->pad);
                AxisClass ax = axis_class(rx, s->w, s->k, s->stride, s->pad);
                long width = (long)az.taps * ay.taps * ax.taps * s->c_out;
                long rows = (long)s->n * az.count * ay.count * ax.count;
                if (width > *max_width) *max_width = width;
                if (rows > *max_rows) *max_rows = rows;
            }
}

/* Floats of workspace each path needs; conv3d_workspace_bytes_cpu is their maximum. */
static long forward_ws_floats(const Conv3dShape *s) {
    if (is_pointwise(s)) return 0;
    const long K = (long)s->k * s->k * s->k * s->c_in;
    return conv_chunk_rows(K, out_positions(s)) * K;
}

static long data_ws_floats(const Conv3dShape *s) {
    if (is_pointwise(s)) return 0;
    long width, rows;
    data_class_extent(s, &width, &rows);
    long total = conv3d_weight_count(s); /* the rearranged filter of one class (all taps when stride 1) */
    if (width > 0) {
        long chunk = conv_chunk_rows(width, rows);
        total += chunk * width;                      /* gathered dy */
        if (s->stride > 1) total += chunk * s->c_in; /* GEMM result before it is scattered into dx */
    }
    return total;
}

size_t conv3d_workspace_bytes_cpu(const Conv3dShape *s) {
    long f = forward_ws_floats(s), d = data_ws_floats(s);
    return sizeof(float) * (size_t)(f > d ? f : d); /* backward filter uses the forward's column matrix */
}

/* ---- forward ---------------------------------------------------------------------------------------------- */

void conv3d_forward_cpu(const Conv3dShape *s, const float *x, const float *wt, const float *bias, float *y,
                        void *workspace) {
    const long P = out_positions(s);
    const int ci = s->c_in, co = s->c_out;
    if (is_pointwise(s)) {
        /* y [P][c_out] = x [P][c_in] x wt [c_out][c_in]^T + bias */
        fill_bias(y, P, co, bias);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)P, co, ci, 1.0f, x, ci, wt, ci, 1.0f, y, co);
        return;
    }
    const long K = (long)s->k * s->k * s->k * ci;
    const long R = conv_chunk_rows(K, P);
    float *col = workspace; /* [R][K] */
    for (long p0 = 0; p0 < P; p0 += R) {
        const long rows = min_l(R, P - p0);
        im2col(s, x, p0, rows, col);
        fill_bias(y + p0 * co, rows, co, bias);
        /* y [rows][c_out] += col [rows][K] x wt [c_out][K]^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, co, (int)K, 1.0f, col, (int)K, wt, (int)K,
                    1.0f, y + p0 * co, co);
    }
}

/* ---- backward filter -------------------------------------------------------------------------------------- */

/* dbias [c] = beta*dbias + sum over the P rows of dy [P][c], summed in double over fixed blocks of rows. */
static void bias_grad(long P, int c, const float *dy, float *dbias, float beta) {
    const long nb = (P + CONV_BIAS_BLOCK_ROWS - 1) / CONV_BIAS_BLOCK_ROWS;
    double *part = vx_calloc((size_t)nb * c, sizeof(double)); /* [nb][c] */
#pragma omp parallel for schedule(static)
    for (long blk = 0; blk < nb; blk++) {
        double *acc = part + blk * c;
        const long r1 = min_l(P, (blk + 1) * CONV_BIAS_BLOCK_ROWS);
        for (long r = blk * CONV_BIAS_BLOCK_ROWS; r < r1; r++)
            for (int j = 0; j < c; j++) acc[j] += dy[r * c + j];
    }
    for (int j = 0; j < c; j++) {
        double sum = 0.0;
        for (long blk = 0; blk < nb; blk++) sum += part[blk * c + j];
        dbias[j] = beta != 0.0f ? beta * dbias[j] + (float)sum : (float)sum;
    }
    free(part);
}

void conv3d_backward_filter_cpu(const Conv3dShape *s, const float *x, const float *dy, float *dw, float *dbias,
                                float beta, void *workspace) {
    const long P = out_positions(s);
    const int ci = s->c_in, co = s->c_out;
    if (dbias) bias_grad(P, co, dy, dbias, beta);
    if (is_pointwise(s)) {
        /* dw [c_out][c_in] = beta*dw + dy [P][c_out]^T x x [P][c_in] */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, co, ci, (int)P, 1.0f, dy, co, x, ci, beta, dw, ci);
        return;
    }
    const long K = (long)s->k * s->k * s->k * ci;
    const long R = conv_chunk_rows(K, P);
    float *col = workspace; /* [R][K] */
    for (long p0 = 0; p0 < P; p0 += R) {
        const long rows = min_l(R, P - p0);
        im2col(s, x, p0, rows, col);
        /* dw [c_out][K] = b*dw + dy_chunk [rows][c_out]^T x col [rows][K]; the caller's beta on the first chunk
         * only (BLAS with beta 0 overwrites without reading dw), then the chunks accumulate in a fixed order. */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, co, (int)K, (int)rows, 1.0f, dy + p0 * co, co, col,
                    (int)K, p0 == 0 ? beta : 1.0f, dw, (int)K);
    }
}

/* ---- backward data ---------------------------------------------------------------------------------------- */

void conv3d_backward_data_cpu(const Conv3dShape *s, const float *dy, const float *wt, float *dx, float beta,
                              void *workspace) {
    const int ci = s->c_in, co = s->c_out, k = s->k, st = s->stride;
    if (is_pointwise(s)) {
        /* dx [P][c_in] = beta*dx + dy [P][c_out] x wt [c_out][c_in] */
        const long P = in_positions(s);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)P, ci, co, 1.0f, dy, co, wt, ci, beta, dx, ci);
        return;
    }
    long max_width, max_rows;
    data_class_extent(s, &max_width, &max_rows);
    const long R = conv_chunk_rows(max_width > 0 ? max_width : 1, max_rows);
    const long k3 = (long)k * k * k;
    float *wr = workspace;              /* one class's rearranged filter, at most k^3*c_out*c_in floats */
    float *col = wr + k3 * co * ci;     /* [R][taps*c_out] gathered dy */
    float *tmp = col + R * max_width;   /* [R][c_in] GEMM result (stride > 1 only) */
    const long dy_sample = (long)s->od * s->oh * s->ow * co;

    for (int rz = 0; rz < st; rz++)
        for (int ry = 0; ry < st; ry++)
            for (int rx = 0; rx < st; rx++) {
                const AxisClass az = axis_class(rz, s->d, k, st, s->pad);
                const AxisClass ay = axis_class(ry, s->h, k, st, s->pad);
                const AxisClass ax = axis_class(rx, s->w, k, st, s->pad);
                const long rows_total = (long)s->n * az.count * ay.count * ax.count;
                const long taps = (long)az.taps * ay.taps * ax.taps;
                const long W = taps * co;
                if (rows_total == 0) continue;
                if (W == 0) {
                    /* no tap reads these positions (k < stride): their gradient is 0 */
                    if (beta != 0.0f) continue;
#pragma omp parallel for schedule(static)
                    for (long q = 0; q < rows_total; q++) {
                        long t = q;
                        const int jx = (int)(t % ax.count);
                        t /= ax.count;
                        const int jy = (int)(t % ay.count);
                        t /= ay.count;
                        const int jz = (int)(t % az.count);
                        const long b = t / az.count;
                        const long pos = ((b * s->d + rz + (long)jz * st) * s->h + ry + (long)jy * st) * s->w + rx +
                                         (long)jx * st;
                        memset(dx + pos * ci, 0, sizeof(float) * ci);
                    }
                    continue;
                }
                /* wr [c_in][taps][c_out]: tap (a, b, c) is kernel index (kd_max - a*s, kh_max - b*s, kw_max - c*s) */
#pragma omp parallel for schedule(static)
                for (int i = 0; i < ci; i++)
                    for (int a = 0; a < az.taps; a++)
                        for (int bb = 0; bb < ay.taps; bb++)
                            for (int c = 0; c < ax.taps; c++) {
                                const long kidx = ((long)(az.kd_max - a * st) * k + (ay.kd_max - bb * st)) * k +
                                                  (ax.kd_max - c * st);
                                float *dst = wr + (long)i * W + (((long)a * ay.taps + bb) * ax.taps + c) * co;
                                for (int o = 0; o < co; o++) dst[o] = wt[((long)o * k3 + kidx) * ci + i];
                            }

                for (long q0 = 0; q0 < rows_total; q0 += R) {
                    const long rows = min_l(R, rows_total - q0);
                    /* gather: row q is the class's q-th input position (b, rz + jz*s, ry + jy*s, rx + jx*s);
                     * its first tap kd_max reads output z (z + pad - kd_max)/s, the next ones ascend by 1 */
#pragma omp parallel for schedule(static)
                    for (long r = 0; r < rows; r++) {
                        long t = q0 + r;
                        const int jx = (int)(t % ax.count);
                        t /= ax.count;
                        const int jy = (int)(t % ay.count);
                        t /= ay.count;
                        const int jz = (int)(t % az.count);
                        const long b = t / az.count;
                        const int z = rz + jz * st, y = ry + jy * st, xx = rx + jx * st;
                        gather_row(col + r * W, dy + b * dy_sample, s->od, s->oh, s->ow, co,
                                   (z + s->pad - az.kd_max) / st, az.taps, (y + s->pad - ay.kd_max) / st, ay.taps,
                                   (xx + s->pad - ax.kd_max) / st, ax.taps);
                    }
                    if (st == 1) {
                        /* one class holding every position in order: write straight into dx */
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, ci, (int)W, 1.0f, col,
                                    (int)W, wr, (int)W, beta, dx + q0 * ci, ci);
                        continue;
                    }
                    /* tmp [rows][c_in] = col [rows][W] x wr [c_in][W]^T, then scattered to the class positions */
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, ci, (int)W, 1.0f, col, (int)W,
                                wr, (int)W, 0.0f, tmp, ci);
#pragma omp parallel for schedule(static)
                    for (long r = 0; r < rows; r++) {
                        long t = q0 + r;
                        const int jx = (int)(t % ax.count);
                        t /= ax.count;
                        const int jy = (int)(t % ay.count);
                        t /= ay.count;
                        const int jz = (int)(t % az.count);
                        const long b = t / az.count;
                        const long pos = ((b * s->d + rz + (long)jz * st) * s->h + ry + (long)jy * st) * s->w + rx +
                                         (long)jx * st;
                        float *d = dx + pos * ci;
                        const float *src = tmp + r * ci;
                        if (beta != 0.0f)
                            for (int i = 0; i < ci; i++) d[i] = beta * d[i] + src[i];
                        else
                            for (int i = 0; i < ci; i++) d[i] = src[i];
                    }
                }
            }
}
