#include "common/data/indexed_index.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace trainyard::data {
namespace {

std::uint64_t U64(const unsigned char* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

std::string Decimal(unsigned __int128 v) {
  std::string s;
  do {
    s.insert(s.begin(), static_cast<char>('0' + static_cast<int>(v % 10)));
    v /= 10;
  } while (v != 0);
  return s;
}

absl::Status Bad(const ByteSource& idx, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(idx.name(), ": ", what));
}

// The file must be exactly the header and its three arrays: counts that need more are
// an overrun, anything after them is refused (sequence modes of a multimodal dataset
// named as such).
absl::Status CheckSize(const ByteSource& idx, std::uint64_t sequences, std::uint64_t documents) {
  const std::uint64_t size = idx.size();
  const unsigned __int128 need =
      kIndexedHeaderSize + static_cast<unsigned __int128>(sequences) * 12 + static_cast<unsigned __int128>(documents) * 8;
  if (need > size) {
    return Bad(idx, absl::StrCat("sequence_count ", sequences, " and document_count ", documents,
                                 " overrun the file: their arrays need ", Decimal(need),
                                 " bytes, the file has ", size, " (truncated, or not an index)"));
  }
  const std::uint64_t extra = size - static_cast<std::uint64_t>(need);
  if (extra != 0 && extra == sequences) {
    return Bad(idx, absl::StrCat("holds a sequence mode per sequence after the document indices (", extra,
                                 " bytes): multimodal indexed datasets are unsupported"));
  }
  if (extra != 0) {
    return Bad(idx, absl::StrCat(extra, " trailing bytes after the document indices (which end at byte offset ",
                                 static_cast<std::uint64_t>(need), "); multimodal sequence modes are unsupported "
                                 "and nothing else may follow"));
  }
  return absl::OkStatus();
}

// Lengths and pointers, window by window: each length non-negative, each pointer where
// the previous sequence ended, and the sequences together exactly the .bin.
absl::StatusOr<std::uint64_t> CheckSequences(const ByteSource& idx, std::uint64_t sequences, int itemsize,
                                             std::uint64_t bin_bytes, const std::string& bin_name) {
  const std::uint64_t lengths_at = kIndexedHeaderSize;
  const std::uint64_t pointers_at = lengths_at + sequences * 4;
  std::vector<std::int32_t> lengths(std::min(sequences, kWindowEntries));
  std::vector<std::int64_t> pointers(lengths.size());
  std::uint64_t end = 0;  // bytes of the .bin covered so far
  std::uint64_t tokens = 0;
  for (std::uint64_t first = 0; first < sequences; first += kWindowEntries) {
    const std::uint64_t n = std::min(kWindowEntries, sequences - first);
    TY_RETURN_IF_ERROR(idx.ReadAt(lengths_at + first * 4, n * 4, lengths.data()));
    TY_RETURN_IF_ERROR(idx.ReadAt(pointers_at + first * 8, n * 8, pointers.data()));
    for (std::uint64_t j = 0; j < n; ++j) {
      const std::uint64_t i = first + j;
      const std::int64_t length = lengths[j];
      const std::int64_t pointer = pointers[j];
      if (length < 0) {
        return Bad(idx, absl::StrCat("sequence_lengths[", i, "] = ", length, " at byte offset ", lengths_at + i * 4,
                                     " is negative"));
      }
      if (pointer < 0 || static_cast<std::uint64_t>(pointer) != end) {
        return Bad(idx, absl::StrCat("sequence_pointers[", i, "] = ", pointer, " at byte offset ", pointers_at + i * 8,
                                     " is not contiguous: expected ", end,
                                     i == 0 ? std::string(" (the first sequence starts the .bin)")
                                            : absl::StrCat(" = sequence_pointers[", i - 1, "] + sequence_lengths[",
                                                           i - 1, "] x ", itemsize, " bytes")));
      }
      const std::uint64_t bytes = static_cast<std::uint64_t>(length) * static_cast<std::uint64_t>(itemsize);
      if (bytes > bin_bytes - end) {
        return Bad(idx, absl::StrCat("sequence ", i, " (", length, " tokens at sequence_pointers[", i, "] = ",
                                     pointer, ") ends at byte ", end + bytes, ", past the end of ", bin_name, " (",
                                     bin_bytes, " bytes)"));
      }
      end += bytes;
      tokens += static_cast<std::uint64_t>(length);
    }
  }
  if (end != bin_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(bin_name, ": ", bin_bytes, " bytes, but the ", sequences,
                                                   " sequences of ", idx.name(), " cover ", end,
                                                   ": the .bin does not belong to this .idx"));
  }
  return tokens;
}

