/* nccl_id.c: the NCCL unique id the ranks of `train --gpus N` meet with, made by the parent (launch.h). Making one
 * starts NCCL's bootstrap listener in this process and creates no CUDA context. */
#include <stdio.h>
#include <string.h>

#include "parallel/launch.h"

#ifdef VX_NCCL
#include <nccl.h>

int dist_nccl_unique_id(char *hex, size_t len, char *why, size_t why_len) {
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
        snprintf(why, why_len, "ncclGetUniqueId failed: %s (%s)", ncclGetErrorString(r), ncclGetLastError(NULL));
        return 0;
    }
    if (len < 2 * sizeof id.internal + 1) {
        snprintf(why, why_len, "no room for the id");
        return 0;
    }
    for (size_t i = 0; i < sizeof id.internal; i++) snprintf(hex + 2 * i, 3, "%02x", (unsigned char)id.internal[i]);
    return 1;
}
#else
int dist_nccl_unique_id(char *hex, size_t len, char *why, size_t why_len) {
    (void)hex, (void)len;
    snprintf(why, why_len, "this build has no NCCL (built with CUDA=0, or NCCL was not found: make cuda-info)");
    return 0;
}
#endif

static int hex_value(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

int dist_nccl_id_from_hex(const char *hex, void *out, size_t len) {
    if (strlen(hex) != 2 * len) return 0;
    for (size_t i = 0; i < len; i++) {
        const int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) return 0;
        ((unsigned char *)out)[i] = (unsigned char)(hi * 16 + lo);
    }
    return 1;
}
