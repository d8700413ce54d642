/* kernels.c: `voxscale bench kernels`: every op the config's model calls, at each of its shapes (kernel_cases.c),
 * first checked against a float64 reference, then timed and rated against ceilings measured in the same run.
 *
 *   check   one call on fresh inputs; each output buffer's max|got - ref| / max|ref| must be within the op's
 *           tolerance (convolutions under TF32 on a GPU: 1e-2, TF32's 10-bit mantissa); a failure is reported,
 *           the op is still timed, and the command exits 1 after writing the report.
 *   time    two warm-up calls, then as many timed calls as fit the budget (5 at least), each on the next of R
 *           copies of the buffers, R chosen so that the copies together exceed 4x the last-level cache and 128 MiB
 *           (CPU: /sys's largest cache, which a VM may understate; GPU: L2): the op reads from memory, as in training, not from cache. Each call is
 *           timed alone (CUDA events on the compute stream, the wall clock on the CPU); median, min and p90.
 *   rate    convolutions, GEMMs and attention in GFLOP/s against the GEMM ceiling (BLAS sgemm 2048^3 / cuBLAS
 *           SGEMM 8192^3, TF32 as the run allows); every other op in GB/s of bytes read + written against the copy ceiling (a parallel
 *           memcpy of 256 MiB / a device-to-device cudaMemcpy of 512 MiB, counted the same way). Ceilings are
 *           measured before and after the ops, and the better of each kept.
 *
 *   gate    for ci/regress, each case is also rated against a short probe of its ceiling run right before and
 *           after it (CPU; see probe_rate), at its median call. (Not the fastest call: on the VM a 3 MiB op's
 *           fastest of 200 calls ran 3.3x faster than its median, an outlier no later run need repeat.)
 *
 * attention  besides the model's own shapes, issue 21's reference shapes (--attention-tokens; 512 and 4096 tokens by
 *           default for a model that calls attention, 32768 when asked): self-attention, batch 1, one head, head dim
 *           64, rows "b1 h1 TxT d64". FLOPs in FlashAttention's accounting: forward 4 b h tq tk d (two products,
 *           Q K^T and P V), backward 2.5x that, 10 b h tq tk d (five products: the scores recomputed, dV, dP, dK,
 *           dQ), whatever the kernel really does (attention_spec.c). The check is op_check.c's as for any
 *           compute-bound op: about 1500 sampled output elements, each of its query's (or key's) row computed in
 *           float64 against every key, at the timed shape itself (32768 included: about 1500 rows x 32768 keys,
 *           seconds). The backward's o and lse at 4096 tokens and above are not the forward's (att_fill: too large
 *           to compute in double there), which the check does not need: reference and op read the same inputs.
 *           attention_step is the pair as a model's step runs it: the forward keeping what the backend saves
 *           (the CPU's probabilities, while one tile of keys fits), the backward reading it; counted as computed,
 *           12 b h tq tk d where saved, 14 where not. Its check computes every row's forward in double, so it is
 *           left out of reference shapes above 2e9 b h tq tk d (32768 tokens).
 *           On a GPU the rows name the path the timed calls ran ("cudnn": cuDNN's fused attention, "own": the own
 *           kernel; VX_ATTN_CUDA picks, attention_cudnn.cu), in the log line, the JSON ("path") and the table.
 *
 * Test-only hooks (tests/integration/test_bench_kernels.py): VX_TEST_WRONG_OP=name corrupts that op's first
 * output element before the check, so the check must fail; VX_TEST_SLOW_OP=name[:factor] calls that op `factor`
 * times (default 3) per timed call, so the regression gate (ci/regress) must fail. */
#include <cblas.h>
#include <cJSON.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench/bench.h"
#include "bench/bench_util.h"
#include "bench/case_arena.h"
#include "bench/kernel_cases.h"
#include "bench/kernel_count.h"
#include "backend/op_check.h"
#include "common/cpu_gemm.h"
#include "core/fsutil.h"
#include "core/stop_signal.h"
#include "core/progress.h"
#include "core/util.h"
#include "train/runtime.h"

#ifndef VX_CUDA
double bench_cuda_copy_gbps(size_t bytes) {
    (void)bytes;
    vx_fatal("bench_cuda_copy_gbps called in a build without CUDA");
}
size_t bench_cuda_l2_bytes(void) { return 0; }
#endif

