/* conv3d_cpu_select.c: the CPU backend's convolution table (ops.def): per shape and direction, the im2col + sgemm
 * reference (conv3d_cpu.c) or oneDNN (conv3d_dnnl.c), whichever ran faster when measured, as cuDNN's "find" chooses.
 *
 * When: at the first call of a shape (a training run's first step, a benchmark's warm-up); the workspace a plan
 * asks before that is enough for either candidate, so that planning alone measures nothing. How: both candidates run on scratch buffers of the shape
 * (forward with bias, backward-data with beta 0, backward-filter with the bias gradient), alternately, each timed
 * as its fastest of 3 to 12 calls after a warm-up; the slower must lose by more than 3% for oneDNN to replace the
 * reference (a tie keeps im2col). The choice is kept per process and in a file, keyed by the CPU's model name, the
 * thread count, oneDNN's version and ISA, the GEMM kernels im2col runs on, and the shape, so that a run measures only shapes that no earlier run on
 * this kind of machine measured, and reruns use the same kernels (the bits then repeat: both candidates are
 * deterministic at a fixed thread count). The file is $VX_CONV_CACHE, else $XDG_CACHE_HOME/voxscale/conv-cpu.tsv,
 * else ~/.cache/voxscale/conv-cpu.tsv; VX_CONV_CACHE=off keeps choices in the process only.
 * VX_CONV_CPU=im2col|onednn forces a path (tests, comparisons; the fixtures made before oneDNN existed pin im2col),
 * VX_CONV_LOG=1 prints each choice with both times and oneDNN's implementation. */
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cpu_gemm.h"
#include "common/cpu_op.h"
#include "conv3d/conv3d.h"
#include "conv3d/conv3d_cpu_select.h"
#include "conv3d/conv3d_dnnl.h"
#include "core/util.h"

#define CACHE_FORMAT "v1" /* bump when a candidate changes enough to void earlier measurements */
#define TIE_MARGIN 0.97   /* oneDNN replaces im2col only when at most 97% of its time */

static const char *DIR_NAME[3] = {"forward", "backward-data", "backward-filter"};

typedef struct Choice {
    Conv3dShape s;
    int threads;
    int path[3];       /* CONV_PATH_* per direction */
    double ms[3][2];   /* measured im2col, oneDNN (0 when not measured in this process) */
    size_t ws;         /* workspace bytes of the chosen paths */
    struct Choice *next;
} Choice;

static Choice *choices;
static int mode = -1; /* -1: VX_CONV_CPU not read yet; else CONV_MODE_* */
static int log_state = -1;

static int conv_log(void) {
    if (log_state < 0) {
        const char *e = getenv("VX_CONV_LOG");
        log_state = e && e[0] && strcmp(e, "0") != 0;
    }
    return log_state;
}

int conv3d_cpu_mode(void) {
    if (mode < 0) {
        const char *e = getenv("VX_CONV_CPU");
        if (!e || !*e || strcmp(e, "auto") == 0) mode = CONV_MODE_AUTO;
        else if (strcmp(e, "im2col") == 0) mode = CONV_MODE_IM2COL;
        else if (strcmp(e, "onednn") == 0) mode = CONV_MODE_ONEDNN;
        else vx_usage_error("VX_CONV_CPU must be auto, im2col or onednn, not \"%s\"", e);
    }
    return mode;
}

void conv3d_cpu_set_mode(int m) {
    mode = m;
    while (choices) {
        Choice *c = choices;
        choices = c->next;
        free(c);
    }
}

static void shape_key(const Conv3dShape *s, char *buf, size_t len) {
    snprintf(buf, len, "n%d %dx%dx%d c%d->%d k%dx%dx%d s%dx%dx%d p%dx%dx%d", s->n, s->d, s->h, s->w, s->c_in, s->c_out,
             s->k[0], s->k[1], s->k[2], s->stride[0], s->stride[1], s->stride[2], s->pad[0], s->pad[1], s->pad[2]);
}

/* ---- the file of earlier choices ---------------------------------------------------------------------------- */

