// Untrusted text (a file name, a field a client sent, a line a rank printed):
// - Quote, for an error or log message: printable ASCII kept, `\` and `"` escaped,
//   every other byte as \xNN, cut after 100 bytes with the total length noted, so
//   hostile input is never echoed whole and cannot forge lines or terminal escapes;
// - UTF-8: whether bytes are valid UTF-8 (proto3 strings must be), and a valid copy;
// - a count with its noun in the right number, for messages people read.
// Pure; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace trainyard {

inline constexpr std::size_t kMaxQuotedBytes = 100;

// `value` escaped and cut as above, without surrounding quotes.
std::string Quote(std::string_view value);
// The same in single quotes: 'value'.
std::string Quoted(std::string_view value);
// Text that is already escaped (a JSON dump) cut to `max` bytes with "..." after a cut.
std::string Clip(std::string_view escaped, std::size_t max = kMaxQuotedBytes);

// Well-formed UTF-8: no overlong forms, surrogates, truncated sequences or code points
// past U+10FFFF.
bool IsUtf8(std::string_view s);
// `s` with each byte that starts no valid UTF-8 sequence replaced by U+FFFD.
std::string ToValidUtf8(std::string_view s);

// "1 slot", "0 slots", "2 GPUs": `n` and the noun, singular only for exactly 1; the
// plural is `singular` + "s" unless given.
std::string Counted(std::int64_t n, std::string_view singular, std::string_view plural = {});

}  // namespace trainyard
