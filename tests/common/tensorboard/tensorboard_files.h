// Reads TensorBoard event files back for tests: the TFRecord framing checked record by
// record (both masked CRCs), each record parsed as the Event it holds.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/base/file_io.h"
#include "common/tensorboard/tfrecord.h"
#include "tensorboard/event.pb.h"

namespace trainyard::testing {

// The records of `bytes`; `error` says where the framing breaks (empty when whole).
inline std::vector<tensorboard::Event> ParseRecords(const std::string& bytes, std::string* error) {
  std::vector<tensorboard::Event> out;
  std::size_t at = 0;
  auto u32 = [&](std::size_t p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes[p + i]);
    return v;
  };
  error->clear();
  while (at < bytes.size()) {
    if (bytes.size() - at < 12) {
      *error = "truncated header at " + std::to_string(at);
      return out;
    }
    uint64_t len = 0;
    for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<unsigned char>(bytes[at + i]);
    if (u32(at + 8) != tensorboard::MaskCrc(tensorboard::Crc32c(std::string_view(bytes).substr(at, 8)))) {
      *error = "length crc at " + std::to_string(at);
      return out;
    }
    if (bytes.size() - at - 12 < len + 4) {
      *error = "truncated data at " + std::to_string(at);
      return out;
    }
    const std::string data = bytes.substr(at + 12, len);
    if (u32(at + 12 + len) != tensorboard::MaskCrc(tensorboard::Crc32c(data))) {
      *error = "data crc at " + std::to_string(at);
      return out;
    }
    tensorboard::Event e;
    if (!e.ParseFromString(data)) {
      *error = "unparseable event at " + std::to_string(at);
      return out;
    }
    out.push_back(std::move(e));
    at += 12 + len + 4;
  }
  return out;
}

}  // namespace trainyard::testing
