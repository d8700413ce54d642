/* suggest.h: "did you mean": the known name nearest to a mistyped one (a flag, a command, a config key), by plain
 * edit distance, for the one-line errors of bad input. */
#pragma once
#include <stddef.h>

/* The name in names[0..n) nearest to `word` by Damerau-Levenshtein distance (insert, delete, substitute, swap two
 * neighbours; case-insensitive), when near enough to be the likely intent: at most 1 edit for words of up to 4
 * characters, 2 up to 8, 3 beyond; NULL when none is (or two are equally near: no guess between them). */
const char *suggest_nearest(const char *word, const char *const *names, int n);
/* The same over a list written as ",name,name," (cli.h's allowed flags). Copies the name into out; "" when none. */
const char *suggest_nearest_in_list(const char *word, const char *list, char *out, size_t len);
/* " (did you mean X?)" into out when there is a nearest name, else ""; `prefix` goes before it ("--"). Returns out. */
char *suggest_phrase(const char *nearest, const char *prefix, char *out, size_t len);
