// Fuzz target: the bytes of a safetensors file as the engine's reader sees them
// (worker/engine/io/safetensors_header: the 8-byte length with its cap, then the header
// JSON checked against the data buffer that follows). Every refusal is a
// std::runtime_error; invariants: errors stay short-ish (the reader quotes names up to
// ~100 characters but may list a shape), and an accepted header tiles the buffer with
// entries whose shape x itemsize equals their byte span.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "tests/fuzz/fuzz_check.h"
#include "worker/engine/io/safetensors_header.h"

namespace trainyard::engine {
namespace {

void CheckAccepted(const ParsedSafetensorsHeader& h, std::uint64_t buffer_bytes) {
  std::uint64_t expected = 0;
  for (const SafetensorsHeaderEntry& e : h.tensors) {
    if (e.begin != expected || e.end < e.begin) fuzz::Violated("accepted entries do not tile: " + e.name);
    std::uint64_t bytes = SafetensorsDtypeSize(e.dtype);
    for (int64_t d : e.shape) {
      if (d < 0 || __builtin_mul_overflow(bytes, static_cast<std::uint64_t>(d), &bytes)) {
        fuzz::Violated("accepted shape overflows: " + e.name);
      }
    }
    if (bytes != e.end - e.begin) fuzz::Violated("accepted entry's span is not its shape: " + e.name);
    expected = e.end;
  }
  if (expected != buffer_bytes) fuzz::Violated("accepted entries leave trailing bytes");
}

void Run(const std::uint8_t* data, std::size_t size) {
  const std::string path = "fuzz.safetensors";
  try {
    unsigned char len[8] = {};
    std::memcpy(len, data, size < 8 ? size : 8);
    const std::uint64_t n = SafetensorsHeaderLength(len, size, path);
    const std::string text(reinterpret_cast<const char*>(data) + 8, n);
    const std::uint64_t buffer_bytes = size - 8 - n;
    CheckAccepted(ParseSafetensorsHeader(text, buffer_bytes, path), buffer_bytes);
  } catch (const std::runtime_error& e) {
    // The JSON library's own message may quote a bit of the input; shapes are dumped whole.
    if (std::strncmp(e.what(), "safetensors fuzz.safetensors: ", 30) != 0) {
      fuzz::Violated(std::string("unexpected error: ") + e.what());
    }
  }
}

}  // namespace
}  // namespace trainyard::engine

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  trainyard::engine::Run(data, size);
  return 0;
}