typedef struct {
    double gemm_gflops, copy_gbps;
    char gemm_what[128], copy_what[128];
    size_t cache_bytes;
} Ceilings;

/* The largest cache /sys lists for cpu0 (the last level), or 32 MiB when it cannot be read. */
static size_t cpu_cache_bytes(void) {
    size_t best = 0;
    for (int i = 0; i < 8; i++) {
        char path[96], text[32];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (fgets(text, sizeof text, f)) {
            char *end;
            double v = strtod(text, &end);
            const size_t b = (size_t)(v * (*end == 'M' ? 1048576 : *end == 'K' ? 1024 : 1));
            if (b > best) best = b;
        }
        fclose(f);
    }
    return best ? best : (size_t)32 << 20;
}

/* memcpy of `bytes` split over the OpenMP threads, fastest of 5 after one warm-up, GB/s of bytes read + written. */
static double cpu_copy_gbps(size_t bytes) {
    char *a = vx_malloc(bytes), *b = vx_malloc(bytes);
    memset(a, 1, bytes), memset(b, 2, bytes);
    double best = 1e30;
    for (int r = -1; r < 5; r++) {
        const double t0 = vx_now();
        bench_parallel_copy(b, a, bytes);
        const double t = vx_now() - t0;
        if (r >= 0 && t < best) best = t;
    }
    free(a), free(b);
    return 2.0 * (double)bytes / best * 1e-9;
}

/* The ceiling probed again right before and after each case, for the regression gate: on a shared VM the
 * machine's speed moved 2x within one run (the GEMM ceiling 31 then 70 GFLOP/s, measured), so a case is compared
 * with a ceiling measured next to it, not minutes away. CPU only: a short BLAS sgemm (384^3, about 2 ms) or a
 * parallel memcpy of 64 MiB, best of 3. A GPU is not shared that way: 0 there, and the run's ceilings serve. */
typedef struct {
    float *a, *b, *c;
    char *src, *dst;
} Probe;
enum { PROBE_N = 384 };
static const size_t PROBE_BYTES = (size_t)64 << 20;

static Probe probe_open(void) {
    Probe p;
    p.a = vx_malloc((size_t)PROBE_N * PROBE_N * sizeof(float));
    p.b = vx_malloc((size_t)PROBE_N * PROBE_N * sizeof(float));
    p.c = vx_malloc((size_t)PROBE_N * PROBE_N * sizeof(float));
    for (long i = 0; i < (long)PROBE_N * PROBE_N; i++) p.a[i] = p.b[i] = (float)(i % 7) * 0.1f;
    p.src = vx_malloc(PROBE_BYTES), p.dst = vx_malloc(PROBE_BYTES);
    memset(p.src, 1, PROBE_BYTES), memset(p.dst, 2, PROBE_BYTES);
    return p;
}
static void probe_close(Probe *p) { free(p->a), free(p->b), free(p->c), free(p->src), free(p->dst); }

static double probe_rate(Probe *p, int compute) {
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        const double t0 = vx_now();
        if (compute) {
            cpu_sgemm(0, 1, PROBE_N, PROBE_N, PROBE_N, 1.0f, p->a, PROBE_N, p->b, PROBE_N, 0.0f, p->c, PROBE_N);
        } else {
            bench_parallel_copy(p->dst, p->src, PROBE_BYTES);
        }
        const double t = vx_now() - t0;
        if (t < best) best = t;
    }
    return compute ? 2.0 * PROBE_N * PROBE_N * PROBE_N / best * 1e-9 : 2.0 * (double)PROBE_BYTES / best * 1e-9;
}

/* tf32: train.tf32 */
static Ceilings measure_ceilings(const Runtime *rt, int tf32) {
    Ceilings c = {0};
    if (strcmp(rt->be->name, "cuda") == 0) {
        c.gemm_gflops = bench_cublas_sgemm_gflops(8192, tf32);
        snprintf(c.gemm_what, sizeof c.gemm_what, "cuBLAS SGEMM 8192^3 (%s)", tf32 ? "TF32" : "FP32");
        c.copy_gbps = bench_cuda_copy_gbps((size_t)512 << 20);
        snprintf(c.copy_what, sizeof c.copy_what, "device-to-device cudaMemcpy of 512 MiB (read + write)");
        c.cache_bytes = bench_cuda_l2_bytes();
    } else {
        c.gemm_gflops = bench_sgemm_gflops(2048, 2048, 2048);
        snprintf(c.gemm_what, sizeof c.gemm_what, "%s sgemm 2048^3, same threads", cpu_gemm_uses_onednn() ? "oneDNN" : "BLAS");
        c.copy_gbps = cpu_copy_gbps((size_t)256 << 20);
        snprintf(c.copy_what, sizeof c.copy_what, "memcpy of 256 MiB over the OpenMP threads (read + write)");
        c.cache_bytes = cpu_cache_bytes();
    }
    return c;
}

