/* label_policy.c: data.uncertain and data.blank read (see label_policy.h). */
#include "data/label_policy.h"

#include <stdio.h>
#include <string.h>

#include "core/util.h"

static int policy_of(const char *word, LabelPolicy *p) {
    static const struct {
        const char *name;
        LabelPolicy p;
    } NAMES[] = {{"error", LABEL_KEEP_ERROR}, {"u_ignore", LABEL_MASK}, {"u_zeros", LABEL_ZERO}, {"u_ones", LABEL_ONE}};
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
        if (strcmp(word, NAMES[i].name) == 0) {
            *p = NAMES[i].p;
            return 1;
        }
    return 0;
}

/* s without the spaces around it, into buf */
static const char *trimmed(const char *s, size_t n, char *buf, size_t len) {
    while (n && *s == ' ') s++, n--;
    while (n && s[n - 1] == ' ') n--;
    snprintf(buf, len, "%.*s", (int)n, s);
    return buf;
}

LabelPolicy label_uncertain_policy(const DataConfig *cfg, const char *name, char *const *names, int n,
                                   const char *origin) {
    const char *spec = cfg->uncertain;
    LabelPolicy rest = LABEL_KEEP_ERROR, mine = LABEL_KEEP_ERROR;
    int given = 0, bare = 0;
    for (const char *p = spec; *p;) {
        const size_t len = strcspn(p, ",");
        char item[CONFIG_STR], label[CONFIG_STR], word[CONFIG_STR];
        trimmed(p, len, item, sizeof item);
        const char *eq = strchr(item, '=');
        trimmed(eq ? eq + 1 : item, strlen(eq ? eq + 1 : item), word, sizeof word);
        LabelPolicy pol;
        if (!policy_of(word, &pol))
            vx_usage_error("%s: data.uncertain \"%s\": \"%s\" is not a policy; use u_ignore, u_zeros, u_ones (or error)",
                           origin, spec, word);
        if (eq) {
            trimmed(item, (size_t)(eq - item), label, sizeof label);
            int known = 0;
            for (int k = 0; k < n; k++) known |= strcmp(names[k], label) == 0;
            if (!known)
                vx_usage_error("%s: data.uncertain \"%s\" names \"%s\", which is not one of data.label_columns",
                               origin, spec, label);
            if (strcmp(label, name) == 0) mine = pol, given = 1;
        } else {
            if (bare++)
                vx_usage_error("%s: data.uncertain \"%s\" gives two policies for the other labels; give one", origin,
                               spec);
            rest = pol;
        }
        p += len + (p[len] == ',');
    }
    return given ? mine : rest;
}

LabelPolicy label_blank_policy(const DataConfig *cfg) {
    return strcmp(cfg->blank, "zero") == 0 ? LABEL_ZERO : strcmp(cfg->blank, "ignore") == 0 ? LABEL_MASK
                                                                                              : LABEL_KEEP_ERROR;
}

float label_policy_value(LabelPolicy p) {
    return p == LABEL_MASK ? LABEL_MASKED : p == LABEL_ONE ? 1.0f : 0.0f;
}
