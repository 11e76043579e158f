#include "client/cli/audit_format.h"

#include <cstdint>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/cli/job_view.h"
#include "common/base/text.h"

namespace trainyard::cli {

std::string FormatAuditTable(const std::vector<v1::AuditRecord>& rows) {
  if (rows.empty()) return "no audit rows\n";
  std::string out = "TIME                  IDENTITY (ROLE)             ACTION         TARGET        VIA     OUTCOME\n";
  for (const auto& r : rows) {
    const std::string who = absl::StrCat(r.identity(), " (", r.role().empty() ? "-" : r.role(), ")");
    const std::string target = r.target().empty() ? "-" : r.target();
    absl::StrAppend(&out, FormatUtc(ToTime(r.time())), "  ", who, std::string(who.size() < 28 ? 28 - who.size() : 1, ' '),
                    r.action(), std::string(r.action().size() < 15 ? 15 - r.action().size() : 1, ' '), target,
                    std::string(target.size() < 14 ? 14 - target.size() : 1, ' '), r.via(),
                    std::string(r.via().size() < 8 ? 8 - r.via().size() : 1, ' '), r.outcome(), "\n");
    std::string detail;
    if (!r.reason().empty()) absl::StrAppend(&detail, "reason: ", r.reason());
    if (!r.message().empty()) absl::StrAppend(&detail, detail.empty() ? "" : "; ", r.message());
    if (r.job_ids_size() > 0 && r.action() == "drain") {
      absl::StrAppend(&detail, detail.empty() ? "" : "; ", "jobs:");
      for (const auto& j : r.job_ids()) absl::StrAppend(&detail, " ", j);
    }
    if (!detail.empty()) absl::StrAppend(&out, "    ", detail, "\n");
  }
  return out;
}

std::string FormatStoppedBy(const std::vector<v1::AuditRecord>& rows) {
  std::string out;
  for (const auto& r : rows) {
    const std::string verb = r.action() == "drain" ? absl::StrCat("drained from ", r.target()) : "cancelled";
    absl::StrAppend(&out, verb, " by ", r.identity(), " (", r.role(), ") at ", FormatUtc(ToTime(r.time())), " via ",
                    r.via(), r.reason().empty() ? "" : absl::StrCat(": ", r.reason()), "\n");
  }
  return out;
}

absl::StatusOr<absl::Time> ParseSince(std::string_view text, absl::Time now) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("--since ", Quoted(text), ": ", why));
  };
  if (text.empty()) return bad("empty; give a time (2026-12-06T10:00:00Z) or an age (90m, 12h, 7d)");
  const char unit = text.back();
  if (unit == 'm' || unit == 'h' || unit == 'd') {
    std::string_view number = text.substr(0, text.size() - 1);
    int64_t n = 0;
    if (!number.empty() && number[0] == '-') return bad("a negative age");
    if (number.empty() || number.size() > 9 || !absl::SimpleAtoi(std::string(number), &n)) {
      return bad("an age is a whole number and a unit: 90m, 12h, 7d");
    }
    const absl::Duration per = unit == 'm' ? absl::Minutes(1) : unit == 'h' ? absl::Hours(1) : absl::Hours(24);
    return now - n * per;
  }
  absl::Time t;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, std::string(text), &t, &error)) {
    return bad("neither an RFC 3339 time (2026-12-06T10:00:00Z) nor an age (90m, 12h, 7d)");
  }
  if (t > now) return bad(absl::StrCat("in the future (now is ", FormatUtc(now), ")"));
  if (t < absl::UnixEpoch()) return bad("before 1970");
  return t;
}

}  // namespace trainyard::cli
