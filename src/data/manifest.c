/* manifest.c: reading a CSV manifest or listing a folder of volumes (see manifest.h). */
#include "data/manifest.h"

#include <errno.h>
#include <glob.h>
#include <libgen.h>
#include <stdarg.h>
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

/* n copies of fields (a record's, or the header's) */
static char **copy_fields(const Manifest *m, char *const *fields, int n) {
    char **out = vx_malloc((size_t)(n > 0 ? n : 1) * sizeof *out);
    for (int i = 0; i < n; i++)
        if (!(out[i] = strdup(fields[i]))) vx_exit_error(VX_EXIT_MEMORY, "out of memory reading %s", m->origin);
    return out;
}

static void free_fields(char **fields, int n) {
    for (int i = 0; fields && i < n; i++) free(fields[i]);
    free(fields);
}

/* ---- CSV records ------------------------------------------------------------------------------------------- */

/* A CSV reader over text in memory (RFC 4180 as spreadsheets write it): records of any length; a quoted field may
 * hold commas, doubled quotes and line ends; CRLF or LF; a UTF-8 byte order mark before the header is skipped.
 * A record's fields are NUL-terminated copies in buf, field[i] pointing into it. */
typedef struct {
    const char *p, *end, *origin;
    int record;   /* of the record read last: 1 is the header */
    char *buf;
    size_t cap;
    char **field;
    int n;
    size_t *at; /* field offsets while buf may still move */
    char error[256]; /* why csv_next returned -1 */
} Csv;

static void csv_open(Csv *c, const char *origin, const char *text, size_t len) {
    memset(c, 0, sizeof *c);
    c->origin = origin;
    c->p = text;
    c->end = text + len;
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) c->p += 3; /* Excel's "CSV UTF-8" */
    c->cap = 256;
    c->buf = vx_malloc(c->cap);
    c->field = vx_malloc(MANIFEST_MAX_FIELDS * sizeof *c->field);
    c->at = vx_malloc(MANIFEST_MAX_FIELDS * sizeof *c->at);
}

static void csv_close(Csv *c) {
    free(c->buf);
    free(c->field);
    free(c->at);
}

static void put(Csv *c, size_t *o, char ch) {
    if (*o + 1 >= c->cap) c->buf = vx_realloc(c->buf, c->cap *= 2);
    c->buf[(*o)++] = ch;
}

/* Reads the next record: 1, 0 at the end of the text, or -1 and c->error for an unterminated quote, a NUL byte
 * (not UTF-8 text: UTF-16, as some spreadsheets save it?) or more than MANIFEST_MAX_FIELDS fields. */
static int csv_next(Csv *c) {
    if (c->p >= c->end) return 0;
    c->record++;
    size_t o = 0;
    int quoted = 0;
    c->n = 0;
    c->at[c->n++] = 0;
    const char *s = c->p;
    for (; s < c->end; s++) {
        const char ch = *s;
        if (ch == 0) {
            snprintf(c->error, sizeof c->error, "a NUL byte in a field: a manifest is UTF-8 text (a spreadsheet's "
                     "\"Unicode text\" is UTF-16: save it as CSV UTF-8)");
            return -1;
        }
        if (quoted) {
            if (ch == '"' && s + 1 < c->end && s[1] == '"') s++; /* "" inside quotes is one quote */
            else if (ch == '"') {
                quoted = 0;
                continue;
            }
        } else if (ch == '"') {
            quoted = 1;
            continue;
        } else if (ch == ',') {
            if (c->n == MANIFEST_MAX_FIELDS) {
                snprintf(c->error, sizeof c->error, "the row has more than %d columns, more than a manifest holds; "
                         "check its delimiters and quotes", MANIFEST_MAX_FIELDS);
                return -1;
            }
            put(c, &o, 0);
            c->at[c->n++] = o;
            continue;
        } else if (ch == '\n' || ch == '\r') {
            break;
        }
        put(c, &o, ch);
    }
    put(c, &o, 0);
    if (quoted) {
        snprintf(c->error, sizeof c->error, "an unterminated quote");
        return -1;
    }
    if (s < c->end && *s == '\r') s++;
    if (s < c->end && *s == '\n') s++;
    c->p = s;
    for (int i = 0; i < c->n; i++) c->field[i] = c->buf + c->at[i];
    return 1;
}

/* Refuses the manifest (exit 2) after freeing what reading it holds: the fuzz target's refused inputs must not
 * leak (they longjmp out of vx_usage_error). */
__attribute__((noreturn, format(printf, 4, 5))) static void refuse(Manifest *m, Csv *c, char *path, const char *fmt,
                                                                   ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    csv_close(c);
    free(path);
    manifest_free(m);
    vx_usage_error("%s", msg);
}

/* The next record, or the refusal naming the file and record. */
static int next_or_refuse(Manifest *m, Csv *c, char *path) {
    const int r = csv_next(c);
    if (r < 0) refuse(m, c, path, "%s:%d: %s", c->origin, c->record, c->error);
    return r;
}

/* ---- columns ----------------------------------------------------------------------------------------------- */

