/* conv3d_cpu.c: the float32 CPU 3D convolution of conv3d.h: the shape and count helpers, and forward,
 * backward-data and backward-filter as a gather into a column matrix plus one cblas_sgemm per chunk of rows.
 *
 * Kernel size, stride and padding are per axis (k[3], stride[3], pad[3] in the order d, h, w; conv3d.h).
 * Forward (im2col): for output positions P (rows) and K = kd*kh*kw*c_in (columns),
 *   col[p][((a*kh + b)*kw + c)*c_in + ci] = x at the input position tap (a, b, c) reads (0 in the padding)
 *   y[P][c_out] = col[P][K] x wt[c_out][K]^T + bias, then + residual (the fused skip) while the chunk is in cache
 * Backward filter: dw[c_out][K] = sum over chunks of dy_chunk^T x col_chunk; dbias = sum over P of dy.
 * Backward data (gather form, race-free): every input position gathers the dy values at the output positions
 * that read it and multiplies them by the filter rearranged to [c_in][taps*c_out]. For strides (sd, sh, sw) other
 * than 1 the input positions split into sd*sh*sw residue classes (z mod sd, y mod sh, x mod sw); within a class the
 * same taps are valid everywhere, so each class gathers only its own taps (about kd*kh*kw/(sd*sh*sw) of them) and no
 * multiply-by-zero is done.
 * Taps are ordered from the highest kernel index down, which makes the dy positions they read ascend by one:
 * every (kd, kh) line of taps is then one contiguous run of dy, exactly like a forward im2col line.
 * 1x1x1 stride-1 pad-0 convolutions skip the gathers: x and dy are already the [P][c] matrices.
 * A cubic shape (the autoencoder's) takes exactly the steps it took before the axes were separate: the same
 * chunks, classes in the same order, the same GEMMs, so its results are the same bits.
 *
 * Threading: the rows are cut into chunks sized from the shape alone (conv_chunk_rows, about 2 MB of column
 * matrix, so it is still cache-hot when the GEMM reads it); the forward's chunks start at every sample's first row,
 * so that a sample's outputs do not depend on its slot in the batch. OpenMP threads take whole chunks: each
 * gathers its chunk into its own slice of the workspace and runs a single-threaded sgemm on it. Measured on the
 * 2-core machine this is several times faster than alternating OpenMP gathers with OpenBLAS-threaded GEMMs,
 * whose two spinning thread pools fight over the cores (by 10x when another process is running). OpenBLAS is
 * switched to one thread for the duration of each call and restored after.
 * Determinism: a chunk's result does not depend on which thread computes it, dw is summed per fixed group of
 * chunks and the groups are added in order, dbias over fixed row blocks: every output is bit-identical for any
 * thread count. */
#include <omp.h>
#include <string.h>

#include "conv3d/conv3d.h"
#include "common/cpu_gemm.h"
#include "core/util.h"

/* Column matrix per chunk: about this many bytes, rows clamped to [MIN_ROWS, MAX_ROWS]. Measured on the 2-core
 * Xeon (2 MB L2 per core), 0.5 to 2 MB per chunk perform alike for k=3, and 2048-row chunks help the pointwise
 * GEMMs (K = c_in is short there). The unit test's "chunked" shapes have several times CONV_CHUNK_MAX_ROWS rows,
 * so they run many chunks whatever the width. */
#define CONV_CHUNK_TARGET_BYTES (2L << 20)
#define CONV_CHUNK_MAX_ROWS 2048L
#define CONV_CHUNK_MIN_ROWS 16L
/* Backward filter: chunks are summed into at most CONV_FILTER_MAX_GROUPS partial dw's (fewer for big filters,
 * keeping them under CONV_FILTER_PARTIAL_BYTES, but at least CONV_FILTER_MIN_GROUPS for parallelism). */
#define CONV_FILTER_MAX_GROUPS 32L
#define CONV_FILTER_MIN_GROUPS 4L
#define CONV_FILTER_PARTIAL_BYTES (16L << 20)
/* Rows per partial sum of dbias: fixed, so the sum's order does not depend on the thread count. */
#define CONV_BIAS_BLOCK_ROWS 1024L

