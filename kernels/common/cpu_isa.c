/* cpu_isa.c: the CPU's instruction set from /proc/cpuinfo and cpuid, capped by VX_CPU_ISA (cpu_isa.h). Read once, at
 * the first call of any thread; oneDNN's maximum ISA is set in that same call, before anything of oneDNN has run (conv3d_dnnl.c and
 * cpu_gemm.c ask cpu_isa() before their first oneDNN call for that reason). */
#include <cblas.h>
#include <cpuid.h>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cpu_isa.h"
#include "core/util.h"

static CpuIsa isa;

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

/* VX_CPU_ISA's levels, lowest first, each with oneDNN's matching maximum */
enum { LEVEL_BELOW_AVX2, LEVEL_AVX2, LEVEL_AVX512, LEVEL_AVX512_BF16, LEVEL_AMX };
static const struct {
    const char *name;
    dnnl_cpu_isa_t onednn;
} levels[] = {
    [LEVEL_BELOW_AVX2] = {"", dnnl_cpu_isa_all},
    [LEVEL_AVX2] = {"avx2", dnnl_cpu_isa_avx2},
    [LEVEL_AVX512] = {"avx512", dnnl_cpu_isa_avx512_core},
    [LEVEL_AVX512_BF16] = {"avx512_bf16", dnnl_cpu_isa_avx512_core_bf16},
    [LEVEL_AMX] = {"amx", dnnl_cpu_isa_avx512_core_amx},
};

static int level_of(const CpuIsa *c) {
    if (c->tier < ISA_AVX2) return LEVEL_BELOW_AVX2;
    if (c->tier == ISA_AVX2) return LEVEL_AVX2;
    return c->amx_bf16 ? LEVEL_AMX : c->avx512_bf16 ? LEVEL_AVX512_BF16 : LEVEL_AVX512;
}

static void describe_into(const CpuIsa *c, char *buf, size_t len) {
    snprintf(buf, len, "%s%s%s", cpu_tier_name(c->tier), c->avx512_bf16 ? ", AVX512-BF16" : "",
             c->amx_bf16 ? ", AMX-BF16" : "");
}

static void detect(void) {
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
    const char *hide = getenv("VX_CPU_HIDE");
    if (hide && has_word(hide, "avx512_bf16")) isa.avx512_bf16 = 0;
    if (hide && has_word(hide, "amx_bf16")) isa.amx_bf16 = 0;
}

/* VX_CPU_ISA: lower the level to the one named, and oneDNN's maximum with it */
static void apply_cap(void) {
    const char *want = getenv("VX_CPU_ISA");
    if (!want || !*want || strcmp(want, "native") == 0) return;
    int cap = -1;
    for (int l = LEVEL_AVX2; l <= LEVEL_AMX; l++)
        if (strcmp(want, levels[l].name) == 0) cap = l;
    if (cap < 0) vx_usage_error("VX_CPU_ISA must be avx2, avx512, avx512_bf16, amx or native, not \"%s\"", want);
    char own[96];
    describe_into(&isa, own, sizeof own);
    const int have = level_of(&isa);
    if (cap > have)
        vx_usage_error("VX_CPU_ISA=%s asks for more than this CPU has (%s); unset it or name a lower level", want, own);
    if (cap == have) return; /* nothing lowered */
    if (cap < LEVEL_AVX512) isa.tier = ISA_AVX2;
    if (cap < LEVEL_AVX512_BF16) isa.avx512_bf16 = 0;
    if (cap < LEVEL_AMX) isa.amx_bf16 = 0;
    snprintf(isa.cap, sizeof isa.cap, "%s", want);
    snprintf(isa.full, sizeof isa.full, "%s", own);
    /* OpenBLAS chose its kernels when it was loaded, from the CPU (or OPENBLAS_CORETYPE): kernels above the cap would
     * leave every BLAS GEMM on the wider ISA while the rest claims the narrower one */
    const char *core = openblas_get_corename();
    if (cpu_gemm_openblas_tier(core) > isa.tier)
        vx_usage_error("VX_CPU_ISA=%s, but OpenBLAS loaded its %s kernels (%s): set OPENBLAS_CORETYPE=Haswell as well "
                       "(OpenBLAS picks its kernels when it loads, before VX_CPU_ISA is read)", want, core,
                       cpu_tier_name(cpu_gemm_openblas_tier(core)));
    if (dnnl_set_max_cpu_isa(levels[cap].onednn) != dnnl_success)
        vx_fatal("VX_CPU_ISA=%s: oneDNN refused the maximum ISA %s (it had already run)", want, levels[cap].name);
}

static void detect_once(void) {
    detect();
    apply_cap();
}

/* Once per process, whichever thread asks first: the first ask can come from inside an OpenMP region (a convolution's
 * chunks each calling the GEMM), and two threads both setting oneDNN's maximum ISA made the second fail. */
const CpuIsa *cpu_isa(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, detect_once);
    return &isa;
}

const char *cpu_tier_name(CpuVecTier t) {
    static const char *names[] = {"SSE", "AVX", "AVX2", "AVX-512"};
    return names[t];
}

void cpu_isa_describe(char *buf, size_t len) {
    const CpuIsa *c = cpu_isa();
    describe_into(c, buf, len);
    if (c->cap[0])
        snprintf(buf + strlen(buf), len - strlen(buf), " (VX_CPU_ISA=%s on a CPU with %s)", c->cap, c->full);
}

const char *cpu_isa_level(void) {
    const CpuIsa *c = cpu_isa();
    const int l = level_of(c);
    if (l != LEVEL_BELOW_AVX2) return levels[l].name;
    return c->tier == ISA_AVX ? "avx" : "sse";
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

const char *cpu_isa_onednn_name(void) {
    (void)cpu_isa(); /* VX_CPU_ISA's cap first: asking oneDNN fixes its maximum */
    const char *s = dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa()); /* "cpu_isa_avx512_core_bf16" */
    return strncmp(s, "cpu_isa_", 8) == 0 ? s + 8 : s;
}

int cpu_isa_bf16_runs(char *why, size_t why_len) {
    const CpuIsa *c = cpu_isa();
    if (!c->avx512_bf16 && !c->amx_bf16) {
        char d[256]; /* what cpu_isa_describe may write, the cap and the CPU's own levels */
        cpu_isa_describe(d, sizeof d);
        if (why) snprintf(why, why_len, "this CPU (%.80s: %.120s) has neither AVX512-BF16 nor AMX-BF16", c->model, d);
        return 0;
    }
    /* the kernels oneDNN generates: the CPU may have bf16 while DNNL_MAX_CPU_ISA holds oneDNN below it (then its bf16
     * kernels would be emulated, slower than float32) */
    const dnnl_cpu_isa_t e = dnnl_get_effective_cpu_isa();
    if ((e & dnnl_cpu_isa_avx512_core_bf16) != dnnl_cpu_isa_avx512_core_bf16) {
        if (why)
            snprintf(why, why_len, "oneDNN is limited to %s on this CPU (DNNL_MAX_CPU_ISA?), below its bf16 kernels",
                     cpu_isa_onednn_name());
        return 0;
    }
    return 1;
}

int cpu_isa_amx_runs(void) {
    const dnnl_cpu_isa_t e = dnnl_get_effective_cpu_isa();
    return cpu_isa()->amx_bf16 && (e & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx;
}
