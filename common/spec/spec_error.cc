#include "common/spec/spec_error.h"

#include <cstdio>

namespace trainyard::spec {

SpecError Invalid(std::string field, std::string rule, std::string message) {
  SpecError e;
  e.kind = SpecError::Kind::kInvalid;
  e.field = std::move(field);
  e.rule = std::move(rule);
  e.message = std::move(message);
  return e;
}

SpecError Unimplemented(std::string field, std::string message) {
  SpecError e;
  e.kind = SpecError::Kind::kUnimplemented;
  e.field = std::move(field);
  e.rule = "unimplemented";
  e.message = std::move(message);
  return e;
}

std::string Quote(std::string_view value) {
  constexpr std::size_t kMaxQuoted = 100;
  std::string out;
  for (std::size_t i = 0; i < value.size() && i < kMaxQuoted; ++i) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '"') {
      out.push_back(static_cast<char>(c));
    } else if (c == '\\' || c == '"') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else {
      char buf[5];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  if (value.size() > kMaxQuoted) {
    out += "...(" + std::to_string(value.size()) + " bytes)";
  }
  return out;
}

}  // namespace trainyard::spec