static const char *cache_path(void) {
    static char path[1024];
    static int done;
    if (done) return path[0] ? path : NULL;
    done = 1;
    const char *e = getenv("VX_CONV_CACHE"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    if (e && *e) {
        if (strcmp(e, "off") != 0) snprintf(path, sizeof path, "%s", e);
    } else if (x && *x) snprintf(path, sizeof path, "%s/voxscale/conv-cpu.tsv", x);
    else if (h && *h) snprintf(path, sizeof path, "%s/.cache/voxscale/conv-cpu.tsv", h);
    return path[0] ? path : NULL;
}

/* "v1\t<cpu model>\t<threads>\t<oneDNN version>\t<its isa>\t<GEMM kernels>": what a line's choice holds for */
static void machine_key(int threads, char *buf, size_t len) {
    snprintf(buf, len, "%s\t%s\t%d\t%s\t%s\t%s", CACHE_FORMAT, cpu_isa()->model, threads, conv3d_dnnl_version(),
             conv3d_dnnl_isa(), cpu_gemm_kernels());
}

/* The path recorded for (shape, direction) on this machine, or -1. Lines: machine key, shape, direction, path,
 * im2col ms, oneDNN ms. */
static int cache_lookup(const Conv3dShape *s, int threads, int dir, double ms[2]) {
    const char *path = cache_path();
    if (!path) return -1;
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char mk[512], sk[160], want[768], line[1024];
    machine_key(threads, mk, sizeof mk);
    shape_key(s, sk, sizeof sk);
    snprintf(want, sizeof want, "%s\t%s\t%s\t", mk, sk, DIR_NAME[dir]);
    int found = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, want, strlen(want)) != 0) continue;
        char p[16];
        double a, b;
        if (sscanf(line + strlen(want), "%15s %lf %lf", p, &a, &b) != 3) continue;
        found = strcmp(p, "onednn") == 0 ? CONV_PATH_ONEDNN : strcmp(p, "im2col") == 0 ? CONV_PATH_IM2COL : -1;
        ms[0] = a, ms[1] = b; /* the last line for a key wins */
    }
    fclose(f);
    return found;
}

/* Appends one line (O_APPEND: lines of concurrent ranks do not interleave, each being one short write). A file that
 * cannot be written only costs a measurement next time: said once, never fatal. */
static void cache_store(const Conv3dShape *s, int threads, int dir, int path_chosen, const double ms[2]) {
    const char *path = cache_path();
    if (!path) return;
    char dir_path[1024];
    snprintf(dir_path, sizeof dir_path, "%s", path);
    char *slash = strrchr(dir_path, '/');
    if (slash && slash != dir_path) {
        *slash = 0;
        for (char *p = dir_path + 1; *p; p++)
            if (*p == '/') *p = 0, mkdir(dir_path, 0755), *p = '/';
        mkdir(dir_path, 0755);
    }
    char mk[512], sk[160], line[1024];
    machine_key(threads, mk, sizeof mk);
    shape_key(s, sk, sizeof sk);
    const int n = snprintf(line, sizeof line, "%s\t%s\t%s\t%s\t%.4f\t%.4f\n", mk, sk, DIR_NAME[dir],
                           path_chosen == CONV_PATH_ONEDNN ? "onednn" : "im2col", ms[0], ms[1]);
    FILE *f = fopen(path, "a");
    static int warned;
    if (!f || fwrite(line, 1, (size_t)n, f) != (size_t)n || fclose(f) != 0) {
        if (!warned) fprintf(stderr, "voxscale: warning: cannot record convolution choices in %s (%s); set VX_CONV_CACHE=FILE or =off\n", path, strerror(errno));
        warned = 1;
    }
}

/* ---- measuring ------------------------------------------------------------------------------------------------ */

static float *scratch(long n, unsigned seed) {
    float *p = vx_malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (long i = 0; i < n; i++) p[i] = (float)((long)((i * 2654435761u + seed) % 2001) - 1000) * 1e-3f;
    return p;
}

static void call(const Conv3dShape *s, int dir, int path, float *const *b, void *ws) {
    if (path == CONV_PATH_IM2COL) {
        if (dir == CONV3D_FORWARD) conv3d_forward_cpu(s, b[0], b[1], b[2], NULL, b[3], ws);
        else if (dir == CONV3D_BACKWARD_DATA) conv3d_backward_data_cpu(s, b[3], b[1], b[0], 0.0f, ws);
        else conv3d_backward_filter_cpu(s, b[0], b[3], b[1], b[2], 0.0f, ws);
    } else {
        if (dir == CONV3D_FORWARD) conv3d_dnnl_forward(s, b[0], b[1], b[2], NULL, b[3], ws);
        else if (dir == CONV3D_BACKWARD_DATA) conv3d_dnnl_backward_data(s, b[3], b[1], b[0], 0.0f, ws);
        else conv3d_dnnl_backward_filter(s, b[0], b[3], b[1], b[2], 0.0f, ws);
    }
}

