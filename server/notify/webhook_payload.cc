#include "server/notify/webhook_payload.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/events/proto_json.h"
#include "common/proto_time.h"
#include "server/notify/webhook_file.h"

namespace trainyard {

std::string WebhookDeliveryId(const std::string& job_id, int64_t seq, const std::string& endpoint) {
  return absl::StrCat(job_id, ":", seq, ":", endpoint);
}

std::string WebhookBody(const v1::Event& event, const std::string& owner, const std::string& endpoint,
                        uint32_t kinds) {
  nlohmann::ordered_json body;
  body["id"] = WebhookDeliveryId(event.job_id(), event.seq(), endpoint);
  body["endpoint"] = endpoint;
  body["kinds"] = WebhookKindNames(kinds);
  body["job_id"] = event.job_id();
  body["owner"] = owner;
  body["seq"] = event.seq();
  body["attempt"] = event.attempt();
  body["time"] = absl::FormatTime("%Y-%m-%d%ET%H:%M:%E3SZ", FromProtoTime(event.time()), absl::UTCTimeZone());
  body["event"] = nlohmann::ordered_json::parse(ToJsonLine(event));
  // Stored strings are valid UTF-8 (the wire codec refuses others); replace keeps a
  // damaged one from throwing here.
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string HmacSha256Hex(std::string_view key, std::string_view message) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(message.data()),
       message.size(), digest, &size);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(size * 2);
  for (unsigned int i = 0; i < size; ++i) {
    hex.push_back(kHex[digest[i] >> 4]);
    hex.push_back(kHex[digest[i] & 15]);
  }
  return hex;
}

std::string WebhookSignature(std::string_view secret, int64_t t, std::string_view body) {
  return absl::StrCat("t=", t, ",v1=", HmacSha256Hex(secret, absl::StrCat(t, ".") + std::string(body)));
}

}  // namespace trainyard
