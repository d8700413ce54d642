/* fuzz_safetensors.c: the safetensors reader (st_parse: header length, JSON, dtypes, shapes, offsets), then every
 * float tensor it accepted read as float32, and its metadata as predict --weights reads it (issue 34): the
 * "voxscale.config" entry parsed as a config. Every input must be accepted or refused with exit 2; an accepted one
 * must keep the promises the checks make (tensors back to back inside the data section), and its reading must stay
 * inside the buffer (ASan sees to that: the input is copied into a buffer of exactly its size). */
#include <string.h>

#include "core/config.h"
#include "core/safetensors.h"
#include "fuzz_harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    unsigned char *buf = malloc(size ? size : 1);
    memcpy(buf, data, size);
    StFile f;
    memset(&f, 0, sizeof f);
    const int code = FUZZ_CATCH(st_parse(buf, size, "fuzz.safetensors", &f));
    if (code != 0 && code != VX_EXIT_USAGE) abort();
    if (code == 0) {
        uint64_t total = 0;
        for (int i = 0; i < f.n; i++) {
            const StTensor *t = &f.t[i];
            if (t->end < t->begin || t->end > size - f.data_at) abort();
            total += t->end - t->begin;
            if (st_find(&f, t->name) == NULL) abort();
            if (!st_is_float(t->dtype) || st_count(t) > (1 << 20)) continue;
            float *out = malloc((size_t)st_count(t) * sizeof(float) + 1);
            st_to_f32(&f, t, out);
            free(out);
        }
        if (total != size - f.data_at) abort(); /* every data byte in exactly one tensor */
        const char *meta = st_meta(&f, "voxscale.config"); /* what predict --weights and export's reader take */
        if (meta) {
            static Config cfg;
            const int c = FUZZ_CATCH(config_parse_text(&cfg, meta, strlen(meta), "fuzz.safetensors (its metadata)"));
            if (c != 0 && c != VX_EXIT_USAGE) abort();
        }
    }
    st_free(&f);
    free(buf);
    return 0;
}
