/* config_output.h: the config's "output" section: the run directory and what is written there besides
 * checkpoints (TensorBoard, profiler traces, the sample log). */
#pragma once
#include "core/config_base.h"

typedef struct {
    char dir[CONFIG_STR]; /* the run directory; "" = runs/<config name>-<time> */
    int tensorboard;      /* write event files */
    int image_every, image_samples, hist_every; /* TensorBoard intervals (0 = off) */
    double flush_secs;
    char profile[CONFIG_STR]; /* "START:END" or "" */
    int sample_log;           /* write samples.tsv: the global samples each micro-batch read */
} OutputConfig;

/* Parses output.profile "START:END" (1-based optimizer steps, inclusive); 0 when empty or malformed. */
int config_profile_window(const OutputConfig *output, int *start, int *end);
