// common/crc32c.h: CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord files
// (TensorBoard event files) checksum their length and data, and the "masked" form they store.
// A 1 KiB table built once; event files are a few KiB, so no hardware CRC is needed.
#pragma once
#include <stddef.h>
#include <stdint.h>

// crc32c("123456789") == 0xE3069283.
uint32_t crc32c_compute(const void *data, size_t n);
// The CRC of the bytes so far (crc, 0 for none) extended by n more: a file checksummed in
// chunks (crc32c_update(crc32c_update(0, a, na), b, nb) == crc32c_compute of a then b).
uint32_t crc32c_update(uint32_t crc, const void *data, size_t n);
// TFRecord's mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8 (tensorflow/core/lib/hash/crc32c.h).
uint32_t crc32c_mask(uint32_t crc);
