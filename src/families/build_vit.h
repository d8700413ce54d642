/* build_vit.h: the transformer pieces build_vit3d.c makes and build_vit3d_diffusion.c reuses (parameter names as
 * timm's / DiT's); internal to src/families. */
#pragma once
#include "graph/model.h"

/* LayerNorm over x's last axis; with affine its weight and bias are parameters "<name>.weight|bias" (DiT's adaLN
 * blocks normalise without them: the modulation is their affine). */
int vit_layernorm(Model *m, const char *name, int x, int affine);
/* A Linear over x's rows to `out` features, weight "<name>.weight" [out][in] and bias; GELU (erf) fused after it
 * when gelu. */
int vit_linear(Model *m, const char *name, int x, int out, int gelu);
/* a + b */
int vit_add(Model *m, const char *name, int a, int b);
/* Nodes first .. the last one made so far as a Block (model.h): activation checkpointing's unit, one per
 * transformer block, its last node the residual add or gate that makes the block's output. */
void vit_checkpoint_block(Model *m, int first);
