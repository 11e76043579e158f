// The one error type of the spec core: which field, which rule, where it came from,
// and a sentence for people. Callers outside the core map it to their own error
// channel (absl::Status in the controller and CLI, std::invalid_argument in the engine).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "common/base/text.h"  // Quote: what a message may show of its input

namespace trainyard::spec {

struct SpecError {
  enum class Kind {
    kInvalid,        // the value breaks a rule: INVALID_ARGUMENT
    kUnimplemented,  // legal, but this release cannot run it: UNIMPLEMENTED
    kNotFound,       // a job file that cannot be opened: NOT_FOUND
  };
  Kind kind = Kind::kInvalid;
  // "section.key" of the offending field, or "" for a whole-document problem (syntax,
  // file size). For a rule across fields, the field the message starts with.
  std::string field;
  // Short rule name: "syntax", "unknown_key", "type", "range", "one_of", "divides",
  // "requires", "length", "charset", "utf8", "unimplemented", "file".
  std::string rule;
  // Where the value came from: "job.toml:5:9", "--set", or "" (a proto, a default).
  std::string origin;
  // A sentence naming the field and the rule, e.g. "training.lr must be in (0, 10],
  // got 20". Quotes at most ~100 characters of any input (see Quote).
  std::string message;

  // "origin: message", or the message alone.
  std::string ToString() const { return origin.empty() ? message : origin + ": " + message; }
};

SpecError Invalid(std::string field, std::string rule, std::string message);
SpecError Unimplemented(std::string field, std::string message);

// A value or the error why not. Small on purpose: C++17 has no std::expected.
template <class T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}           // NOLINT: implicit by design
  Result(SpecError error) : v_(std::move(error)) {}   // NOLINT: implicit by design
  bool ok() const { return v_.index() == 0; }
  const T& value() const& { return std::get<0>(v_); }
  T& value() & { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const SpecError& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, SpecError> v_;
};

}  // namespace trainyard::spec
