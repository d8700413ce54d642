/* tag_set.c: open-addressing string set (FNV-1a hash, linear probing, grows at half full). */
#include "tb/tag_set.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

static uint64_t tag_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* Slot holding tag, or the empty slot where it would go. cap is a power of two and never full. */
static size_t tag_slot(char *const *slots, size_t cap, const char *tag) {
    size_t i = (size_t)tag_hash(tag) & (cap - 1);
    while (slots[i] && strcmp(slots[i], tag) != 0) i = (i + 1) & (cap - 1);
    return i;
}

bool tag_set_contains(const TagSet *s, const char *tag) {
    return s->cap && s->slots[tag_slot(s->slots, s->cap, tag)] != NULL;
}

bool tag_set_insert(TagSet *s, const char *tag) {
    if (tag_set_contains(s, tag)) return false;
    if (2 * (s->count + 1) > s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        char **slots = vx_calloc(cap, sizeof *slots);
        for (size_t i = 0; i < s->cap; i++)
            if (s->slots[i]) slots[tag_slot(slots, cap, s->slots[i])] = s->slots[i];
        free(s->slots);
        s->slots = slots;
        s->cap = cap;
    }
    size_t len = strlen(tag) + 1;
    char *copy = vx_malloc(len);
    memcpy(copy, tag, len);
    s->slots[tag_slot(s->slots, s->cap, tag)] = copy;
    s->count++;
    return true;
}

void tag_set_free(TagSet *s) {
    for (size_t i = 0; i < s->cap; i++) free(s->slots[i]);
    free(s->slots);
    memset(s, 0, sizeof *s);
}
