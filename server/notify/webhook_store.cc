#include "server/notify/webhook_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace trainyard {
namespace {

constexpr char kSchema[] = R"sql(
    CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
    CREATE TABLE IF NOT EXISTS scanned (job_id TEXT PRIMARY KEY, seq INTEGER NOT NULL);
    CREATE TABLE IF NOT EXISTS outbox (
      id         INTEGER PRIMARY KEY AUTOINCREMENT,
      endpoint   TEXT NOT NULL,
      job_id     TEXT NOT NULL,
      seq        INTEGER NOT NULL,
      body       TEXT NOT NULL,
      created_ms INTEGER NOT NULL,
      attempts   INTEGER NOT NULL DEFAULT 0,
      next_ms    INTEGER NOT NULL DEFAULT 0,
      UNIQUE (endpoint, job_id, seq)
    );
    CREATE INDEX IF NOT EXISTS outbox_order ON outbox (endpoint, id);
    CREATE TABLE IF NOT EXISTS endpoints (
      name            TEXT PRIMARY KEY,
      delivered       INTEGER NOT NULL DEFAULT 0,
      failed          INTEGER NOT NULL DEFAULT 0,
      dropped         INTEGER NOT NULL DEFAULT 0,
      last_error      TEXT NOT NULL DEFAULT '',
      last_error_ms   INTEGER NOT NULL DEFAULT 0,
      last_success_ms INTEGER NOT NULL DEFAULT 0
    );
)sql";

int64_t Ms(absl::Time t) { return absl::ToUnixMillis(t); }

}  // namespace

absl::StatusOr<std::unique_ptr<WebhookStore>> WebhookStore::Open(const std::string& path) {
  TY_ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> db, SqliteDb::Open(path));
  {
    TY_ASSIGN_OR_RETURN(auto stmt, db->Prepare("PRAGMA user_version"));
    TY_ASSIGN_OR_RETURN(bool row, stmt.Step());
    const int64_t version = row ? stmt.ColumnInt(0) : 0;
    if (version > kWebhookSchemaVersion) {
      return absl::FailedPreconditionError(absl::StrCat(path, " has schema version ", version, ", newer than this ",
                                                        "trainyard-controller's ", kWebhookSchemaVersion,
                                                        "; it was left as it is"));
    }
  }
  TY_RETURN_IF_ERROR(db->Exec(absl::StrCat("BEGIN IMMEDIATE;", kSchema, "PRAGMA user_version = ",
                                           kWebhookSchemaVersion, "; COMMIT;")));
  return std::unique_ptr<WebhookStore>(new WebhookStore(std::move(db)));
}

template <class Body>
absl::Status WebhookStore::Transaction(Body body) {
  TY_RETURN_IF_ERROR(db_->Exec("BEGIN IMMEDIATE"));
  absl::Status s = body(*db_);
  if (s.ok()) s = db_->Exec("COMMIT");
  if (!s.ok()) db_->Exec("ROLLBACK").IgnoreError();
  return s;
}

absl::StatusOr<bool> WebhookStore::Initialized() {
  absl::MutexLock lock(&mu_);
  TY_ASSIGN_OR_RETURN(auto stmt, db_->Prepare("SELECT value FROM meta WHERE key = 'initialized'"));
  TY_ASSIGN_OR_RETURN(bool row, stmt.Step());
  return row && stmt.ColumnInt(0) == 1;
}

absl::Status WebhookStore::MarkInitialized(const std::map<std::string, int64_t>& last_seqs) {
  absl::MutexLock lock(&mu_);
  return Transaction([&](SqliteDb& db) -> absl::Status {
    TY_ASSIGN_OR_RETURN(auto put, db.Prepare("INSERT OR REPLACE INTO scanned (job_id, seq) VALUES (?, ?)"));
    for (const auto& [job, seq] : last_seqs) {
      put.Reset();
      put.BindText(1, job);
      put.BindInt(2, seq);
      TY_RETURN_IF_ERROR(put.Run());
    }
    return db.Exec("INSERT OR REPLACE INTO meta (key, value) VALUES ('initialized', 1)");
  });
}

absl::StatusOr<int64_t> WebhookStore::ScannedSeq(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  TY_ASSIGN_OR_RETURN(auto stmt, db_->Prepare("SELECT seq FROM scanned WHERE job_id = ?"));
  stmt.BindText(1, job_id);
  TY_ASSIGN_OR_RETURN(bool row, stmt.Step());
  return row ? stmt.ColumnInt(0) : 0;
}

