/* cupti_load.h: CUPTI loaded when a profile first needs it (dlopen), not linked: a run without --profile needs no
 * libcupti at all, and a machine whose CUPTI is missing or of another major version still trains (issue 20).
 * CUDA builds only (gpu_activity.c, the one user, calls CUPTI through cupti_fn).
 *
 * Where from, first found wins: VX_CUPTI_LIB (a path; ci/gpu/libpath.sh sets it to the toolkit's CUPTI), the
 * library the build found (VX_CUPTI_LIBDIR, mk/trace.mk: the toolkit's on the machine that built, and on a GPU
 * machine with the same toolkit layout its own), then libcupti.so.<major> through the library path (RUNPATH,
 * LD_LIBRARY_PATH: a pip wheel's). */
#pragma once
#include <stddef.h>

#include <cupti.h>

#define VX_CUPTI_FUNCTIONS(X)                                                                                    \
    X(cuptiGetVersion)                                                                                           \
    X(cuptiGetCallbackName)                                                                                      \
    X(cuptiGetResultString)                                                                                      \
    X(cuptiGetTimestamp)                                                                                         \
    X(cuptiSetThreadIdType)                                                                                      \
    X(cuptiActivityRegisterTimestampCallback)                                                                    \
    X(cuptiActivityRegisterCallbacks)                                                                            \
    X(cuptiActivityGetNextRecord)                                                                                \
    X(cuptiActivityGetNumDroppedRecords)                                                                         \
    X(cuptiActivityEnable)                                                                                       \
    X(cuptiActivityDisable)                                                                                      \
    X(cuptiActivityFlushAll)

typedef struct {
#define VX_CUPTI_FIELD(f) __typeof__(&f) f;
    VX_CUPTI_FUNCTIONS(VX_CUPTI_FIELD)
#undef VX_CUPTI_FIELD
} CuptiFunctions;

/* The loaded functions (every field set), or NULL with why (which file was tried, dlerror's words). Loads once;
 * a failure is remembered. Thread-safe. */
const CuptiFunctions *cupti_load(char *why, size_t why_len);
/* The path of the library loaded ("" before a successful cupti_load). */
const char *cupti_loaded_path(void);
