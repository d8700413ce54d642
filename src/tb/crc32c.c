/* crc32c.c: CRC-32C by the SSE4.2 crc32 instruction (x86, chosen at run time) or by a byte table.
 * The hardware path is compiled with a target attribute rather than a global -msse4.2, so the binary still runs
 * on CPUs without it; the choice is made once from __builtin_cpu_supports. */
#include "tb/crc32c.h"

#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define CRC32C_X86 1
#endif

#define CRC32C_POLY_REFLECTED 0x82f63b78u

static uint32_t crc_table[256];
static int crc_table_ready; /* the table is a pure function of the polynomial: racing initializers agree */

static void crc32c_table_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ CRC32C_POLY_REFLECTED : c >> 1;
        crc_table[i] = c;
    }
    __atomic_store_n(&crc_table_ready, 1, __ATOMIC_RELEASE);
}

uint32_t crc32c_extend_sw(uint32_t crc, const void *data, size_t n) {
    if (!__atomic_load_n(&crc_table_ready, __ATOMIC_ACQUIRE)) crc32c_table_init();
    const uint8_t *p = data;
    uint32_t c = ~crc;
    while (n--) c = crc_table[(c ^ *p++) & 0xffu] ^ (c >> 8);
    return ~c;
}

#ifdef CRC32C_X86
__attribute__((target("sse4.2"))) uint32_t crc32c_extend_hw(uint32_t crc, const void *data, size_t n) {
    const uint8_t *p = data;
    uint32_t c = ~crc;
    /* Byte steps up to 8-byte alignment, then 8 bytes per instruction; memcpy keeps the loads alias-safe. */
    while (n && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8(c, *p++);
        n--;
    }
#ifdef __x86_64__
    uint64_t c64 = c;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        c64 = _mm_crc32_u64(c64, word);
    }
    c = (uint32_t)c64;
#endif
    for (; n >= 4; n -= 4, p += 4) {
        uint32_t word;
        memcpy(&word, p, 4);
        c = _mm_crc32_u32(c, word);
    }
    while (n--) c = _mm_crc32_u8(c, *p++);
    return ~c;
}

bool crc32c_hw_available(void) {
    static int cached = -1; /* __builtin_cpu_supports is cheap, but this sits on the per-record path */
    int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (v < 0) {
        v = __builtin_cpu_supports("sse4.2") ? 1 : 0;
        __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    }
    return v == 1;
}
#else
uint32_t crc32c_extend_hw(uint32_t crc, const void *data, size_t n) { return crc32c_extend_sw(crc, data, n); }
bool crc32c_hw_available(void) { return false; }
#endif

uint32_t crc32c_extend(uint32_t crc, const void *data, size_t n) {
    return crc32c_hw_available() ? crc32c_extend_hw(crc, data, n) : crc32c_extend_sw(crc, data, n);
}

uint32_t crc32c(const void *data, size_t n) { return crc32c_extend(0, data, n); }
