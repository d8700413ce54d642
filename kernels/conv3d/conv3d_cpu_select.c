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
 * The forward is chosen per sample shape (the shape but its batch n): the first batch size that asks measures, and
 * every other batch size of the shape runs the same path, in the process and through the file (its forward lines
 * key "n*"). The two paths round differently, and each gives a sample the same bits in any slot of its batch
 * (conv3d_cpu.c), so one forward path per sample shape is what makes a sample's evaluation outputs the same bytes
 * whatever the batch size (predict, validation; issue 41). The backward directions stay keyed by the whole shape.
 * VX_CONV_CPU=im2col|onednn forces a path (tests, comparisons; the fixtures made before oneDNN existed pin im2col),
 * VX_CONV_LOG=1 prints each choice with both times and oneDNN's implementation.
 * bf16 math (a shape's bf16_math: train.precision bf16 on a CPU with AVX512-BF16 or AMX) adds a third candidate,
 * oneDNN's bf16 kernels, measured beside the two float32 ones in the same rounds: it runs where it is at least 3%
 * faster than the faster float32 path, which then stays where bf16 would not pay (bf16 costs accuracy, so it must
 * earn its place by speed; as TF32 on the GPU is allowed, not imposed). VX_CONV_CPU=onednn forces oneDNN in the
 * shape's math (its bf16 kernels under bf16 math: what the bf16 tests pin). Such shapes are keyed apart ("... bf16"). */
#include <errno.h>
#include <math.h>
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

#define CACHE_FORMAT "v2" /* bump when a candidate or a key changes (v2: forward lines keyed per sample shape) */
#define TIE_MARGIN 0.97   /* oneDNN replaces im2col only when at most 97% of its time */

static const char *DIR_NAME[3] = {"forward", "backward-data", "backward-filter"};

typedef struct Choice {
    Conv3dShape s;
    int threads;
    int path[3];       /* CONV_PATH_* per direction */
    double ms[3][3];   /* measured im2col, oneDNN, oneDNN bf16 (0 when not measured in this process) */
    size_t ws;         /* workspace bytes of the chosen paths */
    struct Choice *next;
} Choice;

static Choice *choices;
static int mode = -1; /* -1: VX_CONV_CPU not read yet; else CONV_MODE_* */
static int log_state = -1;

static int conv_log(void) {
    if (log_state < 0) log_state = vx_env_flag("VX_CONV_LOG");
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

/* "n4 16x16x16 c1->8 k3x3x3 s1x1x1 p1x1x1"; the forward's file lines say "n*" (chosen per sample shape) */
static void shape_key_dir(const Conv3dShape *s, int dir, char *buf, size_t len) {
    char n[16];
    if (dir == CONV3D_FORWARD) snprintf(n, sizeof n, "*");
    else snprintf(n, sizeof n, "%d", s->n);
    snprintf(buf, len, "n%s %dx%dx%d c%d->%d k%dx%dx%d s%dx%dx%d p%dx%dx%d", n, s->d, s->h, s->w, s->c_in, s->c_out,
             s->k[0], s->k[1], s->k[2], s->stride[0], s->stride[1], s->stride[2], s->pad[0], s->pad[1], s->pad[2]);
    if (s->bf16_math) snprintf(buf + strlen(buf), len - strlen(buf), " bf16");
}
static void shape_key(const Conv3dShape *s, char *buf, size_t len) { shape_key_dir(s, -1, buf, len); }

/* the same shape but for its batch size */
static int same_sample_shape(const Conv3dShape *a, const Conv3dShape *b) {
    Conv3dShape x = *a;
    x.n = b->n;
    return memcmp(&x, b, sizeof x) == 0;
}

static const char *PATH_WORD[3] = {"im2col", "onednn", "onednn-bf16"};

/* the shape as its float32 candidates run it (bf16_math off) */
static Conv3dShape f32_of(const Conv3dShape *s) {
    Conv3dShape f = *s;
    f.bf16_math = 0;
    return f;
}

/* Whether oneDNN is a candidate for direction dir of c (its math as given). Under VX_CONV_CPU=auto a kernel whose
 * scratchpad is over DNNL_WS_RATIO x the im2col reference's workspace and over DNNL_WS_FLOOR is not: the plan
 * reserves the largest candidate's workspace before anything is measured, and oneDNN 2.6.3's backward-weights
 * scratchpad grows with the threads (resnet3d-18's 1x1x1 512 -> 512 3^3 shape at batch 8: 162 MiB at 1 thread,
 * 270 at 2, 918 at 8, where im2col needs 28), so a kernel that then lost to im2col still held the CPU arena at
 * 303 MiB instead of 61 (cuDNN's algorithms have a workspace limit for the same reason). Forced (onednn) it runs. */
#define DNNL_WS_RATIO 4.0
#define DNNL_WS_FLOOR (64UL << 20)
static int dnnl_candidate(const Conv3dShape *c, int dir, char *why, size_t why_len) {
    if (!conv3d_dnnl_usable(c, dir, NULL, 0, why, why_len)) return 0;
    if (conv3d_cpu_mode() != CONV_MODE_AUTO) return 1;
    const size_t ws = conv3d_dnnl_workspace_bytes(c, dir), ref = conv3d_workspace_bytes_cpu(c);
    if (ws <= DNNL_WS_FLOOR || ws <= DNNL_WS_RATIO * (double)ref) return 1;
    if (why)
        snprintf(why, why_len, "oneDNN's kernel asks %.1f MiB of scratchpad, over %.0fx im2col's %.1f MiB: not a "
                 "candidate", ws / 1048576.0, DNNL_WS_RATIO, ref / 1048576.0);
    return 0;
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
 * im2col ms, oneDNN ms (and oneDNN bf16 ms for bf16 math). */
static int cache_lookup(const Conv3dShape *s, int threads, int dir, double ms[3]) {
    const char *path = cache_path();
    if (!path) return -1;
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char mk[512], sk[160], want[768], line[1024];
    machine_key(threads, mk, sizeof mk);
    shape_key_dir(s, dir, sk, sizeof sk);
    snprintf(want, sizeof want, "%s\t%s\t%s\t", mk, sk, DIR_NAME[dir]);
    int found = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, want, strlen(want)) != 0) continue;
        char p[16];
        double a, b, c = 0;
        const int got = sscanf(line + strlen(want), "%15s %lf %lf %lf", p, &a, &b, &c);
        if (got < 3 || (s->bf16_math && got < 4)) continue;
        int path = -1;
        for (int i = 0; i < (s->bf16_math ? 3 : 2); i++)
            if (strcmp(p, PATH_WORD[i]) == 0) path = i;
        found = path; /* the last line for a key wins */
        ms[0] = a, ms[1] = b, ms[2] = c;
    }
    fclose(f);
    return found;
}

