#include "common/tensorboard/tfrecord.h"

#include <boost/crc.hpp>

namespace trainyard::tensorboard {

namespace {

void AppendLittleEndian(uint64_t value, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

}  // namespace

uint32_t Crc32c(std::string_view data) {
  // Castagnoli polynomial, reflected in and out, initial and final XOR all ones.
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(data.data(), data.size());
  return crc.checksum();
}

uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

void AppendRecord(std::string_view data, std::string* out) {
  std::string length;
  AppendLittleEndian(data.size(), 8, &length);
  out->append(length);
  AppendLittleEndian(MaskCrc(Crc32c(length)), 4, out);
  out->append(data);
  AppendLittleEndian(MaskCrc(Crc32c(data)), 4, out);
}

}  // namespace trainyard::tensorboard