// document_indices: 0, non-decreasing, each at most S, the last S.
absl::Status CheckDocuments(const ByteSource& idx, std::uint64_t sequences, std::uint64_t documents) {
  const std::uint64_t at = kIndexedHeaderSize + sequences * 12;
  if (documents == 0) {
    return Bad(idx, absl::StrCat("document_count is 0: document_indices must hold at least [0, ", sequences,
                                 "] (0, then the sequence that ends each document)"));
  }
  std::vector<std::int64_t> window(std::min(documents, kWindowEntries));
  std::int64_t previous = 0;
  for (std::uint64_t first = 0; first < documents; first += kWindowEntries) {
    const std::uint64_t n = std::min(kWindowEntries, documents - first);
    TY_RETURN_IF_ERROR(idx.ReadAt(at + first * 8, n * 8, window.data()));
    for (std::uint64_t j = 0; j < n; ++j) {
      const std::uint64_t d = first + j;
      const std::int64_t v = window[j];
      const std::string field = absl::StrCat("document_indices[", d, "] = ", v, " at byte offset ", at + d * 8);
      if (d == 0 && v != 0) return Bad(idx, field + " must be 0");
      if (v < previous) return Bad(idx, absl::StrCat(field, " is below document_indices[", d - 1, "] = ", previous));
      if (static_cast<std::uint64_t>(v) > sequences) {
        return Bad(idx, absl::StrCat(field, " is past sequence_count ", sequences));
      }
      if (d + 1 == documents && static_cast<std::uint64_t>(v) != sequences) {
        return Bad(idx, absl::StrCat(field, " is the last and must equal sequence_count ", sequences));
      }
      previous = v;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<IndexedIndexInfo> ValidateIndexedIndex(const ByteSource& idx, std::uint64_t bin_bytes,
                                                      const std::string& bin_name) {
  if (idx.size() < kIndexedHeaderSize) {
    return Bad(idx, absl::StrCat(idx.size(), " bytes, shorter than the ", kIndexedHeaderSize,
                                 "-byte header of an indexed dataset"));
  }
  unsigned char header[kIndexedHeaderSize];
  TY_RETURN_IF_ERROR(idx.ReadAt(0, kIndexedHeaderSize, header));
  if (std::memcmp(header, kIndexedMagic, kIndexedMagicSize) != 0) {
    return Bad(idx, "bad magic at byte offset 0: not a Megatron indexed dataset (expected \"MMIDIDX\\x00\\x00\")");
  }
  const std::uint64_t version = U64(header + 9);
  if (version != 1) {
    return Bad(idx, absl::StrCat("version ", version, " at byte offset 9 is unsupported (only 1)"));
  }
  const std::uint8_t code = header[17];
  const std::optional<TokenDtype> dtype = MegatronDtype(code);
  if (!dtype) {
    return Bad(idx, absl::StrCat("dtype code ", static_cast<int>(code),
                                 " at byte offset 17 is not one of 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, "
                                 "6 float64, 7 float32, 8 uint16"));
  }
  IndexedIndexInfo info;
  info.dtype = *dtype;
  info.sequences = U64(header + 18);
  const std::uint64_t document_count = U64(header + 26);
  TY_RETURN_IF_ERROR(CheckSize(idx, info.sequences, document_count));
  TY_ASSIGN_OR_RETURN(info.tokens, CheckSequences(idx, info.sequences, TokenDtypeSize(info.dtype), bin_bytes, bin_name));
  TY_RETURN_IF_ERROR(CheckDocuments(idx, info.sequences, document_count));
  info.documents = document_count - 1;
  return info;
}

}  // namespace trainyard::data
