/* cpu_gemm.c: the float32 GEMM on OpenBLAS or oneDNN (cpu_gemm.h). The choice is made once, at the first call, and
 * never changes within a process. */
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cpu_gemm.h"
#include "core/util.h"

static int use_onednn;
static int amx; /* oneDNN runs AMX kernels here: its sgemm was measured faster (cpu_gemm.h) */
static char forced[16];
/* how many cpu_gemm_serial_begin sections the calling thread is in */
static _Thread_local int serial_depth;

/* oneDNN's sgemm on one thread where a serial section's caller runs it outside an active parallel region (none, or
 * one whose `if` was false): there oneDNN forks a team of its own, and an M=2 product (a DiT's timestep MLP or
 * adaLN) took 2-4 ms instead of 0.01-0.3 after a large parallel GEMM (2-core AVX-512 Xeon); 22 ms of a
 * vit3d-diffusion-64 step. Returns the team size to restore, 0 where nothing was changed. */
static int onednn_one_thread_begin(void) {
    if (serial_depth == 0 || omp_in_parallel()) return 0;
    const int team = omp_get_max_threads();
    omp_set_num_threads(1);
    return team;
}
static void onednn_one_thread_end(int team) {
    if (team) omp_set_num_threads(team);
}

static void decide(void) {
    (void)cpu_isa(); /* VX_CPU_ISA's cap reaches oneDNN before its first sgemm */
    const char *e = getenv("VX_GEMM");
    if (e && *e) {
        if (strcmp(e, "openblas") != 0 && strcmp(e, "onednn") != 0)
            vx_usage_error("VX_GEMM must be openblas or onednn, not \"%s\"", e);
        snprintf(forced, sizeof forced, "%s", e);
        use_onednn = strcmp(e, "onednn") == 0;
        return;
    }
    amx = cpu_isa_amx_runs();
    use_onednn = cpu_gemm_openblas_tier(openblas_get_corename()) < cpu_isa()->tier || amx;
}

/* decided once, by whichever thread asks first (the first GEMM may come from inside an OpenMP region) */
int cpu_gemm_uses_onednn(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, decide);
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
    snprintf(buf, len, "oneDNN %d.%d.%d sgemm (%s)", v->major, v->minor, v->patch, cpu_isa_onednn_name());
    if (forced[0]) snprintf(buf + strlen(buf), len - strlen(buf), ", VX_GEMM=%s", forced);
    else if (bt >= ct && amx)
        snprintf(buf + strlen(buf), len - strlen(buf), ": measured faster than %s's %s kernels on AMX Xeons", ob,
                 core);
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
        const int team = onednn_one_thread_begin();
        const dnnl_status_t st =
            dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
        onednn_one_thread_end(team);
        if (st != dnnl_success) vx_fatal("oneDNN's sgemm refused m=%d n=%d k=%d", m, n, k);
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, A, lda,
                B, ldb, beta, C, ldc);
}

void cpu_sgemv(int ta, int rows, int cols, float alpha, const float *A, int lda, const float *x, int incx, float beta,
               float *y) {
    if (cpu_gemm_uses_onednn()) {
        /* y as a one-column matrix: [out][1] = op(A) [out][in] x [in][1], x's rows incx apart */
        const int out = ta ? cols : rows, in = ta ? rows : cols, team = onednn_one_thread_begin();
        const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', 'N', out, 1, in, alpha, A, lda, x, incx, beta, y, 1);
        onednn_one_thread_end(team);
        if (st != dnnl_success) vx_fatal("oneDNN's sgemm refused a %dx%d matrix-vector product", rows, cols);
        return;
    }
    cblas_sgemv(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, rows, cols, alpha, A, lda, x, incx, beta, y, 1);
}

int cpu_gemm_serial_begin(void) {
    serial_depth++;
    const int saved = openblas_get_num_threads();
    if (saved != 1) openblas_set_num_threads(1);
    return saved;
}
void cpu_gemm_serial_end(int saved) {
    serial_depth--;
    if (saved != 1) openblas_set_num_threads(saved);
}