/* ---- shape helpers ---------------------------------------------------------------------------------------- */

Conv3dShape conv3d_shape_3d(int n, int d, int h, int w, int c_in, int c_out, const int k[3], const int stride[3],
                            const int pad[3]) {
    Conv3dShape s = {.n = n, .d = d, .h = h, .w = w, .c_in = c_in, .c_out = c_out};
    const int size[3] = {d, h, w};
    int bad = n < 1 || d < 1 || h < 1 || w < 1 || c_in < 1 || c_out < 1;
    for (int a = 0; a < 3; a++) {
        s.k[a] = k[a], s.stride[a] = stride[a], s.pad[a] = pad[a];
        bad |= k[a] < 1 || stride[a] < 1 || pad[a] < 0;
    }
    if (bad)
        vx_fatal("conv3d: invalid shape n=%d d=%d h=%d w=%d c_in=%d c_out=%d k=%dx%dx%d stride=%dx%dx%d pad=%dx%dx%d",
                 n, d, h, w, c_in, c_out, k[0], k[1], k[2], stride[0], stride[1], stride[2], pad[0], pad[1], pad[2]);
    for (int a = 0; a < 3; a++)
        if (size[a] + 2 * pad[a] < k[a])
            vx_fatal("conv3d: kernel %dx%dx%d larger than the padded input %dx%dx%d (pad %dx%dx%d)", k[0], k[1], k[2],
                     d, h, w, pad[0], pad[1], pad[2]);
    s.od = (d + 2 * pad[0] - k[0]) / stride[0] + 1;
    s.oh = (h + 2 * pad[1] - k[1]) / stride[1] + 1;
    s.ow = (w + 2 * pad[2] - k[2]) / stride[2] + 1;
    return s;
}

Conv3dShape conv3d_shape(int n, int d, int h, int w, int c_in, int c_out, int k, int stride, int pad) {
    return conv3d_shape_3d(n, d, h, w, c_in, c_out, (const int[3]){k, k, k}, (const int[3]){stride, stride, stride},
                           (const int[3]){pad, pad, pad});
}

long conv3d_taps(const Conv3dShape *s) { return (long)s->k[0] * s->k[1] * s->k[2]; }
long conv3d_input_count(const Conv3dShape *s) { return (long)s->n * s->d * s->h * s->w * s->c_in; }
long conv3d_output_count(const Conv3dShape *s) { return (long)s->n * s->od * s->oh * s->ow * s->c_out; }
long conv3d_weight_count(const Conv3dShape *s) { return (long)s->c_out * conv3d_taps(s) * s->c_in; }
double conv3d_forward_flops(const Conv3dShape *s) {
    return 2.0 * s->n * s->od * s->oh * s->ow * (double)s->c_out * s->k[0] * s->k[1] * s->k[2] * s->c_in;
}

/* "7" or "1x3x3" */
static void axes_str(const int v[3], char *buf, size_t len) {
    if (v[0] == v[1] && v[1] == v[2]) snprintf(buf, len, "%d", v[0]);
    else snprintf(buf, len, "%dx%dx%d", v[0], v[1], v[2]);
}

void conv3d_kernel_label(const Conv3dShape *s, char *buf, size_t len) {
    char k[40], st[40];
    axes_str(s->k, k, sizeof k);
    axes_str(s->stride, st, sizeof st);
    snprintf(buf, len, "k%s s%s", k, st);
}

/* ---- shared pieces ---------------------------------------------------------------------------------------- */

static int is_pointwise(const Conv3dShape *s) {
    for (int a = 0; a < 3; a++)
        if (s->k[a] != 1 || s->stride[a] != 1 || s->pad[a] != 0) return 0;
    return 1;
}
static long out_positions(const Conv3dShape *s) { return (long)s->n * s->od * s->oh * s->ow; }
static long min_l(long a, long b) { return a < b ? a : b; }
static long max_l(long a, long b) { return a > b ? a : b; }
static long ceil_div(long a, long b) { return (a + b - 1) / b; }

