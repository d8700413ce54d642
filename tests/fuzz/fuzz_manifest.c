/* fuzz_manifest.c: the CSV manifest reader (manifest_parse_csv: a BOM, quoting, line ends, rows of any length,
 * the column limit, NUL bytes, repeated columns, splits, the seeded validation draw, the repeat and leak counts).
 * Every input must give a list or be refused with exit 2; a list's entries all have paths and rows, and its
 * warning counts are within what its rows allow. */
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
            if (!m.e[i].path || !m.e[i].path[0] || m.e[i].row < 2) abort();
        /* the warnings' counts: a repeat or a leak needs two rows */
        if (m.dup_rows < 0 || m.dup_rows >= m.n || m.leaked < 0 || 2 * m.leaked > m.n) abort();
        manifest_report(&m); /* (stderr is closed by the fuzzer) */
        manifest_free(&m);
    } else if (code != VX_EXIT_USAGE) {
        abort();
    }
    return 0;
}
