#include "tests/support/files.h"

#include <cstdint>

#include "common/base/file_io.h"

namespace trainyard::testing {

std::string ReadFileOrEmpty(const std::filesystem::path& path) {
  auto bytes = ReadFile(path.string(), std::size_t{1} << 30);
  return bytes.ok() ? *std::move(bytes) : std::string();
}

std::string PseudoRandomBytes(std::size_t n, int seed) {
  std::string out(n, '\0');
  uint32_t x = 2463534242u + static_cast<uint32_t>(seed);
  for (std::size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    out[i] = static_cast<char>(x & 0xff);
  }
  return out;
}

}  // namespace trainyard::testing
