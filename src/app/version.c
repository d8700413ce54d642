/* version.c: the build's identity and its libraries' versions (see version.h). The build facts come from
 * $(BUILD)/gen/vx_build_info.h, which the Makefile rewrites only when they change. */
#include "app/version.h"

#include <cJSON.h>
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <png.h>
#include <protobuf-c/protobuf-c.h>
#include <string.h>
#include <zlib.h>
#ifdef VX_MPI
#include <mpi.h>
#endif

#include "common/cpu_gemm.h"
#include "core/build_version.h"
#include "hw/hw.h"
#include "vx_build_info.h"
#include "vx_cuda_archs.h"

void version_print(FILE *out, const char *prefix) {
    fprintf(out, "voxscale %s\n", build_version());
    fprintf(out, "%sbuild: %s; %s %s\n", prefix, VX_BUILD_FLAGS,
#ifdef __clang__
            "clang",
#else
            "gcc",
#endif
            __VERSION__);
#ifdef VX_CUDA
    char built[256], loaded[256];
    hw_cuda_build_versions(built, sizeof built);
    hw_cuda_loaded_versions(loaded, sizeof loaded);
    char found[1024];
    snprintf(found, sizeof found, "%s", VX_CUDA_FOUND);
    for (size_t n = strlen(found); n > 0 && (found[n - 1] == ';' || found[n - 1] == ' ');) found[--n] = 0;
    fprintf(out, "%sCUDA: built with %s (" VX_CUDA_ARCHS "); libraries found at build time: %s\n", prefix, built,
            found);
    fprintf(out, "%sCUDA at run time: %s\n", prefix, loaded);
#else
    fprintf(out, "%sCUDA: not built in (CUDA=0, or no nvcc at build time)\n", prefix);
#endif
    const dnnl_version_t *dn = dnnl_version();
    fprintf(out, "%soneDNN: %d.%d.%d (built against %d.%d.%d)\n", prefix, dn->major, dn->minor, dn->patch,
            DNNL_VERSION_MAJOR, DNNL_VERSION_MINOR, DNNL_VERSION_PATCH);
    char gemm[256];
    cpu_gemm_describe(gemm, sizeof gemm);
    fprintf(out, "%sOpenBLAS: %s; the GEMM on this CPU: %s\n", prefix, openblas_get_config(), gemm);
#ifdef VX_MPI
    char mpi[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int n = 0;
    MPI_Get_library_version(mpi, &n); /* (one of the calls allowed before MPI_Init) */
    mpi[strcspn(mpi, ",\n")] = 0;
    fprintf(out, "%sMPI: %s\n", prefix, mpi);
#else
    fprintf(out, "%sMPI: not built in (MPI=0)\n", prefix);
#endif
    fprintf(out, "%sother: cJSON %s, libpng %s, zlib %s, protobuf-c %s\n", prefix, cJSON_Version(),
            png_get_libpng_ver(NULL), zlibVersion(), protobuf_c_version());
}
