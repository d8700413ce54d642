/* cupti_load.c: CUPTI through dlopen (see cupti_load.h). */
#include "trace/gpu_activity.h"

#include <stdio.h>
#include <string.h>

/* CUPTI's record layouts, checked against the headers of CUDA 13.0, 13.2 and 13.5 (cupti_activity.h): from 13.0 to
 * 13.5 every record gpu_activity.c reads is, in a newer minor, the same fields at the same offsets with new ones
 * appended (CUpti_ActivityKernel10 -> Kernel11 in 13.2: + priority; -> Kernel13 in 13.5: + executionModel,
 * sourceGraphId, sourceGraphNodeId; Memcpy6 -> Memcpy7 and Memset4 -> Memset5 in 13.5: + sourceGraphId,
 * sourceGraphNodeId; CUpti_ActivityAPI unchanged). A newer minor fills its newer record, which then reads right
 * through ours. Minors past the last one checked are refused until their headers are checked and this raised. */
#define CUPTI_MINOR_CHECKED 5

int trace_cupti_version_ok(unsigned built, unsigned loaded, char *why, size_t why_len) {
    const unsigned bmaj = built / 10000, bmin = built / 100 % 100, lmaj = loaded / 10000, lmin = loaded / 100 % 100;
    const char *what = NULL;
    if (loaded < 130000) what = "an API version from before CUDA 13";
    else if (lmaj != bmaj) what = "another CUDA major version";
    else if (lmin < bmin) what = "an older CUDA minor version, whose records may lack fields this build reads";
    else if (lmin > CUPTI_MINOR_CHECKED)
        what = "a CUDA minor version newer than the last one whose record layouts were checked (13.5)";
    if (!what) return 1;
    if (why && why_len)
        snprintf(why, why_len, "the CUPTI library loaded has API version %u (CUDA %u.%u): %s; this build reads the "
                 "records of version %u (CUDA %u.%u) and those of newer minors up to 13.%d, whose records only add "
                 "fields; use the libcupti of the CUDA toolkit it was built with (VX_CUPTI_LIB=path)", loaded, lmaj,
                 lmin, what, built, bmaj, bmin, CUPTI_MINOR_CHECKED);
    return 0;
}

#ifdef VX_CUDA
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

#include "trace/cupti_load.h"

#ifndef VX_CUPTI_LIBDIR
#define VX_CUPTI_LIBDIR ""
#endif

static pthread_once_t once = PTHREAD_ONCE_INIT;
static CuptiFunctions fns;
static int loaded;
static char failure[640], loaded_from[512];

static void load(void) {
    char soname[32], built[512] = "";
    snprintf(soname, sizeof soname, "libcupti.so.%d", CUPTI_API_VERSION / 10000);
    if (VX_CUPTI_LIBDIR[0]) snprintf(built, sizeof built, "%s/%s", VX_CUPTI_LIBDIR, soname);
    const char *env = getenv("VX_CUPTI_LIB");
    const char *tries[3] = {env && env[0] ? env : NULL, built[0] ? built : NULL, soname};
    void *h = NULL;
    char errs[400] = "";
    for (int i = 0; i < 3 && !h; i++) {
        if (!tries[i]) continue;
        h = dlopen(tries[i], RTLD_NOW | RTLD_LOCAL);
        if (h) {
            snprintf(loaded_from, sizeof loaded_from, "%s", tries[i]);
        } else {
            const char *e = dlerror();
            snprintf(errs + strlen(errs), sizeof errs - strlen(errs), "%s%s", errs[0] ? "; " : "", e ? e : tries[i]);
        }
    }
    if (!h) {
        snprintf(failure, sizeof failure, "cannot load CUPTI (%s): a profile's GPU side needs the CUDA %d toolkit's "
                 "libcupti (or the nvidia-cuda-cupti wheel) on the library path, or VX_CUPTI_LIB=path", errs,
                 CUPTI_API_VERSION / 10000);
        return;
    }
#define VX_CUPTI_SYM(f)                                                                                          \
    if (!(*(void **)&fns.f = dlsym(h, #f))) {                                                                    \
        snprintf(failure, sizeof failure, "%.400s has no %s: not a CUPTI this build can use", loaded_from, #f);     \
        dlclose(h);                                                                                              \
        return;                                                                                                  \
    }
    VX_CUPTI_FUNCTIONS(VX_CUPTI_SYM)
#undef VX_CUPTI_SYM
    loaded = 1;
}

const CuptiFunctions *cupti_load(char *why, size_t why_len) {
    pthread_once(&once, load);
    if (loaded) return &fns;
    if (why && why_len) snprintf(why, why_len, "%s", failure);
    return NULL;
}

const char *cupti_loaded_path(void) { return loaded ? loaded_from : ""; }
#endif
