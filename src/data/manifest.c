/* manifest.c: reading a CSV manifest or listing a folder of volumes (see manifest.h). */
#include "data/manifest.h"

#include <errno.h>
#include <glob.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fsutil.h"
#include "core/util.h"
#include "common/rng.h"

#define MANIFEST_MAX_BYTES (64 << 20) /* a million rows of long paths */
#define MANIFEST_MAX_FIELDS 256

static void add(Manifest *m, int *cap, const char *path, int row, int val) {
    if (m->n == *cap) m->e = vx_realloc(m->e, (size_t)(*cap = *cap ? 2 * *cap : 64) * sizeof *m->e);
    m->e[m->n++] = (ManifestEntry){.path = strdup(path), .row = row, .val = val};
    if (!m->e[m->n - 1].path) vx_exit_error(VX_EXIT_MEMORY, "out of memory reading %s", m->origin);
}

/* Splits one CSV record starting at *p (up to end) into fields (NUL-terminated copies in buf); advances *p past
 * its line end. Returns the field count, or -1 for an unterminated quote. */
static int split_record(const char **p, const char *end, char *buf, size_t buf_len, char **fields, int max) {
    int n = 0;
    size_t o = 0;
    const char *s = *p;
    fields[n++] = buf;
    int quoted = 0;
    for (; s < end; s++) {
        const char ch = *s;
        if (quoted) {
            if (ch == '"' && s + 1 < end && s[1] == '"') s++; /* "" inside quotes is one quote */
            else if (ch == '"') {
                quoted = 0;
                continue;
            }
        } else if (ch == '"') {
            quoted = 1;
            continue;
        } else if (ch == ',') {
            if (o + 1 >= buf_len || n == max) break;
            buf[o++] = 0;
            fields[n++] = buf + o;
            continue;
        } else if (ch == '\n' || ch == '\r') {
            break;
        }
        if (o + 1 < buf_len) buf[o++] = ch;
    }
    buf[o] = 0;
    if (quoted) return -1;
    while (s < end && (*s == '\r' || *s == '\n')) {
        if (*s++ == '\n') break;
    }
    *p = s;
    return n;
}

static int column(char **fields, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(fields[i], name) == 0) return i;
    return -1;
}

/* Holds out round(fraction x n) entries, at least 1 when fraction > 0 and n > 1, by a seeded permutation. */
static void draw_validation(Manifest *m, double fraction, uint64_t seed) {
    int k = (int)(fraction * m->n + 0.5);
    if (fraction > 0 && k == 0 && m->n > 1) k = 1;
    if (k >= m->n) k = m->n - 1;
    int *order = vx_malloc((size_t)(m->n ? m->n : 1) * sizeof *order);
    for (int i = 0; i < m->n; i++) order[i] = i;
    for (int i = m->n - 1; i > 0; i--) { /* Fisher-Yates on the counter-based hash: the same split every run */
        const int j = (int)(vx_hash3(seed, 0x5B117ull, (uint64_t)i) % (uint64_t)(i + 1));
        const int t = order[i];
        order[i] = order[j], order[j] = t;
    }
    for (int i = 0; i < k; i++) m->e[order[i]].val = 1;
    free(order);
}

void manifest_parse_csv(Manifest *m, const DataConfig *cfg, int64_t seed, const char *csv_path, const char *text,
                        size_t len) {
    memset(m, 0, sizeof *m);
    snprintf(m->origin, sizeof m->origin, "%s", csv_path);
    char dir[CONFIG_STR];
    snprintf(dir, sizeof dir, "%s", csv_path);
    const char *base = dirname(dir);
    const char *p = text, *end = text + len;
    static char line[16384];
    char *f[MANIFEST_MAX_FIELDS];
    int n = split_record(&p, end, line, sizeof line, f, MANIFEST_MAX_FIELDS);
    if (n < 0) vx_usage_error("%s:1: an unterminated quote in the header row", csv_path);
    const int pc = column(f, n, cfg->path_column), sc = column(f, n, cfg->split_column);
    if (pc < 0)
        vx_usage_error("%s:1: no column \"%s\" in the header row; name the path column with data.path_column", csv_path,
                       cfg->path_column);
    int cap = 0, with_split = sc >= 0;
    for (int row = 2; p < end; row++) {
        n = split_record(&p, end, line, sizeof line, f, MANIFEST_MAX_FIELDS);
        if (n < 0) vx_usage_error("%s:%d: an unterminated quote", csv_path, row);
        if (n == 1 && f[0][0] == 0) continue; /* a blank line */
        if (pc >= n || f[pc][0] == 0)
            vx_usage_error("%s:%d: the row has no path (column \"%s\"); give every row one or remove it", csv_path, row,
                           cfg->path_column);
        int val = 0;
        if (with_split) {
            const char *v = sc < n ? f[sc] : "";
            if (strcmp(v, "train") == 0) val = 0;
            else if (strcmp(v, "val") == 0 || strcmp(v, "validation") == 0) val = 1;
            else
                vx_usage_error("%s:%d: split \"%s\" is neither train nor val (column \"%s\")", csv_path, row, v,
                               cfg->split_column);
        }
        char path[4096];
        if (f[pc][0] == '/') snprintf(path, sizeof path, "%s", f[pc]);
        else snprintf(path, sizeof path, "%s/%s", base, f[pc]);
        add(m, &cap, path, row, val);
    }
    if (m->n == 0) vx_usage_error("%s: the manifest lists no volumes", csv_path);
    if (!with_split) draw_validation(m, cfg->val_fraction, (uint64_t)seed);
}

static int natural(const void *a, const void *b) { return strverscmp(*(char *const *)a, *(char *const *)b); }

void manifest_load(Manifest *m, const DataConfig *cfg, int64_t seed) {
    if (strcmp(cfg->source, "csv") == 0) {
        size_t len;
        char *text = fs_read_file(cfg->csv, MANIFEST_MAX_BYTES, &len);
        if (!text)
            vx_usage_error("%s: cannot read the manifest (%s); check data.csv", cfg->csv,
                           errno == EFBIG ? "larger than 64 MiB" : strerror(errno));
        manifest_parse_csv(m, cfg, seed, cfg->csv, text, len);
        free(text);
        return;
    }
    memset(m, 0, sizeof *m);
    snprintf(m->origin, sizeof m->origin, "the folder %s", cfg->dir);
    char pattern[2 * CONFIG_STR + 2];
    snprintf(pattern, sizeof pattern, "%s/%s", cfg->dir, cfg->glob);
    glob_t g;
    const int rc = glob(pattern, 0, NULL, &g);
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0))
        vx_usage_error("%s: no entry matches data.glob \"%s\"; check data.dir and data.glob", cfg->dir,
                       cfg->glob);
    if (rc != 0) vx_usage_error("%s: cannot list the folder; check data.dir", cfg->dir);
    qsort(g.gl_pathv, g.gl_pathc, sizeof *g.gl_pathv, natural);
    int cap = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) add(m, &cap, g.gl_pathv[i], 0, 0);
    globfree(&g);
    draw_validation(m, cfg->val_fraction, (uint64_t)seed);
}

void manifest_free(Manifest *m) {
    for (int i = 0; i < m->n; i++) free(m->e[i].path);
    free(m->e);
    memset(m, 0, sizeof *m);
}
