/* hw.h: hardware detection and the device/batch choice `train` makes from it. */
#pragma once
#include <stddef.h>

#include "backend/backend.h"
#include "core/config_model.h"
#include "core/config_train.h"
#include "hw/hw_plan.h"

#define HW_MAX_GPUS 16

typedef struct {
    char name[256];
    size_t total_bytes;
    size_t free_bytes; /* valid when free_known: read only for the GPU the backend started on (needs a context) */
    int free_known;
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
    int gpu; /* the GPU this process trains on (its local rank in a data-parallel run; set before choosing) */
    char gpu_reason[256]; /* why no GPU is usable, when n_gpus == 0 */
    int gpu_device_files; /* NVIDIA device files in /dev (hw_nvidia_device_files): GPUs whatever CUDA says */
} HwInfo;

void hw_detect(HwInfo *hw);
/* NVIDIA GPU device files in dev_dir ("/dev": nvidia0, nvidia1, ...; not nvidiactl or nvidia-uvm): whether the
 * machine has GPUs whatever CUDA says of them (a driver older than the build's CUDA makes CUDA report none). */
int hw_nvidia_device_files(const char *dev_dir);
void hw_print(const HwInfo *hw);
/* Why there is no GPU, in plain words: "no GPU found" (no NVIDIA device in /dev: CUDA's error there, e.g.
 * cudaErrorInsufficientDriver, means no driver, not a broken one), "no usable GPU" (devices CUDA cannot use: the
 * driver, say), "no GPU" (a build without CUDA: gpu_reason says so); NULL when there are GPUs. hw->gpu_reason has CUDA's words. */
const char *hw_no_gpu(const HwInfo *hw);
/* Picks the backend for train->device (a GPU only where the model section's model fits there) and says why in
 * `reason`. Exits 2 if cuda is requested and impossible. The CUDA backend starts on GPU hw->gpu and fills in its free
 * memory. */
const Backend *hw_choose_backend(const ModelConfig *model, const TrainConfig *train, HwInfo *hw, char *reason,
                                 size_t reason_len);
/* Memory the chosen backend may use: free GPU memory, or available RAM. */
size_t hw_available_bytes(const HwInfo *hw, const Backend *be);
/* The share of free memory a model may plan for: the rest is left to cuDNN, the CUDA context's growth and the
 * allocator's rounding. The device choice and the automatic batch size use the same share, so a device that is
 * chosen always has batch size 1 fit. */
#define HW_MEMORY_SHARE 0.8
#define HW_AUTO_BATCH_CAP_GPU 64
/* What the hardware plan (hw_plan.h) knows of the device be runs on: GPU or CPU, compute capability, the memory it
 * may plan against, and the largest automatic batch (the CPU's core count: more only adds latency; 64 on a GPU). */
HwPlanDevice hw_plan_device(const HwInfo *hw, const Backend *be);

/* Implemented in hw_cuda.cu when built with CUDA: fills gpus from their properties (no CUDA context is created),
 * returns their count, or 0 with a reason. */
int hw_cuda_query(HwGpu *gpus, int max, char *reason, size_t reason_len);
/* The versions of the CUDA libraries this build was compiled against, one line ("CUDA runtime 13.0, cuDNN 9.13.0,
 * NCCL 2.28.9, cuBLAS 13.1.0, CUPTI API 130001"): what `detect` prints and ci/gpu.sh's driver check compares the GPU
 * machine's libraries with. CUDA builds only. */
void hw_cuda_build_versions(char *out, size_t len);
/* The versions this process runs with (a GPU machine's may differ from the build's): the driver's CUDA ("none found"
 * without one), the CUDA runtime, the loaded cuDNN and NCCL. CUDA builds only. */
void hw_cuda_loaded_versions(char *out, size_t len);
/* Free memory on `device` (creates or reuses its context); 0 when it cannot be read. */
int hw_cuda_free_bytes(int device, size_t *free_bytes);
