// emu_test.cpp: the CUDA backend's own kernels under the host emulation (run.sh) against the CPU ops.
#include <cuda_runtime.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
extern "C" {
#include "backend.h"
}
void emu_poison_scratch(void);
static uint64_t st = 12345;
static double urand() { st += 0x9E3779B97F4A7C15ull; uint64_t z = st; z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull; z = (z ^ (z >> 27)) * 0x94D049BB133111EBull; return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0; }
// Buffers of exactly n floats starting `off` floats past a 64-byte boundary (off = 1: not 16-byte aligned, so the
// launchers must take their scalar paths). No slack after the end, so ASan (run.sh) reports any read or write
// past the last element.
static float *fn(long n, int off = 0) {
    void *m = nullptr;
    if (posix_memalign(&m, 64, 4 * (size_t)(n + off))) abort();
    float *p = (float *)m;
    for (long i = 0; i < n + off; i++) p[i] = NAN;
    return p + off;
}
static float *fr(long n, double lo, double hi, int off = 0) { float *p = fn(n, off); for (long i = 0; i < n; i++) p[i] = (float)(lo + (hi - lo) * urand()); return p; }
static float *fc(const float *s, long n, int off = 0) { float *p = fn(n, off); memcpy(p, s, 4 * n); return p; }
static int fails = 0;
static void cmp(const char *w, const float *g, const float *c, long n, double tol = 1e-5) {
    double num = 0, den = 0; for (long i = 0; i < n; i++) { double e = (double)g[i] - c[i]; num += e * e; den += (double)c[i] * c[i]; }
    double e = num != num ? INFINITY : den > 0 ? sqrt(num / den) : sqrt(num);
    if (!(e <= tol)) { printf("FAIL %s: %.3g\n", w, e); fails++; } else printf("ok   %s: %.3g\n", w, e);
}
static void gn_act(int n, long S, int c, int G, int off, int silu) {
    GroupNormShape s = {n, S, c, G, 1e-5f, silu}; long cnt = (long)n * S * c, ng = (long)n * G;
    float *x = fr(cnt, -1, 1); for (long i = 0; i < cnt; i++) x[i] = 0.5f + x[i] * (1 + (i % c) * 0.3f);
    float *gm = fr(c, .5, 1.5), *bt = fr(c, -.5, .5), *r = fr(cnt, -1, 1);
    float *xg = fc(x, cnt, off), *rg = fc(r, cnt, off);
    float *y = fn(cnt), *m = fn(ng), *rs = fn(ng), *yg = fn(cnt, off), *mg = fn(ng), *rsg = fn(ng);
    groupnorm_forward_cpu(&s, x, gm, bt, y, m, rs); emu_poison_scratch();
    groupnorm_forward_cuda(&s, xg, gm, bt, yg, mg, rsg);
    char w[128]; snprintf(w, sizeof w, "gn%s fwd y n%d S%ld c%d G%d off%d", silu ? "+silu" : "", n, S, c, G, off);
    cmp(w, yg, y, cnt); cmp("gn mean", mg, m, ng); cmp("gn rstd", rsg, rs, ng);
    for (int bd = 0; bd < 2; bd++) for (int bp = 0; bp < 2; bp++) {
        float *dx = bd ? fr(cnt, -1, 1) : fn(cnt), *dg = bp ? fr(c, -1, 1) : fn(c), *db = bp ? fr(c, -1, 1) : fn(c);
        float *dxg = fc(dx, cnt, off); float *dgg = fc(dg, c), *dbg = fc(db, c);
        groupnorm_backward_cpu(&s, r, x, gm, bt, m, rs, dx, dg, db, bd, bp); emu_poison_scratch();
        groupnorm_backward_cuda(&s, rg, xg, gm, bt, m, rs, dxg, dgg, dbg, bd, bp);
        snprintf(w, sizeof w, "gn bwd dx b%d%d", bd, bp); cmp(w, dxg, dx, cnt);
        cmp("gn dgamma", dgg, dg, c); cmp("gn dbeta", dbg, db, c);
    }
}
static void gn(int n, long S, int c, int G, int off) { gn_act(n, S, c, G, off, 0); gn_act(n, S, c, G, off, 1); }
static void up(int n, int d, int h, int w, int c) {
    long nx = (long)n * d * h * w * c, ny = 8 * nx; float *x = fr(nx, -1, 1), *r = fr(ny, -1, 1), *y = fn(ny), *yg = fn(ny);
    upsample2x_forward_cpu(n, d, h, w, c, x, y); upsample2x_forward_cuda(n, d, h, w, c, x, yg); cmp("up fwd", yg, y, ny, 0);
    for (int b = 0; b < 2; b++) { float *dx = b ? fr(nx, -1, 1) : fn(nx), *dxg = fc(dx, nx);
        upsample2x_backward_cpu(n, d, h, w, c, r, dx, b); upsample2x_backward_cuda(n, d, h, w, c, r, dxg, b); cmp("up bwd", dxg, dx, nx, 0); }
}
static void ew(long n, int off) {
    float *a = fr(n, -1, 1, off), *b = fr(n, -1, 1, off), *y = fn(n), *yg = fn(n, off);
    add_forward_cpu(n, a, b, y); add_forward_cuda(n, a, b, yg); cmp("add", yg, y, n, 0);
    float *d = fn(n), *dg = fn(n, off); accumulate_cpu(n, a, d, 0); accumulate_cuda(n, a, dg, 0); cmp("acc0", dg, d, n, 0);
    accumulate_cpu(n, b, d, 1); accumulate_cuda(n, b, dg, 1); cmp("acc1", dg, d, n, 0);
    scale_cpu(n, d, .375f); scale_cuda(n, dg, .375f); cmp("scale", dg, d, n, 0);
    float *sy = fn(n), *syg = fn(n, off); silu_forward_cpu(n, a, sy); silu_forward_cuda(n, a, syg); cmp("silu", syg, sy, n);
    for (int bb = 0; bb < 2; bb++) { float *dx = bb ? fr(n, -1, 1) : fn(n), *dxg = fc(dx, n, off);
        silu_backward_cpu(n, a, b, dx, bb); silu_backward_cuda(n, a, b, dxg, bb); cmp("silu bwd", dxg, dx, n); }
    for (int k = 0; k < 2; k++) { float l = NAN, lg = NAN, *dp = fn(n), *dpg = fn(n, off);
        for (long i = 3; i < n; i += 10) b[i] = a[i];
        recon_loss_cpu((ReconLoss)k, n, a, b, &l, dp, .75f); emu_poison_scratch(); recon_loss_cuda((ReconLoss)k, n, a, b, &lg, dpg, .75f);
        cmp("loss", &lg, &l, 1, 1e-6); cmp("dpred", dpg, dp, n, 1e-6); }
    float ss, ssg; sumsq_cpu(n, a, &ss); emu_poison_scratch(); sumsq_cuda(n, a, &ssg); cmp("sumsq", &ssg, &ss, 1, 1e-6);
    float *o = fn(n), *og = fn(n, off); normal_fill_cpu(n, 42, 7, 777, o); normal_fill_cuda(n, 42, 7, 777, og); cmp("normal", og, o, n, 1e-6);
    float *p = fr(n, -1, 1), *m = fr(n, -.1, .1), *v = fr(n, 0, .01), *pg = fc(p, n, off), *mg = fc(m, n, off), *vg = fc(v, n, off);
    AdamWParams ap = {1e-2f, .9f, .999f, 1e-8f, .05f, .5f, 0};
    for (int t = 1; t <= 3; t++) { ap.step = t; adamw_cpu(n, p, a, m, v, &ap); adamw_cuda(n, pg, a, mg, vg, &ap); }
    cmp("adamw p", pg, p, n); cmp("adamw m", mg, m, n); cmp("adamw v", vg, v, n);
}
static void lat(int n, long cps, int we, int wd) {
    LatentShape s = {n, cps, -5, 3}; long cnt = n * cps; float *mu = fr(cnt, -2, 2), *lv = fr(cnt, -7, 5), *e = fr(cnt, -2, 2), *dz = fr(cnt, -1, 1);
    float *z = fn(cnt), *zg = fn(cnt), k = NAN, kg = NAN; latent_forward_cpu(&s, mu, lv, we ? e : 0, z, &k); emu_poison_scratch();
    latent_forward_cuda(&s, mu, lv, we ? e : 0, zg, &kg); cmp("lat z", zg, z, cnt); cmp("lat kl", &kg, &k, 1, 1e-6);
    float *a = fn(cnt), *b = fn(cnt), *ag = fn(cnt), *bg = fn(cnt);
    latent_backward_cpu(&s, mu, lv, we ? e : 0, wd ? dz : 0, .3f, a, b); latent_backward_cuda(&s, mu, lv, we ? e : 0, wd ? dz : 0, .3f, ag, bg);
    cmp("lat dmu", ag, a, cnt); cmp("lat dlv", bg, b, cnt);
}
/* flips and rotations: every code on a cube (all four rotations) and on a box (k even only), channels 1 and 3 */
static void aug(int d, int h, int w, int c) {
    const long n = (long)d * h * w * c;
    float *x = fr(n, -1, 1);
    for (uint32_t code = 0; code < 32; code++) {
        if (h != w && ((code >> AUGMENT_ROT_SHIFT) & 1u)) continue;
        float *y = fn(n), *yg = fn(n);
        augment_cpu(d, h, w, c, code, x, y);
        augment_cuda(d, h, w, c, code, x, yg);
        char what[64];
        snprintf(what, sizeof what, "augment %dx%dx%dx%d code %u", d, h, w, c, code);
        cmp(what, yg, y, n, 0);
    }
}
int main() {
    aug(5, 6, 6, 1); aug(4, 5, 7, 3); aug(3, 8, 8, 2);
    ew(1001, 0); ew(7000, 0); ew(7000, 1); ew(300001, 0);
    up(3, 5, 7, 9, 3); up(2, 3, 4, 5, 12); up(1, 2, 3, 2, 20);
    lat(3, 35, 1, 1); lat(3, 35, 0, 1); lat(2, 4096 * 5 + 7, 1, 1); lat(3, 35, 1, 0); lat(1500, 3, 1, 1);
    gn(3, 5 * 7 * 9, 12, 4, 0); gn(3, 5 * 7 * 9, 20, 4, 0); gn(2, 5 * 7 * 9, 5, 1, 0); gn(2, 60, 12, 12, 0); gn(2, 60, 12, 1, 1);
    gn(2, 40 * 40 * 40, 16, 4, 0); gn(2, 50, 258, 2, 0); gn(1, 30, 1040, 8, 0);
    printf("%d failures\n", fails);
    return fails != 0;
}
