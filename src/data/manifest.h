/* manifest.h: the list of volumes a run reads: a CSV manifest (data.source csv) or a folder (data.source dir),
 * each entry a path (a NIfTI file or a folder of PNG slices) and its split. The CSV has a header row; data.path_column
 * names the path column (paths relative to the CSV's folder unless absolute); data.split_column, when the CSV has
 * it, says train or val per row; quoted fields ("a,b") and CRLF line ends are read. A folder source lists the
 * entries that match data.glob, in natural order. Without a split column data.val_fraction of the entries is held
 * out for validation by a seeded draw. Bad input (no such file, a row without a path, an unknown split value, an
 * empty list) is one line naming the file and row, exit 2. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "core/config_data.h"

typedef struct {
    char *path;   /* as the readers take it */
    int row;      /* the CSV row it came from (1 = the header), 0 for a folder source */
    int val;      /* 1: held out for validation */
} ManifestEntry;

typedef struct {
    ManifestEntry *e;
    int n;
    char origin[CONFIG_STR + 32]; /* "data/list.csv" or "the folder data/ct": where errors point */
} Manifest;

/* seed (train.seed): the validation draw without a split column. */
void manifest_load(Manifest *m, const DataConfig *cfg, int64_t seed);
void manifest_free(Manifest *m);
/* The same from CSV text in memory (the file at csv_path gave it): the CSV reader's fuzz target enters here. */
void manifest_parse_csv(Manifest *m, const DataConfig *cfg, int64_t seed, const char *csv_path, const char *text,
                        size_t len);
