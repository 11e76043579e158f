#include "absl/strings/str_cat.h"
#include "client/cli/audit_format.h"
#include "client/cli/cli_format.h"
#include "client/cli/command_runner.h"
#include "common/events/proto_json.h"
#include "google/protobuf/util/time_util.h"

namespace trainyard::cli {

int Runner::Audit(const std::string& job_id, const std::string& since, int limit) {
  google::protobuf::Timestamp since_ts;
  if (!since.empty()) {
    absl::StatusOr<absl::Time> t = ParseSince(since, env_.clock != nullptr ? env_.clock->Now() : absl::Now());
    if (!t.ok()) {
      err_ << FormatError(t.status()) << std::endl;
      return kExitUsage;
    }
    since_ts = google::protobuf::util::TimeUtil::MillisecondsToTimestamp(absl::ToUnixMillis(*t));
  }
  auto rows = client_->ListAudit(job_id, since.empty() ? nullptr : &since_ts, limit);
  if (!rows.ok()) return Fail(rows.status());
  if (options_.Json()) {
    for (const auto& r : *rows) out_ << ToJsonLine(r) << '\n';
  } else {
    // Identities, targets and reasons came from callers.
    out_ << TerminalSafe(FormatAuditTable(*rows), /*keep_newlines=*/true);
  }
  out_.flush();
  return kExitOk;
}

}  // namespace trainyard::cli
