// inc/cuda_fp16.h: float16 for the host emulation of run.sh: the storage type and the two conversions the kernels
// use, with dtype.h's round-to-nearest-even (what __float2half_rn does on the GPU).
#pragma once
#include <cstdint>
#include "common/dtype.h"
struct __half { uint16_t x; };
inline float __half2float(__half v) { return dtype_f16_to_f32(v.x); }
inline __half __float2half_rn(float f) { return __half{dtype_f32_to_f16(f)}; }
