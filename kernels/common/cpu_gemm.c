/* cpu_gemm.c: the CPU's instruction set from /proc/cpuinfo and cpuid, and the float32 GEMM on OpenBLAS or oneDNN
 * (cpu_gemm.h). The choice is made once, at the first call, and never changes within a process. */
#include <cblas.h>
#include <cpuid.h>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cpu_gemm.h"
#include "core/util.h"

static CpuIsa isa;
static int isa_known;

/* whether /proc/cpuinfo's flags line holds `flag` as a whole word */
static int has_flag(const char *flags, const char *flag) {
    const size_t n = strlen(flag);
    for (const char *p = flags; (p = strstr(p, flag)); p += n)
        if ((p == flags || p[-1] == ' ' || p[-1] == '\t') && (p[n] == ' ' || p[n] == '\n' || p[n] == 0)) return 1;
    return 0;
}

/* whether the comma list `list` holds `word` */
static int has_word(const char *list, const char *word) {
    const size_t n = strlen(word);
    for (const char *p = list; *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ','))
        if (strncmp(p, word, n) == 0 && (p[n] == ',' || p[n] == 0)) return 1;
    return 0;
}

const CpuIsa *cpu_isa(void) {
    if (isa_known) return &isa;
    snprintf(isa.model, sizeof isa.model, "unknown CPU");
    static char flags[4096];
    flags[0] = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[4096];
        int have_model = 0, have_flags = 0;
        while ((!have_model || !have_flags) && fgets(line, sizeof line, f)) {
            char *colon = strchr(line, ':');
            if (!colon) continue;
            if (!have_model && strncmp(line, "model name", 10) == 0) {
                colon += 1 + (colon[1] == ' ');
                colon[strcspn(colon, "\n")] = 0;
                snprintf(isa.model, sizeof isa.model, "%s", colon);
                have_model = 1;
            } else if (!have_flags && strncmp(line, "flags", 5) == 0) {
                snprintf(flags, sizeof flags, "%s", colon + 1);
                have_flags = 1;
            }
        }
        fclose(f);
    }
    /* cpuid is the truth for what runs (a VM's cpuinfo could list more than is enabled); cpuinfo adds BF16 and AMX,
     * which gcc 12's __builtin_cpu_supports does not all name */
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq"))
        isa.tier = ISA_AVX512;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) isa.tier = ISA_AVX2;
    else if (__builtin_cpu_supports("avx")) isa.tier = ISA_AVX;
    else isa.tier = ISA_SSE;
    /* BF16 and AMX: cpuid says the CPU has them (leaf 7: subleaf 1 EAX bit 5 AVX512-BF16; subleaf 0 EDX bits 22 and
     * 24 AMX-BF16 and AMX-TILE) and cpuinfo that the kernel lets them run (AMX's tile state needs its support) */
    unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0, a0 = 0, b0 = 0, c0 = 0, d0 = 0;
    const int leaf7 = __get_cpuid_count(7, 0, &a0, &b0, &c0, &d0);
    if (leaf7 && a0 >= 1) __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1);
    isa.avx512_bf16 = isa.tier == ISA_AVX512 && (a1 >> 5 & 1) && has_flag(flags, "avx512_bf16");
    isa.amx_bf16 = (d0 >> 22 & 1) && (d0 >> 24 & 1) && has_flag(flags, "amx_bf16") && has_flag(flags, "amx_tile");
    /* VX_CPU_HIDE=avx512_bf16,amx_bf16 (tests only): as if the CPU lacked them, so that the refusal of bf16 math on
     * such a CPU runs on a machine that has them */
    const char *hide = getenv("VX_CPU_HIDE");
    if (hide && has_word(hide, "avx512_bf16")) isa.avx512_bf16 = 0;
    if (hide && has_word(hide, "amx_bf16")) isa.amx_bf16 = 0;
    isa_known = 1;
    return &isa;
}

const char *cpu_tier_name(CpuVecTier t) {
    static const char *names[] = {"SSE", "AVX", "AVX2", "AVX-512"};
    return names[t];
}

void cpu_isa_describe(char *buf, size_t len) {
    const CpuIsa *c = cpu_isa();
    snprintf(buf, len, "%s%s%s", cpu_tier_name(c->tier), c->avx512_bf16 ? ", AVX512-BF16" : "",
             c->amx_bf16 ? ", AMX-BF16" : "");
}