/* A column the manifest reads, by its name in the header: the path and the split column today (labels would be
 * more of these). `key` is the config key that names it, for messages. */
typedef struct {
    const char *key, *name;
    int required;
    int index; /* in the header; -1 when absent */
} Column;

/* Finds each column in the header row (the record just read). A column the manifest reads given twice is
 * ambiguous (exit 2); any other name given twice is counted for a warning. */
static void find_columns(Manifest *m, Csv *c, Column *cols, int ncols) {
    for (int k = 0; k < ncols; k++) {
        cols[k].index = -1;
        for (int i = 0; i < c->n; i++) {
            if (strcmp(c->field[i], cols[k].name) != 0) continue;
            if (cols[k].index >= 0)
                refuse(m, c, NULL, "%s:1: column \"%s\" (%s) is in the header twice, as columns %d and %d; which "
                       "one is meant is not clear: rename one", c->origin, cols[k].name, cols[k].key,
                       cols[k].index + 1, i + 1);
            cols[k].index = i;
        }
        if (cols[k].required && cols[k].index < 0)
            refuse(m, c, NULL, "%s:1: no column \"%s\" in the header row; name the path column with %s", c->origin,
                   cols[k].name, cols[k].key);
    }
    for (int i = 0; i < c->n; i++)
        for (int j = 0; j < i; j++)
            if (strcmp(c->field[i], c->field[j]) == 0) {
                if (!m->dup_columns) snprintf(m->dup_column, sizeof m->dup_column, "%.60s", c->field[i]);
                m->dup_columns++;
                break;
            }
}

/* Field of column `col` in the record just read; "" when the row is shorter. */
static const char *field_of(const Csv *c, const Column *col) {
    return col->index >= 0 && col->index < c->n ? c->field[col->index] : "";
}

/* ---- the validation split and its checks ------------------------------------------------------------------- */

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

/* "a/./b//c" -> "a/b/c": the same file written two ways compares equal (links are not followed). */
static void normalize(char *path) {
    const char first = path[0];
    char *w = path;
    for (const char *r = path; *r;) {
        if (r[0] == '/' && r[1] == '/') {
            r++;
        } else if (r[0] == '/' && r[1] == '.' && (r[2] == '/' || r[2] == 0)) {
            r += 2;
        } else if (r == path && r[0] == '.' && r[1] == '/') {
            r += 2;
        } else {
            *w++ = *r++;
        }
    }
    if (w == path) *w++ = first == '/' ? '/' : '.'; /* "/." is "/", never "" (the fuzz target found it) */
    *w = 0;
}

static int by_path(const void *a, const void *b, void *manifest) {
    const Manifest *m = manifest;
    const int i = *(const int *)a, j = *(const int *)b;
    const int c = strcmp(m->e[i].path, m->e[j].path);
    return c ? c : (i > j) - (i < j);
}

/* Counts entries that repeat a file listed before in the same split (read as often as listed) and files in both
 * splits (validation would measure training data), each with the first example; and an empty validation set. */
static void check_split(Manifest *m, int with_split, double val_fraction) {
    int *idx = vx_malloc((size_t)(m->n ? m->n : 1) * sizeof *idx);
    for (int i = 0; i < m->n; i++) idx[i] = i;
    qsort_r(idx, (size_t)m->n, sizeof *idx, by_path, m);
    for (int a = 0, b; a < m->n; a = b) {
        int first[2] = {-1, -1};
        for (b = a; b < m->n && strcmp(m->e[idx[b]].path, m->e[idx[a]].path) == 0; b++) {
            const ManifestEntry *e = &m->e[idx[b]];
            if (first[e->val] < 0) {
                first[e->val] = idx[b];
                continue;
            }
            if (!m->dup_rows) m->dup_example[0] = m->e[first[e->val]].row, m->dup_example[1] = e->row;
            m->dup_rows++;
        }
        if (first[0] >= 0 && first[1] >= 0) {
            if (!m->leaked) m->leak_example[0] = m->e[first[0]].row, m->leak_example[1] = m->e[first[1]].row;
            m->leaked++;
        }
    }
    free(idx);
    int n_val = 0;
    for (int i = 0; i < m->n; i++) n_val += m->e[i].val;
    m->empty_val = n_val == 0 && (with_split || val_fraction > 0);
}

/* ---- sources ----------------------------------------------------------------------------------------------- */

