/* device_options.h: the choices a GPU run makes once for all its convolutions (backend.h's
 * backend_cuda_set_options; read by conv3d's cuDNN planner through cuda_check.h's vx_cuda_options). */
#pragma once

typedef struct {
    int deterministic; /* 1: only algorithms whose results are bitwise reproducible run to run (convolutions;
                          every own kernel is deterministic anyway) */
    int allow_tf32;    /* 1: cuDNN may use TF32 tensor cores in float32 convolutions (Ampere and newer; about 1e-3
                          relative error); 0: full float32 FMA math */
} BackendOptions;
