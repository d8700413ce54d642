/* crc32c.h: CRC-32C (Castagnoli), the checksum of TFRecord framing, and TFRecord's "masked" form of it.
 * crc32c() picks the SSE4.2 crc32 instruction when the running CPU has it and a table otherwise; both paths
 * are exported so tests can check that they agree. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* CRC-32C of n bytes (standard: initial value and final xor 0xFFFFFFFF; "123456789" -> 0xE3069283). */
uint32_t crc32c(const void *data, size_t n);
/* Continues a CRC: crc32c_extend(crc32c(a), b) == crc32c(a followed by b). crc32c_extend(0, ...) == crc32c(...). */
uint32_t crc32c_extend(uint32_t crc, const void *data, size_t n);

/* The two implementations behind crc32c_extend. crc32c_extend_hw may only be called when crc32c_hw_available(). */
uint32_t crc32c_extend_sw(uint32_t crc, const void *data, size_t n);
uint32_t crc32c_extend_hw(uint32_t crc, const void *data, size_t n);
bool crc32c_hw_available(void);

/* TFRecord stores CRCs rotated and offset, because a CRC of data that itself holds CRCs is weak. */
static inline uint32_t crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
static inline uint32_t crc32c_unmask(uint32_t masked) {
    uint32_t rot = masked - 0xa282ead8u;
    return (rot >> 17) | (rot << 15);
}
