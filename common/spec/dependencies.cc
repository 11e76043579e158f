#include "common/spec/dependencies.h"

#include <set>

namespace trainyard::spec {
namespace {

constexpr const char* kField = "job.after";
// Room for kMaxAfterEntries entries of the longest id and condition, with separators.
constexpr std::size_t kMaxAfterTextLength = kMaxAfterEntries * (kMaxAfterJobIdLength + 16);

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool IdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

SpecError Bad(const std::string& message) { return Invalid(kField, "syntax", std::string(kField) + ": " + message); }

}  // namespace

const char* AfterConditionName(AfterCondition condition) {
  switch (condition) {
    case AfterCondition::kSucceeded:
      return "succeeded";
    case AfterCondition::kFailed:
      return "failed";
    case AfterCondition::kEnded:
      return "ended";
    case AfterCondition::kStarted:
      return "started";
  }
  return "succeeded";
}

const char* AfterConditionGoal(AfterCondition condition) {
  switch (condition) {
    case AfterCondition::kSucceeded:
      return "to succeed";
    case AfterCondition::kFailed:
      return "to fail";
    case AfterCondition::kEnded:
      return "to end";
    case AfterCondition::kStarted:
      return "to start";
  }
  return "to succeed";
}

Result<std::vector<AfterEntry>> ParseAfter(std::string_view text) {
  std::vector<AfterEntry> out;
  if (text.size() > kMaxAfterTextLength) {
    return Invalid(kField, "length",
                   std::string(kField) + " is " + std::to_string(text.size()) + " bytes long, over the limit of " +
                       std::to_string(kMaxAfterTextLength) + " (at most " + std::to_string(kMaxAfterEntries) +
                       " jobs)");
  }
  if (Trim(text).empty()) return out;
  std::set<std::string, std::less<>> seen;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view entry = Trim(text.substr(start, comma - start));
    start = comma + 1;
    if (entry.empty()) return Bad("an empty entry in \"" + Quote(std::string(text)) + "\" (a stray comma?)");
    if (out.size() == kMaxAfterEntries) {
      return Invalid(kField, "length",
                     std::string(kField) + " names more than " + std::to_string(kMaxAfterEntries) +
                         " jobs; a dependent may wait for at most " + std::to_string(kMaxAfterEntries));
    }
    AfterEntry e;
    std::string_view id = entry;
    if (const std::size_t colon = entry.find(':'); colon != std::string_view::npos) {
      id = Trim(entry.substr(0, colon));
      const std::string_view cond = Trim(entry.substr(colon + 1));
      bool known = false;
      for (AfterCondition c :
           {AfterCondition::kSucceeded, AfterCondition::kFailed, AfterCondition::kEnded, AfterCondition::kStarted}) {
        if (cond == AfterConditionName(c)) {
          e.condition = c;
          known = true;
        }
      }
      if (!known) {
        return Invalid(kField, "one_of",
                       std::string(kField) + ": unknown condition \"" + Quote(std::string(cond)) + "\" in \"" +
                           Quote(std::string(entry)) + "\" (known: succeeded, failed, ended, started)");
      }
    }
    if (id.empty()) return Bad("\"" + Quote(std::string(entry)) + "\" names no job");
    if (id.size() > kMaxAfterJobIdLength) {
      return Invalid(kField, "length",
                     std::string(kField) + ": the job id \"" + Quote(std::string(id)) + "\" is " +
                         std::to_string(id.size()) + " bytes long, over the limit of " +
                         std::to_string(kMaxAfterJobIdLength));
    }
    for (char c : id) {
      if (!IdChar(c)) {
        return Invalid(kField, "charset",
                       std::string(kField) + ": \"" + Quote(std::string(id)) +
                           "\" is not a job id (letters, digits, '.', '_' and '-', such as job-3)");
      }
    }
    if (!seen.insert(std::string(id)).second) {
      return Bad("job " + std::string(id) + " is named twice; give each job once, with one condition");
    }
    e.job = std::string(id);
    out.push_back(std::move(e));
  }
  return out;
}

std::string AfterText(const std::vector<AfterEntry>& entries) {
  std::string out;
  for (const AfterEntry& e : entries) {
    if (!out.empty()) out += ',';
    out += e.job;
    if (e.condition != AfterCondition::kSucceeded) out += std::string(":") + AfterConditionName(e.condition);
  }
  return out;
}

}  // namespace trainyard::spec
