/* fuzz_manifest.c: the CSV manifest reader (manifest_parse_csv: a BOM, quoting, line ends, rows of any length,
 * the column limit, NUL bytes, repeated columns, splits, the seeded validation draw, the repeat and leak counts),
 * then a head's labels from an accepted list (labels_read and labels_check_sets, issue 34: each task's columns,
 * label, time,event, y and a,b, whatever their text: numbers beyond float32, censored sets, one class). Every input
 * must give a list (and labels) or be refused with exit 2; a list's entries all have paths and rows, its warning
 * counts are within what its rows allow, and accepted labels are finite float32 within their task's range. */
#include <string.h>

#include "core/config.h"
#include <math.h>

#include "data/labels.h"
#include "data/manifest.h"
#include "fuzz_harness.h"

/* The labels each task reads from the list (its columns named by data.label_columns), checked as training checks
 * them; what is accepted must be finite and in the task's range. */
static void labels_of_every_task(const Manifest *m, const Config *base) {
    static const struct { const char *task, *columns; int classes; } TASKS[] = {
        {"classification", "", 3}, {"survival", "", 1}, {"regression", "y", 1}, {"multilabel", "a,b", 2}};
    static int *train, *val;
    static float *labels;
    for (size_t k = 0; k < sizeof TASKS / sizeof TASKS[0]; k++) {
        static DataConfig d;
        d = base->data;
        snprintf(d.label_columns, sizeof d.label_columns, "%s", TASKS[k].columns);
        labels = NULL;
        if (FUZZ_CATCH(labels = labels_read(m, &d, TASKS[k].task, TASKS[k].classes)) != 0) {
            free(labels);
            continue;
        }
        const int per = labels_per_sample(TASKS[k].task, TASKS[k].classes);
        for (long i = 0; i < (long)m->n * per; i++)
            if (!isfinite(labels[i])) abort();
        train = malloc(sizeof(int) * (size_t)(m->n + 1)), val = malloc(sizeof(int) * (size_t)(m->n + 1));
        int nt = 0, nv = 0;
        for (int i = 0; i < m->n; i++) {
            if (m->e[i].val) val[nv++] = i;
            else train[nt++] = i;
        }
        FUZZ_CATCH(labels_check_sets(labels, train, nt, val, nv, TASKS[k].task, TASKS[k].classes, m->origin, 1));
        free(train);
        free(val);
        free(labels);
    }
}

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
        labels_of_every_task(&m, &cfg);
        manifest_free(&m);
    } else if (code != VX_EXIT_USAGE) {
        abort();
    }
    return 0;
}
