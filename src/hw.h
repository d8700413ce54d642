/* hw.h: hardware detection and the device/batch choice `train` makes from it. */
#pragma once
#include <stddef.h>

#include "backend.h"
#include "config.h"

#define HW_MAX_GPUS 16

typedef struct {
    char name[256];
    size_t total_bytes, free_bytes;
    int sms, cc_major, cc_minor;
    int warp_size, max_threads_per_block;
    size_t shared_mem_per_block;
} HwGpu;

typedef struct {
    char cpu_model[256];
    int cores;
    int sse42, avx2, fma, avx512f;
    size_t ram_total, ram_available;
    int cuda_built;     /* compiled with nvcc and cuDNN */
    int n_gpus;
    HwGpu gpus[HW_MAX_GPUS];
    char gpu_reason[256]; /* why no GPU is usable, when n_gpus == 0 */
} HwInfo;

void hw_detect(HwInfo *hw);
void hw_print(const HwInfo *hw);
/* Picks the backend for cfg->device and says why in `reason`. Exits 2 if cuda is requested and impossible. */
const Backend *hw_choose_backend(const Config *cfg, const HwInfo *hw, char *reason, size_t reason_len);
/* Memory the chosen backend may use: free GPU memory, or available RAM. */
size_t hw_available_bytes(const HwInfo *hw, const Backend *be);
/* The largest micro-batch (power of two, <= cap) whose planned memory fits in 80% of `available`. */
int hw_auto_batch(const Config *cfg, const Backend *be, size_t available, int cap);

/* Implemented in hw_cuda.cu when built with CUDA: fills gpus, returns their count, or 0 with a reason. */
int hw_cuda_query(HwGpu *gpus, int max, char *reason, size_t reason_len);
