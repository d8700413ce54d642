/* probe.c: one fixed training step dumped for the PyTorch comparison (see probe.h).
 * Files: PREFIX.json (names, shapes, offsets into the .bin, losses, the resolved config) and PREFIX.bin (float32
 * arrays: input [N][D][H][W][C], eps and recon in NDHWC, params and grads in the model's packed layout, the views back to back at their "offset"). */
#include "app/probe.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/cli.h"
#include "core/fsutil.h"
#include "core/util.h"
#include "train/runtime.h"

static const char *HELP = "usage: voxscale probe --config FILE --out PREFIX [--seed N] [--batch-size N] [--amp P] [--set K=V]\n"
                          "  runs one forward/backward on batch 0 and writes PREFIX.json and PREFIX.bin (float32,\n"
                          "  whatever the precision the step ran in); for model.family resnet3d VX_PROBE_STEPS (3)\n"
                          "  training steps of fixed parameters, then one evaluation forward\n";

static cJSON *dims_json(Dims d) { return cJSON_CreateIntArray((int[]){d.n, d.d, d.h, d.w, d.c}, 5); }

int probe_main(int argc, char **argv) {
    CliArgs a;
    cli_parse(argc, argv, &a, HELP, ",config,out,seed,batch-size,device,threads,set,deterministic,checkpoint-activations,amp,");
    if (a.cfg.output.dir[0] == 0) vx_usage_error("probe: --out PREFIX is required");
    Runtime rt;
    runtime_open(&rt, &a.cfg.model, &a.cfg.train, 0);
    Model *m = rt.model;
    model_allocate(m);
    model_init_params(m, (uint64_t)a.cfg.train.seed);
    if (m->family == FAMILY_VIT3D_DIFFUSION) {
        const int rc = probe_diffusion(&a.cfg, &rt);
        runtime_close(&rt);
        return rc;
    }
    if (m->family == FAMILY_VIT3D) {
        runtime_close(&rt);
        vx_usage_error("probe: model.family vit3d has no probe yet (tests/unit/test_vit3d.c checks its gradients)");
    }
    if (m->family != FAMILY_AE3D) {
        const char *env = getenv("VX_PROBE_STEPS");
        const int steps = env && atoi(env) > 0 ? atoi(env) : 3;
        const int rc = probe_head(&a.cfg, &rt, steps);
        runtime_close(&rt);
        return rc;
    }
    Tensor *in = &m->tensors[m->t_input];
    float *batch = runtime_load_phantom_batch(&rt, a.cfg.train.seed, a.cfg.data.noise, 0);
    model_set_first_sample(m, 0);
    model_forward(m, 1);
    /* The arena reuses the output's and the noise's memory during backward: copy them out first. */
    Tensor *z = &m->tensors[m->t_z];
    float *recon = vx_malloc((size_t)in->count * sizeof(float));
    model_tensor_to_host(m, m->t_recon, recon);
    float *eps = probe_to_host(rt.be, model_noise(m), z->count);
    model_backward(m, 1.0f, 0.0f, NULL);
    Losses l = model_read_losses(m);

    char path[CONFIG_STR + 16];
    snprintf(path, sizeof path, "%s.bin", a.cfg.output.dir);
    FILE *f = fopen(path, "wb");
    if (!f) vx_usage_error("probe: cannot create %s", path);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "input", (double)probe_append(f, batch, in->count));
    cJSON_AddNumberToObject(j, "eps", (double)probe_append(f, eps, z->count));
    cJSON_AddNumberToObject(j, "recon", (double)probe_append(f, recon, in->count));
    cJSON_AddNumberToObject(j, "param_values", (double)probe_append(f, probe_packed_to_host(m, m->param), m->param_count));
    cJSON_AddNumberToObject(j, "grad_values", (double)probe_append(f, probe_packed_to_host(m, m->grad), m->param_count));
    fclose(f);
    cJSON_AddItemToObject(j, "input_shape", dims_json(in->dims));
    cJSON_AddItemToObject(j, "latent_shape", dims_json(z->dims));
    probe_params_json(j, m);
    cJSON *ls = cJSON_AddObjectToObject(j, "losses");
    cJSON_AddNumberToObject(ls, "recon", l.recon);
    cJSON_AddNumberToObject(ls, "kl", l.kl);
    cJSON_AddNumberToObject(ls, "total", l.total);
    char *cfg_text = config_to_json(&a.cfg);
    cJSON_AddItemToObject(j, "config", cJSON_Parse(cfg_text));
    free(cfg_text);
    char *text = cJSON_Print(j);
    snprintf(path, sizeof path, "%s.json", a.cfg.output.dir);
    fs_write_atomic(path, text, strlen(text));
    printf("probe: loss %.9g (recon %.9g kl %.9g), %ld parameters -> %s\n", l.total, l.recon, l.kl, m->param_count, path);
    free(text);
    cJSON_Delete(j);
    runtime_close(&rt);
    return 0;
}
