// The .idx of a Megatron-LM indexed dataset (megatron/core/datasets/indexed_dataset.py,
// _IndexWriter / _IndexReader), validated against its .bin in one streaming pass.
//
// Layout, little-endian:
//   "MMIDIDX\x00\x00" (9 bytes), uint64 version (= 1), uint8 dtype code (token_dtype.h),
//   uint64 sequence_count S, uint64 document_count D,
//   int32 sequence_lengths[S]   (tokens per sequence),
//   int64 sequence_pointers[S]  (byte offset of each sequence in the .bin),
//   int64 document_indices[D]   (0, ..., S: document d is sequences [di[d], di[d+1])).
// A multimodal dataset appends int8 sequence_modes[S]; that is refused (unsupported).
//
// Checked: the magic, the version, the dtype code, counts whose arrays would overrun the
// file, bytes after the arrays, negative lengths, pointers that are not contiguous
// (pointer[0] = 0, pointer[i+1] = pointer[i] + length[i] * itemsize, as the writer makes
// them) or run past the .bin, a .bin longer than its sequences, and the shape of the
// document indices (starts at 0, non-decreasing, ends at S). The arrays are read in
// bounded windows (kWindowEntries entries at a time), never held: an .idx of 10M
// documents is 120 MB. After validation the dataset's token stream is simply the .bin's
// bytes in order, and the validator returns its dtype and counts.
//
// Thread-safe (pure function of its inputs).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/data/byte_source.h"
#include "common/data/token_dtype.h"

namespace trainyard::data {

inline constexpr char kIndexedMagic[] = "MMIDIDX\x00\x00";  // 9 bytes (the literal adds a 10th NUL)
inline constexpr std::uint64_t kIndexedMagicSize = 9;
inline constexpr std::uint64_t kIndexedHeaderSize = 34;  // magic, version, dtype, S, D
inline constexpr std::uint64_t kWindowEntries = 16384;   // per array read, ~192 KiB of buffers

struct IndexedIndexInfo {
  TokenDtype dtype = TokenDtype::kUint16;
  std::uint64_t sequences = 0;
  std::uint64_t documents = 0;  // document_count - 1
  std::uint64_t tokens = 0;     // sum of the sequence lengths = .bin bytes / itemsize
};

// Validates the .idx read through `idx` against a .bin of `bin_bytes` bytes called
// `bin_name`. INVALID_ARGUMENT naming the .idx (or the .bin), the field and its byte
// offset in the .idx on any violation; the source's own error on a failed read.
absl::StatusOr<IndexedIndexInfo> ValidateIndexedIndex(const ByteSource& idx, std::uint64_t bin_bytes,
                                                      const std::string& bin_name);

}  // namespace trainyard::data
