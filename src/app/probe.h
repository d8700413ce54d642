/* probe.h: `voxscale probe` writes one training step's input, noise, parameters, output, losses and gradients,
 * so bench/reference/ae3d.py can run the same step in PyTorch and compare (tests/integration/test_pytorch.py); for
 * resnet3d several steps and the running statistics, for bench/reference/resnet3d.py and MONAI (test_monai.py). */
#pragma once
#include <stdio.h>

#include "core/config.h"
#include "train/runtime.h"

int probe_main(int argc, char **argv);
/* The same for a family with a prediction head (probe_head.c): `steps` training forwards and backwards and one
 * evaluation forward, on the model rt holds (allocated and initialised). */
int probe_head(const Config *cfg, Runtime *rt, int steps);
/* vit3d_diffusion's (probe_diffusion.c): one training forward and backward of phantom batch 0 at the timesteps and
 * noise its samples key, for bench/reference/vit3d_diffusion.py (tests/integration/test_vit3d_diffusion.py). */
int probe_diffusion(const Config *cfg, Runtime *rt);
/* What the probes share (probe_io.c): a host array appended to the .bin (freed; its offset in floats returned), and a host copy
 * of a flat parameter-shaped buffer in the packed layout. */
long probe_append(FILE *f, float *host, long count);
float *probe_packed_to_host(const Model *m, const float *flat);
/* A host copy of `count` floats of backend memory (caller frees). */
float *probe_to_host(const Backend *be, const float *src, long count);
/* The probe JSON's "param_count" and "params" (name, shape in our layout, offset in the packed .bin array). */
struct cJSON;
void probe_params_json(struct cJSON *j, const Model *m);