CpuVecTier cpu_gemm_openblas_tier(const char *core) {
    static const char *avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
    static const char *avx2[] = {"Haswell", "Zen", "Excavator"};
    static const char *avx[] = {"Sandybridge", "Bulldozer", "Piledriver", "Steamroller"};
    for (size_t i = 0; i < sizeof avx512 / sizeof *avx512; i++)
        if (strcasecmp(core, avx512[i]) == 0) return ISA_AVX512;
    for (size_t i = 0; i < sizeof avx2 / sizeof *avx2; i++)
        if (strcasecmp(core, avx2[i]) == 0) return ISA_AVX2;
    for (size_t i = 0; i < sizeof avx / sizeof *avx; i++)
        if (strcasecmp(core, avx[i]) == 0) return ISA_AVX;
    return ISA_SSE; /* Prescott, Core2, Nehalem, Atom, Opteron, Barcelona, ...: SSE kernels */
}

static int use_onednn = -1; /* -1: not decided yet */
static char forced[16];

int cpu_gemm_uses_onednn(void) {
    if (use_onednn >= 0) return use_onednn;
    const char *e = getenv("VX_GEMM");
    if (e && *e) {
        if (strcmp(e, "openblas") != 0 && strcmp(e, "onednn") != 0)
            vx_usage_error("VX_GEMM must be openblas or onednn, not \"%s\"", e);
        snprintf(forced, sizeof forced, "%s", e);
        use_onednn = strcmp(e, "onednn") == 0;
        return use_onednn;
    }
    use_onednn = cpu_gemm_openblas_tier(openblas_get_corename()) < cpu_isa()->tier;
    return use_onednn;
}

void cpu_gemm_describe(char *buf, size_t len) {
    const int dn = cpu_gemm_uses_onednn();
    const char *core = openblas_get_corename();
    const CpuVecTier bt = cpu_gemm_openblas_tier(core), ct = cpu_isa()->tier;
    const dnnl_version_t *v = dnnl_version();
    /* "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...": its first two words */
    char ob[48];
    snprintf(ob, sizeof ob, "%s", openblas_get_config());
    char *sp = strchr(ob, ' ');
    if (sp && (sp = strchr(sp + 1, ' '))) *sp = 0;
    if (!dn) {
        snprintf(buf, len, "%s, %s kernels (%s)%s%s%s", ob, core, cpu_tier_name(bt), forced[0] ? ", VX_GEMM=" : "",
                 forced, bt < ct ? ": older than this CPU's " : "");
        if (bt < ct) snprintf(buf + strlen(buf), len - strlen(buf), "%s", cpu_tier_name(ct));
        return;
    }
    const char *isa_name = dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa());
    snprintf(buf, len, "oneDNN %d.%d.%d sgemm (%s)", v->major, v->minor, v->patch,
             strncmp(isa_name, "cpu_isa_", 8) == 0 ? isa_name + 8 : isa_name);
    if (forced[0]) snprintf(buf + strlen(buf), len - strlen(buf), ", VX_GEMM=%s", forced);
    else
        snprintf(buf + strlen(buf), len - strlen(buf), ": %s's %s kernels (%s) are older than this %s CPU", ob, core,
                 cpu_tier_name(bt), cpu_tier_name(ct));
}

const char *cpu_gemm_kernels(void) {
    static char buf[64];
    snprintf(buf, sizeof buf, "%s", cpu_gemm_uses_onednn() ? "oneDNN sgemm" : "OpenBLAS ");
    if (!cpu_gemm_uses_onednn()) snprintf(buf + 9, sizeof buf - 9, "%s", openblas_get_corename());
    return buf;
}

void cpu_sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda, const float *B, int ldb,
               float beta, float *C, int ldc) {
    if (cpu_gemm_uses_onednn()) {
        if (dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, A, lda, B, ldb, beta, C, ldc) != dnnl_success)
            vx_fatal("oneDNN's sgemm refused m=%d n=%d k=%d", m, n, k);
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, A, lda,
                B, ldb, beta, C, ldc);
}

void cpu_sgemv(int ta, int rows, int cols, float alpha, const float *A, int lda, const float *x, int incx, float beta,
               float *y) {
    if (cpu_gemm_uses_onednn()) {
        /* y as a one-column matrix: [out][1] = op(A) [out][in] x [in][1], x's rows incx apart */
        const int out = ta ? cols : rows, in = ta ? rows : cols;
        if (dnnl_sgemm(ta ? 'T' : 'N', 'N', out, 1, in, alpha, A, lda, x, incx, beta, y, 1) != dnnl_success)
            vx_fatal("oneDNN's sgemm refused a %dx%d matrix-vector product", rows, cols);
        return;
    }
    cblas_sgemv(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, rows, cols, alpha, A, lda, x, incx, beta, y, 1);
}

int cpu_gemm_serial_begin(void) {
    const int saved = openblas_get_num_threads();
    if (saved != 1) openblas_set_num_threads(1);
    return saved;
}
void cpu_gemm_serial_end(int saved) {
    if (saved != 1) openblas_set_num_threads(saved);
}
