#include "server/auth/authorizer.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace trainyard {

absl::StatusOr<std::unique_ptr<Authorizer>> Authorizer::FromFile(const std::string& path) {
  if (path.empty()) return Disabled();
  auto table = TokenTable::ReadFile(path);
  if (!table.ok()) return table.status();
  return std::unique_ptr<Authorizer>(
      new Authorizer(path, std::make_shared<const TokenTable>(std::move(*table))));
}

std::unique_ptr<Authorizer> Authorizer::Disabled() {
  return std::unique_ptr<Authorizer>(new Authorizer("", nullptr));
}

std::shared_ptr<const TokenTable> Authorizer::Table() const {
  absl::MutexLock lock(&mu_);
  return table_;
}

size_t Authorizer::token_count() const {
  auto table = Table();
  return table ? table->size() : 0;
}

absl::Status Authorizer::Reload() {
  if (!enabled()) return absl::OkStatus();
  auto table = TokenTable::ReadFile(path_);
  if (!table.ok()) {
    spdlog::error("token file not reloaded, the previous {} tokens stay in force: {}", token_count(),
                  std::string(table.status().message()));
    return table.status();
  }
  const size_t n = table->size();
  {
    absl::MutexLock lock(&mu_);
    table_ = std::make_shared<const TokenTable>(std::move(*table));
  }
  spdlog::info("token file {} reloaded: {} tokens", path_, n);
  return absl::OkStatus();
}

absl::StatusOr<Caller> Authorizer::Authenticate(const grpc::ServerContextBase& ctx) const {
  if (!enabled()) return Caller{Role::kAdmin, kLocalOwner};
  std::vector<std::string_view> values;
  const auto range = ctx.client_metadata().equal_range("authorization");
  for (auto it = range.first; it != range.second; ++it) {
    values.emplace_back(it->second.data(), it->second.size());
  }
  return AuthenticateValues(values);
}

absl::StatusOr<Caller> Authorizer::AuthenticateValues(const std::vector<std::string_view>& values) const {
  if (!enabled()) return Caller{Role::kAdmin, kLocalOwner};
  if (values.empty()) return absl::UnauthenticatedError("no bearer token");
  if (values.size() > 1) return absl::UnauthenticatedError("more than one authorization metadata entry");
  std::string_view value = values[0];
  // RFC 6750: the scheme is case-insensitive, followed by one or more spaces.
  constexpr std::string_view kScheme = "bearer";
  bool scheme_matches = value.size() >= kScheme.size();
  for (size_t i = 0; scheme_matches && i < kScheme.size(); ++i) {
    scheme_matches = (value[i] | 0x20) == kScheme[i];
  }
  if (!scheme_matches ||
      (value.size() > kScheme.size() && value[kScheme.size()] != ' ')) {
    return absl::UnauthenticatedError("the authorization metadata is not a bearer token");
  }
  value.remove_prefix(kScheme.size());
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (value.empty()) return absl::UnauthenticatedError("no bearer token");
  const auto table = Table();
  std::optional<Caller> caller = table->Lookup(value);
  if (!caller) return absl::UnauthenticatedError("unknown token");
  return std::move(*caller);
}

bool Authorizer::CanSubmit(const Caller& caller) {
  return caller.role == Role::kSubmitter || caller.role == Role::kAdmin;
}

bool Authorizer::CanSee(const Caller& caller, const std::string& owner) {
  switch (caller.role) {
    case Role::kViewer:
    case Role::kAdmin:
      return true;
    case Role::kSubmitter:
      return caller.owner == owner;
  }
  return false;
}

bool Authorizer::CanCancel(const Caller& caller, const std::string& owner) {
  switch (caller.role) {
    case Role::kViewer:
      return false;
    case Role::kAdmin:
      return true;
    case Role::kSubmitter:
      return caller.owner == owner;
  }
  return false;
}

bool Authorizer::CanSeeFleet(const Caller&) { return true; }

bool Authorizer::CanManageFleet(const Caller& caller) { return caller.role == Role::kAdmin; }

bool Authorizer::CanSubmitNonPreemptible(const Caller& caller) { return caller.role == Role::kAdmin; }

}  // namespace trainyard
