/* config_base.h: what every config section header shares: the size of a string key's buffer, and a list of numbers. */
#pragma once

#define CONFIG_STR 256

#define CONFIG_MAX_LIST 64 /* entries of a list of numbers (class weights, ...) */

/* A list of numbers read from JSON: n entries. */
typedef struct {
    int n;
    double v[CONFIG_MAX_LIST];
} ConfigList;