/* Both candidates of one direction, alternately: ms[path] = the fastest call after one warm-up each, over at least
 * 3 rounds and then more while the rounds so far took under MEASURE_MS (at most 12): the fastest call is what the
 * machine can do, the others are what neighbours took from it (on a shared 2-core VM, calls of one kernel moved
 * by 2-10x within seconds). */
#define MEASURE_MS 250.0
static void measure(const Conv3dShape *s, int dir, double ms[2]) {
    float *b[4] = {scratch(conv3d_input_count(s), 1), scratch(conv3d_weight_count(s), 2), scratch(s->c_out, 3),
                   scratch(conv3d_output_count(s), 4)};
    const size_t wsb = conv3d_workspace_bytes_cpu(s) > conv3d_dnnl_workspace_bytes(s, dir)
                           ? conv3d_workspace_bytes_cpu(s)
                           : conv3d_dnnl_workspace_bytes(s, dir);
    void *ws = vx_malloc(wsb ? wsb : 64);
    double best[2] = {1e30, 1e30};
    const double start = vx_now();
    for (int r = -1; r < 12 && (r < 3 || (vx_now() - start) * 1e3 < MEASURE_MS); r++)
        for (int p = 0; p < 2; p++) {
            const double t0 = vx_now();
            call(s, dir, p, b, ws);
            const double t = (vx_now() - t0) * 1e3;
            if (r >= 0 && t < best[p]) best[p] = t;
        }
    ms[0] = best[0], ms[1] = best[1];
    for (int i = 0; i < 4; i++) free(b[i]);
    free(ws);
}

/* ---- the choice per shape --------------------------------------------------------------------------------- */

static void log_choice(const Choice *c, int dir, const char *how, const char *why) {
    if (!conv_log()) return;
    char sk[160], impl[160] = "";
    shape_key(&c->s, sk, sizeof sk);
    if (c->path[dir] == CONV_PATH_ONEDNN) conv3d_dnnl_usable(&c->s, dir, impl, sizeof impl, NULL, 0);
    char times[96] = "";
    if (c->ms[dir][0] > 0 && c->ms[dir][1] > 0)
        snprintf(times, sizeof times, " (im2col %.3f ms, oneDNN %.3f ms: %.2fx)", c->ms[dir][0], c->ms[dir][1],
                 c->ms[dir][0] / c->ms[dir][1]);
    fprintf(stderr, "conv3d cpu %s %s, %d threads: %s%s%s%s, %s%s%s\n", sk, DIR_NAME[dir], c->threads,
            c->path[dir] == CONV_PATH_ONEDNN ? "oneDNN" : "im2col+sgemm", impl[0] ? " " : "", impl, times, how,
            why ? ": " : "", why ? why : "");
}

static Choice *choose(const Conv3dShape *s) {
    const int threads = omp_get_max_threads();
    for (Choice *c = choices; c; c = c->next)
        if (c->threads == threads && memcmp(&c->s, s, sizeof *s) == 0) return c;
    Choice *c = vx_calloc(1, sizeof *c);
    c->s = *s, c->threads = threads;
    const int m = conv3d_cpu_mode();
    for (int dir = 0; dir < 3; dir++) {
        char why[200] = "";
        const int usable = m != CONV_MODE_IM2COL && conv3d_dnnl_usable(s, dir, NULL, 0, why, sizeof why);
        if (m == CONV_MODE_ONEDNN && !usable)
            vx_fatal("VX_CONV_CPU=onednn, but oneDNN cannot run this convolution: %s", why);
        if (!usable || m != CONV_MODE_AUTO) {
            c->path[dir] = usable ? CONV_PATH_ONEDNN : CONV_PATH_IM2COL;
            log_choice(c, dir, m == CONV_MODE_AUTO ? "the only candidate" : "forced by VX_CONV_CPU", usable ? NULL : why);
            continue;
        }
        const int cached = cache_lookup(s, threads, dir, c->ms[dir]);
        if (cached >= 0) {
            c->path[dir] = cached;
            log_choice(c, dir, "measured earlier", NULL);
            continue;
        }
        measure(s, dir, c->ms[dir]);
        c->path[dir] = c->ms[dir][1] < c->ms[dir][0] * TIE_MARGIN ? CONV_PATH_ONEDNN : CONV_PATH_IM2COL;
        cache_store(s, threads, dir, c->path[dir], c->ms[dir]);
        log_choice(c, dir, "measured now", NULL);
    }
    size_t ws = 0;
    for (int dir = 0; dir < 3; dir++) {
        const size_t b = c->path[dir] == CONV_PATH_ONEDNN ? conv3d_dnnl_workspace_bytes(s, dir) : conv3d_workspace_bytes_cpu(s);
        if (b > ws) ws = b;
    }
    c->ws = ws;
    c->next = choices;
    choices = c;
    return c;
}

