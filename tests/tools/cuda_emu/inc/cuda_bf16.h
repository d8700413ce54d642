// inc/cuda_bf16.h: bfloat16 for the host emulation of run.sh: the storage type and the two conversions the
// kernels use, with dtype.h's round-to-nearest-even (what __float2bfloat16_rn does on the GPU).
#pragma once
#include <cstdint>
#include "common/dtype.h"
struct __nv_bfloat16 { uint16_t x; };
inline float __bfloat162float(__nv_bfloat16 v) { return dtype_bf16_to_f32(v.x); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16{dtype_f32_to_bf16(f)}; }
