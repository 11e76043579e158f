// The table form of the rule tests: one refused set of --set overrides on the debug
// preset, with the field, rule, kind and message it must give. rules_test.cc holds the
// one check (RuleTest.RefusesNamingFieldAndRule); each file instantiates its own cases.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/spec/spec_error.h"

namespace trainyard::spec::rule_case {

struct Case {
  const char* name;
  std::vector<std::string> sets;  // --set overrides on the debug preset
  const char* field;
  const char* rule;
  const char* message;  // exact message, or a substring when it starts with '~'
  SpecError::Kind kind = SpecError::Kind::kInvalid;
};

class RuleTest : public ::testing::TestWithParam<Case> {};

inline std::string CaseName(const ::testing::TestParamInfo<Case>& info) { return info.param.name; }

}  // namespace trainyard::spec::rule_case
