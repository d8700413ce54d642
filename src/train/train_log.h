/* train_log.h: what training shows in TensorBoard: scalars, mid-slice images, weight and gradient histograms,
 * the resolved config as text and as hparams. One event writer per run directory (rank 0 only, once ranks
 * exist); every function accepts NULL (TensorBoard off) and does nothing then. */
#pragma once
#include <stdint.h>

#include "core/config_output.h"
#include "graph/model.h"

typedef struct TrainLog TrainLog;

/* Opens a new event file in output->dir (NULL when output.tensorboard is 0) and writes the resolved config
 * (config_json: config_to_json's text) as text and as the hparams session, whose metrics are the scalar tags
 * metrics[n_metrics] (what the HParams dashboard compares runs by). */
TrainLog *train_log_open(const OutputConfig *output, const char *config_json, const char *const *metrics,
                         int n_metrics);
/* Path of the event file ("" for NULL). */
const char *train_log_path(const TrainLog *l);
void train_log_scalar(TrainLog *l, const char *tag, int64_t step, double value);
/* images/sample_<i>: volumes [count][D][H][W][C] (size[3] x c) and their reconstructions (host memory), each tag
 * described (its rows and columns named) with its first picture. */
void train_log_images(TrainLog *l, const int size[3], int c, const float *inputs, const float *recons, int count,
                      int64_t step);
/* weights/<group> and grads/<group> for each layer group (encoder.down.0, decoder.up.1, encoder.conv_in, ...); the
 * gradients from grads (host, the flat layout: a sharded run's gathered shards) or, when NULL, the model's. */
void train_log_histograms(TrainLog *l, const Model *m, const float *grads, int64_t step);
/* Writes everything out; the hparams session ends as success, or failure when `failed`. */
void train_log_close(TrainLog *l, int failed);
/* Layer group of a parameter name: "encoder.down.0.res.0.conv1.weight" -> "encoder.down.0",
 * "decoder.conv_out.bias" -> "decoder.conv_out". Writes at most len bytes. */
void train_log_param_group(const char *param_name, char *group, int len);
