// The audit log as the CLI prints it: `trainyard audit`'s table, and the
// "cancelled by alice (submitter) at ..." lines of `trainyard get`. Every string in a
// row came from a caller: the result still goes through TerminalSafe. Pure.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard::cli {

// TIME IDENTITY ROLE ACTION TARGET VIA OUTCOME, then the reason and message on the
// row's next line, indented; "no audit rows" for none.
std::string FormatAuditTable(const std::vector<v1::AuditRecord>& rows);
// One line per row: "cancelled by alice (submitter) at 2026-12-06T10:47:17Z via web:
// REASON" ("drained from w1 by ..." for a drain).
std::string FormatStoppedBy(const std::vector<v1::AuditRecord>& rows);

// --since: an RFC 3339 time (2026-12-06T10:00:00Z) or an age before `now` ("90m",
// "12h", "7d"); INVALID_ARGUMENT naming --since for anything else, a negative age or
// a time in the future.
absl::StatusOr<absl::Time> ParseSince(std::string_view text, absl::Time now);

}  // namespace trainyard::cli
