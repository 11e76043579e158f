#include "common/data/token_dtype.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace trainyard::data {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "token files are little-endian and are decoded with memcpy: a big-endian host needs byte swaps");

template <typename T>
std::optional<BadToken> Decode(const unsigned char* bytes, std::int64_t count, std::int64_t vocab,
                               std::int64_t* out) {
  for (std::int64_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, bytes + i * static_cast<std::int64_t>(sizeof(T)), sizeof(T));
    if constexpr (std::is_floating_point_v<T>) {
      // NaN fails every comparison, so it lands here too.
      if (!(v >= 0 && v < static_cast<T>(vocab) && std::floor(v) == v)) {
        return BadToken{i, std::isnan(v) ? std::string("nan") : absl::StrCat(static_cast<double>(v))};
      }
      out[i] = static_cast<std::int64_t>(v);
    } else {
      if constexpr (std::is_signed_v<T>) {
        if (v < 0) return BadToken{i, absl::StrCat(v)};
      }
      if (static_cast<std::uint64_t>(v) >= static_cast<std::uint64_t>(vocab)) {
        return BadToken{i, absl::StrCat(v)};
      }
      out[i] = static_cast<std::int64_t>(v);
    }
  }
  return std::nullopt;
}

}  // namespace

int TokenDtypeSize(TokenDtype dtype) {
  switch (dtype) {
    case TokenDtype::kUint8:
    case TokenDtype::kInt8:
      return 1;
    case TokenDtype::kInt16:
    case TokenDtype::kUint16:
      return 2;
    case TokenDtype::kInt32:
    case TokenDtype::kFloat32:
    case TokenDtype::kUint32:
      return 4;
    case TokenDtype::kInt64:
    case TokenDtype::kFloat64:
      return 8;
  }
  return 0;
}

const char* TokenDtypeName(TokenDtype dtype) {
  switch (dtype) {
    case TokenDtype::kUint8: return "uint8";
    case TokenDtype::kInt8: return "int8";
    case TokenDtype::kInt16: return "int16";
    case TokenDtype::kInt32: return "int32";
    case TokenDtype::kInt64: return "int64";
    case TokenDtype::kFloat64: return "float64";
    case TokenDtype::kFloat32: return "float32";
    case TokenDtype::kUint16: return "uint16";
    case TokenDtype::kUint32: return "uint32";
  }
  return "?";
}

std::optional<TokenDtype> MegatronDtype(std::uint8_t code) {
  switch (code) {
    case 1: return TokenDtype::kUint8;
    case 2: return TokenDtype::kInt8;
    case 3: return TokenDtype::kInt16;
    case 4: return TokenDtype::kInt32;
    case 5: return TokenDtype::kInt64;
    case 6: return TokenDtype::kFloat64;
    case 7: return TokenDtype::kFloat32;
    case 8: return TokenDtype::kUint16;
    default: return std::nullopt;
  }
}

std::optional<BadToken> DecodeTokens(TokenDtype dtype, const unsigned char* bytes, std::int64_t count,
                                     std::int64_t vocab_size, std::int64_t* out) {
  switch (dtype) {
    case TokenDtype::kUint8: return Decode<std::uint8_t>(bytes, count, vocab_size, out);
    case TokenDtype::kInt8: return Decode<std::int8_t>(bytes, count, vocab_size, out);
    case TokenDtype::kInt16: return Decode<std::int16_t>(bytes, count, vocab_size, out);
    case TokenDtype::kInt32: return Decode<std::int32_t>(bytes, count, vocab_size, out);
    case TokenDtype::kInt64: return Decode<std::int64_t>(bytes, count, vocab_size, out);
    case TokenDtype::kFloat64: return Decode<double>(bytes, count, vocab_size, out);
    case TokenDtype::kFloat32: return Decode<float>(bytes, count, vocab_size, out);
    case TokenDtype::kUint16: return Decode<std::uint16_t>(bytes, count, vocab_size, out);
    case TokenDtype::kUint32: return Decode<std::uint32_t>(bytes, count, vocab_size, out);
  }
  return BadToken{0, "unknown dtype"};
}

}  // namespace trainyard::data
