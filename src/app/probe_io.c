/* probe_io.c: what the probes (probe.c, probe_head.c, probe_diffusion.c) share to write their .bin: a host array
 * appended, a flat parameter-shaped buffer in the packed layout, backend floats on the host (see probe.h). */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#include "app/probe.h"
#include "core/util.h"

float *probe_packed_to_host(const Model *m, const float *flat) {
    float *packed = vx_malloc((size_t)m->param_count * sizeof(float));
    model_download_packed(m, flat, packed);
    return packed;
}

long probe_append(FILE *f, float *host, long count) {
    long at = ftell(f) / (long)sizeof(float);
    if (fwrite(host, sizeof(float), (size_t)count, f) != (size_t)count) vx_fatal("cannot write the probe file");
    free(host);
    return at;
}

float *probe_to_host(const Backend *be, const float *src, long count) {
    float *host = vx_malloc((size_t)count * sizeof(float));
    be->copy_to_host(host, src, (size_t)count * sizeof(float));
    return host;
}

void probe_params_json(cJSON *j, const Model *m) {
    cJSON_AddNumberToObject(j, "param_count", (double)m->param_count);
    cJSON *ps = cJSON_AddArrayToObject(j, "params");
    for (int i = 0; i < m->n_params; i++) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "name", m->params[i].name);
        cJSON_AddItemToObject(p, "shape", cJSON_CreateIntArray(m->params[i].shape, m->params[i].ndim));
        cJSON_AddNumberToObject(p, "offset", (double)m->params[i].packed_offset);
        cJSON_AddItemToArray(ps, p);
    }
}
