/* probe.h: `voxscale probe` writes one training step's input, noise, parameters, output, losses and gradients,
 * so bench/reference/ae3d.py can run the same step in PyTorch and compare (tests/integration/test_pytorch.py). */
#pragma once

int probe_main(int argc, char **argv);
