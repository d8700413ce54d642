/* conv_agree.h: the ranks of a CPU run convolve with the same kernels: rank 0's choices, broadcast.
 * The CPU backend chooses im2col + sgemm or oneDNN per convolution shape by timing both at the shape's first call
 * (conv3d_cpu_select.h). Ranks that time at once can choose differently where the two are within a few percent
 * (seen on a 2-core Xeon: two of resnet3d-18's shapes), and the file of choices keeps the last line written, so a
 * fresh multi-rank run rounded differently from its rerun: resnet3d-18-cls on 2 ranks ended 8 steps at loss 1.100
 * where every later run of the same command ended at 1.472 (this BatchNorm/ReLU net turns rounding into discrete
 * changes). Now rank 0 alone chooses (timing, or reading its file), and every other rank takes its choices before
 * the first step of each stage. */
#pragma once
#include "backend/backend.h"
#include "graph/model.h"
#include "parallel/comm.h"

/* Every distinct convolution shape of m chosen by rank 0 and adopted by the others; nothing on one rank or on the GPU
 * (cuDNN's heuristics choose without timing: the same on every rank). A rank whose VX_CONV_CPU forces a path keeps
 * it (it still takes part in the broadcast). */
void conv_agree(Comm *c, const Backend *be, const Model *m);
