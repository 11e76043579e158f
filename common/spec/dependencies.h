// job.after: the jobs a job waits for, as text "JOB[:condition], ..." in the spec (one
// string key, so the spec core, the proto and every reader carry it unchanged), parsed
// and checked here once for the CLI, the controller and the rules.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/spec/spec_error.h"

namespace trainyard::spec {

// What the dependency must have done before the dependent may start. Each condition,
// once true, stays true (terminal states are final, a start time is never unset), so
// a released dependent is never held again.
enum class AfterCondition {
  kSucceeded,  // ended SUCCEEDED (the default)
  kFailed,     // ended FAILED
  kEnded,      // ended, however
  kStarted,    // reached RUNNING at least once
};

// "succeeded", "failed", "ended", "started".
const char* AfterConditionName(AfterCondition condition);
// "to succeed", "to fail", "to end", "to start": "waiting for job-3 to succeed".
const char* AfterConditionGoal(AfterCondition condition);

struct AfterEntry {
  std::string job;
  AfterCondition condition = AfterCondition::kSucceeded;
};

// At most this many jobs in one job.after: a dependency is named by hand or by a
// script; a longer list is a mistake (a sweep's children are followed as one sweep).
inline constexpr std::size_t kMaxAfterEntries = 16;
// A job id as the controller makes them ("job-12"), capped like a name.
inline constexpr std::size_t kMaxAfterJobIdLength = 64;
// The longest chain a job may end: A after B after C ... counts the jobs in it. The
// controller refuses a submit that would make a longer one.
inline constexpr int kMaxDependencyDepth = 32;

// Parses job.after: comma-separated entries, each a job id (letters, digits, '.', '_',
// '-') with an optional ":condition"; spaces around entries are ignored, "" is no
// dependency. Refused (field "job.after"): an empty entry, an unknown condition, a bad
// id, the same job twice, more than kMaxAfterEntries entries, text past the limit.
Result<std::vector<AfterEntry>> ParseAfter(std::string_view text);

// The entries back as text, in the canonical form ParseAfter reads ("job-3,job-4:failed":
// the default condition left out).
std::string AfterText(const std::vector<AfterEntry>& entries);

}  // namespace trainyard::spec
