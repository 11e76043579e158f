// The safetensors header (https://github.com/huggingface/safetensors), parsed and
// validated without torch, so the reader's checks can be fuzzed and reused by tools that
// link no LibTorch:
//   8-byte little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value", ...}}   (metadata optional, string -> string)
//   then the byte buffer; offsets are relative to the buffer's start.
// safetensors_file.{h,cc} reads and writes the files with torch tensors on top of this.
// Free functions with no state; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace trainyard::engine {

// The header is parsed before anything else is trusted; a bigger one is rejected.
inline constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100ull * 1000 * 1000;

enum class SafetensorsDtype { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

// "F64", "F32", ...; the name in the file.
const char* SafetensorsDtypeName(SafetensorsDtype dtype);
// Bytes per element.
std::size_t SafetensorsDtypeSize(SafetensorsDtype dtype);

// Throws std::runtime_error("safetensors PATH: PROBLEM"): every safetensors error.
[[noreturn]] void FailSafetensors(const std::string& path, const std::string& problem);

// One tensor's entry in a validated header.
struct SafetensorsHeaderEntry {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;
  std::uint64_t begin = 0, end = 0;  // relative to the data buffer
};

struct ParsedSafetensorsHeader {
  std::vector<SafetensorsHeaderEntry> tensors;  // in data-offset order
  std::map<std::string, std::string> metadata;
};

// The header length N from the file's first 8 bytes, checked against the 100 MB cap and
// against the `file_bytes` the file holds (N must fit after the 8 bytes). Throws naming
// `path`.
std::uint64_t SafetensorsHeaderLength(const unsigned char (&len_bytes)[8], std::uint64_t file_bytes,
                                      const std::string& path);

// Parses and validates the header JSON `text` for a data buffer of `buffer_bytes`: JSON
// syntax, an object, duplicate names, dtypes, shapes (and their byte size overflowing),
// __metadata__ strings, and that the offsets tile the buffer exactly (contiguous, in
// range, shape x itemsize == bytes). Throws std::runtime_error naming `path` and the
// problem.
ParsedSafetensorsHeader ParseSafetensorsHeader(const std::string& text, std::uint64_t buffer_bytes,
                                               const std::string& path);

}  // namespace trainyard::engine
