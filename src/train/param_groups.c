/* param_groups.c: train.freeze and train.backbone_lr_mult as ranges of the flat parameter buffer (see
 * param_groups.h). */
#include "train/param_groups.h"

#include <stdio.h>
#include <string.h>

#include "core/util.h"

/* Whether name lies under prefix p[0..n): the prefix itself or prefix + "." (layer1 covers layer1.0.conv1.weight,
 * not layer10) */
static int under(const char *name, const char *p, size_t n) {
    return n > 0 && strncmp(name, p, n) == 0 && (name[n] == 0 || name[n] == '.' || p[n - 1] == '.');
}

static int frozen(const char *freeze, const char *name) {
    for (const char *p = freeze; *p;) {
        size_t n = strcspn(p, ","), a = 0;
        while (a < n && p[a] == ' ') a++;
        size_t b = n;
        while (b > a && p[b - 1] == ' ') b--;
        if (under(name, p + a, b - a)) return 1;
        p += n + (p[n] == ',');
    }
    return 0;
}

/* Every prefix of train.freeze must name some parameter (a typo would freeze nothing and say nothing) */
static void check_prefixes(const Model *m, const char *freeze) {
    for (const char *p = freeze; *p;) {
        size_t n = strcspn(p, ","), a = 0;
        while (a < n && p[a] == ' ') a++;
        size_t b = n;
        while (b > a && p[b - 1] == ' ') b--;
        int hit = 0;
        for (int i = 0; i < m->n_params && !hit && b > a; i++) hit = under(m->params[i].name, p + a, b - a);
        char e[CONFIG_STR];
        if (!hit)
            vx_usage_error("train.freeze: \"%s\" is the start of no parameter's name (the first are %s, %s, ...): "
                           "name layers by their PyTorch prefix, e.g. conv1,bn1,layer1", 
                           vx_escape((snprintf(e, sizeof e, "%.*s", (int)(b - a), p + a), e), e, sizeof e),
                           m->params[0].name, m->n_params > 1 ? m->params[1].name : "");
        p += n + (p[n] == ',');
    }
}

void param_groups_plan(const Model *m, const TrainConfig *train, ParamGroups *out, int verbose) {
    memset(out, 0, sizeof *out);
    out->backbone_lr_mult = train->backbone_lr_mult;
    const char *freeze = train->freeze;
    int nf = 0; /* parameters are created first layer first: the frozen ones must be params[0 .. nf) */
    if (freeze[0]) {
        check_prefixes(m, freeze);
        while (nf < m->n_params && frozen(freeze, m->params[nf].name)) nf++;
        for (int i = nf; i < m->n_params; i++)
            if (frozen(freeze, m->params[i].name))
                vx_usage_error("train.freeze: %s is frozen but %s, before it in the network, is not: freeze the first "
                               "layers only (e.g. conv1,bn1,layer1), so that what trains is one part of the network",
                               m->params[i].name, m->params[nf].name);
        if (nf == m->n_params) vx_usage_error("train.freeze covers every parameter: nothing is left to train");
    }
    out->frozen_params = nf;
    /* flat offsets run in reverse: params[nf - 1] is the first frozen float, params[n-1] sits at 0 */
    out->trainable = nf ? m->params[nf - 1].offset : m->param_floats;
    int head = m->n_params; /* the head's parameters: resnet3d's fc, densenet's class_layers.out, created last */
    const char *head_prefix = m->family == FAMILY_RESNET3D ? "fc." : m->family == FAMILY_DENSENET ? "class_layers." : NULL;
    while (head_prefix && head > 0 && strncmp(m->params[head - 1].name, head_prefix, strlen(head_prefix)) == 0) head--;
    const long head_end = head > 0 && head < m->n_params ? m->params[head - 1].offset : 0;
    if (train->backbone_lr_mult != 1 && head_end > 0 && head_end < out->trainable) {
        out->g[out->n++] = (ParamGroup){0, head_end, 0};
        out->g[out->n++] = (ParamGroup){head_end, out->trainable, 1};
    } else {
        out->g[out->n++] = (ParamGroup){0, out->trainable, 0};
    }
    if (!verbose) return;
    long n_frozen = 0;
    for (int i = 0; i < nf; i++) n_frozen += m->params[i].count;
    if (nf)
        vx_log("freeze: %d of %d parameter tensors not trained (%s ... %s: %ld of %ld parameters; train.freeze)\n", nf,
               m->n_params, m->params[0].name, m->params[nf - 1].name, n_frozen, m->param_count);
    if (out->n == 2)
        vx_log("lr groups: the head (%s...) at train.lr, the rest at train.lr x %g (train.backbone_lr_mult)\n",
               m->params[head].name, train->backbone_lr_mult);
}