/* Per-thread slices of workspace: one per processor, a number that cannot change while the process runs, so
 * the size conv3d_workspace_bytes_cpu reports at planning time still holds at every call. A thread count set
 * above the processor count is clamped to it here (oversubscribing cores gains nothing for GEMMs). */
static long conv_slots(void) { return omp_get_num_procs(); }
static int conv_threads(void) { return (int)min_l(omp_get_max_threads(), conv_slots()); }

/* Rows per chunk for a column matrix `width` floats wide over `total` rows: a function of the shape only. */
static long conv_chunk_rows(long width, long total) {
    long r = CONV_CHUNK_TARGET_BYTES / (max_l(width, 1) * (long)sizeof(float));
    r = min_l(max_l(r, CONV_CHUNK_MIN_ROWS), CONV_CHUNK_MAX_ROWS);
    return min_l(r, max_l(total, 1));
}

/* The three GEMM forms the convolution needs, row-major, alpha 1, beta 0 (overwrite) or 1 (accumulate). With a
 * single output column OpenBLAS's sgemm still runs its packing path (3 GFLOP/s for a 16->1 output conv), so
 * that case goes to sgemv. sgemv's beta 0 is not relied on to ignore NaN (it scales y by beta in some OpenBLAS
 * versions): y is zeroed first and accumulated into. */
static void gemv_rows(int t, int m, int n, const float *A, int lda, const float *xv, int incx, float beta, float *yv,
                      long ylen) {
    if (beta == 0.0f) memset(yv, 0, sizeof(float) * (size_t)ylen);
    cpu_sgemv(t, m, n, 1.0f, A, lda, xv, incx, beta == 0.0f ? 1.0f : beta, yv);
}

