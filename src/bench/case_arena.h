/* case_arena.h: host memory for `bench kernels`' timed copies of a case's buffers on the CPU, mapped once per run and
 * reused by every case (case_arena.c says why). */
#ifndef VX_BENCH_CASE_ARENA_H
#define VX_BENCH_CASE_ARENA_H

#include <stddef.h>

typedef struct {
    char *base;    /* the mapping, NULL where none was made (a GPU run, a sanitizer build, a failed mmap) */
    size_t size;   /* its bytes */
    size_t used;   /* bytes handed out since the last case_arena_reset */
    size_t offset; /* where in its page each buffer starts: the backend allocator's own in-page offset */
} CaseArena;

/* Maps `bytes` plus a page for each of up to `buffers` buffers (each starts on a page of its own) and measures the
 * in-page offset of a buffer from alloc (the backend's allocator,
 * released again with release). Leaves a->base NULL under AddressSanitizer, where every buffer must keep its own
 * red zones, and where the mapping fails: case_arena_take then always returns NULL. */
void case_arena_open(CaseArena *a, size_t bytes, size_t buffers, void *(*alloc)(size_t), void (*release)(void *));
/* a buffer of `bytes` from the arena, at the same in-page offset as the backend's own, or NULL when it does not fit
 * (the caller then allocates it as before) */
void *case_arena_take(CaseArena *a, size_t bytes);
/* whether p came from the arena (it is then not released on its own) */
int case_arena_owns(const CaseArena *a, const void *p);
/* every buffer handed out is free again (the next case's) */
void case_arena_reset(CaseArena *a);
void case_arena_close(CaseArena *a);

#endif