absl::StatusOr<WebhookStore::Enqueued> WebhookStore::Enqueue(const std::string& job_id, int64_t scanned,
                                                            const std::vector<Queued>& deliveries, int max_pending) {
  absl::MutexLock lock(&mu_);
  Enqueued out;
  absl::Status s = Transaction([&](SqliteDb& db) -> absl::Status {
    std::map<std::string, int64_t> pending;
    TY_ASSIGN_OR_RETURN(auto count, db.Prepare("SELECT COUNT(*) FROM outbox WHERE endpoint = ?"));
    TY_ASSIGN_OR_RETURN(auto insert, db.Prepare("INSERT OR IGNORE INTO outbox (endpoint, job_id, seq, body, "
                                                  "created_ms) VALUES (?, ?, ?, ?, ?)"));
    TY_ASSIGN_OR_RETURN(auto drop, db.Prepare("UPDATE endpoints SET dropped = dropped + 1 WHERE name = ?"));
    for (const Queued& q : deliveries) {
      auto it = pending.find(q.endpoint);
      if (it == pending.end()) {
        count.Reset();
        count.BindText(1, q.endpoint);
        TY_ASSIGN_OR_RETURN(bool row, count.Step());
        it = pending.emplace(q.endpoint, row ? count.ColumnInt(0) : 0).first;
      }
      if (it->second >= max_pending) {
        drop.Reset();
        drop.BindText(1, q.endpoint);
        TY_RETURN_IF_ERROR(drop.Run());
        ++out.dropped[q.endpoint];
        continue;
      }
      insert.Reset();
      insert.BindText(1, q.endpoint);
      insert.BindText(2, job_id);
      insert.BindInt(3, q.seq);
      insert.BindText(4, q.body);
      insert.BindInt(5, Ms(q.created));
      TY_RETURN_IF_ERROR(insert.Run());
      if (db.Changes() > 0) {
        ++it->second;
        out.queued.insert(q.endpoint);
      }
    }
    TY_ASSIGN_OR_RETURN(auto put, db.Prepare("INSERT OR REPLACE INTO scanned (job_id, seq) VALUES (?, ?)"));
    put.BindText(1, job_id);
    put.BindInt(2, scanned);
    return put.Run();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<std::optional<WebhookStore::Pending>> WebhookStore::Next(const std::string& endpoint) {
  absl::MutexLock lock(&mu_);
  TY_ASSIGN_OR_RETURN(auto stmt, db_->Prepare("SELECT id, job_id, seq, body, created_ms, attempts, next_ms FROM "
                                              "outbox WHERE endpoint = ? ORDER BY id LIMIT 1"));
  stmt.BindText(1, endpoint);
  TY_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return std::optional<Pending>();
  Pending p;
  p.id = stmt.ColumnInt(0);
  p.job_id = stmt.ColumnText(1);
  p.seq = stmt.ColumnInt(2);
  p.body = stmt.ColumnText(3);
  p.created = absl::FromUnixMillis(stmt.ColumnInt(4));
  p.attempts = static_cast<int>(stmt.ColumnInt(5));
  p.next = absl::FromUnixMillis(stmt.ColumnInt(6));
  return std::optional<Pending>(std::move(p));
}

absl::Status WebhookStore::Delivered(const std::string& endpoint, int64_t id, absl::Time now) {
  absl::MutexLock lock(&mu_);
  return Transaction([&](SqliteDb& db) -> absl::Status {
    TY_ASSIGN_OR_RETURN(auto del, db.Prepare("DELETE FROM outbox WHERE id = ?"));
    del.BindInt(1, id);
    TY_RETURN_IF_ERROR(del.Run());
    TY_ASSIGN_OR_RETURN(auto up, db.Prepare("UPDATE endpoints SET delivered = delivered + 1, last_success_ms = ? "
                                              "WHERE name = ?"));
    up.BindInt(1, Ms(now));
    up.BindText(2, endpoint);
    return up.Run();
  });
}

absl::Status WebhookStore::Retry(const std::string& endpoint, int64_t id, int attempts, absl::Time next,
                                 const std::string& error, absl::Time now) {
  absl::MutexLock lock(&mu_);
  return Transaction([&](SqliteDb& db) -> absl::Status {
    TY_ASSIGN_OR_RETURN(auto up, db.Prepare("UPDATE outbox SET attempts = ?, next_ms = ? WHERE id = ?"));
    up.BindInt(1, attempts);
    up.BindInt(2, Ms(next));
    up.BindInt(3, id);
    TY_RETURN_IF_ERROR(up.Run());
    TY_ASSIGN_OR_RETURN(auto err, db.Prepare("UPDATE endpoints SET last_error = ?, last_error_ms = ? WHERE name = ?"));
    err.BindText(1, error);
    err.BindInt(2, Ms(now));
    err.BindText(3, endpoint);
    return err.Run();
  });
}

absl::Status WebhookStore::GiveUp(const std::string& endpoint, int64_t id, const std::string& error, absl::Time now) {
  absl::MutexLock lock(&mu_);
  return Transaction([&](SqliteDb& db) -> absl::Status {
    TY_ASSIGN_OR_RETURN(auto del, db.Prepare("DELETE FROM outbox WHERE id = ?"));
    del.BindInt(1, id);
    TY_RETURN_IF_ERROR(del.Run());
    TY_ASSIGN_OR_RETURN(auto up, db.Prepare("UPDATE endpoints SET failed = failed + 1, last_error = ?, "
                                              "last_error_ms = ? WHERE name = ?"));
    up.BindText(1, error);
    up.BindInt(2, Ms(now));
    up.BindText(3, endpoint);
    return up.Run();
  });
}

absl::StatusOr<std::map<std::string, int64_t>> WebhookStore::KeepEndpoints(const std::vector<std::string>& names) {
  absl::MutexLock lock(&mu_);
  std::map<std::string, int64_t> removed;
  absl::Status s = Transaction([&](SqliteDb& db) -> absl::Status {
    std::set<std::string> keep(names.begin(), names.end());
    TY_ASSIGN_OR_RETURN(auto list, db.Prepare("SELECT endpoint, COUNT(*) FROM outbox GROUP BY endpoint"));
    while (true) {
      TY_ASSIGN_OR_RETURN(bool row, list.Step());
      if (!row) break;
      std::string name = list.ColumnText(0);
      if (keep.count(name) == 0) removed[name] = list.ColumnInt(1);
    }
    TY_ASSIGN_OR_RETURN(auto all, db.Prepare("SELECT name FROM endpoints"));
    std::vector<std::string> gone;
    while (true) {
      TY_ASSIGN_OR_RETURN(bool row, all.Step());
      if (!row) break;
      if (keep.count(all.ColumnText(0)) == 0) gone.push_back(all.ColumnText(0));
    }
    for (const auto& [name, n] : removed) gone.push_back(name);
    TY_ASSIGN_OR_RETURN(auto del_outbox, db.Prepare("DELETE FROM outbox WHERE endpoint = ?"));
    TY_ASSIGN_OR_RETURN(auto del_row, db.Prepare("DELETE FROM endpoints WHERE name = ?"));
    for (const std::string& name : gone) {
      del_outbox.Reset();
      del_outbox.BindText(1, name);
      TY_RETURN_IF_ERROR(del_outbox.Run());
      del_row.Reset();
      del_row.BindText(1, name);
      TY_RETURN_IF_ERROR(del_row.Run());
    }
    TY_ASSIGN_OR_RETURN(auto add, db.Prepare("INSERT OR IGNORE INTO endpoints (name) VALUES (?)"));
    for (const std::string& name : keep) {
      add.Reset();
      add.BindText(1, name);
      TY_RETURN_IF_ERROR(add.Run());
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return removed;
}

absl::StatusOr<std::map<std::string, WebhookStore::EndpointStats>> WebhookStore::Stats() {
  absl::MutexLock lock(&mu_);
  std::map<std::string, EndpointStats> out;
  TY_ASSIGN_OR_RETURN(auto rows, db_->Prepare("SELECT name, delivered, failed, dropped, last_error, last_error_ms, "
                                              "last_success_ms FROM endpoints"));
  while (true) {
    TY_ASSIGN_OR_RETURN(bool row, rows.Step());
    if (!row) break;
    EndpointStats& s = out[rows.ColumnText(0)];
    s.delivered = rows.ColumnInt(1);
    s.failed = rows.ColumnInt(2);
    s.dropped = rows.ColumnInt(3);
    s.last_error = rows.ColumnText(4);
    if (rows.ColumnInt(5) > 0) s.last_error_time = absl::FromUnixMillis(rows.ColumnInt(5));
    if (rows.ColumnInt(6) > 0) s.last_success_time = absl::FromUnixMillis(rows.ColumnInt(6));
  }
  TY_ASSIGN_OR_RETURN(auto pending, db_->Prepare("SELECT endpoint, COUNT(*) FROM outbox GROUP BY endpoint"));
  while (true) {
    TY_ASSIGN_OR_RETURN(bool row, pending.Step());
    if (!row) break;
    auto it = out.find(pending.ColumnText(0));
    if (it != out.end()) it->second.pending = pending.ColumnInt(1);
  }
  return out;
}

}  // namespace trainyard