/* C [m][n] = beta*C + A [m][k] x B [n][k]^T */
static void gemm_nt(int m, int n, int k, const float *A, int lda, const float *B, int ldb, float beta, float *C,
                    int ldc) {
    if (n == 1 && ldc == 1) gemv_rows(0, m, k, A, lda, B, 1, beta, C, m);
    else cpu_sgemm(0, 1, m, n, k, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

/* C [m][n] = beta*C + A [k][m]^T x B [k][n] */
static void gemm_tn(int m, int n, int k, const float *A, int lda, const float *B, int ldb, float beta, float *C,
                    int ldc) {
    if (m == 1 && lda == 1) gemv_rows(1, k, n, B, ldb, A, 1, beta, C, n);
    else cpu_sgemm(1, 0, m, n, k, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

/* C [m][n] = beta*C + A [m][k] x B [k][n] */
static void gemm_nn(int m, int n, int k, const float *A, int lda, const float *B, int ldb, float beta, float *C,
                    int ldc) {
    if (n == 1 && ldb == 1 && ldc == 1) gemv_rows(0, m, k, A, lda, B, 1, beta, C, m);
    else cpu_sgemm(0, 0, m, n, k, 1.0f, A, lda, B, ldb, beta, C, ldc);
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

/* Forward im2col of output rows [p0, p0 + rows): col [rows][kd*kh*kw*c_in]. Runs inside one thread. */
static void im2col(const Conv3dShape *s, const float *x, long p0, long rows, float *col) {
    const long K = conv3d_taps(s) * s->c_in;
    const long sample = (long)s->d * s->h * s->w * s->c_in;
    for (long r = 0; r < rows; r++) {
        long p = p0 + r;
        const int ox = (int)(p % s->ow);
        p /= s->ow;
        const int oy = (int)(p % s->oh);
        p /= s->oh;
        const int oz = (int)(p % s->od);
        const long b = p / s->od;
        gather_row(col + r * K, x + b * sample, s->d, s->h, s->w, s->c_in, oz * s->stride[0] - s->pad[0], s->k[0],
                   oy * s->stride[1] - s->pad[1], s->k[1], ox * s->stride[2] - s->pad[2], s->k[2]);
    }
}

/* ---- forward ---------------------------------------------------------------------------------------------- */

/* Forward and backward filter share the chunking: rows of the [P][K] column matrix (x itself when pointwise). */
static long fwd_chunk_rows(const Conv3dShape *s) {
    return conv_chunk_rows(conv3d_taps(s) * s->c_in, out_positions(s));
}

void conv3d_forward_cpu(const Conv3dShape *s, const float *x, const float *wt, const float *bias,
                        const float *residual, float *y, void *workspace) {
    const long K = conv3d_taps(s) * s->c_in;
    const int co = s->c_out, pw = is_pointwise(s);
    /* chunks of R rows start at every sample's first output position: BLAS kernels round a row by its place in their
     * register blocks (OpenBLAS's Haswell sgemm by its place among 12), so a sample's rows must meet the GEMM at the
     * same places in every slot of every batch for its outputs to be the same bits (what predict promises) */
    const long Ps = (long)s->od * s->oh * s->ow, R = fwd_chunk_rows(s), per_sample = ceil_div(Ps, R);
    const long nch = s->n * per_sample;
    const int saved = cpu_gemm_serial_begin();
#pragma omp parallel num_threads(conv_threads())
    {
        float *col = pw ? NULL : (float *)workspace + omp_get_thread_num() * R * K; /* [R][K] */
#pragma omp for schedule(dynamic, 1)
        for (long c = 0; c < nch; c++) {
            const long in_sample = c % per_sample * R, p0 = c / per_sample * Ps + in_sample;
            const long rows = min_l(R, Ps - in_sample);
            if (!pw) im2col(s, x, p0, rows, col);
            float *yc = y + p0 * co; /* [rows][c_out] */
            for (long r = 0; r < rows; r++)
                for (int j = 0; j < co; j++) yc[r * co + j] = bias ? bias[j] : 0.0f;
            /* y [rows][c_out] += col [rows][K] x wt [c_out][K]^T */
            gemm_nt((int)rows, co, (int)K, pw ? x + p0 * K : col, (int)K, wt, (int)K, 1.0f, yc, co);
            /* (conv + bias) + residual: the same sum, in the same order, as the separate add it replaces */
            if (residual)
                for (long i = 0; i < rows * co; i++) yc[i] += residual[p0 * co + i];
        }
    }
    cpu_gemm_serial_end(saved);
}

/* ---- backward filter -------------------------------------------------------------------------------------- */

/* dbias [c] = beta*dbias + sum over the P rows of dy [P][c], summed in double over fixed blocks of rows. */
void conv3d_bias_grad_cpu(long P, int c, const float *dy, float *dbias, float beta) {
    const long nb = ceil_div(P, CONV_BIAS_BLOCK_ROWS);
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

/* Number of partial dw's: a function of the shape only (it fixes the summation order). */
static long filter_groups(const Conv3dShape *s) {
    const long nch = ceil_div(out_positions(s), fwd_chunk_rows(s));
    const long g = CONV_FILTER_PARTIAL_BYTES / (conv3d_weight_count(s) * (long)sizeof(float));
    return min_l(nch, min_l(max_l(g, CONV_FILTER_MIN_GROUPS), CONV_FILTER_MAX_GROUPS));
}

void conv3d_backward_filter_cpu(const Conv3dShape *s, const float *x, const float *dy, float *dw, float *dbias,
                                float beta, void *workspace) {
    const long P = out_positions(s), K = conv3d_taps(s) * s->c_in, nw = conv3d_weight_count(s);
    const int co = s->c_out, pw = is_pointwise(s);
    if (dbias) conv3d_bias_grad_cpu(P, co, dy, dbias, beta);
    const long R = fwd_chunk_rows(s), nch = ceil_div(P, R), ng = filter_groups(s);
    /* workspace: per-thread column matrices [slots][R][K], then the partial dw's [ng][c_out][K] */
    float *cols = workspace;
    float *part = cols + (pw ? 0 : conv_slots() * R * K);
    const int saved = cpu_gemm_serial_begin();
#pragma omp parallel num_threads(conv_threads())
    {
        float *col = pw ? NULL : cols + omp_get_thread_num() * R * K;
        /* group g sums chunks [g*nch/ng, (g+1)*nch/ng) in order, on one thread */
#pragma omp for schedule(dynamic, 1)
        for (long g = 0; g < ng; g++) {
            float *dwg = ng == 1 ? dw : part + g * nw;
            for (long c = g * nch / ng; c < (g + 1) * nch / ng; c++) {
                const long p0 = c * R, rows = min_l(R, P - p0);
                if (!pw) im2col(s, x, p0, rows, col);
                /* dwg [c_out][K] (+)= dy_chunk [rows][c_out]^T x col [rows][K]; BLAS with beta 0 overwrites without
                 * reading, so the first chunk of a group needs no zeroing (and ng == 1 writes dw with the caller's
                 * beta) */
                const float b = c > g * nch / ng ? 1.0f : ng == 1 ? beta : 0.0f;
                gemm_tn(co, (int)K, (int)rows, dy + p0 * co, co, pw ? x + p0 * K : col, (int)K, b, dwg, (int)K);
            }
        }
        /* dw = beta*dw + the groups' partials, added in group order (in double) */
        if (ng > 1) {
#pragma omp for schedule(static)
            for (long i = 0; i < nw; i++) {
                double sum = 0.0;
                for (long g = 0; g < ng; g++) sum += part[g * nw + i];
                dw[i] = beta != 0.0f ? beta * dw[i] + (float)sum : (float)sum;
            }
        }
    }
    cpu_gemm_serial_end(saved);
}

/* ---- backward data ---------------------------------------------------------------------------------------- */

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

/* The sd*sh*sw residue classes of input positions: their taps, positions, and where their filter and rows start. */
typedef struct {
    int r[3];            /* residue along z, y, x */
    AxisClass a[3];      /* per axis: positions, taps, first tap */
    long rows;           /* input positions in the class (all samples) */
    long width;          /* gathered floats per position: taps * c_out */
    long wr_offset;      /* the class's rearranged filter [c_in][width] in the filter area */
} DataClass;

static int n_classes(const Conv3dShape *s) { return s->stride[0] * s->stride[1] * s->stride[2]; }

/* Fills cls[sd*sh*sw] (z residue slowest, x fastest); returns the widest row and the most positions of a class via
 * max_width, max_rows. */
static void data_classes(const Conv3dShape *s, DataClass *cls, long *max_width, long *max_rows) {
    const int *st = s->stride;
    const int size[3] = {s->d, s->h, s->w};
    long off = 0;
    *max_width = 0;
    *max_rows = 0;
    for (int i = 0; i < n_classes(s); i++) {
        DataClass *c = &cls[i];
        c->r[0] = i / (st[1] * st[2]), c->r[1] = i / st[2] % st[1], c->r[2] = i % st[2];
        long taps = 1;
        c->rows = s->n;
        for (int ax = 0; ax < 3; ax++) {
            c->a[ax] = axis_class(c->r[ax], size[ax], s->k[ax], st[ax], s->pad[ax]);
            taps *= c->a[ax].taps;
            c->rows *= c->a[ax].count;
        }
        c->width = taps * s->c_out;
        c->wr_offset = off;
        off += c->width * s->c_in; /* the classes partition the taps: off ends at kd*kh*kw*c_out*c_in */
        *max_width = max_l(*max_width, c->width);
        *max_rows = max_l(*max_rows, c->rows);
    }
}

/* Input position of row q of class c: (b, r_z + j_z*sd, r_y + j_y*sh, r_x + j_x*sw), as a flat position index;
 * j[] receives (j_z, j_y, j_x) and *b the sample. */
static long class_position(const Conv3dShape *s, const DataClass *c, long q, int j[3], long *b) {
    j[2] = (int)(q % c->a[2].count);
    q /= c->a[2].count;
    j[1] = (int)(q % c->a[1].count);
    q /= c->a[1].count;
    j[0] = (int)(q % c->a[0].count);
    *b = q / c->a[0].count;
    const int *st = s->stride;
    return ((*b * s->d + c->r[0] + (long)j[0] * st[0]) * s->h + c->r[1] + (long)j[1] * st[1]) * s->w + c->r[2] +
           (long)j[2] * st[2];
}

/* Rows per backward-data chunk, from the widest class. */
static long data_chunk_rows(const Conv3dShape *s, long max_width, long max_rows) {
    return conv_chunk_rows(max_width, max_rows);
}

void conv3d_backward_data_cpu(const Conv3dShape *s, const float *dy, const float *wt, float *dx, float beta,
                              void *workspace) {
    const int ci = s->c_in, co = s->c_out;
    const int *k = s->k, *st = s->stride;
    const long k3 = conv3d_taps(s);
    const int strided = st[0] > 1 || st[1] > 1 || st[2] > 1; /* more than one class: results are scattered */
    if (is_pointwise(s)) {
        /* dx [P][c_in] = beta*dx + dy [P][c_out] x wt [c_out][c_in], by chunks of rows */
        const long P = out_positions(s), R = conv_chunk_rows(co, P), nch = ceil_div(P, R);
        const int saved = cpu_gemm_serial_begin();
#pragma omp parallel for schedule(dynamic, 1) num_threads(conv_threads())
        for (long c = 0; c < nch; c++)
            gemm_nn((int)min_l(R, P - c * R), ci, co, dy + c * R * co, co, wt, ci, beta, dx + c * R * ci, ci);
        cpu_gemm_serial_end(saved);
        return;
    }
    const int ncls = n_classes(s);
    DataClass *cls = vx_malloc(sizeof(DataClass) * (size_t)ncls);
    long max_width, max_rows;
    data_classes(s, cls, &max_width, &max_rows);
    const long R = data_chunk_rows(s, max_width, max_rows);
    /* work items: (class, first row) for every chunk of every class; classes with no tap only need zeroing */
    long nitems = 0;
    long *n_items = vx_malloc(sizeof(long) * (size_t)ncls);
    for (int i = 0; i < ncls; i++) {
        n_items[i] = cls[i].width > 0 ? ceil_div(cls[i].rows, R) : (beta == 0.0f && cls[i].rows > 0);
        nitems += n_items[i];
    }
    long *items = vx_malloc(sizeof(long) * 2 * (size_t)max_l(nitems, 1)); /* [nitems][class, q0] */
    for (int i = 0, it = 0; i < ncls; i++)
        for (long c = 0; c < n_items[i]; c++, it++) items[2 * it] = i, items[2 * it + 1] = c * R;
    free(n_items);

    /* workspace: the classes' rearranged filters (kd*kh*kw*c_out*c_in floats), then per thread [R][max_width]
     * gathered dy and, for stride > 1, [R][c_in] GEMM results to scatter */
    float *wr_all = workspace;
    float *bufs = wr_all + k3 * co * ci;
    const long per_thread = R * max_width + (strided ? R * ci : 0);
    const long dy_sample = (long)s->od * s->oh * s->ow * co;
    const int saved = cpu_gemm_serial_begin();
#pragma omp parallel num_threads(conv_threads())
    {
        /* wr [c_in][taps][c_out] per class: tap (a, b, c) is kernel index (kd_max - a*sd, kh_max - b*sh,
         * kw_max - c*sw) */
#pragma omp for schedule(static)
        for (long t = 0; t < (long)ncls * ci; t++) {
            const DataClass *c = &cls[t / ci];
            const int i = (int)(t % ci);
            const AxisClass *az = &c->a[0], *ay = &c->a[1], *ax = &c->a[2];
            for (int a = 0; a < az->taps; a++)
                for (int bb = 0; bb < ay->taps; bb++)
                    for (int cc = 0; cc < ax->taps; cc++) {
                        const long kidx = ((long)(az->kd_max - a * st[0]) * k[1] + (ay->kd_max - bb * st[1])) * k[2] +
                                          (ax->kd_max - cc * st[2]);
                        float *dst = wr_all + c->wr_offset + (long)i * c->width +
                                     (((long)a * ay->taps + bb) * ax->taps + cc) * co;
                        for (int o = 0; o < co; o++) dst[o] = wt[((long)o * k3 + kidx) * ci + i];
                    }
        }
        float *col = bufs + omp_get_thread_num() * per_thread; /* [R][width] */
        float *tmp = col + R * max_width;                       /* [R][c_in] */
#pragma omp for schedule(dynamic, 1)
        for (long it = 0; it < nitems; it++) {
            const DataClass *c = &cls[items[2 * it]];
            const long q0 = items[2 * it + 1], rows = min_l(R, c->rows - q0), W = c->width;
            int j[3];
            long b;
            if (W == 0) {
                /* no tap reads these positions (k < stride on some axis): their gradient is 0 */
                for (long q = 0; q < c->rows; q++) memset(dx + class_position(s, c, q, j, &b) * ci, 0, sizeof(float) * ci);
                continue;
            }
            /* gather: row q's first tap kd_max reads output z (z + pad - kd_max)/stride, the next ones ascend by 1 */
            for (long r = 0; r < rows; r++) {
                class_position(s, c, q0 + r, j, &b);
                int start[3];
                for (int ax = 0; ax < 3; ax++)
                    start[ax] = (c->r[ax] + j[ax] * st[ax] + s->pad[ax] - c->a[ax].kd_max) / st[ax]; /* exact */
                gather_row(col + r * W, dy + b * dy_sample, s->od, s->oh, s->ow, co, start[0], c->a[0].taps, start[1],
                           c->a[1].taps, start[2], c->a[2].taps);
            }
            const float *wr = wr_all + c->wr_offset;
            if (!strided) {
                /* a single class holding every position in order: write straight into dx rows */
                gemm_nt((int)rows, ci, (int)W, col, (int)W, wr, (int)W, beta, dx + q0 * ci, ci);
                continue;
            }
            /* tmp [rows][c_in] = col [rows][W] x wr [c_in][W]^T, then scattered to the class positions */
            gemm_nt((int)rows, ci, (int)W, col, (int)W, wr, (int)W, 0.0f, tmp, ci);
            for (long r = 0; r < rows; r++) {
                float *d = dx + class_position(s, c, q0 + r, j, &b) * ci;
                const float *src = tmp + r * ci;
                if (beta != 0.0f)
                    for (int i = 0; i < ci; i++) d[i] = beta * d[i] + src[i];
                else
                    for (int i = 0; i < ci; i++) d[i] = src[i];
            }
        }
    }
    cpu_gemm_serial_end(saved);
    free(items);
    free(cls);
}

/* ---- workspace -------------------------------------------------------------------------------------------- */

size_t conv3d_workspace_bytes_cpu(const Conv3dShape *s) {
    const long K = conv3d_taps(s) * s->c_in;
    /* forward: per-thread column matrices; backward filter: those plus the partial dw's */
    const long cols = is_pointwise(s) ? 0 : conv_slots() * fwd_chunk_rows(s) * K;
    const long ng = filter_groups(s);
    const long filt = cols + (ng > 1 ? ng * conv3d_weight_count(s) : 0);
    long data = 0;
    if (!is_pointwise(s)) {
        const int ncls = n_classes(s);
        DataClass *cls = vx_malloc(sizeof(DataClass) * (size_t)ncls);
        long max_width, max_rows;
        data_classes(s, cls, &max_width, &max_rows);
        free(cls);
        const long R = data_chunk_rows(s, max_width, max_rows);
        const int strided = s->stride[0] > 1 || s->stride[1] > 1 || s->stride[2] > 1;
        data = conv3d_weight_count(s) + conv_slots() * (R * max_width + (strided ? R * s->c_in : 0));
    }
    return sizeof(float) * (size_t)max_l(filt, data);
}
