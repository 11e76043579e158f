#include "server/store/sqlite_db.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace trainyard {

absl::StatusOr<std::unique_ptr<SqliteDb>> SqliteDb::Open(const std::string& path, bool configure) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                           nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat("open database ", path, ": ", msg));
  }
  std::unique_ptr<SqliteDb> out(new SqliteDb(db, path));
  sqlite3_busy_timeout(db, 5000);
  if (configure) TY_RETURN_IF_ERROR(out->Configure());
  return out;
}

absl::Status SqliteDb::Configure() {
  if (auto s = Exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; "
                    "PRAGMA foreign_keys=ON;");
      !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(path_, ": ", s.message()));
  }
  return absl::OkStatus();
}

SqliteDb::~SqliteDb() { sqlite3_close(db_); }

absl::Status SqliteDb::Exec(std::string_view sql) {
  char* err = nullptr;
  std::string text(sql);
  if (sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    return absl::InternalError(absl::StrCat("sqlite: ", msg, " in: ", std::string(sql.substr(0, 80))));
  }
  return absl::OkStatus();
}

absl::StatusOr<SqliteStatement> SqliteDb::Prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr) !=
      SQLITE_OK) {
    return absl::InternalError(
        absl::StrCat("sqlite prepare: ", sqlite3_errmsg(db_), " in: ", std::string(sql.substr(0, 80))));
  }
  return SqliteStatement(db_, stmt);
}

int64_t SqliteDb::Changes() const { return sqlite3_changes(db_); }

SqliteStatement::SqliteStatement(SqliteStatement&& other) noexcept
    : db_(other.db_), stmt_(std::exchange(other.stmt_, nullptr)) {}

SqliteStatement::~SqliteStatement() { sqlite3_finalize(stmt_); }

void SqliteStatement::BindInt(int index, int64_t value) {
  sqlite3_bind_int64(stmt_, index, value);
}
void SqliteStatement::BindDouble(int index, double value) {
  sqlite3_bind_double(stmt_, index, value);
}
void SqliteStatement::BindText(int index, std::string_view value) {
  sqlite3_bind_text(stmt_, index, value.data(), static_cast<int>(value.size()),
                    SQLITE_TRANSIENT);
}
void SqliteStatement::BindBlob(int index, std::string_view value) {
  sqlite3_bind_blob(stmt_, index, value.data(), static_cast<int>(value.size()),
                    SQLITE_TRANSIENT);
}
void SqliteStatement::BindNull(int index) { sqlite3_bind_null(stmt_, index); }

absl::StatusOr<bool> SqliteStatement::Step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return absl::InternalError(absl::StrCat("sqlite step: ", sqlite3_errmsg(db_)));
}

absl::Status SqliteStatement::Run() {
  auto row = Step();
  if (!row.ok()) return row.status();
  return absl::OkStatus();
}

void SqliteStatement::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

int64_t SqliteStatement::ColumnInt(int index) { return sqlite3_column_int64(stmt_, index); }
double SqliteStatement::ColumnDouble(int index) { return sqlite3_column_double(stmt_, index); }

std::string SqliteStatement::ColumnText(int index) {
  const unsigned char* text = sqlite3_column_text(stmt_, index);
  return text ? std::string(reinterpret_cast<const char*>(text)) : std::string();
}

std::string SqliteStatement::ColumnBlob(int index) {
  const void* blob = sqlite3_column_blob(stmt_, index);
  int size = sqlite3_column_bytes(stmt_, index);
  return blob ? std::string(static_cast<const char*>(blob), size) : std::string();
}

}  // namespace trainyard