void manifest_parse_csv(Manifest *m, const DataConfig *cfg, int64_t seed, const char *csv_path, const char *text,
                        size_t len) {
    memset(m, 0, sizeof *m);
    snprintf(m->origin, sizeof m->origin, "%s", csv_path);
    char dir[CONFIG_STR];
    snprintf(dir, sizeof dir, "%s", csv_path);
    const char *base = dirname(dir);
    Csv c;
    csv_open(&c, csv_path, text, len);
    if (!next_or_refuse(m, &c, NULL))
        refuse(m, &c, NULL, "%s: the manifest is empty (a header row with a \"%s\" column is expected)", csv_path,
               cfg->path_column);
    enum { COL_PATH, COL_SPLIT, NCOLS };
    Column cols[NCOLS] = {{"data.path_column", cfg->path_column, 1, -1}, {"data.split_column", cfg->split_column, 0, -1}};
    find_columns(m, &c, cols, NCOLS);
    m->with_split = cols[COL_SPLIT].index >= 0;
    m->header = copy_fields(m, c.field, c.n); /* labels are read by name later (dataset_set_labels) */
    m->n_header = c.n;
    int cap = 0;
    size_t path_cap = 256;
    char *path = vx_malloc(path_cap);
    while (next_or_refuse(m, &c, path)) {
        if (c.n == 1 && c.field[0][0] == 0) continue; /* a blank line */
        const char *file = field_of(&c, &cols[COL_PATH]);
        if (file[0] == 0)
            refuse(m, &c, path, "%s:%d: the row has no path (column \"%s\"); give every row one or remove it",
                   csv_path, c.record, cols[COL_PATH].name);
        int val = 0;
        if (m->with_split) {
            const char *v = field_of(&c, &cols[COL_SPLIT]);
            if (strcmp(v, "train") == 0) val = 0;
            else if (strcmp(v, "val") == 0 || strcmp(v, "validation") == 0) val = 1;
            else
                refuse(m, &c, path, "%s:%d: split \"%s\" is neither train nor val (column \"%s\")", csv_path, c.record,
                       v, cols[COL_SPLIT].name);
        }
        const size_t need = strlen(base) + strlen(file) + 2;
        if (need > path_cap) path = vx_realloc(path, path_cap = need);
        if (file[0] == '/') snprintf(path, path_cap, "%s", file);
        else snprintf(path, path_cap, "%s/%s", base, file);
        normalize(path);
        add(m, &cap, path, c.record, val);
        m->e[m->n - 1].fields = copy_fields(m, c.field, c.n);
        m->e[m->n - 1].n_fields = c.n;
    }
    if (m->n == 0) refuse(m, &c, path, "%s: the manifest lists no volumes", csv_path);
    free(path);
    csv_close(&c);
    if (!m->with_split) draw_validation(m, cfg->val_fraction, (uint64_t)seed);
    check_split(m, m->with_split, cfg->val_fraction);
}

static int natural(const void *a, const void *b) { return strverscmp(*(char *const *)a, *(char *const *)b); }

/* A listing's x.img (.img.gz) beside its x.hdr (.hdr.gz) is the same volume, read through the .hdr: not an entry of
 * its own. */
static int pair_data_file(const glob_t *g, const char *path) {
    const size_t n = strlen(path), gz = n > 3 && strcmp(path + n - 3, ".gz") == 0 ? 3 : 0;
    if (n < 4 + gz || strncmp(path + n - gz - 4, ".img", 4) != 0) return 0;
    char *hdr = strdup(path);
    if (!hdr) vx_exit_error(VX_EXIT_MEMORY, "out of memory listing a folder");
    memcpy(hdr + n - gz - 4, ".hdr", 4);
    const char *key = hdr;
    const int found = bsearch(&key, g->gl_pathv, g->gl_pathc, sizeof *g->gl_pathv, natural) != NULL;
    free(hdr);
    return found;
}

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
    for (size_t i = 0; i < g.gl_pathc; i++)
        if (!pair_data_file(&g, g.gl_pathv[i])) add(m, &cap, g.gl_pathv[i], 0, 0);
    globfree(&g);
    draw_validation(m, cfg->val_fraction, (uint64_t)seed);
    check_split(m, 0, cfg->val_fraction);
}

void manifest_report(const Manifest *m) {
    if (m->dup_columns)
        vx_error_line("warning: %s: %d column name(s) of the header given twice (\"%s\" first); the columns read are "
                      "named once", m->origin, m->dup_columns, m->dup_column);
    if (m->dup_rows)
        vx_error_line("warning: %s: %d row(s) list a volume listed before in the same split (row %d repeats row %d "
                      "first); each is read as often as it is listed", m->origin, m->dup_rows, m->dup_example[1],
                      m->dup_example[0]);
    if (m->leaked)
        vx_error_line("warning: %s: %d volume(s) are in both the training and the validation split (rows %d and %d "
                      "first): validation measures training data", m->origin, m->leaked, m->leak_example[0],
                      m->leak_example[1]);
    if (m->empty_val)
        vx_error_line("warning: %s: no volume is held out for validation (%s); the run validates nothing", m->origin,
                      m->with_split ? "no row's split is val" : "one volume, or data.val_fraction rounds to none");
}

int manifest_column(const Manifest *m, const char *name) {
    for (int i = 0; i < m->n_header; i++)
        if (strcmp(m->header[i], name) == 0) return i;
    return -1;
}

const char *manifest_field(const Manifest *m, int i, int col) {
    const ManifestEntry *e = &m->e[i];
    return col >= 0 && col < e->n_fields ? e->fields[col] : "";
}

void manifest_free(Manifest *m) {
    for (int i = 0; i < m->n; i++) {
        free(m->e[i].path);
        free_fields(m->e[i].fields, m->e[i].n_fields);
    }
    free_fields(m->header, m->n_header);
    free(m->e);
    memset(m, 0, sizeof *m);
}
