/* tag_set.h: a set of strings, used by the event writer to know which tags it has already described. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char **slots; /* open addressing; NULL = empty */
    size_t cap, count;
} TagSet;

/* Adds a copy of tag; returns true when it was not there before. */
bool tag_set_insert(TagSet *s, const char *tag);
bool tag_set_contains(const TagSet *s, const char *tag);
void tag_set_free(TagSet *s);
