/* conv3d_cpu_select.h: which CPU convolution runs a shape's direction (conv3d_cpu_select.c): the im2col + sgemm
 * reference or oneDNN (and, for shapes with bf16_math, oneDNN's bf16 kernels), chosen by measurement at plan time
 * (VX_CONV_CPU=auto, the default), or forced. */
#pragma once
#include <stddef.h>

#include "conv3d/conv3d.h"

enum { CONV_PATH_IM2COL, CONV_PATH_ONEDNN, CONV_PATH_ONEDNN_BF16 }; /* the last: bf16 math shapes only */
enum { CONV_MODE_AUTO, CONV_MODE_IM2COL, CONV_MODE_ONEDNN };

/* VX_CONV_CPU, read once: CONV_MODE_* */
int conv3d_cpu_mode(void);
/* Overrides VX_CONV_CPU for this process and forgets the choices made (the op tests run both paths). */
void conv3d_cpu_set_mode(int mode);
/* The path direction `dir` (CONV3D_FORWARD, ...) of s runs on: chosen, and measured when new, at the first ask. */
int conv3d_cpu_path(const Conv3dShape *s, int dir);
/* Installs path[dir] (CONV_PATH_*) as the choice of each direction of s at this process's thread count, without
 * measuring: what another rank measured (train/conv_agree.c). Ranks of one run must run the same kernels: ranks that
 * measure at once can choose differently for shapes whose two paths are within a few percent, and then a fresh run
 * rounds differently from its rerun (which reads the choices the file kept last). `whose` is the log's word
 * ("chosen by rank 0"). Returns 0, changing nothing, when a path cannot run here (another host's oneDNN without that
 * ISA): this process then chooses for itself. */
int conv3d_cpu_adopt(const Conv3dShape *s, const int path[3], const char *whose);
/* "oneDNN 2.6.3 (avx512_core_bf16) on 21 of 36 shape-directions, im2col+sgemm on 15 (...)" and, where shapes asked
 * for bf16 math, "; bf16 math on 18 of them (...)": the choices made so far in this process (the device: line, after
 * the model's plan made them). */
void conv3d_cpu_describe(char *buf, size_t len);