int conv3d_cpu_path(const Conv3dShape *s, int dir) { return choose(s)->path[dir]; }

void conv3d_cpu_describe(char *buf, size_t len) {
    int n = 0, dn = 0;
    for (const Choice *c = choices; c; c = c->next)
        for (int dir = 0; dir < 3; dir++) n++, dn += c->path[dir] == CONV_PATH_ONEDNN;
    const int m = conv3d_cpu_mode();
    if (n == 0 && m == CONV_MODE_AUTO) { /* said before the first call: nothing chosen yet */
        snprintf(buf, len, "%s (%s) or im2col+sgemm per shape and direction, the faster measured at its first "
                 "call (VX_CONV_LOG=1 lists them)", conv3d_dnnl_version(), conv3d_dnnl_isa());
        return;
    }
    snprintf(buf, len, "%s (%s) on %d of %d shape-directions, im2col+sgemm on %d (%s; VX_CONV_LOG=1 lists them)",
             conv3d_dnnl_version(), conv3d_dnnl_isa(), dn, n, n - dn,
             m == CONV_MODE_AUTO ? "the faster of the two, measured per shape" : "forced by VX_CONV_CPU");
}

/* ---- the CPU backend's table (ops.def): float32 only -------------------------------------------------------- */

/* The workspace asked by a plan: the chosen paths' where the shape was chosen already, else enough for either
 * candidate in every direction, without measuring. Planning alone (detect, the hardware plan trying batch sizes,
 * the cuDNN descriptor checks, a CUDA run's host-side model) must not time convolutions of every shape it
 * considers on scratch buffers of that shape (ae3d-128 at batch 32 is gigabytes); the first call measures. */
static size_t cpu_workspace(const Conv3dShape *s) {
    /* a 16-bit shape is asked by plans made on the host for a GPU (the hardware plan, the padding tests): the
     * reference's size, as before issue 22; running one is still refused (cpu_need_f32 in the calls below) */
    if (s->dtype != DT_F32) return conv3d_workspace_bytes_cpu(s);
    const int threads = omp_get_max_threads();
    for (const Choice *c = choices; c; c = c->next)
        if (c->threads == threads && memcmp(&c->s, s, sizeof *s) == 0) return c->ws;
    size_t ws = conv3d_workspace_bytes_cpu(s);
    if (conv3d_cpu_mode() != CONV_MODE_IM2COL)
        for (int dir = 0; dir < 3; dir++) {
            char why[200];
            if (!conv3d_dnnl_usable(s, dir, NULL, 0, why, sizeof why)) continue;
            const size_t b = conv3d_dnnl_workspace_bytes(s, dir);
            if (b > ws) ws = b;
        }
    return ws;
}
static void cpu_forward(const Conv3dShape *s, const void *x, const void *wt, const float *bias, const void *residual,
                        void *y, void *ws) {
    cpu_need_f32(s->dtype, "conv3d_forward");
    if (choose(s)->path[CONV3D_FORWARD] == CONV_PATH_ONEDNN) conv3d_dnnl_forward(s, x, wt, bias, residual, y, ws);
    else conv3d_forward_cpu(s, x, wt, bias, residual, y, ws);
}
static void cpu_backward_data(const Conv3dShape *s, const void *dy, const void *wt, void *dx, float beta, void *ws) {
    cpu_need_f32(s->dtype, "conv3d_backward_data");
    if (choose(s)->path[CONV3D_BACKWARD_DATA] == CONV_PATH_ONEDNN) conv3d_dnnl_backward_data(s, dy, wt, dx, beta, ws);
    else conv3d_backward_data_cpu(s, dy, wt, dx, beta, ws);
}
static void cpu_backward_filter(const Conv3dShape *s, const void *x, const void *dy, float *dw, float *dbias,
                                float beta, void *ws) {
    cpu_need_f32(s->dtype, "conv3d_backward_filter");
    if (choose(s)->path[CONV3D_BACKWARD_FILTER] == CONV_PATH_ONEDNN) conv3d_dnnl_backward_filter(s, x, dy, dw, dbias, beta, ws);
    else conv3d_backward_filter_cpu(s, x, dy, dw, dbias, beta, ws);
}
const Conv3dOps conv3d_ops_cpu = {{op_supports_f32}, cpu_workspace, cpu_forward, cpu_backward_data,
                                  cpu_backward_filter};