/* Appends one line (O_APPEND: lines of concurrent ranks do not interleave, each being one short write). A file that
 * cannot be written only costs a measurement next time: said once, never fatal. */
static void cache_store(const Conv3dShape *s, int threads, int dir, int path_chosen, const double ms[3]) {
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
    char mk[512], sk[160], line[1024], bf16_ms[32] = "";
    machine_key(threads, mk, sizeof mk);
    shape_key_dir(s, dir, sk, sizeof sk);
    if (s->bf16_math) snprintf(bf16_ms, sizeof bf16_ms, "\t%.4f", ms[2]);
    const int n = snprintf(line, sizeof line, "%s\t%s\t%s\t%s\t%.4f\t%.4f%s\n", mk, sk, DIR_NAME[dir],
                           PATH_WORD[path_chosen], ms[0], ms[1], bf16_ms);
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

static void call(const Conv3dShape *shape, int dir, int path, float *const *b, void *ws) {
    const Conv3dShape f = f32_of(shape), *s = path == CONV_PATH_ONEDNN_BF16 ? shape : &f;
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

/* The candidates of one direction (im2col, oneDNN, and oneDNN bf16 under bf16 math; those not usable get 0 ms and
 * are not run), alternately: ms[path] = the fastest call after one warm-up each, over at least
 * 3 rounds and then more while the rounds so far took under MEASURE_MS (at most 12): the fastest call is what the
 * machine can do, the others are what neighbours took from it (on a shared 2-core VM, calls of one kernel moved
 * by 2-10x within seconds). */
#define MEASURE_MS 250.0
static void measure(const Conv3dShape *s, int dir, const int usable[3], double ms[3]) {
    float *b[4] = {scratch(conv3d_input_count(s), 1), scratch(conv3d_weight_count(s), 2), scratch(s->c_out, 3),
                   scratch(conv3d_output_count(s), 4)};
    const Conv3dShape f = f32_of(s);
    const size_t need[3] = {conv3d_workspace_bytes_cpu(s), usable[1] ? conv3d_dnnl_workspace_bytes(&f, dir) : 0,
                            usable[2] ? conv3d_dnnl_workspace_bytes(s, dir) : 0};
    size_t wsb = 64;
    for (int p = 0; p < 3; p++) wsb = need[p] > wsb ? need[p] : wsb;
    void *ws = vx_malloc(wsb);
    double best[3] = {1e30, 1e30, 1e30};
    const double start = vx_now();
    for (int r = -1; r < 12 && (r < 3 || (vx_now() - start) * 1e3 < MEASURE_MS); r++)
        for (int p = 0; p < 3; p++) {
            if (!usable[p]) continue;
            const double t0 = vx_now();
            call(s, dir, p, b, ws);
            const double t = (vx_now() - t0) * 1e3;
            if (r >= 0 && t < best[p]) best[p] = t;
        }
    for (int p = 0; p < 3; p++) ms[p] = usable[p] ? best[p] : 0;
    for (int i = 0; i < 4; i++) free(b[i]);
    free(ws);
}

/* Whether oneDNN's bf16 kernels compute direction dir of s within twice bf16's bound (op_check.c's 1.6e-2 of the
 * largest value) of the float32 reference, im2col, on the same scratch inputs. Not all do: oneDNN 2.6.3's 1x1
 * backward-data (jit_bf16_1x1) reads an odd number of output channels in ndhwc wrongly (errors of 40-200%; found by
 * the op tests), so a kernel is a candidate only once it has agreed here, one call each, per shape and direction. */
#define BF16_AGREE 3.2e-2
static int bf16_agrees(const Conv3dShape *s, int dir, char *why, size_t why_len) {
    float *b[4] = {scratch(conv3d_input_count(s), 1), scratch(conv3d_weight_count(s), 2), scratch(s->c_out, 3),
                   scratch(conv3d_output_count(s), 4)};
    const size_t a = conv3d_workspace_bytes_cpu(s), d = conv3d_dnnl_workspace_bytes(s, dir);
    void *ws = vx_malloc((a > d ? a : d) + 64);
    const int out = dir == CONV3D_FORWARD ? 3 : dir == CONV3D_BACKWARD_DATA ? 0 : 1; /* (filter: and dbias, b[2]) */
    const long n = out == 3 ? conv3d_output_count(s) : out == 0 ? conv3d_input_count(s) : conv3d_weight_count(s);
    call(s, dir, CONV_PATH_IM2COL, b, ws);
    float *ref = vx_malloc(sizeof(float) * (size_t)n);
    memcpy(ref, b[out], sizeof(float) * (size_t)n);
    call(s, dir, CONV_PATH_ONEDNN_BF16, b, ws);
    double worst = 0, scale = 0;
    for (long i = 0; i < n; i++) {
        const double e = fabs((double)b[out][i] - ref[i]);
        if (!(e <= worst)) worst = e; /* NaN too */
        if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
    }
    const double err = worst / (scale > 0 ? scale : 1);
    if (!(err <= BF16_AGREE))
        snprintf(why, why_len, "oneDNN's bf16 kernel is off by %.2g of the largest value from float32 (bound %.2g): "
                 "float32 here", err, BF16_AGREE);
    for (int i = 0; i < 4; i++) free(b[i]);
    free(ref);
    free(ws);
    return err <= BF16_AGREE;
}

/* ---- the choice per shape --------------------------------------------------------------------------------- */

static const char *PATH_NAME[3] = {"im2col+sgemm", "oneDNN", "oneDNN bf16"};

static void log_choice(const Choice *c, int dir, const char *how, const char *why) {
    if (!conv_log()) return;
    char sk[160], impl[160] = "";
    shape_key(&c->s, sk, sizeof sk);
    const Conv3dShape f = f32_of(&c->s);
    if (c->path[dir] != CONV_PATH_IM2COL)
        conv3d_dnnl_usable(c->path[dir] == CONV_PATH_ONEDNN_BF16 ? &c->s : &f, dir, impl, sizeof impl, NULL, 0);
    char times[160] = "";
    if (c->ms[dir][0] > 0 && c->ms[dir][1] > 0)
        snprintf(times, sizeof times, " (im2col %.3f ms, oneDNN %.3f ms: %.2fx", c->ms[dir][0], c->ms[dir][1],
                 c->ms[dir][0] / c->ms[dir][1]);
    if (times[0] && c->ms[dir][2] > 0)
        snprintf(times + strlen(times), sizeof times - strlen(times), ", oneDNN bf16 %.3f ms", c->ms[dir][2]);
    if (times[0]) snprintf(times + strlen(times), sizeof times - strlen(times), ")");
    fprintf(stderr, "conv3d cpu %s %s, %d threads: %s%s%s%s, %s%s%s\n", sk, DIR_NAME[dir], c->threads,
            PATH_NAME[c->path[dir]], impl[0] ? " " : "", impl, times, how, why ? ": " : "", why ? why : "");
}

/* The path the measured times choose: oneDNN over im2col when 3% faster, then bf16 over that when 3% faster. */
static int fastest(const double ms[3], const int usable[3]) {
    int p = usable[1] && ms[1] < ms[0] * TIE_MARGIN ? CONV_PATH_ONEDNN : CONV_PATH_IM2COL;
    if (usable[2] && ms[2] < ms[p] * TIE_MARGIN) p = CONV_PATH_ONEDNN_BF16;
    return p;
}

/* this process's choice for the shape at the current thread count, or NULL when not made yet */
static Choice *find_choice(const Conv3dShape *s, int threads) {
    for (Choice *c = choices; c; c = c->next)
        if (c->threads == threads && memcmp(&c->s, s, sizeof *s) == 0) return c;
    return NULL;
}

/* another batch size's choice of the same sample shape at this thread count, or NULL */
static Choice *find_sibling(const Conv3dShape *s, int threads) {
    for (Choice *c = choices; c; c = c->next)
        if (c->threads == threads && c->s.n != s->n && same_sample_shape(&c->s, s)) return c;
    return NULL;
}

/* the workspace the chosen paths of c need */
static size_t chosen_workspace(const Choice *c) {
    const Conv3dShape f = f32_of(&c->s);
    size_t ws = 0;
    for (int dir = 0; dir < 3; dir++) {
        const int p = c->path[dir];
        const size_t b = p == CONV_PATH_IM2COL ? conv3d_workspace_bytes_cpu(&c->s)
                                               : conv3d_dnnl_workspace_bytes(p == CONV_PATH_ONEDNN_BF16 ? &c->s : &f, dir);
        if (b > ws) ws = b;
    }
    return ws;
}

/* c, its paths set, as this process's choice (first in the list: found before any older one) */
static void keep(Choice *c) {
    c->ws = chosen_workspace(c);
    c->next = choices;
    choices = c;
}

static Choice *choose(const Conv3dShape *s) {
    const int threads = omp_get_max_threads();
    Choice *c = find_choice(s, threads);
    if (c) return c;
    c = vx_calloc(1, sizeof *c);
    c->s = *s, c->threads = threads;
    const int m = conv3d_cpu_mode();
    const Conv3dShape f = f32_of(s);
    const Choice *sibling = m == CONV_MODE_AUTO ? find_sibling(s, threads) : NULL;
    for (int dir = 0; dir < 3; dir++) {
        char why[200] = "";
        /* one forward path per sample shape, whatever the batch (where this batch size can run it) */
        if (dir == CONV3D_FORWARD && sibling &&
            (sibling->path[dir] == CONV_PATH_IM2COL ||
             dnnl_candidate(sibling->path[dir] == CONV_PATH_ONEDNN_BF16 ? s : &f, dir, NULL, 0))) {
            c->path[dir] = sibling->path[dir];
            char how[64];
            snprintf(how, sizeof how, "as chosen at batch %d", sibling->s.n);
            log_choice(c, dir, how, NULL);
            continue;
        }
        /* the oneDNN candidate of the shape's own math (float32, or bf16), and under bf16 math its float32 one */
        int usable = m != CONV_MODE_IM2COL && dnnl_candidate(s, dir, why, sizeof why);
        const int usable_f32 = !s->bf16_math ? usable
                                             : m != CONV_MODE_IM2COL && dnnl_candidate(&f, dir, NULL, 0);
        if (m == CONV_MODE_AUTO && (usable || usable_f32)) { /* a bf16 choice in the file agreed when it was made */
            const int cached = cache_lookup(s, threads, dir, c->ms[dir]);
            if (cached == CONV_PATH_IM2COL || (cached == CONV_PATH_ONEDNN && usable_f32) ||
                (cached == CONV_PATH_ONEDNN_BF16 && usable)) {
                c->path[dir] = cached;
                log_choice(c, dir, "measured earlier", NULL);
                continue;
            }
        }
        if (s->bf16_math && usable && !bf16_agrees(s, dir, why, sizeof why)) usable = 0;
        if (m == CONV_MODE_ONEDNN && !usable && !usable_f32)
            vx_fatal("VX_CONV_CPU=onednn, but oneDNN cannot run this convolution: %s", why);
        if (m != CONV_MODE_AUTO) { /* oneDNN forced: in the shape's math, float32 where bf16 disagreed */
            c->path[dir] = !usable_f32 ? CONV_PATH_IM2COL : !s->bf16_math ? CONV_PATH_ONEDNN
                           : usable ? CONV_PATH_ONEDNN_BF16 : CONV_PATH_ONEDNN;
            log_choice(c, dir, "forced by VX_CONV_CPU", why[0] ? why : NULL);
            continue;
        }
        const int cand[3] = {1, usable_f32, s->bf16_math && usable};
        if (!cand[1] && !cand[2]) {
            c->path[dir] = CONV_PATH_IM2COL;
            log_choice(c, dir, "the only candidate", why);
            continue;
        }
        measure(s, dir, cand, c->ms[dir]);
        c->path[dir] = fastest(c->ms[dir], cand);
        cache_store(s, threads, dir, c->path[dir], c->ms[dir]);
        log_choice(c, dir, "measured now", NULL);
    }
    keep(c);
    return c;
}

int conv3d_cpu_path(const Conv3dShape *s, int dir) { return choose(s)->path[dir]; }

int conv3d_cpu_adopt(const Conv3dShape *s, const int path[3], const char *whose) {
    const int threads = omp_get_max_threads();
    const Conv3dShape f = f32_of(s);
    for (int dir = 0; dir < 3; dir++) { /* a path this process can run (another host's oneDNN may lack an ISA) */
        const int p = path[dir];
        if (p == CONV_PATH_IM2COL) continue;
        if ((p != CONV_PATH_ONEDNN && p != CONV_PATH_ONEDNN_BF16) || (p == CONV_PATH_ONEDNN_BF16 && !s->bf16_math) ||
            !dnnl_candidate(p == CONV_PATH_ONEDNN_BF16 ? s : &f, dir, NULL, 0))
            return 0;
    }
    Choice *c = find_choice(s, threads);
    const int fresh = !c;
    if (fresh) {
        c = vx_calloc(1, sizeof *c);
        c->s = *s, c->threads = threads;
    }
    for (int dir = 0; dir < 3; dir++) {
        c->path[dir] = path[dir];
        memset(c->ms[dir], 0, sizeof c->ms[dir]);
        log_choice(c, dir, whose, NULL);
    }
    if (fresh) keep(c);
    else c->ws = chosen_workspace(c);
    for (Choice *o = choices; o; o = o->next) /* the other batch sizes of the sample shape: the same forward */
        if (o != c && o->threads == threads && same_sample_shape(&o->s, s) &&
            o->path[CONV3D_FORWARD] != path[CONV3D_FORWARD]) {
            o->path[CONV3D_FORWARD] = path[CONV3D_FORWARD];
            o->ws = chosen_workspace(o);
        }
    return 1;
}

static int bf16_planned; /* a planned shape asked for bf16 math (what the device line says before any call) */

void conv3d_cpu_describe(char *buf, size_t len) {
    int n = 0, dn = 0, bn = 0, asked = 0;
    for (const Choice *c = choices; c; c = c->next)
        for (int dir = 0; dir < 3; dir++)
            n++, dn += c->path[dir] != CONV_PATH_IM2COL, bn += c->path[dir] == CONV_PATH_ONEDNN_BF16,
                asked += c->s.bf16_math;
    const int m = conv3d_cpu_mode();
    if (n == 0 && m == CONV_MODE_AUTO) { /* said before the first call: nothing chosen yet */
        snprintf(buf, len, "%s (%s) or im2col+sgemm per shape and direction, the %s measured at its first "
                 "call (VX_CONV_LOG=1 lists them)", conv3d_dnnl_version(), conv3d_dnnl_isa(),
                 bf16_planned ? "fastest of three with bf16" : "faster");
        if (bf16_planned)
            snprintf(buf + strlen(buf), len - strlen(buf), "; bf16 math where it wins (oneDNN's %s kernels: bf16 "
                     "inputs, float32 accumulation and outputs)", conv3d_dnnl_isa());
        return;
    }
    snprintf(buf, len, "%s (%s) on %d of %d shape-directions, im2col+sgemm on %d (%s; VX_CONV_LOG=1 lists them)",
             conv3d_dnnl_version(), conv3d_dnnl_isa(), dn, n, n - dn,
             m != CONV_MODE_AUTO ? "forced by VX_CONV_CPU"
             : asked ? "the fastest of three with bf16, measured per shape" : "the faster of the two, measured per shape");
    if (asked)
        snprintf(buf + strlen(buf), len - strlen(buf), "; bf16 math on %d of them (oneDNN's %s kernels: bf16 "
                 "inputs, float32 accumulation and outputs)", bn, conv3d_dnnl_isa());
}

/* ---- the CPU backend's table (ops.def): float32 storage only, bf16 math where the shape asks ------------------ */

/* The workspace asked by a plan: the chosen paths' where the shape was chosen already, else enough for either
 * candidate in every direction, without measuring. Planning alone (detect, the hardware plan trying batch sizes,
 * the cuDNN descriptor checks, a CUDA run's host-side model) must not time convolutions of every shape it
 * considers on scratch buffers of that shape (ae3d-128 at batch 32 is gigabytes); the first call measures. */
static size_t cpu_workspace(const Conv3dShape *s) {
    /* a 16-bit shape is asked by plans made on the host for a GPU (the hardware plan, the padding tests): the
     * reference's size, as before issue 22; running one is still refused (cpu_need_f32 in the calls below) */
    if (s->dtype != DT_F32) return conv3d_workspace_bytes_cpu(s);
    bf16_planned |= s->bf16_math != 0;
    const Choice *chosen = find_choice(s, omp_get_max_threads());
    if (chosen) return chosen->ws;
    size_t ws = conv3d_workspace_bytes_cpu(s);
    const Conv3dShape f = f32_of(s); /* oneDNN float32 is a candidate of a bf16 shape too */
    if (conv3d_cpu_mode() != CONV_MODE_IM2COL)
        for (int dir = 0; dir < 3; dir++)
            for (int bf = 0; bf < 1 + (s->bf16_math != 0); bf++) {
                char why[200];
                const Conv3dShape *c = bf ? s : &f;
                if (!dnnl_candidate(c, dir, why, sizeof why)) continue;
                const size_t b = conv3d_dnnl_workspace_bytes(c, dir);
                if (b > ws) ws = b;
            }
    return ws;
}
static void cpu_forward(const Conv3dShape *s, const void *x, const void *wt, const float *bias, const void *residual,
                        void *y, void *ws) {
    cpu_need_f32(s->dtype, "conv3d_forward");
    const int p = choose(s)->path[CONV3D_FORWARD];
    const Conv3dShape f = f32_of(s);
    if (p == CONV_PATH_IM2COL) conv3d_forward_cpu(s, x, wt, bias, residual, y, ws);
    else conv3d_dnnl_forward(p == CONV_PATH_ONEDNN_BF16 ? s : &f, x, wt, bias, residual, y, ws);
}
static void cpu_backward_data(const Conv3dShape *s, const void *dy, const void *wt, void *dx, float beta, void *ws) {
    cpu_need_f32(s->dtype, "conv3d_backward_data");
    const int p = choose(s)->path[CONV3D_BACKWARD_DATA];
    const Conv3dShape f = f32_of(s);
    if (p == CONV_PATH_IM2COL) conv3d_backward_data_cpu(s, dy, wt, dx, beta, ws);
    else conv3d_dnnl_backward_data(p == CONV_PATH_ONEDNN_BF16 ? s : &f, dy, wt, dx, beta, ws);
}
static void cpu_backward_filter(const Conv3dShape *s, const void *x, const void *dy, float *dw, float *dbias,
                                float beta, void *ws) {
    cpu_need_f32(s->dtype, "conv3d_backward_filter");
    const int p = choose(s)->path[CONV3D_BACKWARD_FILTER];
    const Conv3dShape f = f32_of(s);
    if (p == CONV_PATH_IM2COL) conv3d_backward_filter_cpu(s, x, dy, dw, dbias, beta, ws);
    else conv3d_dnnl_backward_filter(p == CONV_PATH_ONEDNN_BF16 ? s : &f, x, dy, dw, dbias, beta, ws);
}
const Conv3dOps conv3d_ops_cpu = {{op_supports_f32}, cpu_workspace, cpu_forward, cpu_backward_data,
                                  cpu_backward_filter, cpu_isa_bf16_runs};
