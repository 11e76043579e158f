// Reads and writes the safetensors format (https://github.com/huggingface/safetensors):
//   8-byte little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value", ...}}   (metadata optional, string -> string)
//   then the byte buffer; offsets are relative to the buffer's start.
// Tensors are stored whole (unsharded), row-major, little-endian. Dtypes: F64 F32 F16
// BF16 I64 I32 I16 I8 U8 BOOL. The header is parsed and validated by the torch-free
// safetensors_header.h. Free functions with no shared state; thread-safe as long as two
// calls do not write the same path.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "worker/engine/io/safetensors_header.h"

namespace trainyard::engine {

// Writes `tensors` (any supported dtype, CPU; made contiguous) to `path` in the given
// order, atomically: the bytes go to `path`.tmp, are fsynced, then renamed over
// `path`, so a reader never sees a half-written file and a failed write leaves any
// previous file intact. Throws std::runtime_error naming the path (unsupported dtype,
// non-CPU tensor, duplicate or empty name, I/O error).
void WriteSafetensors(const std::string& path,
                      const std::vector<std::pair<std::string, torch::Tensor>>& tensors);

struct SafetensorsWriteOptions {
  // Added to __metadata__ next to "format": "pt".
  std::map<std::string, std::string> metadata;
  // Test hook (fault tests): runs once the header and the first tensor's bytes are in
  // the temporary file, before the rest; it may block, so a test can kill mid-write.
  std::function<void()> after_first_tensor;
};
void WriteSafetensors(const std::string& path,
                      const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const SafetensorsWriteOptions& options);

// One tensor's entry in a validated header.
struct SafetensorsEntry {
  std::string name;
  c10::ScalarType dtype;
  std::vector<int64_t> shape;
  std::uint64_t begin = 0, end = 0;  // relative to the data buffer
};

// A validated header (the same checks as ReadSafetensors) without the data.
struct SafetensorsHeader {
  std::string path;
  std::uint64_t file_bytes = 0;
  std::uint64_t buffer_start = 0;          // 8 + header length
  std::vector<SafetensorsEntry> tensors;   // in data-offset order
  std::map<std::string, std::string> metadata;
  const SafetensorsEntry* Find(const std::string& name) const;
};
SafetensorsHeader ReadSafetensorsHeader(const std::string& path);

// Reads one tensor named in `header` (throws naming the path if there is none).
torch::Tensor ReadSafetensorsTensor(const SafetensorsHeader& header, const std::string& name);

// Reads every tensor, in the order of their data offsets (the order they were written).
// Validates the whole header first: its length and the 100 MB cap, JSON syntax, dtypes,
// shapes, duplicate names, and that the offsets tile the buffer exactly (contiguous,
// in range, shape x itemsize == bytes). Throws std::runtime_error naming the path and
// the problem.
std::vector<std::pair<std::string, torch::Tensor>> ReadSafetensors(const std::string& path);

}  // namespace trainyard::engine
