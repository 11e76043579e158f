// The controller's --webhooks file: where to POST which job events, in TOML. Read once
// when the controller starts and again on SIGHUP (a bad file keeps the endpoints in
// force), as --policy-file is:
//
//   [delivery]                 # optional; these are the defaults
//   timeout_s = 10             # one POST, connect included: 1 ..60
//   max_attempts = 20          # a delivery is given up after this many: 1 ..1000
//   max_age_hours = 24         # ... or once its event is this old: > 0, at most 720
//   backoff_initial_s = 1      # wait after the first failure, doubling: > 0, at most 3600
//   backoff_max_s = 300        # the doubling stops here: backoff_initial_s ..86400
//   max_pending = 10000        # deliveries queued per endpoint; more are dropped: 1 ..1000000
//
//   [[endpoint]]
//   name = "ops"               # [A-Za-z0-9_-]{1,64}, unique: the metrics label and id suffix
//   url = "https://hooks.example.com/trainyard"   # http(s), no user:password
//   events = ["state_change", "stall", "preemption", "checkpoint", "restart"]
//   owners = ["alice", "bob"]  # optional: only these owners' jobs; absent: every owner
//   secret_file = "ops.secret" # or secret = "..."; exactly one; 16 ..4096 bytes
//
// As with the policy file every problem is reported, never tolerated: INVALID_ARGUMENT
// "FILE:LINE: ..." for the earliest one (with a count of the others). Secrets never
// appear in an error, a log line or the status RPC.
//
// Thread-safe (stateless). ParseWebhookFile reads the secret files it names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace trainyard {

inline constexpr std::size_t kMaxWebhookFileBytes = 1 << 20;
inline constexpr std::size_t kMaxWebhookEndpoints = 32;  // one sender thread each
inline constexpr std::size_t kMaxWebhookNameBytes = 64;
inline constexpr std::size_t kMinWebhookSecretBytes = 16;
inline constexpr std::size_t kMaxWebhookSecretBytes = 4096;

// What an endpoint subscribes to; one stored event may be several (webhook_policy.h).
enum WebhookKind : uint32_t {
  kWebhookStateChange = 1u << 0,
  kWebhookStall = 1u << 1,
  kWebhookPreemption = 1u << 2,
  kWebhookCheckpoint = 1u << 3,
  kWebhookRestart = 1u << 4,
};
inline constexpr uint32_t kAllWebhookKinds = (1u << 5) - 1;

// "state_change", "stall", ...; the names a file and a payload use.
std::vector<std::string> WebhookKindNames(uint32_t kinds);

struct WebhookEndpoint {
  std::string name;
  std::string url;
  uint32_t kinds = 0;
  std::vector<std::string> owners;  // empty: every owner
  std::string secret;               // never logged
};

struct WebhookDelivery {
  absl::Duration timeout = absl::Seconds(10);
  int max_attempts = 20;
  absl::Duration max_age = absl::Hours(24);
  absl::Duration backoff_initial = absl::Seconds(1);
  absl::Duration backoff_max = absl::Minutes(5);
  int max_pending = 10000;
};

struct WebhookConfig {
  std::vector<WebhookEndpoint> endpoints;
  WebhookDelivery delivery;
};

// `text` as a webhooks file; `file_name` prefixes every error and a relative
// secret_file is read from its folder.
absl::StatusOr<WebhookConfig> ParseWebhookFile(std::string_view text, const std::string& file_name);

// The file at `path` (read with a kMaxWebhookFileBytes cap). Errors reading it keep
// ReadFile's code and say "webhooks file 'PATH': ...".
absl::StatusOr<WebhookConfig> LoadWebhookFile(const std::string& path);

}  // namespace trainyard
