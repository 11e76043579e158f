// The element types a token file may hold, and their checked conversion to token ids.
//
// Flat files name their type by suffix (.u16, .u32; nanoGPT's .bin is uint16; text is
// one byte per token); a Megatron-LM indexed dataset names it by the dtype code in its
// .idx (indexed_index.h). Every file is little-endian. A token is valid when it is an
// integer in [0, vocab_size): a negative signed value, a float that is NaN, infinite,
// negative or not integral, and any value >= vocab_size are errors, never clamped or
// truncated. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace trainyard::data {

enum class TokenDtype {
  kUint8,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kFloat64,
  kFloat32,
  kUint16,
  kUint32,  // flat .u32 files only: Megatron has no code for it
};

// Bytes per element.
int TokenDtypeSize(TokenDtype dtype);
// numpy's name ("uint16", "float32", ...).
const char* TokenDtypeName(TokenDtype dtype);
// Megatron-LM's DType codes: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64,
// 7 float32, 8 uint16; nullopt for any other code.
std::optional<TokenDtype> MegatronDtype(std::uint8_t code);

// A token that is not a valid id: its position among the decoded elements and its value
// as text ("-3", "2.5", "nan", "70000").
struct BadToken {
  std::int64_t index = 0;
  std::string value;
};

// Decodes `count` little-endian elements of `dtype` from `bytes` into `out` as token ids,
// checking each against [0, vocab_size). Returns the first invalid element, or nullopt
// when all `count` are valid (`out` is then filled).
std::optional<BadToken> DecodeTokens(TokenDtype dtype, const unsigned char* bytes, std::int64_t count,
                                     std::int64_t vocab_size, std::int64_t* out);

}  // namespace trainyard::data