/* VX_TEST_SLOW_OP / VX_TEST_WRONG_OP name this op? (slow: the factor, else 1) */
static int test_slow_factor(const char *op) {
    const char *e = getenv("VX_TEST_SLOW_OP");
    if (!e || !*e) return 1;
    const size_t n = strcspn(e, ":");
    if (strlen(op) != n || strncmp(e, op, n) != 0) return 1;
    const int f = e[n] == ':' ? atoi(e + n + 1) : 3;
    return f > 1 ? f : 1;
}
static int test_wrong(const char *op) {
    const char *e = getenv("VX_TEST_WRONG_OP");
    return e && strcmp(e, op) == 0;
}

typedef struct {
    double err;     /* the worst output buffer's relative error */
    double tol;
    int ok;
    char detail[200];
    double med, min, p90; /* seconds */
    int reps, copies;
    double rate, fraction; /* GFLOP/s or GB/s at the median time, and of the ceiling */
    double fraction_best;  /* the same at the fastest call (load only ever slows a call) */
    double local_ceiling;  /* the probe next to the case (CPU; 0 on a GPU) */
    double local_fraction;      /* the median call against it: what ci/regress compares */
    char path[16];              /* the implementation the timed calls ran, where the op has several ("" else) */
} CaseResult;

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void time_case(const Backend *be, const KernelOp *op, const KernelCase *k, void *const *const *sets,
                      int copies, void *ws, double budget_s, int max_reps, CaseResult *r) {
    const int slow = test_slow_factor(op->name);
    const OpHead *table = kernel_op_table(be, k->op);
    double first = 0;
    for (int w = 0; w < 3; w++) { /* two warm-ups; the third call estimates the time */
        be->timer_mark(0);
        for (int f = 0; f < slow; f++) op->run(table, k, sets[w % copies], ws);
        be->timer_mark(1);
        first = be->timer_elapsed_ms(0, 1) * 1e-3;
    }
    int reps = first > 0 ? (int)(budget_s / first) : max_reps;
    reps = reps < 5 ? 5 : reps > max_reps ? max_reps : reps;
    double *t = vx_malloc((size_t)reps * sizeof *t);
    for (int i = 0; i < reps; i++) {
        be->timer_mark(0);
        for (int f = 0; f < slow; f++) op->run(table, k, sets[(i + 1) % copies], ws);
        be->timer_mark(1);
        t[i] = be->timer_elapsed_ms(0, 1) * 1e-3;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_d);
    r->reps = reps, r->copies = copies;
    r->min = t[0], r->med = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
    r->p90 = t[(int)(0.9 * (reps - 1))];
    free(t);
}

/* "a,b,c" -> flags per op; an unknown name is a usage error listing the names. */
static void select_ops(const char *list, int *want, int n_ops, const KernelOp *ops) {
    for (int i = 0; i < n_ops; i++) want[i] = list == NULL;
    if (!list) return;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        const int i = kernel_op_find(tok);
        if (i < 0) {
            char names[4096] = "";
            for (int j = 0; j < n_ops; j++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", j ? ", " : "", ops[j].name);
            vx_usage_error("bench kernels: --ops names \"%s\", which is not an op; choose from %s", tok, names);
        }
        want[i] = 1;
    }
}

/* --attention-tokens "T,T,...": the counts into t[] (at most max); "0" alone: none; NULL: -1, the model's default
 * (attention_default). A bad list is a usage error, before anything starts. */
