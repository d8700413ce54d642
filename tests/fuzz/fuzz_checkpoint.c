/* fuzz_checkpoint.c: the checkpoint loader (ckpt_verify, then ckpt_apply into an allocated model) against a tiny
 * model (tests/fuzz/ckpt_model.json, read from the working directory ci/fuzz.sh runs in). Mutations almost always
 * break the CRC-32, which would stop every input at the checksum; so for inputs whose first byte is odd the target
 * recomputes the CRC first, and the header's range checks see the mutated fields themselves. */
#include <string.h>
#include <zlib.h>

#include "core/config.h"
#include "fuzz_harness.h"
#include "ckpt/ckpt.h"
#include "hw/hw_plan.h"

static Model *model;
static int64_t steps; /* train.steps of the model's config: a checkpoint's step must be below it */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    static Config cfg;
    config_load(&cfg, "tests/fuzz/ckpt_model.json");
    const ModelOptions opt = hw_model_options(&cfg.train);
    model = model_build(&cfg.model, &opt, 1, backend_cpu());
    steps = cfg.train.steps;
    model_allocate(model);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int fix_crc = data[0] & 1;
    unsigned char *buf = malloc(size - 1 ? size - 1 : 1); /* the first byte only chooses */
    memcpy(buf, data + 1, size - 1);
    const size_t len = size - 1;
    if (fix_crc && len >= 4) {
        uint32_t crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), buf, (uInt)(len - 4));
        memcpy(buf + len - 4, &crc, 4);
    }
    const CkptExpect want = ckpt_expect(model, steps);
    Ckpt ck = {0};
    const int code = FUZZ_CATCH(ckpt_verify(buf, len, &want, "fuzz.ckpt", &ck.header));
    if (code == 0) {
        ck.file = buf;
        ck.bytes = len;
        CkptState st;
        ckpt_apply(&ck, model, &st);
        if (st.step < 0 || st.step >= want.steps || st.next_sample < st.step) abort(); /* what the checks promise */
    } else if (code != VX_EXIT_USAGE) {
        abort();
    }
    free(buf);
    return 0;
}
