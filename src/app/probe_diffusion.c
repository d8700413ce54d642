/* probe_diffusion.c: `voxscale probe` for vit3d_diffusion: one training forward and backward of phantom batch 0, its
 * timesteps and noise keyed by samples 0.., dumped for the PyTorch float64 comparison (bench/reference/
 * vit3d_diffusion.py, tests/integration/test_vit3d_diffusion.py). Files: PREFIX.json (names, shapes, offsets into
 * the .bin, the losses, the resolved config) and PREFIX.bin (float32: the clean input x0 and the noisy x_t
 * [N][D][H][W][C], the target (v or eps), the views [N][2][img][img], the prediction, the coefficients [4][N]
 * (timestep, alpha, sigma, loss weight), the parameters and their gradients in the packed layout). The reference
 * recomputes the views from x0, the noise from x_t, and the prediction, the losses and the gradients from the rest.
 * VX_PROBE_PERTURB=S adds S times a keyed standard normal to every parameter first: adaLN-Zero starts the blocks and
 * the final Linear at 0, where most gradients are 0 and the comparison would check little of the network. */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"

#include "app/probe.h"
#include "core/fsutil.h"
#include "core/util.h"

static float *tensor_host(const Model *m, int t) {
    float *h = vx_malloc((size_t)m->tensors[t].count * sizeof(float));
    model_tensor_to_host(m, t, h);
    return h;
}

static void perturb(Model *m, double scale) {
    float *flat = vx_malloc((size_t)m->param_floats * sizeof(float));
    m->be->copy_to_host(flat, m->param, (size_t)m->param_floats * sizeof(float));
    for (int i = 0; i < m->n_params; i++)
        for (long j = 0; j < m->params[i].count; j++)
            flat[m->params[i].offset + j] += (float)(scale * vx_normal(0x9E7B, (uint64_t)i, (uint64_t)j));
    m->be->copy_to_device(m->param, flat, (size_t)m->param_floats * sizeof(float));
    model_sync_lp(m);
    free(flat);
}

int probe_diffusion(const Config *cfg, Runtime *rt) {
    Model *m = rt->model;
    const char *env = getenv("VX_PROBE_PERTURB");
    if (env && atof(env) > 0) perturb(m, atof(env));
    const Tensor *in = &m->tensors[m->t_input];
    float *x0 = runtime_load_phantom_batch(rt, cfg->train.seed, cfg->data.noise, 0);
    model_set_first_sample(m, 0);
    model_forward(m, 1);
    /* before backward: the arena reuses these after the loss */
    float *xt = tensor_host(m, m->t_xt), *views = tensor_host(m, m->t_views), *pred = tensor_host(m, m->t_recon);
    float *target = probe_to_host(m->be, model_diffusion_target(m), in->count);
    float *coef = probe_to_host(m->be, model_diffusion_coefficients(m), 4L * m->batch);
    model_backward(m, 1.0f, 0.0f, NULL);
    const Losses l = model_read_losses(m);

    char path[CONFIG_STR + 16];
    snprintf(path, sizeof path, "%s.bin", cfg->output.dir);
    FILE *f = fopen(path, "wb");
    if (!f) vx_usage_error("probe: cannot create %s", path);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "input", (double)probe_append(f, x0, in->count));
    cJSON_AddNumberToObject(j, "x_t", (double)probe_append(f, xt, in->count));
    cJSON_AddNumberToObject(j, "target", (double)probe_append(f, target, in->count));
    cJSON_AddNumberToObject(j, "views", (double)probe_append(f, views, m->tensors[m->t_views].count));
    cJSON_AddNumberToObject(j, "pred", (double)probe_append(f, pred, in->count));
    cJSON_AddNumberToObject(j, "coefficients", (double)probe_append(f, coef, 4L * m->batch));
    cJSON_AddNumberToObject(j, "param_values", (double)probe_append(f, probe_packed_to_host(m, m->param), m->param_count));
    cJSON_AddNumberToObject(j, "grad_values", (double)probe_append(f, probe_packed_to_host(m, m->grad), m->param_count));
    fclose(f);
    cJSON_AddItemToObject(j, "input_shape", cJSON_CreateIntArray((int[]){in->dims.n, in->dims.d, in->dims.h,
                                                                         in->dims.w, in->dims.c}, 5));
    probe_params_json(j, m);
    cJSON *ls = cJSON_AddObjectToObject(j, "losses");
    cJSON_AddNumberToObject(ls, "diffusion", l.recon);
    cJSON_AddNumberToObject(ls, "projection", l.physics);
    cJSON_AddNumberToObject(ls, "total", l.total);
    char *cfg_text = config_to_json(cfg);
    cJSON_AddItemToObject(j, "config", cJSON_Parse(cfg_text));
    free(cfg_text);
    char *text = cJSON_Print(j);
    snprintf(path, sizeof path, "%s.json", cfg->output.dir);
    fs_write_atomic(path, text, strlen(text));
    printf("probe: loss %.9g (diffusion %.9g projection %.9g), %ld parameters -> %s\n", l.total, l.recon, l.physics,
           m->param_count, path);
    free(text);
    cJSON_Delete(j);
    return 0;
}
