/* diffusion_sample.c: DDIM sampling of vit3d_diffusion (diffusion_sample.h). */
#include "graph/diffusion_sample.h"

#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "core/stop_signal.h"
#include "core/util.h"
#include "diffusion/diffusion.h"
#include "elementwise/elementwise.h"
#include "graph/diffusion_schedule.h"
#include "graph/model_exec_diff.h"

#define RNG_STREAM_DIFF_SAMPLE 0xD1F2ull /* x_T of a sample: index = id * count + element */

static void need_family(const Model *m, const char *fn) {
    VX_CHECK(m->family == FAMILY_VIT3D_DIFFUSION && m->t_xt >= 0 && m->t_views >= 0,
             "%s: model.family %s has no sampler (vit3d_diffusion only)", fn, m->cfg.family);
}

static size_t views_bytes(const Model *m) { return (size_t)m->tensors[m->t_views].count * sizeof(float); }

void diffusion_render_views(Model *m, const float *vols, float *views) {
    need_family(m, "diffusion_render_views");
    const Backend *be = m->be;
    const size_t vol_bytes = (size_t)m->tensors[m->t_input].count * sizeof(float);
    void *vol = be->alloc(vol_bytes);
    float *img = be->alloc(views_bytes(m));
    be->copy_to_device(vol, vols, vol_bytes);
    diff_render_views(m, vol, DT_F32, img);
    be->synchronize();
    be->copy_to_host(views, img, views_bytes(m));
    be->release(img);
    be->release(vol);
}

void diffusion_set_views(Model *m, const float *views) {
    need_family(m, "diffusion_set_views");
    m->be->copy_to_device(model_tensor(m, m->t_views), views, views_bytes(m));
    m->be->synchronize();
}

/* A cascade's later stage: the earlier network samples first from the same views (recursively, its own earlier
 * ones before it), and its sample, resampled to this grid, is what t_cascade holds through this stage's steps. */
static void sample_earlier_stage(Model *m, int steps, uint64_t seed, const uint64_t *ids) {
    Model *p = m->cascade_prev;
    const Backend *be = m->be;
    float *views = vx_malloc(views_bytes(m));
    be->synchronize();
    be->copy_to_host(views, model_tensor(m, m->t_views), views_bytes(m));
    diffusion_set_views(p, views);
    free(views);
    model_sync_lp(p); /* its weights are this model's buffer, which a load rewrote */
    const Dims lo = p->tensors[p->t_input].dims, hi = m->tensors[m->t_cascade].dims;
    const long lo_count = p->tensors[p->t_input].count / p->batch, hi_count = m->tensors[m->t_cascade].count / m->batch;
    float *early = vx_malloc((size_t)p->batch * lo_count * sizeof(float));
    float *up = vx_malloc((size_t)m->batch * hi_count * sizeof(float));
    diffusion_ddim_sample(p, steps, seed, ids, early);
    for (int b = 0; b < m->batch; b++)
        model_resample_grid(early + b * lo_count, (const int[3]){lo.d, lo.h, lo.w}, up + b * hi_count,
                            (const int[3]){hi.d, hi.h, hi.w}, hi.c);
    const Tensor *t = &m->tensors[m->t_cascade];
    void *raw = vx_malloc((size_t)t->count * dtype_size(t->dtype));
    dtype_convert((size_t)t->count, DT_F32, up, t->dtype, raw);
    be->copy_to_device(model_tensor(m, m->t_cascade), raw, (size_t)t->count * dtype_size(t->dtype));
    be->synchronize();
    free(raw);
    free(up);
    free(early);
}

void diffusion_ddim_sample(Model *m, int steps, uint64_t seed, const uint64_t *ids, float *x0) {
    need_family(m, "diffusion_ddim_sample");
    const Backend *be = m->be;
    if (m->cascade_prev) sample_earlier_stage(m, steps, seed, ids);
    const int T = m->cfg.diff.timesteps, n = m->batch;
    VX_CHECK(steps >= 1 && steps <= T, "diffusion_ddim_sample: %d steps of %d timesteps", steps, T);
    const Tensor *xt = &m->tensors[m->t_xt];
    const long count = xt->count / n;
    const DiffusionShape s = {.n = n, .count = count,
                              .param = strcmp(m->cfg.diff.prediction, "epsilon") == 0 ? DIFFUSION_EPS : DIFFUSION_V,
                              .dtype = m->tensors[m->t_recon].dtype};
    /* x_T on the host: the bits do not depend on the backend, the batch or the ranks */
    for (int b = 0; b < n; b++)
        for (long i = 0; i < count; i++)
            x0[(long)b * count + i] = vx_normal(seed, RNG_STREAM_DIFF_SAMPLE, ids[b] * (uint64_t)count + (uint64_t)i);
    float *state = be->alloc((size_t)n * count * sizeof(float)), *next = be->alloc(2 * (size_t)n * sizeof(float));
    be->copy_to_device(state, x0, (size_t)n * count * sizeof(float));
    int *ts = vx_malloc((size_t)steps * sizeof(int)), *t = vx_malloc((size_t)n * sizeof(int));
    float *host_next = vx_malloc(2 * (size_t)n * sizeof(float));
    const DdimSpacing spacing = (DdimSpacing)diffusion_ddim_spacing_parse(m->cfg.diff.timestep_spacing);
    VX_CHECK((int)spacing >= 0, "diffusion_ddim_sample: diffusion.timestep_spacing %s", m->cfg.diff.timestep_spacing);
    diffusion_ddim_timesteps(spacing, T, steps, ts);
    m->sampling = 1;
    for (int i = 0; i < steps && !stop_signal_requested(); i++) { /* (a stop: the caller honours it, see the .h) */
        for (int b = 0; b < n; b++) t[b] = ts[i];
        diff_set_timesteps(m, t); /* t, alpha, sigma of t_i: the forward's timestep embedding and ddim_step's */
        float a_next, s_next;
        diffusion_coefficients(diffusion_ddim_next_alphabar(spacing, m->alphabar, T, steps, i), &a_next, &s_next);
        for (int b = 0; b < n; b++) host_next[b] = a_next, host_next[n + b] = s_next;
        be->write_async(next, host_next, 2 * (size_t)n * sizeof(float));
        be->elementwise->cast(xt->count, DT_F32, state, xt->dtype, model_tensor(m, m->t_xt));
        model_forward(m, 0);
        const float *coef = model_diffusion_coefficients(m); /* [4][n]: t, alpha, sigma, weight */
        be->diffusion->ddim_step(&s, coef + n, coef + 2 * n, next, next + n, state, model_tensor(m, m->t_recon), state);
    }
    m->sampling = 0;
    be->synchronize();
    be->copy_to_host(x0, state, (size_t)n * count * sizeof(float));
    const float k = (float)m->cfg.diff.data_scale; /* the process ran on k * x0 (diffusion.data_scale) */
    if (k != 1.0f)
        for (long i = 0; i < (long)n * count; i++) x0[i] /= k;
    free(host_next);
    free(t);
    free(ts);
    be->release(next);
    be->release(state);
}
