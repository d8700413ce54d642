/* gelu.h: GELU elementwise over `count` elements, as PyTorch's nn.GELU(approximate="tanh" | "none"):
 *   GELU_TANH  y = x * sigmoid(2u), u = sqrt(2/pi) * (x + 0.044715 x^3)   (= 0.5 x (1 + tanh u), the same function)
 *   GELU_ERF   y = 0.5 x (1 + erf(x / sqrt(2)))
 * backward: dx = [beta*dx +] dy * gelu'(x), from the forward's input x (nothing else is saved):
 *   tanh: s + x s (1 - s) 2 u'(x), s = sigmoid(2u), u' = sqrt(2/pi) (1 + 3*0.044715 x^2);  erf: Phi(x) + x phi(x)
 * x, y, dy, dx of shape.dtype (the CPU: float32, the reference; CUDA: every storage type, computed in float32).
 * The transformer's MLP runs it fused into its first GEMM (gemm.h's GELU epilogues, the same formulas); this op is
 * the stand-alone form and the reference those epilogues are checked against. */
#pragma once
#include "common/dtype.h"
#include "common/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { GELU_TANH = 0, GELU_ERF = 1 } GeluKind;

typedef struct {
    long count;
    int kind;    /* GeluKind */
    DType dtype; /* storage of x, y, dy, dx */
} GeluShape;

/* The op's sub-table (kernels/backend/ops.def): be->gelu->... */
enum { GELU_FORWARD, GELU_BACKWARD }; /* its functions, for supports() */
typedef struct GeluOps {
    OpHead head;
    void (*forward)(const GeluShape *s, const void *x, void *y);
    void (*backward)(const GeluShape *s, const void *x, const void *dy, void *dx, float beta);
} GeluOps;
extern const GeluOps gelu_ops_cpu;
extern const GeluOps gelu_ops_cuda; /* CUDA builds only */

#ifdef __cplusplus
}
#endif
