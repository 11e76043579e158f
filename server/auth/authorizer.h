// Who may call the JobService, and what each caller may do (docs/security.md,
// "Authorization").
//
// On (FromFile with a path): every call must carry gRPC metadata
// `authorization: Bearer <token>`; the token is looked up in the TokenTable read from
// the file. Reload() re-reads the file (the controller calls it on SIGHUP); a file
// that no longer reads or parses keeps the old table and returns the error.
// Off (FromFile with an empty path, or Disabled()): the loopback / development mode;
// every caller is an admin whose owner is "local", and tokens are ignored.
//
// Roles: a viewer reads everything and changes nothing; a submitter submits jobs and
// sees and changes only its own; an admin does everything. The Can* helpers are the
// only place that says so.
//
// Thread-safe: the table is an immutable snapshot swapped under a mutex, so a reload
// never blocks a lookup for longer than a pointer copy.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <grpcpp/server_context.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/auth/token_table.h"

namespace trainyard {

class Authorizer {
 public:
  // The owner of every job created while authorization is off.
  static constexpr char kLocalOwner[] = "local";

  // Reads the token file at `path` (TokenTable::ReadFile's errors); an empty path
  // means authorization off.
  static absl::StatusOr<std::unique_ptr<Authorizer>> FromFile(const std::string& path);
  static std::unique_ptr<Authorizer> Disabled();

  bool enabled() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  // Tokens in the current table (0 when off).
  size_t token_count() const;

  // Re-reads the file. On an error the current table stays in force and the error
  // (naming the file and line) is returned. OK and nothing done when off.
  absl::Status Reload();

  // The caller of a call, from its `authorization` metadata. UNAUTHENTICATED
  // "no bearer token" when it has none (or an empty one), "the authorization metadata
  // is not a bearer token" for another scheme, "more than one authorization metadata
  // entry", "unknown token" for a token that is not in the table. No message holds any
  // of the presented value.
  absl::StatusOr<Caller> Authenticate(const grpc::ServerContextBase& ctx) const;
  // The same for the values of every `authorization` entry of a call, in order.
  absl::StatusOr<Caller> AuthenticateValues(const std::vector<std::string_view>& values) const;

  // Submit a job: submitter, admin.
  static bool CanSubmit(const Caller& caller);
  // See a job of `owner` (get, list, watch, its artifacts): viewer, admin, and the
  // submitter who owns it.
  static bool CanSee(const Caller& caller, const std::string& owner);
  // Change a job of `owner` (cancel, resize): admin, and the submitter who owns it.
  static bool CanCancel(const Caller& caller, const std::string& owner);
  // Read the fleet (ListWorkers): every role.
  static bool CanSeeFleet(const Caller& caller);
  // Cordon, uncordon and drain workers: admin.
  static bool CanManageFleet(const Caller& caller);
  // Submit a job that opts out of preemption (job.preemptible = false) above priority
  // 0: admin.
  static bool CanSubmitNonPreemptible(const Caller& caller);

 private:
  Authorizer(std::string path, std::shared_ptr<const TokenTable> table)
      : path_(std::move(path)), table_(std::move(table)) {}

  std::shared_ptr<const TokenTable> Table() const;

  const std::string path_;  // empty: off
  mutable absl::Mutex mu_;
  std::shared_ptr<const TokenTable> table_ ABSL_GUARDED_BY(mu_);  // null when off
};

}  // namespace trainyard
