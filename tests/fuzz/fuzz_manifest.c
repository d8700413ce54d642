/* fuzz_manifest.c: the CSV manifest reader (manifest_parse_csv: quoting, line ends, columns, splits, the seeded
 * validation draw). Every input must give a list or be refused with exit 2; a list's entries all have paths. */
#include <string.h>

#include "core/config.h"
#include "data/manifest.h"
#include "fuzz_harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static Config cfg;
    static int ready;
    if (!ready) {
        config_defaults(&cfg);
        ready = 1;
    }
    static Manifest m; /* static: a refused input's longjmp must not leave it in a dead frame */
    const int code =
        FUZZ_CATCH(manifest_parse_csv(&m, &cfg.data, cfg.train.seed, "fuzz/list.csv", (const char *)data, size));
    if (code == 0) {
        for (int i = 0; i < m.n; i++)
            if (!m.e[i].path || !m.e[i].path[0]) abort();
        manifest_free(&m);
    } else if (code != VX_EXIT_USAGE) {
        abort();
    }
    return 0;
}
