/* patch_cpu.c: float32 CPU patchify / unpatchify (patch.h): one OpenMP loop over the token elements, each read or
 * written once through patch_volume_index. */
#include "common/cpu_op.h"
#include "patch/patch.h"

static void check(const PatchShape *s, const char *fn) {
    cpu_need_f32(s->dtype, fn);
    const char *bad = patch_shape_error(s);
    if (*bad)
        vx_fatal("patch: %s (volume %dx%dx%d, patch %dx%dx%d)", bad, s->d, s->h, s->w, s->p[0], s->p[1], s->p[2]);
}

static void cpu_to_tokens(const PatchShape *s, const void *vv, void *tv, float beta) {
    check(s, "patch_to_tokens");
    const float *v = vv;
    float *t = tv;
    const long n = patch_count(s);
#pragma omp parallel for schedule(static) if (n >= 65536)
    for (long e = 0; e < n; e++) {
        const float x = v[patch_volume_index(s, e)];
        t[e] = beta != 0.0f ? beta * t[e] + x : x;
    }
}

static void cpu_to_volume(const PatchShape *s, const void *tv, void *vv, float beta) {
    check(s, "patch_to_volume");
    const float *t = tv;
    float *v = vv;
    const long n = patch_count(s);
#pragma omp parallel for schedule(static) if (n >= 65536)
    for (long e = 0; e < n; e++) {
        const long o = patch_volume_index(s, e);
        v[o] = beta != 0.0f ? beta * v[o] + t[e] : t[e];
    }
}

/* ---- the CPU backend's table (ops.def): float32 only -------------------------------------------------------- */

const PatchOps patch_ops_cpu = {{op_supports_f32}, cpu_to_tokens, cpu_to_volume};
