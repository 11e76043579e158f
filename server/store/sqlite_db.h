#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainyard {

class SqliteStatement;

// RAII handle on one SQLite connection (WAL mode, synchronous=FULL so a commit that
// returned is on disk). Not thread-safe: the owner serialises access.
class SqliteDb {
 public:
  // configure=false opens without writing anything (no journal-mode change), so that a
  // caller may look at the file (its schema version) first; Configure() does the rest.
  static absl::StatusOr<std::unique_ptr<SqliteDb>> Open(const std::string& path, bool configure = true);
  absl::Status Configure();
  ~SqliteDb();
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;

  absl::Status Exec(std::string_view sql);
  absl::StatusOr<SqliteStatement> Prepare(std::string_view sql);
  int64_t Changes() const;
  sqlite3* raw() { return db_; }

 private:
  SqliteDb(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  sqlite3* db_;
  std::string path_;
};

// A prepared statement; Bind* use 1-based indexes as SQLite does.
class SqliteStatement {
 public:
  SqliteStatement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  SqliteStatement(SqliteStatement&& other) noexcept;
  SqliteStatement& operator=(SqliteStatement&&) = delete;
  ~SqliteStatement();

  void BindInt(int index, int64_t value);
  void BindDouble(int index, double value);
  void BindText(int index, std::string_view value);
  void BindBlob(int index, std::string_view value);
  void BindNull(int index);

  // Returns true while a row is available, false when done.
  absl::StatusOr<bool> Step();
  absl::Status Run();  // Step() expecting no rows.
  void Reset();

  int64_t ColumnInt(int index);
  double ColumnDouble(int index);
  std::string ColumnText(int index);
  std::string ColumnBlob(int index);

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_;
};

}  // namespace trainyard
