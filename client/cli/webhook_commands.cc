#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/cli/cli_format.h"
#include "client/cli/command_runner.h"
#include "common/events/proto_json.h"
#include "common/proto_time.h"

namespace trainyard::cli {
namespace {

std::string When(const google::protobuf::Timestamp& t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", FromProtoTime(t), absl::UTCTimeZone());
}

// One block per endpoint:
//   ops  https://hooks.example.com/trainyard
//     events: state_change, stall   owners: every owner
//     pending 0, delivered 12, failed 1, dropped 0
//     last success: 2026-12-06T17:51:41Z
//     last error:   2026-12-06T17:50:00Z HTTP 500: 'down'
std::string FormatWebhookStatus(const v1::GetWebhookStatusResponse& status) {
  if (!status.configured()) return "the controller runs without --webhooks: no endpoints\n";
  std::string out = absl::StrCat("webhooks of ", status.file(), "\n");
  for (const v1::WebhookEndpointStatus& e : status.endpoints()) {
    absl::StrAppend(&out, "\n", e.name(), "  ", e.url(), "\n");
    absl::StrAppend(&out, "  events: ", absl::StrJoin(e.events(), ", "), "   owners: ",
                    e.owners().empty() ? std::string("every owner") : absl::StrJoin(e.owners(), ", "), "\n");
    absl::StrAppend(&out, "  pending ", e.pending(), ", delivered ", e.delivered(), ", failed ", e.failed(),
                    ", dropped ", e.dropped(), "\n");
    absl::StrAppend(&out, "  last success: ", e.has_last_success_time() ? When(e.last_success_time()) : "never", "\n");
    if (!e.last_error().empty()) {
      absl::StrAppend(&out, "  last error:   ", e.has_last_error_time() ? When(e.last_error_time()) + " " : "",
                      e.last_error(), "\n");
    }
  }
  return out;
}

}  // namespace

int Runner::WebhookStatus() {
  absl::StatusOr<v1::GetWebhookStatusResponse> status = client_->GetWebhookStatus();
  if (!status.ok()) return Fail(status.status());
  if (options_.Json()) {
    out_ << ToJsonLine(*status) << '\n';
  } else {
    // Errors quote what a receiver answered: made safe for a terminal.
    out_ << TerminalSafe(FormatWebhookStatus(*status), /*keep_newlines=*/true);
  }
  out_.flush();
  return kExitOk;
}

}  // namespace trainyard::cli
