/* suggest.c: the nearest known name to a mistyped one (see suggest.h). */
#include "core/suggest.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#define SUGGEST_MAX 64 /* longer words are compared on their first 64 characters: no name here is longer */

/* Optimal string alignment distance (Damerau-Levenshtein without repeated edits of one substring), ignoring case. */
static int distance(const char *a, const char *b) {
    int la = (int)strnlen(a, SUGGEST_MAX), lb = (int)strnlen(b, SUGGEST_MAX);
    int d[SUGGEST_MAX + 1][SUGGEST_MAX + 1];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            const int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
            int v = d[i - 1][j - 1] + (ca != cb);
            if (d[i - 1][j] + 1 < v) v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) && tolower((unsigned char)a[i - 2]) == cb &&
                d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[la][lb];
}

static int allowed_edits(const char *word) {
    const size_t n = strlen(word);
    return n <= 4 ? 1 : n <= 8 ? 2 : 3;
}

const char *suggest_nearest(const char *word, const char *const *names, int n) {
    const char *best = NULL;
    int best_d = allowed_edits(word) + 1, ties = 0;
    for (int i = 0; i < n; i++) {
        if (!names[i] || !names[i][0]) continue;
        const int d = distance(word, names[i]);
        if (d < best_d) best = names[i], best_d = d, ties = 0;
        else if (d == best_d && best && strcmp(best, names[i]) != 0) ties++;
    }
    return ties ? NULL : best;
}

const char *suggest_nearest_in_list(const char *word, const char *list, char *out, size_t len) {
    const char *names[128];
    char buf[2048];
    int n = 0;
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && n < 128; t = strtok_r(NULL, ",", &save))
        names[n++] = t;
    const char *best = suggest_nearest(word, names, n);
    snprintf(out, len, "%s", best ? best : "");
    return out;
}

char *suggest_phrase(const char *nearest, const char *prefix, char *out, size_t len) {
    if (nearest && nearest[0]) snprintf(out, len, " (did you mean %s%s?)", prefix ? prefix : "", nearest);
    else if (len) out[0] = 0;
    return out;
}
