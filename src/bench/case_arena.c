/* case_arena.c: the CPU case buffers of `bench kernels`, from one mapping per run. Each case is timed on enough copies
 * of its buffers to exceed the last-level cache (up to 1 GiB), and those copies were allocated and freed per case:
 * from 256 KiB up each is an mmap of its own (kernels.c fixes glibc's threshold so that a buffer's place within its
 * page does not follow the heap's history), so every case faulted in and zeroed up to 1 GiB of fresh pages before
 * uploading into them. On the 2-core Xeon that was 27 of a default-config run's 41 s (sys time; perf: clear_page and
 * the page-fault path under the upload's memcpy), and CI runs `bench kernels` a dozen times. Here the pages are
 * faulted in once and every buffer starts at the offset within its page that the backend's allocator gives (measured
 * at open), so the layout the timed ops see is the one the per-case allocations gave. */
#include "bench/case_arena.h"

#include <stdint.h>
#include <sys/mman.h>

#if defined(__SANITIZE_ADDRESS__)
#define CASE_ARENA_OFF 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CASE_ARENA_OFF 1
#endif
#endif

enum { CASE_ARENA_PAGE = 4096 };

void case_arena_open(CaseArena *a, size_t bytes, size_t buffers, void *(*alloc)(size_t), void (*release)(void *)) {
    *a = (CaseArena){0};
#ifdef CASE_ARENA_OFF
    (void)bytes, (void)buffers, (void)alloc, (void)release;
#else
    void *probe = alloc((size_t)1 << 20); /* above the mmap threshold kernels.c sets, as the copies are */
    a->offset = (uintptr_t)probe % CASE_ARENA_PAGE;
    release(probe);
    const size_t size = (bytes + CASE_ARENA_PAGE - 1) / CASE_ARENA_PAGE * CASE_ARENA_PAGE + buffers * CASE_ARENA_PAGE;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    a->base = p, a->size = size;
#endif
}

void *case_arena_take(CaseArena *a, size_t bytes) {
    if (!a->base) return NULL;
    const size_t need = (a->offset + bytes + CASE_ARENA_PAGE - 1) / CASE_ARENA_PAGE * CASE_ARENA_PAGE;
    if (need > a->size - a->used) return NULL;
    char *p = a->base + a->used + a->offset;
    a->used += need;
    return p;
}

int case_arena_owns(const CaseArena *a, const void *p) {
    const char *c = p;
    return a->base && c >= a->base && c < a->base + a->size;
}

void case_arena_reset(CaseArena *a) { a->used = 0; }

void case_arena_close(CaseArena *a) {
    if (a->base) munmap(a->base, a->size);
    *a = (CaseArena){0};
}
