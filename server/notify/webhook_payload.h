// What one webhook delivery sends: the JSON body, its id, and the signature header
// (docs/webhooks.md gives the schema and a receiver's check).
//
//   X-Trainyard-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>
//
// The body is fixed when the delivery is queued, so every retry sends the same bytes
// under the same id; only t (and so v1) is new per attempt.
//
// Thread-safe (stateless).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "trainyard/v1/event.pb.h"

namespace trainyard {

inline constexpr char kWebhookSignatureHeader[] = "X-Trainyard-Signature";
inline constexpr char kWebhookIdHeader[] = "X-Trainyard-Delivery";

// "<job>:<seq>:<endpoint>": one per stored event and endpoint, whatever the attempt or
// the controller's restarts; the receiver deduplicates by it.
std::string WebhookDeliveryId(const std::string& job_id, int64_t seq, const std::string& endpoint);

// {"id", "endpoint", "kinds": [...], "job_id", "owner", "seq", "attempt", "time" (the
// event's, RFC 3339 UTC), "event": the stored Event as proto3 JSON}.
std::string WebhookBody(const v1::Event& event, const std::string& owner, const std::string& endpoint,
                        uint32_t kinds);

// Lowercase hex HMAC-SHA256 of `message` under `key` (OpenSSL).
std::string HmacSha256Hex(std::string_view key, std::string_view message);

// The X-Trainyard-Signature value for `body` sent at unix second `t`.
std::string WebhookSignature(std::string_view secret, int64_t t, std::string_view body);

}  // namespace trainyard
