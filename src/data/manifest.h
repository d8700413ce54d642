/* manifest.h: the list of volumes a run reads: a CSV manifest (data.source csv) or a folder (data.source dir),
 * each entry a path (a NIfTI file or a folder of PNG slices) and its split. The CSV has a header row; data.path_column
 * names the path column (paths relative to the CSV's folder unless absolute); data.split_column, when the CSV has
 * it, says train or val per row. Read as spreadsheets write it: a UTF-8 byte order mark is skipped, quoted fields
 * ("a,b", "say ""x""", line ends inside quotes) and CRLF line ends are read, rows of any length. The columns read
 * are looked up by name in the header (manifest.c's Column list: a new column is one entry there). A folder source
 * lists the entries that match data.glob, in natural order (a .hdr/.img pair once, by its .hdr). Without a split
 * column data.val_fraction of the entries is held out for validation by a seeded draw.
 * Bad input is one line naming the file and row, exit 2: no such column, a row without a path, an unknown split
 * value, an unterminated quote, a NUL byte (UTF-16 text), more than 256 columns, a column read given twice in the
 * header, an empty list. Repeated rows, a file in both splits, an empty validation set and other repeated header
 * names are warnings (manifest_report). */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "core/config_data.h"

typedef struct {
    char *path;   /* as the readers take it */
    int row;      /* the CSV row it came from (1 = the header), 0 for a folder source */
    int val;      /* 1: held out for validation */
    char **fields; /* the CSV row's fields, n_fields of them (NULL for a folder source): labels are read from them */
    int n_fields;
} ManifestEntry;

typedef struct {
    ManifestEntry *e;
    int n;
    char origin[CONFIG_STR + 32]; /* "data/list.csv" or "the folder data/ct": where errors point */
    int with_split;               /* the CSV has the split column */
    /* what manifest_report warns of, once each, with a count and the first example */
    int dup_columns;              /* header names given twice (not of a column read: those are refused) */
    char dup_column[64];
    int dup_rows, dup_example[2]; /* rows repeating a file listed before in the same split: (first row, repeat) */
    int leaked, leak_example[2];  /* files in both splits: (train row, val row) */
    int empty_val;                /* nothing held out although a split column or data.val_fraction asked for it */
    char **header;                /* the CSV's header names, n_header of them (NULL for a folder source) */
    int n_header;
} Manifest;

/* seed (train.seed): the validation draw without a split column. */
void manifest_load(Manifest *m, const DataConfig *cfg, int64_t seed);
void manifest_free(Manifest *m);
/* The same from CSV text in memory (the file at csv_path gave it): the CSV reader's fuzz target enters here. */
void manifest_parse_csv(Manifest *m, const DataConfig *cfg, int64_t seed, const char *csv_path, const char *text,
                        size_t len);
/* The column of the CSV's header named `name`, or -1 (or a folder source). */
int manifest_column(const Manifest *m, const char *name);
/* Entry i's field of column `col` (manifest_column), "" where its row is shorter. */
const char *manifest_field(const Manifest *m, int i, int col);
/* Warns (stderr, one line each) of repeated rows, files in both splits, an empty validation set and repeated
 * header names, with counts: rank 0 calls it once. */
void manifest_report(const Manifest *m);
