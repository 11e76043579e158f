#include "common/base/text.h"

#include <cstdint>
#include <cstdio>

namespace trainyard {

std::string Quote(std::string_view value) {
  std::string out;
  for (std::size_t i = 0; i < value.size() && i < kMaxQuotedBytes; ++i) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    if (c == '\\' || c == '"') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[5];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  if (value.size() > kMaxQuotedBytes) out += "...(" + std::to_string(value.size()) + " bytes)";
  return out;
}

std::string Quoted(std::string_view value) { return "'" + Quote(value) + "'"; }

std::string Clip(std::string_view escaped, std::size_t max) {
  return escaped.size() <= max ? std::string(escaped) : std::string(escaped.substr(0, max)) + "...";
}

namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 when none starts there.
std::size_t SequenceAt(std::string_view s, std::size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  std::size_t extra = 0;
  std::uint32_t cp = 0;
  if ((c & 0xe0) == 0xc0) {
    extra = 1;
    cp = c & 0x1f;
  } else if ((c & 0xf0) == 0xe0) {
    extra = 2;
    cp = c & 0x0f;
  } else if ((c & 0xf8) == 0xf0) {
    extra = 3;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + extra >= s.size()) return 0;  // truncated sequence
  for (std::size_t k = 1; k <= extra; ++k) {
    const unsigned char cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3f);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
  if ((extra == 1 && cp < 0x80) || (extra == 2 && cp < 0x800) || (extra == 3 && cp < 0x10000) ||
      (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) {
    return 0;
  }
  return extra + 1;
}

}  // namespace

bool IsUtf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = SequenceAt(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string ToValidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = SequenceAt(s, i);
    if (n == 0) {
      out += "\xef\xbf\xbd";
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string Counted(std::int64_t n, std::string_view singular, std::string_view plural) {
  std::string out = std::to_string(n) + " ";
  if (n == 1) return out.append(singular);
  return plural.empty() ? out.append(singular).append("s") : out.append(plural);
}

}  // namespace trainyard
