/* hparams_content.c: builds and packs HParamsPluginData with protoc-c's generated code. The plugin expects
 * version 0 (PLUGIN_DATA_VERSION in tensorboard/plugins/hparams/metadata.py), which proto3 leaves unwritten. */
#include "tb/hparams_content.h"

#include <stdlib.h>

#include "core/util.h"
#include "tb/proto/hparams_plugin_data.pb-c.h"

static uint8_t *pack_plugin_data(const Vxtb__HParamsPluginData *pd, size_t *len) {
    size_t n = vxtb__hparams_plugin_data__get_packed_size(pd);
    uint8_t *out = vx_malloc(n);
    if (vxtb__hparams_plugin_data__pack(pd, out) != n) vx_fatal("protobuf-c packed a different size than it sized");
    *len = n;
    return out;
}

/* Fills v with the hparam's value. Strings are only borrowed: the message is packed before params go away. */
static void hparam_value(const TbHParam *p, Vxtb__Value *v) {
    vxtb__value__init(v);
    switch (p->type) {
    case TB_HPARAM_TYPE_NUMBER:
        v->kind_case = VXTB__VALUE__KIND_NUMBER_VALUE;
        v->number_value = p->number;
        break;
    case TB_HPARAM_TYPE_STRING:
        v->kind_case = VXTB__VALUE__KIND_STRING_VALUE;
        v->string_value = (char *)p->string;
        break;
    case TB_HPARAM_TYPE_BOOL:
        v->kind_case = VXTB__VALUE__KIND_BOOL_VALUE;
        v->bool_value = p->boolean;
        break;
    }
}

uint8_t *hparams_pack_experiment(const TbHParam *params, size_t n_params, const char *const *metric_tags,
                                 size_t n_metrics, double time_created, size_t *len) {
    /* Discrete domains as the PyTorch and tf.summary writers give them: a string's own value, both booleans.
     * Numbers get no domain; the dashboard then takes their range from the sessions. */
    Vxtb__Value bool_values[2];
    Vxtb__Value *bool_ptrs[2] = {&bool_values[0], &bool_values[1]};
    vxtb__value__init(&bool_values[0]);
    vxtb__value__init(&bool_values[1]);
    bool_values[0].kind_case = bool_values[1].kind_case = VXTB__VALUE__KIND_BOOL_VALUE;
    bool_values[0].bool_value = 0;
    bool_values[1].bool_value = 1;
    Vxtb__ListValue bool_domain = VXTB__LIST_VALUE__INIT;
    bool_domain.n_values = 2;
    bool_domain.values = bool_ptrs;

    Vxtb__HParamInfo *infos = vx_calloc(n_params, sizeof *infos);
    Vxtb__HParamInfo **info_ptrs = vx_calloc(n_params, sizeof *info_ptrs);
    Vxtb__Value *str_values = vx_calloc(n_params, sizeof *str_values);
    Vxtb__Value **str_ptrs = vx_calloc(n_params, sizeof *str_ptrs);
    Vxtb__ListValue *str_domains = vx_calloc(n_params, sizeof *str_domains);
    for (size_t i = 0; i < n_params; i++) {
        Vxtb__HParamInfo *h = &infos[i];
        vxtb__hparam_info__init(h);
        h->name = (char *)params[i].name;
        switch (params[i].type) {
        case TB_HPARAM_TYPE_NUMBER: h->type = VXTB__HPARAM_DATA_TYPE__DATA_TYPE_FLOAT64; break;
        case TB_HPARAM_TYPE_STRING:
            h->type = VXTB__HPARAM_DATA_TYPE__DATA_TYPE_STRING;
            hparam_value(&params[i], &str_values[i]);
            str_ptrs[i] = &str_values[i];
            vxtb__list_value__init(&str_domains[i]);
            str_domains[i].n_values = 1;
            str_domains[i].values = &str_ptrs[i];
            h->domain_case = VXTB__HPARAM_INFO__DOMAIN_DOMAIN_DISCRETE;
            h->domain_discrete = &str_domains[i];
            break;
        case TB_HPARAM_TYPE_BOOL:
            h->type = VXTB__HPARAM_DATA_TYPE__DATA_TYPE_BOOL;
            h->domain_case = VXTB__HPARAM_INFO__DOMAIN_DOMAIN_DISCRETE;
            h->domain_discrete = &bool_domain;
            break;
        }
        info_ptrs[i] = h;
    }

    Vxtb__MetricName *names = vx_calloc(n_metrics, sizeof *names);
    Vxtb__MetricInfo *metrics = vx_calloc(n_metrics, sizeof *metrics);
    Vxtb__MetricInfo **metric_ptrs = vx_calloc(n_metrics, sizeof *metric_ptrs);
    for (size_t i = 0; i < n_metrics; i++) {
        /* group "" means: the scalar lives in the session's own run, which is where this writer puts it. */
        vxtb__metric_name__init(&names[i]);
        names[i].tag = (char *)metric_tags[i];
        vxtb__metric_info__init(&metrics[i]);
        metrics[i].name = &names[i];
        metric_ptrs[i] = &metrics[i];
    }

    Vxtb__Experiment exp = VXTB__EXPERIMENT__INIT;
    exp.time_created_secs = time_created;
    exp.n_hparam_infos = n_params;
    exp.hparam_infos = info_ptrs;
    exp.n_metric_infos = n_metrics;
    exp.metric_infos = metric_ptrs;

    Vxtb__HParamsPluginData pd = VXTB__HPARAMS_PLUGIN_DATA__INIT;
    pd.data_case = VXTB__HPARAMS_PLUGIN_DATA__DATA_EXPERIMENT;
    pd.experiment = &exp;
    uint8_t *out = pack_plugin_data(&pd, len);

    free(infos);
    free(info_ptrs);
    free(str_values);
    free(str_ptrs);
    free(str_domains);
    free(names);
    free(metrics);
    free(metric_ptrs);
    return out;
}

