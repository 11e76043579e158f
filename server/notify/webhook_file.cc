#include "server/notify/webhook_file.h"

#include <sys/stat.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/file_io.h"
#include "common/base/file_problems.h"
#include "server/policy/toml_text.h"
#include "common/base/text.h"
#include "common/http/http_client.h"
#include "common/spec/toml_type_name.h"

namespace trainyard {
namespace {

constexpr std::pair<WebhookKind, const char*> kKindNames[] = {
    {kWebhookStateChange, "state_change"}, {kWebhookStall, "stall"},       {kWebhookPreemption, "preemption"},
    {kWebhookCheckpoint, "checkpoint"},    {kWebhookRestart, "restart"},
};
constexpr char kKindList[] = "state_change, stall, preemption, checkpoint, restart";
constexpr char kEndpointKeys[] = "name, url, events, owners, secret, secret_file";
constexpr char kDeliveryKeys[] =
    "timeout_s, max_attempts, max_age_hours, backoff_initial_s, backoff_max_s, max_pending";

// Collects every problem with its position, so the earliest in the file is reported
// (toml++ tables iterate in key order, not file order).
class Reader {
 public:
  explicit Reader(std::string file_name) : problems_(std::move(file_name)) {}

  void Add(const toml::source_region& where, std::string message) {
    problems_.Add(where.begin.line, where.begin.column, std::move(message));
  }

  absl::Status Result() { return problems_.Result(); }

  const std::string* String(const toml::node& node, const std::string& what) {
    const auto* s = node.as_string();
    if (s == nullptr) {
      Add(node.source(), absl::StrCat(what, ": expected a string, got ", spec::TomlTypeName(node.type())));
      return nullptr;
    }
    return &s->get();
  }

  // A number (integer or float), finite, in (min, max] (or [min, max] with `closed`).
  std::optional<double> Number(const toml::node& node, const std::string& what, double min, double max,
                               bool closed) {
    double x = 0;
    if (const auto* i = node.as_integer()) {
      x = static_cast<double>(i->get());
    } else if (const auto* f = node.as_floating_point()) {
      x = f->get();
    } else {
      Add(node.source(), absl::StrCat(what, ": expected a number, got ", spec::TomlTypeName(node.type())));
      return std::nullopt;
    }
    if (!std::isfinite(x) || x < min || (!closed && x == min) || x > max) {
      Add(node.source(), absl::StrCat(what, ": ", x, " is out of range (", closed ? "at least " : "more than ", min,
                                      ", at most ", max, ")"));
      return std::nullopt;
    }
    return x;
  }

  std::optional<int> Integer(const toml::node& node, const std::string& what, int64_t min, int64_t max) {
    const auto* v = node.as_integer();
    if (v == nullptr) {
      Add(node.source(), absl::StrCat(what, ": expected an integer, got ", spec::TomlTypeName(node.type())));
      return std::nullopt;
    }
    if (v->get() < min || v->get() > max) {
      Add(node.source(), absl::StrCat(what, ": ", v->get(), " is out of range (", min, " to ", max, ")"));
      return std::nullopt;
    }
    return static_cast<int>(v->get());
  }

  // 1..max bytes of `allowed` characters.
  std::optional<std::string> Name(const toml::node& node, const std::string& what, const char* rule,
                                  bool (*allowed)(unsigned char)) {
    const std::string* name = String(node, what);
    if (name == nullptr) return std::nullopt;
    if (name->empty()) {
      Add(node.source(), absl::StrCat(what, ": must not be empty"));
      return std::nullopt;
    }
    if (name->size() > kMaxWebhookNameBytes) {
      Add(node.source(), absl::StrCat(what, ": ", Quoted(*name), " is ", name->size(), " bytes, more than ",
                                      kMaxWebhookNameBytes));
      return std::nullopt;
    }
    for (unsigned char c : *name) {
      if (!allowed(c)) {
        Add(node.source(), absl::StrCat(what, ": ", Quoted(*name), " may hold only ", rule));
        return std::nullopt;
      }
    }
    return *name;
  }

