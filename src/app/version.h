/* version.h: what this binary is: its version (git describe at build time, or VX_VERSION), how it was built, and the
 * libraries it was built against and runs with; for `voxscale --version`, `voxscale env` and the run's plan.txt. */
#pragma once
#include <stdio.h>

/* The lines of `voxscale --version`: version, build, compiler, and the libraries (CUDA, cuDNN, NCCL, oneDNN,
 * OpenBLAS, MPI, ...) built against and, where they load at run time, loaded. `prefix` starts every line but the
 * first ("- " for env's list). */
void version_print(FILE *out, const char *prefix);