uint8_t *hparams_pack_session_start(const TbHParam *params, size_t n_params, double start_time, size_t *len) {
    Vxtb__SessionStartInfo__HparamsEntry *entries = vx_calloc(n_params, sizeof *entries);
    Vxtb__SessionStartInfo__HparamsEntry **entry_ptrs = vx_calloc(n_params, sizeof *entry_ptrs);
    Vxtb__Value *values = vx_calloc(n_params, sizeof *values);
    for (size_t i = 0; i < n_params; i++) {
        vxtb__session_start_info__hparams_entry__init(&entries[i]);
        entries[i].key = (char *)params[i].name;
        hparam_value(&params[i], &values[i]);
        entries[i].value = &values[i];
        entry_ptrs[i] = &entries[i];
    }
    Vxtb__SessionStartInfo ssi = VXTB__SESSION_START_INFO__INIT;
    ssi.n_hparams = n_params;
    ssi.hparams = entry_ptrs;
    ssi.start_time_secs = start_time;

    Vxtb__HParamsPluginData pd = VXTB__HPARAMS_PLUGIN_DATA__INIT;
    pd.data_case = VXTB__HPARAMS_PLUGIN_DATA__DATA_SESSION_START_INFO;
    pd.session_start_info = &ssi;
    uint8_t *out = pack_plugin_data(&pd, len);
    free(entries);
    free(entry_ptrs);
    free(values);
    return out;
}

uint8_t *hparams_pack_session_end(TbSessionStatus status, double end_time, size_t *len) {
    Vxtb__SessionEndInfo sei = VXTB__SESSION_END_INFO__INIT;
    /* TbSessionStatus uses the plugin's Status numbers, so the value carries over as is. */
    sei.status = (Vxtb__Status)status;
    sei.end_time_secs = end_time;
    Vxtb__HParamsPluginData pd = VXTB__HPARAMS_PLUGIN_DATA__INIT;
    pd.data_case = VXTB__HPARAMS_PLUGIN_DATA__DATA_SESSION_END_INFO;
    pd.session_end_info = &sei;
    return pack_plugin_data(&pd, len);
}
