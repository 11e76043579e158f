// Fuzz target: arbitrary bytes as the .idx of a Megatron indexed dataset, validated by
// common/data/indexed_index (torch-free) against a .bin whose size is the input's first
// 8 bytes (little-endian; fewer bytes: zero-padded). Input: uint64 bin size, then the
// .idx. Every refusal is a Status naming "fuzz.idx" or "fuzz.bin"; invariants: errors
// stay short, and an accepted index is exactly its header and arrays, its sequences
// cover the .bin exactly, and it has at least one document index.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "common/data/byte_source.h"
#include "common/data/indexed_index.h"
#include "tests/fuzz/fuzz_check.h"

namespace trainyard::data {
namespace {

void Run(const std::uint8_t* data, std::size_t size) {
  std::uint64_t bin_bytes = 0;
  std::memcpy(&bin_bytes, data, size < 8 ? size : 8);
  const std::string_view idx_bytes = size > 8 ? std::string_view(reinterpret_cast<const char*>(data) + 8, size - 8)
                                              : std::string_view();
  const MemorySource idx("fuzz.idx", idx_bytes);
  auto info = ValidateIndexedIndex(idx, bin_bytes, "fuzz.bin");
  if (!info.ok()) {
    const std::string m(info.status().message());
    fuzz::CheckErrorSize("ValidateIndexedIndex", m);
    if (m.substr(0, 10) != "fuzz.idx: " && m.substr(0, 10) != "fuzz.bin: ") {
      fuzz::Violated("error names neither file: " + m);
    }
    return;
  }
  const unsigned __int128 expect_size = kIndexedHeaderSize + static_cast<unsigned __int128>(info->sequences) * 12 +
                                        static_cast<unsigned __int128>(info->documents + 1) * 8;
  if (expect_size != idx_bytes.size()) fuzz::Violated("accepted an index that is not exactly its arrays");
  const unsigned __int128 covered = static_cast<unsigned __int128>(info->tokens) * TokenDtypeSize(info->dtype);
  if (covered != bin_bytes) fuzz::Violated("accepted sequences that do not cover the .bin exactly");
  if (std::memcmp(idx_bytes.data(), kIndexedMagic, kIndexedMagicSize) != 0) fuzz::Violated("accepted a bad magic");
}

}  // namespace
}  // namespace trainyard::data

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  trainyard::data::Run(data, size);
  return 0;
}
