// Durable webhook delivery state in DATA_DIR/webhooks.db (SQLite, WAL,
// synchronous=FULL), a file of its own so that delivery bookkeeping never takes the
// write lock that event ingestion commits under:
//   scanned   per job, the last event seq already turned into deliveries;
//   outbox    the deliveries not yet done (body fixed at queueing), in queue order;
//   endpoints per endpoint, delivered / failed / dropped counts, the last error and the
//             last success, so `trainyard webhooks status` survives a restart.
// Queueing a job's deliveries and advancing its scanned seq are one transaction, so a
// kill -9 at any point neither loses nor duplicates a queued delivery; a delivery is
// removed only after its receiver answered 2xx (or it was given up), so a crash
// between the answer and the removal sends it once more (at least once; the receiver
// deduplicates by id).
//
// Thread-safe: one connection under `mu_`.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/store/sqlite_db.h"

namespace trainyard {

inline constexpr int kWebhookSchemaVersion = 1;

class WebhookStore {
 public:
  struct Queued {
    std::string endpoint;
    int64_t seq = 0;
    std::string body;
    absl::Time created;  // the event's time: max_age counts from it
  };
  struct Pending {
    int64_t id = 0;
    std::string job_id;
    int64_t seq = 0;
    std::string body;
    absl::Time created;
    int attempts = 0;
    absl::Time next;  // not before
  };
  struct EndpointStats {
    int64_t pending = 0;
    int64_t delivered = 0;
    int64_t failed = 0;   // given up after attempts, or refused
    int64_t dropped = 0;  // not queued: the endpoint's outbox was full
    std::string last_error;
    std::optional<absl::Time> last_error_time;
    std::optional<absl::Time> last_success_time;
  };

  // Opens (creating if needed) `path`; FAILED_PRECONDITION for a newer schema.
  static absl::StatusOr<std::unique_ptr<WebhookStore>> Open(const std::string& path);

  // Whether the store has met a job list yet (see MarkInitialized).
  absl::StatusOr<bool> Initialized() ABSL_LOCKS_EXCLUDED(mu_);
  // The first start with webhooks: every existing job counts as scanned up to its last
  // seq (`last_seqs`), so history is not sent.
  absl::Status MarkInitialized(const std::map<std::string, int64_t>& last_seqs) ABSL_LOCKS_EXCLUDED(mu_);
  // The job's scanned seq (0 for a job not met yet).
  absl::StatusOr<int64_t> ScannedSeq(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Queues `deliveries` of `job_id` and sets its scanned seq to `scanned`, in one
  // transaction. An endpoint with `max_pending` queued already gets none of them (its
  // dropped count grows instead); a delivery already queued is not queued twice.
  struct Enqueued {
    std::set<std::string> queued;            // endpoints that got at least one
    std::map<std::string, int64_t> dropped;  // per endpoint, deliveries not queued
  };
  absl::StatusOr<Enqueued> Enqueue(const std::string& job_id, int64_t scanned,
                                                const std::vector<Queued>& deliveries, int max_pending)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The oldest queued delivery of `endpoint`.
  absl::StatusOr<std::optional<Pending>> Next(const std::string& endpoint) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Delivered(const std::string& endpoint, int64_t id, absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  // One more failed attempt; tried again at `next`.
  absl::Status Retry(const std::string& endpoint, int64_t id, int attempts, absl::Time next,
                     const std::string& error, absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  // Removed without success; counted as failed.
  absl::Status GiveUp(const std::string& endpoint, int64_t id, const std::string& error, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Keeps `names` (creating their rows) and removes every other endpoint's queue and
  // counts; returns the deliveries so removed per endpoint.
  absl::StatusOr<std::map<std::string, int64_t>> KeepEndpoints(const std::vector<std::string>& names)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::map<std::string, EndpointStats>> Stats() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  explicit WebhookStore(std::unique_ptr<SqliteDb> db) : db_(std::move(db)) {}
  // Runs `body(db)` in BEGIN IMMEDIATE .. COMMIT, rolled back when it fails; the
  // connection is passed in so the body reads no guarded member.
  template <class Body>
  absl::Status Transaction(Body body) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::unique_ptr<SqliteDb> db_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard
