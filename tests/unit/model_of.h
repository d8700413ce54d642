/* model_of.h: a model built from a whole Config the way the runtime builds it: its model section, and the train keys
 * the model takes (hw_model_options). The unit tests start from config_defaults and change keys in either section. */
#pragma once
#include "core/config.h"
#include "hw/hw_plan.h"
#include "graph/model.h"

static inline Model *model_of(const Config *cfg, int batch, const Backend *be) {
    const ModelOptions opt = hw_model_options(&cfg->train);
    return model_build(&cfg->model, &opt, batch, be);
}
