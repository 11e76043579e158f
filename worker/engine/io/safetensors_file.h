// Reads and writes the safetensors format (https://github.com/huggingface/safetensors):
//   8-byte little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value", ...}}   (metadata optional, string -> string)
//   then the byte buffer; offsets are relative to the buffer's start.
// Tensors are stored whole (unsharded), row-major, little-endian. Dtypes: F64 F32 F16
// BF16 I64 I32 I16 I8 U8 BOOL. Free functions with no shared state; thread-safe as long
// as two calls do not write the same path.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace trainyard::engine {

// The header is parsed before anything else is trusted; a bigger one is rejected.
inline constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100ull * 1000 * 1000;

// Writes `tensors` (any supported dtype, CPU; made contiguous) to `path` in the given
// order, atomically: the bytes go to `path`.tmp, are fsynced, then renamed over
// `path`, so a reader never sees a half-written file and a failed write leaves any
// previous file intact. Throws std::runtime_error naming the path (unsupported dtype,
// non-CPU tensor, duplicate or empty name, I/O error).
void WriteSafetensors(const std::string& path,
                      const std::vector<std::pair<std::string, torch::Tensor>>& tensors);

// Reads every tensor, in the order of their data offsets (the order they were written).
// Validates the whole header first: its length and the 100 MB cap, JSON syntax, dtypes,
// shapes, duplicate names, and that the offsets tile the buffer exactly (contiguous,
// in range, shape x itemsize == bytes). Throws std::runtime_error naming the path and
// the problem.
std::vector<std::pair<std::string, torch::Tensor>> ReadSafetensors(const std::string& path);

}  // namespace trainyard::engine