  void UnknownKey(const toml::key& key, const std::string& where, const std::string& allowed) {
    Add(key.source(), absl::StrCat("unknown key ", Quoted(key.str()), where, " (allowed: ", allowed, ")"));
  }

 private:
  FileProblems problems_;
};

bool EndpointNameChar(unsigned char c) { return std::isalnum(c) || c == '_' || c == '-'; }
// Owners are auth owners (server/auth/token_table.h).
bool OwnerChar(unsigned char c) { return std::isalnum(c) || c == '.' || c == '_' || c == '@' || c == '-'; }

// A secret as the file holds it: one line, trailing whitespace (the newline an editor
// adds) removed.
std::string TrimSecret(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  return s;
}

void ReadDelivery(Reader* r, const toml::node& node, WebhookDelivery* d) {
  const auto* table = node.as_table();
  if (table == nullptr) {
    r->Add(node.source(), absl::StrCat("delivery: expected a table ([delivery]), got ", spec::TomlTypeName(node.type())));
    return;
  }
  std::optional<toml::source_region> max_at;
  for (auto&& [key, value] : *table) {
    const std::string_view k = key.str();
    if (k == "timeout_s") {
      if (auto x = r->Number(value, "delivery.timeout_s", 1, 60, true)) d->timeout = absl::Seconds(*x);
    } else if (k == "max_attempts") {
      if (auto n = r->Integer(value, "delivery.max_attempts", 1, 1000)) d->max_attempts = *n;
    } else if (k == "max_age_hours") {
      if (auto x = r->Number(value, "delivery.max_age_hours", 0, 720, false)) d->max_age = absl::Hours(*x);
    } else if (k == "backoff_initial_s") {
      if (auto x = r->Number(value, "delivery.backoff_initial_s", 0, 3600, false)) {
        d->backoff_initial = absl::Seconds(*x);
      }
    } else if (k == "backoff_max_s") {
      if (auto x = r->Number(value, "delivery.backoff_max_s", 0, 86400, false)) {
        d->backoff_max = absl::Seconds(*x);
        max_at = value.source();
      }
    } else if (k == "max_pending") {
      if (auto n = r->Integer(value, "delivery.max_pending", 1, 1000000)) d->max_pending = *n;
    } else {
      r->UnknownKey(key, " in [delivery]", kDeliveryKeys);
    }
  }
  if (max_at && d->backoff_max < d->backoff_initial) {
    r->Add(*max_at, absl::StrCat("delivery.backoff_max_s: ", absl::ToDoubleSeconds(d->backoff_max),
                                 " is less than backoff_initial_s (", absl::ToDoubleSeconds(d->backoff_initial), ")"));
  }
}

// One [[endpoint]]; false when it is unusable (its problems are recorded).
bool ReadEndpoint(Reader* r, const toml::table& table, const std::string& file_name, WebhookEndpoint* e,
                  toml::source_region* name_at) {
  bool ok = true;
  bool have_name = false, have_url = false, have_events = false, have_secret = false;
  const toml::node* secret_node = nullptr;
  const toml::node* secret_file_node = nullptr;
  for (auto&& [key, value] : table) {
    const std::string_view k = key.str();
    if (k == "name") {
      if (auto n = r->Name(value, "endpoint.name", "letters, digits, '_' and '-'", &EndpointNameChar)) {
        e->name = *n;
        *name_at = value.source();
        have_name = true;
      } else {
        ok = false;
      }
    } else if (k == "url") {
      const std::string* url = r->String(value, "endpoint.url");
      if (url == nullptr) {
        ok = false;
      } else if (url->empty()) {
        r->Add(value.source(), "endpoint.url: must not be empty");
        ok = false;
      } else if (absl::Status s = http::ValidateEndpointUrl(*url, "endpoint.url"); !s.ok()) {
        r->Add(value.source(), std::string(s.message()));
        ok = false;
      } else {
        e->url = *url;
        have_url = true;
      }
    } else if (k == "events" || k == "owners") {
      const auto* array = value.as_array();
      const std::string what = "endpoint." + std::string(k);
      if (array == nullptr) {
        r->Add(value.source(), absl::StrCat(what, ": expected an array of strings, got ",
                                            spec::TomlTypeName(value.type())));
        ok = false;
        continue;
      }
      if (array->empty()) {
        r->Add(value.source(), k == "events" ? absl::StrCat(what, ": must name at least one of ", kKindList)
                                             : absl::StrCat(what, ": must name at least one owner (leave it out "
                                                                  "for every owner)"));
        ok = false;
        continue;
      }
      std::map<std::string, uint32_t> seen;  // value -> line
      for (const toml::node& element : *array) {
        std::optional<std::string> item;
        if (k == "owners") {
          item = r->Name(element, what, "letters, digits, '.', '_', '@' and '-'", &OwnerChar);
        } else if (const std::string* s = r->String(element, what)) {
          item = *s;
        }
        if (!item) {
          ok = false;
          continue;
        }
        if (auto [it, fresh] = seen.emplace(*item, element.source().begin.line); !fresh) {
          r->Add(element.source(), absl::StrCat(what, ": ", Quoted(*item), " is listed twice (first at line ",
                                                it->second, ")"));
          ok = false;
          continue;
        }
        if (k == "owners") {
          e->owners.push_back(*item);
          continue;
        }
        uint32_t bit = 0;
        for (const auto& [kind, name] : kKindNames) {
          if (*item == name) bit = kind;
        }
        if (bit == 0) {
          r->Add(element.source(), absl::StrCat(what, ": unknown event kind ", Quoted(*item), " (allowed: ",
                                                kKindList, ")"));
          ok = false;
          continue;
        }
        e->kinds |= bit;
      }
      if (k == "events") have_events = true;
    } else if (k == "secret") {
      secret_node = &value;
    } else if (k == "secret_file") {
      secret_file_node = &value;
    } else {
      r->UnknownKey(key, " in [[endpoint]]", kEndpointKeys);
      ok = false;
    }
  }
  const std::string who = have_name ? absl::StrCat("endpoint ", Quoted(e->name)) : std::string("[[endpoint]]");
  if (secret_node != nullptr && secret_file_node != nullptr) {
    r->Add(secret_file_node->source(), absl::StrCat(who, ": secret and secret_file are both set; give one"));
    ok = false;
  } else if (secret_node != nullptr) {
    // Never quoted back: the value is a secret.
    if (const std::string* s = r->String(*secret_node, "endpoint.secret")) {
      if (s->size() < kMinWebhookSecretBytes || s->size() > kMaxWebhookSecretBytes) {
        r->Add(secret_node->source(), absl::StrCat(who, ": secret is ", s->size(), " bytes; it must be ",
                                                   kMinWebhookSecretBytes, " to ", kMaxWebhookSecretBytes));
        ok = false;
      } else {
        e->secret = *s;
        have_secret = true;
      }
    } else {
      ok = false;
    }
  } else if (secret_file_node != nullptr) {
    const std::string* path = r->String(*secret_file_node, "endpoint.secret_file");
    if (path == nullptr || path->empty()) {
      if (path != nullptr) r->Add(secret_file_node->source(), "endpoint.secret_file: must not be empty");
      ok = false;
    } else {
      const std::string full = (*path)[0] == '/' ? *path : absl::StrCat(DirectoryOf(file_name), "/", *path);
      absl::StatusOr<std::string> bytes = ReadFile(full, kMaxWebhookSecretBytes + 2);
      if (!bytes.ok()) {
        r->Add(secret_file_node->source(),
               absl::StrCat(who, ": secret_file ", Quoted(full), ": ",
                            absl::IsOutOfRange(bytes.status())
                                ? absl::StrCat("more than ", kMaxWebhookSecretBytes, " bytes")
                                : std::string(bytes.status().message())));
        ok = false;
      } else if (std::string secret = TrimSecret(*std::move(bytes));
                 secret.size() < kMinWebhookSecretBytes || secret.size() > kMaxWebhookSecretBytes) {
        r->Add(secret_file_node->source(),
               absl::StrCat(who, ": secret_file ", Quoted(full), " holds ", secret.size(),
                            " bytes (trailing whitespace removed); a secret must be ", kMinWebhookSecretBytes, " to ",
                            kMaxWebhookSecretBytes));
        ok = false;
      } else {
        e->secret = std::move(secret);
        have_secret = true;
      }
    }
  }
  auto missing = [&](bool have, const char* key) {
    if (have || table.find(key) != table.end()) return;
    r->Add(table.source(), absl::StrCat(who, " has no ", key));
    ok = false;
  };
  missing(have_name, "name");
  missing(have_url, "url");
  missing(have_events, "events");
  if (!have_secret && secret_node == nullptr && secret_file_node == nullptr) {
    r->Add(table.source(), absl::StrCat(who, " has no secret or secret_file (every delivery is signed)"));
    ok = false;
  }
  return ok && have_name && have_url && have_events && have_secret;
}

}  // namespace

std::vector<std::string> WebhookKindNames(uint32_t kinds) {
  std::vector<std::string> out;
  for (const auto& [kind, name] : kKindNames) {
    if ((kinds & kind) != 0) out.push_back(name);
  }
  return out;
}

absl::StatusOr<WebhookConfig> ParseWebhookFile(std::string_view text, const std::string& file_name) {
  absl::StatusOr<toml::table> parsed = ParseTomlText(text, file_name, kMaxWebhookFileBytes, "webhooks file");
  if (!parsed.ok()) return parsed.status();
  toml::table root = *std::move(parsed);
  Reader r(file_name);
  WebhookConfig config;
  std::vector<toml::source_region> name_at;  // parallel to config.endpoints
  bool any_endpoint_key = false;
  for (auto&& [key, node] : root) {
    const std::string_view k = key.str();
    if (k == "delivery") {
      ReadDelivery(&r, node, &config.delivery);
    } else if (k == "endpoint") {
      any_endpoint_key = true;
      const auto* array = node.as_array();
      if (array != nullptr && array->empty()) continue;  // `endpoint = []`: none
      if (array == nullptr || !array->is_array_of_tables()) {
        r.Add(node.source(), absl::StrCat("endpoint: expected an array of tables ([[endpoint]]), got ",
                                          array == nullptr ? spec::TomlTypeName(node.type()) : "an array of values"));
        continue;
      }
      for (const auto& element : *array) {
        WebhookEndpoint e;
        toml::source_region at;
        if (ReadEndpoint(&r, *element.as_table(), file_name, &e, &at)) {
          config.endpoints.push_back(std::move(e));
          name_at.push_back(at);
        }
      }
      if (array->size() > kMaxWebhookEndpoints) {
        r.Add(node.source(), absl::StrCat("endpoint: ", array->size(), " endpoints, more than the cap of ",
                                          kMaxWebhookEndpoints));
      }
    } else {
      r.UnknownKey(key, "", "[delivery], [[endpoint]]");
    }
  }
  std::map<std::string, uint32_t> first;
  for (size_t i = 0; i < config.endpoints.size(); ++i) {
    auto [it, fresh] = first.emplace(config.endpoints[i].name, name_at[i].begin.line);
    if (!fresh) {
      r.Add(name_at[i], absl::StrCat("duplicate endpoint ", Quoted(config.endpoints[i].name), " (first at line ",
                                     it->second, ")"));
    }
  }
  if (absl::Status s = r.Result(); !s.ok()) return s;
  if (!any_endpoint_key || config.endpoints.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_name, ":1: no [[endpoint]]: a webhooks file declares at least one"));
  }
  return config;
}

absl::StatusOr<WebhookConfig> LoadWebhookFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadTomlFile(path, kMaxWebhookFileBytes, "webhooks file");
  if (!text.ok()) return text.status();
  return ParseWebhookFile(*text, path);
}

}  // namespace trainyard
