// Internal to common/spec's rules (rules.cc, model_rules.cc): the range and enumeration
// checks every section's rules share, and the model's rules, which live in a file of
// their own. Not for use outside common/spec: callers validate a whole JobSpec with
// spec::Validate (rules.h), whose order of sections the rules rely on.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/spec/job_spec.h"
#include "common/spec/spec_error.h"

namespace trainyard::spec::rules_internal {

using Check = std::optional<SpecError>;

// The first broken rule of `expr`, returned from the calling rule.
#define TY_SPEC_CHECK(expr)                                              \
  do {                                                                   \
    if (::trainyard::spec::rules_internal::Check _c = (expr)) return _c; \
  } while (0)

// value in [lo, hi], or (lo, hi] when lo_open; NaN fails.
Check InRange(const std::string& path, double value, double lo, double hi, bool lo_open = false);
// value in [lo, hi]; a bound named by another key is written as that key's name=value.
Check IntRange(const std::string& path, std::int64_t value, std::int64_t lo, std::int64_t hi,
               const std::string& lo_name = "", const std::string& hi_name = "");
// value is one of `known`.
Check OneOf(const std::string& path, const std::string& value, const std::vector<std::string>& known);

// The [model] section: sizes, routing, expert groups, RoPE scaling, and the attention
// each architecture needs (grouped-query, or deepseek_v3's multi-head latent attention).
Check Model(const ModelSpec& m);

}  // namespace trainyard::spec::rules_internal