static int attention_tokens(const char *list, int *t, int max) {
    if (!list) return -1;
    if (strcmp(list, "0") == 0) return 0;
    int n = 0;
    for (const char *p = list;;) {
        char *end;
        const long v = strtol(p, &end, 10);
        if (end == p || (*end != ',' && *end != 0) || v < 1 || v > 131072 || n == max)
            vx_usage_error("bench kernels: --attention-tokens %s: expected up to %d token counts 1..131072 separated "
                           "by commas (e.g. 512,4096,32768), or 0 for none", list, max);
        t[n++] = (int)v;
        if (*end == 0) break;
        p = end + 1;
    }
    return n;
}
/* 512 and 4096 tokens when the model calls attention, else none */
static int attention_default(const Model *m, int *t) {
    for (int i = 0; i < m->n_nodes; i++)
        if (m->nodes[i].kind == OP_ATTENTION) {
            t[0] = 512, t[1] = 4096;
            return 2;
        }
    return 0;
}

/* Every case buffer from 256 KiB up gets pages of its own (mmap) at the same offset within its page, whatever was
 * allocated before: glibc's threshold otherwise moves with the heap's history (it rises after each large free), so
 * two builds that allocate differently (ci/regress's this-vs-parent pairs) placed the same case's input and output
 * at different distances modulo 4 KiB, and a memory-bound op (upsample2x_forward 1.53x, accumulate 1.29x, equal
 * instruction counts) timed slower in one build in every pair. Fixing the threshold also stops its adjustment. */
static void page_aligned_case_buffers(void) { mallopt(M_MMAP_THRESHOLD, 256 * 1024); }

