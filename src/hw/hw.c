/* hw.c: CPU, RAM and GPU detection; the device and automatic batch size choice (see hw.h). */
#include "hw/hw.h"

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "conv3d/conv3d.h"
#include "core/util.h"
#include "graph/model.h"
#include "vx_cuda_archs.h"

#ifndef VX_CUDA
int hw_cuda_query(HwGpu *gpus, int max, char *reason, size_t reason_len) {
    (void)gpus;
    (void)max;
    snprintf(reason, reason_len, "this build has no CUDA (built with CUDA=0 or without nvcc and cuDNN)");
    return 0;
}
int hw_cuda_free_bytes(int device, size_t *free_bytes) {
    (void)device;
    (void)free_bytes;
    return 0;
}
#endif

static void read_cpu_model(char *out, size_t len) {
    snprintf(out, len, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *colon = strchr(line, ':');
            if (colon) {
                colon += 2;
                colon[strcspn(colon, "\n")] = 0;
                snprintf(out, len, "%s", colon);
            }
            break;
        }
    }
    fclose(f);
}

static size_t meminfo_kb(const char *key) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    size_t v = 0, klen = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            sscanf(line + klen + 1, "%zu", &v);
            break;
        }
    fclose(f);
    return v;
}

void hw_detect(HwInfo *hw) {
    memset(hw, 0, sizeof *hw);
    read_cpu_model(hw->cpu_model, sizeof hw->cpu_model);
    hw->cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    __builtin_cpu_init();
    hw->sse42 = __builtin_cpu_supports("sse4.2");
    hw->avx2 = __builtin_cpu_supports("avx2");
    hw->fma = __builtin_cpu_supports("fma");
    hw->avx512f = __builtin_cpu_supports("avx512f");
    struct sysinfo si;
    if (sysinfo(&si) == 0) hw->ram_total = (size_t)si.totalram * si.mem_unit;
    hw->ram_available = meminfo_kb("MemAvailable") * 1024;
    /* Test hook: VX_TEST_RAM_AVAILABLE_MIB=N plans as if N MiB were available, so that tests of the memory plan's
     * choices (dist.zero auto) do not depend on the machine's free memory at that moment */
    const char *ram = getenv("VX_TEST_RAM_AVAILABLE_MIB");
    if (ram && *ram) hw->ram_available = (size_t)strtoull(ram, NULL, 10) << 20;
#ifdef VX_CUDA
    hw->cuda_built = 1;
#endif
    hw->n_gpus = hw_cuda_query(hw->gpus, HW_MAX_GPUS, hw->gpu_reason, sizeof hw->gpu_reason);
    hw->gpu_device_files = hw_nvidia_device_files("/dev");
}

const char *hw_no_gpu(const HwInfo *hw) {
    /* CUDA's own words for a machine without NVIDIA GPUs (cudaErrorInsufficientDriver: no driver at all) read like a
     * broken driver: where /dev has no NVIDIA device they are kept for the full plan and detect, and it is said
     * plainly */
    if (hw->n_gpus > 0) return NULL;
    if (!hw->cuda_built) return "no GPU";  /* (gpu_reason says: this build has no CUDA) */
    return hw->gpu_device_files > 0 ? "no usable GPU" : "no GPU found";
}

int hw_nvidia_device_files(const char *dev_dir) {
    DIR *d = opendir(dev_dir);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        const char *p = e->d_name;
        if (strncmp(p, "nvidia", 6) != 0 || !p[6]) continue;
        p += 6;
        while (isdigit((unsigned char)*p)) p++;
        n += *p == '\0';
    }
    closedir(d);
    return n;
}

static int printed; /* hw_print said why there is no GPU: the plan's detail need not again */

void hw_print(const HwInfo *hw) {
    printed = 1;
    printf("cpu: %s, %d cores, features:%s%s%s%s\n", hw->cpu_model, hw->cores, hw->sse42 ? " sse4.2" : "",
           hw->avx2 ? " avx2" : "", hw->fma ? " fma" : "", hw->avx512f ? " avx512f" : "");
    printf("ram: %.1f GiB total, %.1f GiB available\n", hw->ram_total / 1073741824.0, hw->ram_available / 1073741824.0);
    char versions[200] = "";
#ifdef VX_CUDA
    hw_cuda_build_versions(versions, sizeof versions);
#endif
    printf("cuda: %s%s%s\n", hw->cuda_built ? "built in (" VX_CUDA_ARCHS ")" : "not built in",
           versions[0] ? "; built with " : "", versions);
    if (hw->n_gpus == 0) printf("gpus: %s (%s)\n", hw_no_gpu(hw), hw->gpu_reason);
    for (int i = 0; i < hw->n_gpus; i++) {
        const HwGpu *g = &hw->gpus[i];
        char free_s[48] = "free memory read when started";
        if (g->free_known) snprintf(free_s, sizeof free_s, "%.1f GiB free", g->free_bytes / 1073741824.0);
        printf("gpu %d: %s, %.1f GiB (%s), %d SMs, compute capability %d.%d\n", i, g->name,
               g->total_bytes / 1073741824.0, free_s, g->sms, g->cc_major, g->cc_minor);
    }
}

/* Starts the CUDA backend on GPU hw->gpu under the config's options and reads its free memory; 0 with a reason when it
 * cannot run. */
