/* hw.c: CPU, RAM and GPU detection; the device and automatic batch size choice (see hw.h). */
#include "hw.h"

#include <stdio.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "model.h"
#include "util.h"

#ifndef VX_CUDA
int hw_cuda_query(HwGpu *gpus, int max, char *reason, size_t reason_len) {
    (void)gpus;
    (void)max;
    snprintf(reason, reason_len, "this build has no CUDA (built with CUDA=0 or without nvcc and cuDNN)");
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
#ifdef VX_CUDA
    hw->cuda_built = 1;
#endif
    hw->n_gpus = hw_cuda_query(hw->gpus, HW_MAX_GPUS, hw->gpu_reason, sizeof hw->gpu_reason);
}

void hw_print(const HwInfo *hw) {
    printf("cpu: %s, %d cores, features:%s%s%s%s\n", hw->cpu_model, hw->cores, hw->sse42 ? " sse4.2" : "",
           hw->avx2 ? " avx2" : "", hw->fma ? " fma" : "", hw->avx512f ? " avx512f" : "");
    printf("ram: %.1f GiB total, %.1f GiB available\n", hw->ram_total / 1073741824.0, hw->ram_available / 1073741824.0);
    printf("cuda: %s\n", hw->cuda_built ? "built in (sm_80, sm_90, PTX)" : "not built in");
    if (hw->n_gpus == 0) printf("gpus: none usable: %s\n", hw->gpu_reason);
    for (int i = 0; i < hw->n_gpus; i++) {
        const HwGpu *g = &hw->gpus[i];
        printf("gpu %d: %s, %.1f GiB (%.1f GiB free), %d SMs, compute capability %d.%d\n", i, g->name,
               g->total_bytes / 1073741824.0, g->free_bytes / 1073741824.0, g->sms, g->cc_major, g->cc_minor);
    }
}

const Backend *hw_choose_backend(const Config *cfg, const HwInfo *hw, char *reason, size_t reason_len) {
    const char *dev = cfg->device;
    if (strcmp(dev, "cpu") == 0) {
        snprintf(reason, reason_len, "requested (device cpu)");
        return backend_cpu();
    }
    /* The CUDA backend lands with its own issue; until then a visible GPU still trains on the CPU. */
    if (strcmp(dev, "cuda") == 0) {
        if (hw->n_gpus == 0) vx_usage_error("--device cuda: no usable GPU (%s); use --device cpu or auto", hw->gpu_reason);
        vx_usage_error("--device cuda: this build has no CUDA backend yet; use --device cpu or auto");
    }
    if (hw->n_gpus == 0) snprintf(reason, reason_len, "no usable GPU: %s", hw->gpu_reason);
    else snprintf(reason, reason_len, "%d GPU(s) found, but this build has no CUDA training backend yet", hw->n_gpus);
    return backend_cpu();
}

size_t hw_available_bytes(const HwInfo *hw, const Backend *be) {
    if (strcmp(be->name, "cuda") == 0 && hw->n_gpus > 0) return hw->gpus[0].free_bytes;
    return hw->ram_available;
}

int hw_auto_batch(const Config *cfg, const Backend *be, size_t available, int cap) {
    int best = 0;
    for (int b = 1; b <= cap; b *= 2) {
        Model *m = model_build(cfg, b, be);
        size_t need = model_device_bytes(m);
        model_free(m);
        if ((double)need > 0.8 * (double)available) break;
        best = b;
    }
    if (best == 0)
        vx_usage_error("even batch size 1 needs more than 80%% of the %.1f GiB available; lower model.input_size or "
                       "model.channels", available / 1073741824.0);
    return best;
}
