/* hparams_content.h: serializes the hparams plugin's HParamsPluginData messages (experiment, session start,
 * session end), the bytes that go into SummaryMetadata.plugin_data.content of the "_hparams_/..." summaries. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "tb/tb_writer.h"

/* Each returns a malloc'd buffer (free() it) and sets *len. Arguments are checked by the caller. */
uint8_t *hparams_pack_experiment(const TbHParam *params, size_t n_params, const char *const *metric_tags,
                                 size_t n_metrics, double time_created, size_t *len);
uint8_t *hparams_pack_session_start(const TbHParam *params, size_t n_params, double start_time, size_t *len);
uint8_t *hparams_pack_session_end(TbSessionStatus status, double end_time, size_t *len);
