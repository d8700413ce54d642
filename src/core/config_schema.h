/* config_schema.h: the one table of config keys (config_schema.c) as the reader and writer (config.c) walk it:
 * each key's section, name, place in a Config, type, range or choices, default and help; internal to src/core. */
#pragma once
#include <stddef.h>

#include "core/config.h"

/* T_FLOAT: a number kept as a double here but used as float32 by the ops, so its range is checked after rounding
 * to float too (beta2 = 0.999999999 is below 1 as a double and exactly 1 as a float). */
/* T_STAGES: train.stages, a list of objects read with STAGE_SCHEMA below. */
/* T_LIST: a list of numbers (ConfigList, config_base.h). */
typedef enum { T_INT, T_INT64, T_DOUBLE, T_FLOAT, T_STRING, T_INT3, T_INTLIST, T_STAGES, T_LIST } KeyType;

typedef struct {
    const char *section, *key;
    size_t offset; /* of the value in a Config (in a Stage for STAGE_SCHEMA) */
    KeyType type;
    double min, max;     /* inclusive range of numbers and of list elements */
    const char *choices; /* T_STRING: "a|b|c", or NULL for any string */
    const char *def;     /* default, as the JSON text of the value */
    const char *help;
} KeySpec;

extern const KeySpec SCHEMA[];      /* every key, in --help-config's and config.json's order */
extern const int NKEYS;
extern const KeySpec STAGE_SCHEMA[]; /* the keys of one entry of train.stages (section "") */
extern const int NSTAGE_KEYS;
extern const KeySpec STAGE_MODEL_SCHEMA[]; /* the keys of train.stages[i].model (offsets in a StageModel) */
extern const int NSTAGE_MODEL_KEYS;