int bench_kernels(Config *cfg, const BenchKernelsOptions *o) {
    page_aligned_case_buffers();
    const double budget_s = (o->budget_ms > 0 ? o->budget_ms : 200) * 1e-3;
    const int max_reps = o->max_reps > 0 ? o->max_reps : 200;
    int n_ops;
    const KernelOp *ops = kernel_ops(&n_ops);
    int *want = vx_calloc((size_t)n_ops, sizeof *want); /* (the table has outgrown any fixed bound: 71 ops) */
    select_ops(o->ops, want, n_ops, ops); /* a bad --ops is refused before anything starts */
    int tokens[8];
    int n_tokens = attention_tokens(o->attention_tokens, tokens, 8); /* and a bad --attention-tokens */
    Runtime rt;
    runtime_open(&rt, &cfg->model, &cfg->train, 1);
    char slug[160], commit[64], stem[128], dir[512], path[1024];
    bench_device_slug(&rt, slug, sizeof slug);
    bench_config_stem(o->config_path, stem, sizeof stem);
    snprintf(dir, sizeof dir, "%s/%s", o->results_dir ? o->results_dir : "results", slug);
    for (int k = 0; k < 2; k++) { /* refused before the cases are checked and timed, not after */
        snprintf(path, sizeof path, "kernels_%s.%s", stem, k ? "md" : "json");
        bench_claim_result(dir, path, o->overwrite);
    }
    const Backend *be = rt.be;
    const int gpu = strcmp(be->name, "cuda") == 0;
    KernelCase *cases;
    int n_all = kernel_cases_of_model(rt.model, be, &cases);
    if (n_tokens < 0) n_tokens = attention_default(rt.model, tokens);
    n_all = kernel_cases_add_attention(&cases, n_all, be, tokens, n_tokens, rt.model->dtype);
    if (bench_kernels_count_mode()) { /* ci/regress's instruction counts: no check, ceiling or timing */
        bench_kernels_count(be, cases, n_all, want);
        free(want);
        free(cases);
        runtime_close(&rt);
        return 0;
    }
    Ceilings ceil = measure_ceilings(&rt, cfg->train.tf32);
    vx_log("ceilings: %s %.1f GFLOP/s; %s %.1f GB/s; cache %.1f MiB\n", ceil.gemm_what, ceil.gemm_gflops,
           ceil.copy_what, ceil.copy_gbps, ceil.cache_bytes / 1048576.0);

    Probe probe = {0};
    if (!gpu) probe = probe_open();
    const size_t copies_cap = (size_t)1 << 30; /* the copies of a case's buffers together stay under 1 GiB */
    enum { MAX_COPIES = 256 };
    CaseArena arena = {0}; /* the CPU's copies, mapped once (case_arena.c says why) */
    if (!gpu) case_arena_open(&arena, copies_cap, MAX_COPIES * KOP_MAX_BUFS, be->alloc, be->release);
    CaseResult *res = calloc((size_t)n_all, sizeof *res);
    VX_CHECK(res != NULL, "out of memory");
    int n_run = 0, n_failed = 0, n_want = 0;
    for (int c = 0; c < n_all; c++) n_want += want[cases[c].op] != 0;
    Progress prog; /* (the cases' lines come as each ends; this one says how far the whole is) */
    progress_begin(&prog, "bench kernels", n_want, "cases");
    stop_signal_catch(1); /* SIGINT/SIGTERM: exit 130 before the next case, nothing written */
    for (int c = 0; c < n_all; c++) {
        stop_signal_honour("bench kernels", "no result was written");
        const KernelCase *k = &cases[c];
        const KernelOp *op = &ops[k->op];
        if (!want[k->op]) continue;
        n_run++;
        size_t set_bytes = 0;
        for (int b = 0; b < k->nbuf; b++) set_bytes += kernel_case_bytes(k, b);
        /* at least 128 MiB: a VM's /sys may show less cache than the host's last level really has (the 2-core
         * EPYC VM lists 8 MiB, yet ops on 36 MiB of copies there still ran above memcpy's rate) */
        const size_t target = 4 * ceil.cache_bytes > ((size_t)128 << 20) ? 4 * ceil.cache_bytes : (size_t)128 << 20;
        int copies = (int)((target + set_bytes - 1) / set_bytes) + 1;
        if (copies > MAX_COPIES) copies = MAX_COPIES;
        if ((size_t)copies * set_bytes > copies_cap)
            copies = (int)(copies_cap / set_bytes) > 1 ? (int)(copies_cap / set_bytes) : 1;
        CaseResult *r = &res[c];
        KernelCheck chk;
        kernel_check_case(be, k, 0, 1234u + (unsigned)c, kernel_check_tolerance(k, gpu && cfg->train.tf32),
                          test_wrong(op->name), &chk);
        r->ok = chk.ok, r->err = chk.err, r->tol = chk.tol;
        snprintf(r->detail, sizeof r->detail, "%s", chk.detail);
        n_failed += !r->ok;
        float **host = kernel_case_inputs(k, 1234u + (unsigned)c);
        void ***sets = vx_malloc((size_t)copies * sizeof *sets);
        for (int s = 0; s < copies; s++) {
            sets[s] = vx_malloc(KOP_MAX_BUFS * sizeof **sets);
            for (int b = 0; b < k->nbuf; b++) {
                sets[s][b] = case_arena_take(&arena, kernel_case_bytes(k, b));
                if (!sets[s][b]) sets[s][b] = be->alloc(kernel_case_bytes(k, b));
                kernel_case_upload(be, k, b, host[b], sets[s][b]);
            }
        }
        void *ws = k->workspace ? be->alloc(k->workspace) : NULL;
        const double before = gpu ? 0 : probe_rate(&probe, op->compute_bound);
        time_case(be, op, k, (void *const *const *)sets, copies, ws, budget_s, max_reps, r);
        const double after = gpu ? 0 : probe_rate(&probe, op->compute_bound);
        r->local_ceiling = before > after ? before : after;
        r->rate = (op->compute_bound ? k->flops : k->bytes) / r->med * 1e-9;
        /* attention on the GPU: cuDNN's fused attention or the own kernel, as the timed calls ran */
        const char *path = strncmp(op->name, "attention_", 10) == 0 && be->attention->last_path
                               ? be->attention->last_path(op->fn)
                               : NULL;
        snprintf(r->path, sizeof r->path, "%s", path ? path : "");
        vx_log("%-24s %-34s %s  %9.1f us  %8.2f %s%s%s\n", op->name, k->shape, r->ok ? "ok    " : "FAILED",
               r->med * 1e6, r->rate, op->compute_bound ? "GFLOP/s" : "GB/s", path ? "  path " : "", path ? path : "");
        if (!r->ok)
            vx_log("  %s check FAILED: %s (error %.3g > tolerance %.3g)\n", op->name, r->detail, r->err, r->tol);
        if (ws) be->release(ws);
        for (int s = 0; s < copies; s++) {
            for (int b = 0; b < k->nbuf; b++)
                if (!case_arena_owns(&arena, sets[s][b])) be->release(sets[s][b]);
            free(sets[s]);
        }
        free(sets);
        case_arena_reset(&arena);
        for (int b = 0; b < k->nbuf; b++) free(host[b]);
        free(host);
        progress_add(&prog, 1);
    }
    progress_end(&prog);

    /* The ceilings once more, after the ops, keeping the better of the two: a ceiling measured during a burst of
     * someone else's load on a shared machine would inflate every fraction of it (seen on the 2-core CI VM). */
    const Ceilings again = measure_ceilings(&rt, cfg->train.tf32);
    if (again.gemm_gflops > ceil.gemm_gflops) ceil.gemm_gflops = again.gemm_gflops;
    if (again.copy_gbps > ceil.copy_gbps) ceil.copy_gbps = again.copy_gbps;
    vx_log("ceilings after the ops: %.1f GFLOP/s, %.1f GB/s; the better of each is used\n", again.gemm_gflops,
           again.copy_gbps);
    for (int c = 0; c < n_all; c++) {
        CaseResult *r = &res[c];
        if (!want[cases[c].op]) continue;
        r->fraction = r->rate / (ops[cases[c].op].compute_bound ? ceil.gemm_gflops : ceil.copy_gbps);
        r->fraction_best = r->fraction * r->med / r->min;
        r->local_fraction = r->local_ceiling > 0 ? r->rate / r->local_ceiling : r->fraction;
    }
    if (!gpu) probe_close(&probe);
    case_arena_close(&arena);

    /* ---- the report -------------------------------------------------------------------------------------- */
    bench_build_commit(commit, sizeof commit);
    bench_results_dir(&rt, o->results_dir, dir, sizeof dir);
    const int threads = cfg->train.threads ? cfg->train.threads : rt.hw.cores;
    char device[400];
    if (gpu)
        snprintf(device, sizeof device, "%s, compute capability %d.%d, TF32 %s", rt.hw.gpus[0].name,
                 rt.hw.gpus[0].cc_major, rt.hw.gpus[0].cc_minor, cfg->train.tf32 ? "on" : "off");
    else
        snprintf(device, sizeof device, "%s, %d cores, %d threads, %s", rt.hw.cpu_model, rt.hw.cores, threads,
                 openblas_get_config());

    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "benchmark", "kernels");
    cJSON_AddStringToObject(j, "config", stem);
    cJSON_AddStringToObject(j, "device", slug);
    cJSON_AddStringToObject(j, "backend", be->name);
    cJSON_AddStringToObject(j, "device_detail", device);
    char isa[420];
    bench_isa(&rt, isa, sizeof isa);
    cJSON_AddStringToObject(j, "isa", isa);
    cJSON_AddStringToObject(j, "commit", commit);
    cJSON_AddNumberToObject(j, "batch", rt.model->batch);
    cJSON_AddNumberToObject(j, "threads", threads);
    cJSON *cj = cJSON_AddObjectToObject(j, "ceilings");
    cJSON_AddNumberToObject(cj, "gemm_gflops", ceil.gemm_gflops);
    cJSON_AddStringToObject(cj, "gemm", ceil.gemm_what);
    cJSON_AddNumberToObject(cj, "copy_gbps", ceil.copy_gbps);
    cJSON_AddStringToObject(cj, "copy", ceil.copy_what);
    cJSON_AddNumberToObject(cj, "cache_bytes", (double)ceil.cache_bytes);
    cJSON_AddStringToObject(j, "precision", dtype_name(rt.model->dtype));
    if (rt.model->bf16_math) cJSON_AddBoolToObject(j, "bf16_math", 1); /* the CPU's bf16: float32 storage */
    cJSON *arr = cJSON_AddArrayToObject(j, "kernels");
    for (int c = 0; c < n_all; c++) {
        if (!want[cases[c].op]) continue;
        const KernelCase *k = &cases[c];
        const KernelOp *op = &ops[k->op];
        const CaseResult *r = &res[c];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "op", op->name);
        cJSON_AddStringToObject(e, "shape", k->shape);
        if (r->path[0]) cJSON_AddStringToObject(e, "path", r->path); /* attention on a GPU: cudnn or own */
        cJSON_AddStringToObject(e, "bound", op->compute_bound ? "compute" : "memory");
        cJSON_AddStringToObject(e, "check", r->ok ? "ok" : "FAILED");
        cJSON_AddNumberToObject(e, "error", r->err);
        cJSON_AddNumberToObject(e, "tolerance", r->tol);
        if (!r->ok) cJSON_AddStringToObject(e, "check_detail", r->detail);
        cJSON_AddNumberToObject(e, "flops", k->flops);
        cJSON_AddNumberToObject(e, "bytes", k->bytes);
        cJSON_AddNumberToObject(e, "median_us", r->med * 1e6);
        cJSON_AddNumberToObject(e, "min_us", r->min * 1e6);
        cJSON_AddNumberToObject(e, "p90_us", r->p90 * 1e6);
        cJSON_AddNumberToObject(e, "reps", r->reps);
        cJSON_AddNumberToObject(e, "copies", r->copies);
        cJSON_AddNumberToObject(e, op->compute_bound ? "gflops" : "gbps", r->rate);
        cJSON_AddNumberToObject(e, "fraction_of_ceiling", r->fraction);
        cJSON_AddNumberToObject(e, "fraction_of_ceiling_best", r->fraction_best);
        cJSON_AddNumberToObject(e, "local_ceiling", r->local_ceiling);
        cJSON_AddNumberToObject(e, "fraction_of_local_ceiling", r->local_fraction);
        cJSON_AddItemToArray(arr, e);
    }
    cJSON_AddNumberToObject(j, "failed_checks", n_failed);
    struct rusage ru; /* the whole process's peak: every case's buffer copies and references included */
    getrusage(RUSAGE_SELF, &ru);
    cJSON_AddNumberToObject(j, "peak_rss_mib", ru.ru_maxrss / 1024.0);
    snprintf(path, sizeof path, "kernels_%s.json", stem);
    bench_write_json(dir, path, j, o->overwrite);

    size_t cap = 4096 + (size_t)n_run * 256, len = 0;
    char *md = vx_malloc(cap);
    len += (size_t)snprintf(md + len, cap - len,
                            "# bench kernels: %s on %s\n\n"
                            "Ceilings measured in the same run: %s **%.1f GFLOP/s**; %s **%.1f GB/s**. Each op checked "
                            "against a float64 reference first, then timed alone (median of the timed calls, inputs "
                            "rotated over copies beyond %.0f MiB: 4x the cache, 128 MiB at least).\n\n"
                            "| op | shape | check (error) | median | rate | of ceiling |\n|---|---|---|---|---|---|\n",
                            stem, slug, ceil.gemm_what, ceil.gemm_gflops, ceil.copy_what, ceil.copy_gbps,
                            fmax(4 * ceil.cache_bytes, 134217728.0) / 1048576.0);
    for (int c = 0; c < n_all; c++) {
        if (!want[cases[c].op]) continue;
        const KernelOp *op = &ops[cases[c].op];
        const CaseResult *r = &res[c];
        len += (size_t)snprintf(md + len, cap - len, "| %s | %s%s%s%s | %s (%.1e) | %.1f us | %.2f %s | %.1f%% |\n",
                                op->name, cases[c].shape, r->path[0] ? " (" : "", r->path, r->path[0] ? ")" : "", r->ok ? "ok" : "**FAILED**", r->err, r->med * 1e6, r->rate,
                                op->compute_bound ? "GFLOP/s" : "GB/s", 100 * r->fraction);
    }
    len += (size_t)snprintf(md + len, cap - len,
                            "\nDevice: %s. Batch %d, activations %s, commit %s. Memory-bound ops count the bytes they "
                            "must read and write once, at their storage type's size; attention counts FlashAttention's "
                            "FLOPs (4 b h tq tk d forward, 2.5x that backward, which recomputes the scores); "
                            "attention_step: the forward and the backward as a model calls them, through the memory "
                            "the backend saves between them, counted as computed (12 b h tq tk d where the "
                            "probabilities are saved, 14 where not). Peak resident memory of the whole run "
                            "%.0f MiB (host).\n",
                            device, rt.model->batch, dtype_name(rt.model->dtype), commit, ru.ru_maxrss / 1024.0);
    snprintf(path, sizeof path, "kernels_%s.md", stem);
    bench_write_text(dir, path, md, len, o->overwrite);
    printf("\nwritten: %s/kernels_%s.{json,md}: %d cases, %d failed checks\n", dir, stem, n_run, n_failed);
    free(md);
    free(res);
    free(cases);
    free(want);
    runtime_close(&rt);
    if (n_failed) {
        fprintf(stderr, "voxscale: bench kernels: %d op check%s failed (see above); the timings of a wrong op mean "
                        "nothing\n", n_failed, n_failed > 1 ? "s" : "");
        return VX_EXIT_FAIL;
    }
    return 0;
}
