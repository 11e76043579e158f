// TFRecord framing, the container of TensorBoard's event files: each record is
//   uint64 length (little-endian), uint32 masked CRC32C of those 8 bytes,
//   `length` bytes of data, uint32 masked CRC32C of the data.
// The CRC is CRC-32C (Castagnoli) from Boost.CRC; the mask is TensorFlow's
// ((crc >> 15) | (crc << 17)) + 0xa282ead8, which keeps a CRC of data that itself holds
// CRCs from being trivially zero. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace trainyard::tensorboard {

// CRC-32C of `data` (crc32c("123456789") = 0xE3069283).
uint32_t Crc32c(std::string_view data);
// TensorFlow's masked form of a CRC, as stored in a record.
uint32_t MaskCrc(uint32_t crc);
// Appends `data` to `out` as one framed record.
void AppendRecord(std::string_view data, std::string* out);

}  // namespace trainyard::tensorboard
