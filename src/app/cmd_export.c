/* cmd_export.c: `voxscale export --ckpt C --out F.safetensors`: a checkpoint's parameters and BatchNorm statistics
 * as a safetensors file in PyTorch's names and layouts (ckpt/weights.h), so that
 * model.load_state_dict(safetensors.torch.load_file(F)) loads it into MONAI's ResNet (resnet3d) or
 * bench/reference/ae3d.py's AE3D (ae3d) unchanged. The metadata carries the resolved config (predict --weights reads
 * it), the family and the step. The checkpoint is verified as --resume verifies it; nothing runs on a device. An
 * existing --out is refused before anything is read unless --overwrite, and never replaces the checkpoint or the
 * config the export reads (core/outguard.h). */
#include <stdio.h>
#include <string.h>

#include "app/cli.h"
#include "app/commands.h"
#include "app/weights_source.h"
#include "core/outguard.h"
#include "core/safetensors.h"
#include "core/util.h"
#include "ckpt/ckpt.h"
#include "hw/hw_plan.h"
#include "ckpt/weights.h"

static const char *HELP =
    "usage: voxscale export --ckpt CKPT --out FILE.safetensors [--config FILE] [--set K=V] [--overwrite]\n"
    "  writes the checkpoint's parameters and BatchNorm statistics as safetensors in MONAI's / PyTorch's names and\n"
    "  NCDHW layouts: model.load_state_dict(safetensors.torch.load_file(FILE)) loads it into\n"
    "  monai.networks.nets.ResNet (resnet3d) or bench/reference/ae3d.py's AE3D (ae3d) unchanged.\n"
    "  The config is the run's config.json beside the checkpoint's folder unless --config is given; a staged\n"
    "  run's checkpoint of a stage whose model differs from the final one (vit3d) is read at that stage's size.\n"
    "  An existing FILE is refused (nothing is written) unless --overwrite is given; the checkpoint and the config\n"
    "  it reads are never overwritten.\n";

int cmd_export(int argc, char **argv) {
    CliArgs a;
    cli_parse_from(argc, argv, &a, HELP, ",config,ckpt,out,set,overwrite,", weights_config_source);
    if (!a.ckpt) vx_usage_error("export: --ckpt CHECKPOINT is required (see --help)");
    if (!a.out) vx_usage_error("export: --out FILE.safetensors is required (see --help)");
    /* before anything is read: an --out that exists (another file, the run's config.json, the checkpoint itself) was
     * replaced without a word */
    out_input(a.ckpt, "--ckpt");
    if (a.config_given) out_input(a.config_path, "--config");
    out_claim(a.out, a.overwrite, "export --out");
    weights_ckpt_stage(&a.cfg, a.ckpt, "export"); /* a stage's best of a staged run: that stage's size */
    ModelOptions opt = hw_model_options(&a.cfg.train);
    opt.precision = "off"; /* the parameters are float32 whatever the run computed in */
    Model *m = model_build(&a.cfg.model, &opt, 1, backend_cpu());
    Ckpt ck;
    ckpt_set_reader("--ckpt", "give --ckpt another checkpoint");
    weights_check_ckpt_config(&a, m);
    ckpt_read(a.ckpt, m, (int64_t)CONFIG_MAX_STEPS + 1, &ck); /* (any step: nothing is left to train here) */
    const unsigned char *data = ck.file + ck.header.header_bytes;
    const size_t pbytes = (size_t)ck.header.param_count * sizeof(float);
    StWriter *w = st_writer_new();
    char *json = config_to_json(&a.cfg);
    char step[32];
    snprintf(step, sizeof step, "%lld", (long long)ck.header.step);
    st_writer_meta(w, "format", "pt");
    st_writer_meta(w, "voxscale.family", a.cfg.model.family);
    st_writer_meta(w, "voxscale.step", step);
    st_writer_meta(w, "voxscale.config", json);
    free(json);
    /* PyTorch counts the training forwards (micro-batches) in num_batches_tracked */
    const int64_t batches = ck.header.step * (int64_t)a.cfg.train.grad_accum;
    weights_export(m, (const float *)data, ck.header.buffer_count ? (const float *)(data + 3 * pbytes) : NULL, batches,
                   w);
    size_t len;
    unsigned char *bytes = st_writer_bytes(w, &len);
    out_write(a.out, bytes, len, a.overwrite, "export --out");
    char p[300];
    const int ema = model_ema_view(m);
    printf("export: %s (%s, step %lld): %ld parameters in %d tensors%s, %ld buffer floats (BatchNorm's statistics, a cascade's earlier networks) -> %s (%.1f MiB)\n",
           vx_escape(a.ckpt, p, sizeof p), a.cfg.model.family, (long long)ck.header.step, m->param_count, m->n_params,
           ema >= 0 ? " and their moving average (ema.*)" : "", m->buffer_floats - (ema >= 0 ? m->buffers[ema].count : 0),
           a.out, len / 1048576.0);
    free(bytes);
    st_writer_free(w);
    ckpt_free(&ck);
    model_free(m);
    return 0;
}
