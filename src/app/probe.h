/* probe.h: `voxscale probe` writes one training step's input, noise, parameters, output, losses and gradients,
 * so bench/reference/ae3d.py can run the same step in PyTorch and compare (tests/integration/test_pytorch.py); for
 * resnet3d several steps and the running statistics, for bench/reference/resnet3d.py and MONAI (test_monai.py). */
#pragma once
#include "core/config.h"
#include "train/runtime.h"

int probe_main(int argc, char **argv);
/* The same for a family with a prediction head (probe_head.c): `steps` training forwards and backwards and one
 * evaluation forward, on the model rt holds (allocated and initialised). */
int probe_head(const Config *cfg, Runtime *rt, int steps);
