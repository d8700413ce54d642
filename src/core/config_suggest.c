/* config_suggest.c: the config key or section nearest to a mistyped one, from the schema table (see config.h). */
#include <stdio.h>
#include <string.h>

#include "core/config.h"
#include "core/config_schema.h"
#include "core/suggest.h"

const char *config_suggest(const char *section, const char *key, char *out, size_t len) {
    const char *names[256] = {0};
    char dotted[256][96];
    int n = 0;
    out[0] = 0;
    if (!key) { /* a section: the schema's sections, once each */
        for (int i = 0; i < NKEYS && n < 256; i++) {
            int seen = 0;
            for (int j = 0; j < n && !seen; j++) seen = strcmp(names[j], SCHEMA[i].section) == 0;
            if (!seen) names[n++] = SCHEMA[i].section;
        }
        const char *best = suggest_nearest(section, names, n);
        snprintf(out, len, "%s", best ? best : "");
        return out;
    }
    /* a key: first among its own section's, then the same name in another section (model.lr: train.lr) */
    for (int i = 0; i < NKEYS && n < 256; i++)
        if (strcmp(SCHEMA[i].section, section) == 0) names[n++] = SCHEMA[i].key;
    const char *best = suggest_nearest(key, names, n);
    if (best) {
        snprintf(out, len, "%s.%s", section, best);
        return out;
    }
    n = 0;
    for (int i = 0; i < NKEYS && n < 256; i++) {
        snprintf(dotted[n], sizeof dotted[n], "%s.%s", SCHEMA[i].section, SCHEMA[i].key);
        names[n] = dotted[n];
        n++;
    }
    char whole[192];
    snprintf(whole, sizeof whole, "%s.%s", section, key);
    best = suggest_nearest(whole, names, n);
    for (int i = 0; !best && i < n; i++) /* the key itself, misplaced: train.lr given as model.lr */
        if (strcmp(SCHEMA[i].key, key) == 0) best = names[i];
    snprintf(out, len, "%s", best ? best : "");
    return out;
}