static int start_cuda(const TrainConfig *train, HwInfo *hw, char *reason, size_t reason_len) {
    if (hw->n_gpus == 0) {
        if (hw->gpu_device_files > 0 || !hw->cuda_built)
            snprintf(reason, reason_len, "%s: %s", hw_no_gpu(hw), hw->gpu_reason);
        else snprintf(reason, reason_len, "%s", hw_no_gpu(hw));
        if (!printed) vx_detail("gpus: %s (%s)\n", hw_no_gpu(hw), hw->gpu_reason);
        return 0;
    }
    BackendOptions o = {.deterministic = train->deterministic, .allow_tf32 = train->tf32};
    backend_cuda_set_options(&o);
    char why[160];
    if (hw->gpu >= hw->n_gpus) {
        snprintf(reason, reason_len, "GPU %d is asked for (local rank %d) but %d GPU(s) are visible", hw->gpu, hw->gpu,
                 hw->n_gpus);
        return 0;
    }
    const HwGpu *g = &hw->gpus[hw->gpu];
    if (!backend_cuda_init(hw->gpu, why, sizeof why)) {
        snprintf(reason, reason_len, "GPU %d (%.100s) cannot be used: %s", hw->gpu, g->name, why);
        return 0;
    }
    if (!hw_cuda_free_bytes(hw->gpu, &hw->gpus[hw->gpu].free_bytes)) {
        backend_cuda_shutdown();
        snprintf(reason, reason_len, "GPU %d (%.100s): its free memory could not be read", hw->gpu, g->name);
        return 0;
    }
    hw->gpus[hw->gpu].free_known = 1;
    return 1;
}

/* 1 when cuDNN can run every convolution direction the model needs (planning records why a direction has no
 * algorithm instead of exiting) and the model at the config's batch size (batch 1 when automatic) fits in
 * HW_MEMORY_SHARE of the GPU's free memory with activation checkpointing, the least the hardware plan can fall back
 * to (hw_plan.h: it switches checkpointing on only when the batch needs it). */
static int fits_on_gpu(const ModelConfig *model, const TrainConfig *train, const HwInfo *hw, char *reason,
                       size_t reason_len) {
    ModelOptions least = hw_model_options(train);
    least.checkpoint_activations = 1;
    Model *m = model_build(model, &least, train->batch_size > 0 ? train->batch_size : 1, backend_cuda());
    for (int i = 0; i < m->n_nodes; i++) {
        const Node *nd = &m->nodes[i];
        char why[2048];
        if (node_convolves(nd) && !conv3d_cuda_usable(&nd->conv, m->tensors[nd->in[0]].grad >= 0, why, sizeof why)) {
            snprintf(reason, reason_len, "cuDNN cannot run %s: %s", nd->name, why);
            model_free(m);
            return 0;
        }
    }
    size_t need = model_device_bytes(m), have = hw->gpus[hw->gpu].free_bytes;
    model_free(m);
    if ((double)need <= HW_MEMORY_SHARE * (double)have) return 1;
    snprintf(reason, reason_len, "too little GPU memory: the model needs %.2f GiB, %.0f%% of GPU %d's %.2f GiB free is %.2f GiB",
             need / 1073741824.0, 100 * HW_MEMORY_SHARE, hw->gpu, have / 1073741824.0,
             HW_MEMORY_SHARE * have / 1073741824.0);
    return 0;
}

const Backend *hw_choose_backend(const ModelConfig *model, const TrainConfig *train, HwInfo *hw, char *reason,
                                 size_t reason_len) {
    const char *dev = train->device;
    if (strcmp(dev, "cpu") == 0) {
        snprintf(reason, reason_len, "requested (device cpu)");
        return backend_cpu();
    }
    char why[2400];
    const int started = start_cuda(train, hw, why, sizeof why);
    const int cuda_ok = started && fits_on_gpu(model, train, hw, why, sizeof why);
    /* a CPU run must not keep the GPU's context, streams and scratch */
    if (started && !cuda_ok) backend_cuda_shutdown();
    if (strcmp(dev, "cuda") == 0) {
        if (!cuda_ok) vx_usage_error("--device cuda: %s; use --device cpu or auto", why);
        snprintf(reason, reason_len, "requested (device cuda): GPU %d, %s", hw->gpu, hw->gpus[hw->gpu].name);
        return backend_cuda();
    }
    if (!cuda_ok) {
        snprintf(reason, reason_len, "%s", why);
        /* a machine with GPUs that trains on the CPU is rarely what was meant: say so where it shows, on every rank */
        const int files = hw->gpu_device_files;
        if (hw->n_gpus > 0 || files > 0)
            vx_error_line("warning: this machine has %d NVIDIA GPU(s) but --device auto trains on the CPU: %s; "
                          "--device cuda makes this an error, ci/gpu/driver_check.py checks the driver and libraries",
                          hw->n_gpus > 0 ? hw->n_gpus : files, why);
        return backend_cpu();
    }
    snprintf(reason, reason_len, "automatic: GPU %d, %s", hw->gpu, hw->gpus[hw->gpu].name);
    return backend_cuda();
}

size_t hw_available_bytes(const HwInfo *hw, const Backend *be) {
    if (strcmp(be->name, "cuda") == 0 && hw->n_gpus > hw->gpu) return hw->gpus[hw->gpu].free_bytes;
    return hw->ram_available;
}

HwPlanDevice hw_plan_device(const HwInfo *hw, const Backend *be) {
    HwPlanDevice d = {.available = hw_available_bytes(hw, be), .cap = hw->cores < 2 ? 1 : hw->cores};
    if (strcmp(be->name, "cuda") == 0 && hw->n_gpus > hw->gpu) {
        const HwGpu *g = &hw->gpus[hw->gpu];
        d.gpu = 1, d.cc_major = g->cc_major, d.cc_minor = g->cc_minor, d.cap = HW_AUTO_BATCH_CAP_GPU;
        d.total = g->total_bytes;
    }
    return d;
}
