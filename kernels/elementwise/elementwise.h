/* elementwise.h: the small vector ops the graph needs: residual add, gradient accumulation, scaling, the cast
 * between storage types (dtype.h), the cast that also pads or slices the channels of each row, and the copy of a
 * slice of channels (concatenation). The CPU versions
 * are the float32 reference; the CUDA ones take the storage type of their activation buffers (`dt`) and compute in
 * float32 whatever it is. */
#pragma once
#include "common/dtype.h"
#include "common/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y = a + b */
void add_forward_cpu(long count, const float *a, const float *b, float *y);
/* dst = beta*dst + src  (beta in {0,1}; with beta 0 dst is overwritten even if it held NaN) */
void accumulate_cpu(long count, const float *src, float *dst, float beta);
/* x *= scale */
void scale_cpu(long count, float *x, float scale);
/* dst[i] = src[i] converted from `from` to `to` (rounded to nearest even when narrowing); src and dst must not
 * overlap unless from == to and src == dst. The CPU converts between any two types (dtype.h). */
void cast_cpu(long count, DType from, const void *src, DType to, void *dst);
/* Rows of channels, with a type change: src [rows][c_from] of `from`, dst [rows][c_to] of `to` (no overlap);
 *   dst[r][c] = beta*dst[r][c] + P[r][c],  P[r][c] = src[r][c] for c < c_from, 0 for c_from <= c < c_to
 * (beta in {0,1}; beta 0 overwrites without reading dst, which may hold NaN). c_to > c_from pads with zeros, c_to <
 * c_from keeps the first c_to channels. Why: cuDNN's tensor-core kernels want a channel count that is a multiple of 8,
 * so the model's first convolution may read its single-channel input (and weights) padded to 8 channels, and its
 * weight gradient, computed padded, is sliced back into the real one (beta: the accumulation micro-batches). */
void pad_channels_cpu(long rows, DType from, int c_from, const void *src, DType to, int c_to, void *dst, float beta);
/* A slice of channels from rows to rows, one storage type: src [rows][c_src], dst [rows][c_dst],
 *   dst[r][dst_off + j] = beta*dst[r][dst_off + j] + src[r][src_off + j]   for j < n
 * (beta in {0,1}; dst's other channels untouched). What a concatenation along the channels is made of (DenseNet's
 * dense layers: each layer's input and its new features side by side) and what its gradient is split by. */
void copy_channels_cpu(long rows, DType dt, int c_src, int src_off, const void *src, int c_dst, int dst_off, void *dst,
                       int n, float beta);

/* CUDA (elementwise_cuda.cu, CUDA builds only): the same semantics on device pointers,
 * enqueued on the CUDA backend's compute stream (backend.h). */
void add_forward_cuda(DType dt, long count, const void *a, const void *b, void *y);
void accumulate_cuda(DType dt, long count, const void *src, void *dst, float beta);
void scale_cuda(long count, float *x, float scale);
void cast_cuda(long count, DType from, const void *src, DType to, void *dst);
void pad_channels_cuda(long rows, DType from, int c_from, const void *src, DType to, int c_to, void *dst, float beta);
void copy_channels_cuda(long rows, DType dt, int c_src, int src_off, const void *src, int c_dst, int dst_off, void *dst,
                        int n, float beta);

/* The op's sub-table (kernels/backend/ops.def): be->elementwise->... */
enum { EW_ADD, EW_ACCUMULATE, EW_SCALE, EW_CAST, EW_PAD_CHANNELS, EW_COPY_CHANNELS }; /* its functions, for supports() */
typedef struct ElementwiseOps {
    OpHead head;
    void (*add)(DType dt, long count, const void *a, const void *b, void *y);
    void (*accumulate)(DType dt, long count, const void *src, void *dst, float beta);
    void (*scale)(long count, float *x, float scale);
    void (*cast)(long count, DType from, const void *src, DType to, void *dst);
    /* rows of c_from channels to rows of c_to (zero-padded or sliced), with a type change */
    void (*pad_channels)(long rows, DType from, int c_from, const void *src, DType to, int c_to, void *dst, float beta);
    /* a slice of channels into a slice of another tensor's (concatenation, and its gradient's split) */
    void (*copy_channels)(long rows, DType dt, int c_src, int src_off, const void *src, int c_dst, int dst_off,
                          void *dst, int n, float beta);
} ElementwiseOps;
extern const ElementwiseOps elementwise_ops_cpu;
extern const ElementwiseOps elementwise_ops_cuda; /* CUDA builds only */

#ifdef __cplusplus
}
#endif
