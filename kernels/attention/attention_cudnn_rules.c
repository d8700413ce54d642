/* attention_cudnn_rules.c: which attention shapes the CUDA backend may hand to cuDNN's fused attention
 * (attention_cudnn_graph.cu builds the graph, attention_cudnn.cu plans and checks it), as plain C so that CPU-only
 * builds test the rules too (tests/unit/test_attention_cudnn.c). Sources: cudnn-frontend's SDPA support checks
 * (sdpa_support_surface.h and its backward node's checks) for cuDNN 9, restricted to what this graph is (no mask,
 * no dropout, no bias, heads of q k v equal):
 *   - bf16 or fp16 storage (the fused engines have no float32 form);
 *   - head dim a multiple of 8 and at most 128: cuDNN takes up to 256 on Hopper, but the first call is checked
 *     against the own kernel, whose limit is ATTN_CUDA_MAX_D, and an unchecked graph is not run;
 *   - row strides (ld) multiples of 8 elements: every tensor is described 16-byte aligned;
 *   - cuDNN 9.6.0 or newer: before it the backward's dQ accumulator had to be zeroed by the caller (cudnn-frontend
 *     did it below 9.6), which this graph does not do; the forward is held to the same version for one rule;
 *   - backward: not tq = tk = 1 (cuDNN refuses it); not on 9.10.0/9.10.1 (backward bugs cudnn-frontend refuses);
 *     on cuDNN 9.15 and older only tk a multiple of 128 (cudnn-frontend adds a padding mask there as a workaround
 *     for a known bug; this graph has none).
 * The compute capability (8.0 or newer) and whether an engine takes the graph are asked at planning. */
#include <stdio.h>

#include "attention/attention.h"

const char *attention_cudnn_shape_rule(const AttentionShape *s, int backward, size_t v) {
    static _Thread_local char buf[200];
    if (s->dtype == DT_F32) return "float32 storage (cuDNN's fused attention takes bf16 and fp16)";
    if (s->batch < 1 || s->tq < 1) return "no queries: nothing to compute";
    if (s->d % 8 != 0 || s->d > ATTN_CUDA_MAX_D) {
        snprintf(buf, sizeof buf, "head dim %d: the cuDNN graph takes multiples of 8 up to %d", s->d, ATTN_CUDA_MAX_D);
        return buf;
    }
    if (s->ld_q % 8 || s->ld_k % 8 || s->ld_v % 8 || s->ld_o % 8) {
        snprintf(buf, sizeof buf, "row strides %d/%d/%d/%d: cuDNN's tensors need multiples of 8 elements (16 bytes)",
                 s->ld_q, s->ld_k, s->ld_v, s->ld_o);
        return buf;
    }
    if (v < 90600) {
        snprintf(buf, sizeof buf, "cuDNN %zu.%zu.%zu is older than 9.6.0, which this graph is written for", v / 10000,
                 v / 100 % 100, v % 100);
        return buf;
    }
    if (!backward) return "";
    if (s->tq == 1 && s->tk == 1) return "tq = tk = 1 (cuDNN's backward does not take it)";
    if (v >= 91000 && v < 91002) return "cuDNN 9.10.0 and 9.10.1 have known bugs in the fused attention backward";
    if (v < 91600 && s->tk % 128 != 0) {
        snprintf(buf, sizeof buf, "tk %d not a multiple of 128 on cuDNN %zu.%zu.%zu (before 9.16 that needs a padding "
                 "mask this graph does not build)", s->tk, v / 10000, v / 100 % 100, v % 100);
        return buf;
    }
    return "";
}

/* op_check.c holds each path to its bound against float64 (bf16 1.6e-2, fp16 2e-3 of the largest value); two
 * results that both pass may differ by twice that, so the check between them allows it. */
double attention_cudnn_tolerance(DType dt) { return dt == DT_BF16 ? 3.2e-2 : dt == DT_F16 ? 4e-3 : 2e-5; }
