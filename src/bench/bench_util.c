/* bench_util.c: what every benchmark shares: medians, the BLAS sgemm ceiling, the results/<device>/ folder name
 * and the commit the figures belong to. */
#include "bench/bench_util.h"

#include <cJSON.h>
#include <omp.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cpu_gemm.h"
#include "common/cpu_isa.h"
#include "core/build_version.h"
#include "core/fsutil.h"
#include "core/outguard.h"
#include "core/util.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Median GFLOP/s of C[m][n] = A[m][k] B[k][n]^T over a few repetitions after one warm-up. */
double bench_sgemm_gflops(int m, int n, int k) {
    float *A = vx_malloc((size_t)m * k * sizeof(float)), *B = vx_malloc((size_t)n * k * sizeof(float));
    float *C = vx_malloc((size_t)m * n * sizeof(float));
    for (long i = 0; i < (long)m * k; i++) A[i] = (float)((i * 7 % 13) - 6) * 0.01f;
    for (long i = 0; i < (long)n * k; i++) B[i] = (float)((i * 5 % 11) - 5) * 0.01f;
    double t[5];
    for (int r = -1; r < 5; r++) {
        double t0 = vx_now();
        cpu_sgemm(0, 1, m, n, k, 1.0f, A, k, B, k, 0.0f, C, n);
        if (r >= 0) t[r] = vx_now() - t0;
    }
    free(A);
    free(B);
    free(C);
    return 2.0 * m * n * k / bench_median(t, 5) * 1e-9;
}

/* "Intel(R) Xeon(R) Processor" -> "intel-xeon-processor": the folding of a results/ folder name. */
void bench_slugify(const char *name, char *out, size_t len) {
    char raw[300], *o = out;
    snprintf(raw, sizeof raw, "%s", name); /* name may be out itself */
    int dash = 0;
    for (const char *p = raw; *p && (size_t)(o - out) < len - 1; p++) {
        if (strncmp(p, "(R)", 3) == 0 || strncmp(p, "(TM)", 4) == 0) {
            p += p[2] == ')' ? 2 : 3;
            continue;
        }
        if (isalnum((unsigned char)*p)) {
            *o++ = (char)tolower((unsigned char)*p);
            dash = 0;
        } else if (!dash && o != out) {
            *o++ = '-';
            dash = 1;
        }
    }
    if (o > out && o[-1] == '-') o--;
    *o = 0;
}

/* A CPU's folder carries the ISA level the kernels dispatched at ("cpu-amd-epyc-avx512-bf16-2c"): one VM name came on
 * hosts with AVX2 and with AVX-512 BF16, whose figures differ 2x and must not share a folder (or a baseline); under
 * VX_CPU_ISA the capped level, since that is what ran. */
void bench_cpu_slug(const HwInfo *hw, char *out, size_t len) {
    char raw[300];
    snprintf(raw, sizeof raw, "cpu-%s-%s-%dc", hw->cpu_model, cpu_isa_level(), hw->cores);
    bench_slugify(raw, out, len);
}

void bench_device_slug(const Runtime *rt, char *out, size_t len) {
    if (strcmp(rt->be->name, "cpu") == 0) bench_cpu_slug(&rt->hw, out, len);
    else bench_slugify(rt->hw.n_gpus ? rt->hw.gpus[0].name : "gpu", out, len);
}

void bench_cpu_isa(char *out, size_t len) {
    char isa[160], gemm[256];
    cpu_isa_describe(isa, sizeof isa);
    cpu_gemm_describe(gemm, sizeof gemm);
    snprintf(out, len, "%s; GEMM: %s", isa, gemm);
}

void bench_isa(const Runtime *rt, char *out, size_t len) {
    if (strcmp(rt->be->name, "cpu") == 0) bench_cpu_isa(out, len);
    else out[0] = 0;
}

void bench_config_stem(const char *config_path, char *out, size_t len) {
    const char *base = strrchr(config_path, '/') ? strrchr(config_path, '/') + 1 : config_path;
    snprintf(out, len, "%s", base);
    if (strrchr(out, '.')) *strrchr(out, '.') = 0;
}

/* The commit the results belong to: VX_COMMIT when set (ci/gpu.sh sets it on a GPU machine, whose copy of the tree
 * has no .git), else the commit this binary was built from (build_version: "-dirty" when its tree had changes). Not
 * the checkout's HEAD: a parent's build run from this tree (bench/alternate.py --base), or a build from uncommitted
 * changes, would otherwise be filed under a commit that did not produce it. */
void bench_build_commit(char *out, size_t len) {
    const char *env = getenv("VX_COMMIT");
    snprintf(out, len, "%s", env && env[0] ? env : build_version());
}

void bench_results_dir(const Runtime *rt, const char *results_root, char *out, size_t len) {
    char slug[160];
    bench_device_slug(rt, slug, sizeof slug);
    snprintf(out, len, "%s/%s", results_root ? results_root : "results", slug);
    fs_mkdirs(out);
}

void bench_claim_result(const char *dir, const char *name, int overwrite) {
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    out_claim(path, overwrite, "bench --results");
}

void bench_write_text(const char *dir, const char *name, const char *text, size_t len, int overwrite) {
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    out_write(path, text, len, overwrite, "bench --results");
}

void bench_write_json(const char *dir, const char *name, cJSON *j, int overwrite) {
    char *text = cJSON_Print(j);
    VX_CHECK(text != NULL, "out of memory printing %s", name);
    bench_write_text(dir, name, text, strlen(text), overwrite);
    free(text);
    cJSON_Delete(j);
}

void bench_parallel_copy(void *dst, const void *src, size_t bytes) {
#pragma omp parallel
    {
        const int nt = omp_get_num_threads(), t = omp_get_thread_num();
        const size_t chunk = (bytes / (size_t)nt + 63) & ~(size_t)63, lo = chunk * (size_t)t;
        if (lo < bytes) memcpy((char *)dst + lo, (const char *)src + lo, lo + chunk > bytes ? bytes - lo : chunk);
    }
}

void bench_log_tail(const char *path, size_t most, char *out, size_t len) {
    size_t n = 0;
    char *text = fs_read_file(path, 1 << 20, &n);
    snprintf(out, len, "%s", text ? text + (n > most ? n - most : 0) : "(its log is unreadable)");
    free(text);
}

double bench_load_average(void) {
    double v = NAN;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f && fscanf(f, "%lf", &v) != 1) v = NAN;
    if (f) fclose(f);
    return v;
}
