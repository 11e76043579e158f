// Exclusive use of a directory by one process for the whole of its life: the
// controller's --data-dir, a worker's --work-dir. Two processes writing one directory
// corrupt each other silently (two controllers interleaving their writes into one
// store), so the second must refuse to start and say who holds it.
//
// The lock is an flock(2) on DIR/PROGRAM.lock. The kernel drops it when the holding
// process ends however it ends (kill -9 included), so a restart takes it at once, with
// no stale-lock timeout to wait out. The file itself records the holder (pid, host,
// start time) for the refusal's message; that record never decides anything, only the
// flock does. It is emptied on a clean release, so a record found under a free lock is
// a holder that died without releasing (killed, crashed, or on another host whose lock
// expired), which the next holder logs. The file is never removed: a process that
// opened it just before a removal could lock the orphaned inode while a third locks a
// new file of the same name.
//
// Thread-compatible; one DirLock per directory and process (a second in the same
// process is refused like another process's).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace trainyard {

class DirLock {
 public:
  // What a lock file says of its holder; fields it does not hold stay empty or 0.
  struct Holder {
    int64_t pid = 0;
    std::string host;
    std::string started;  // RFC 3339, UTC
    std::string program;
  };

  // Creates `dir` (and its parents) when missing, takes DIR/`program`.lock and writes
  // this process into it (pid, this host, `started`). Errors name `flag` and `dir`:
  // FAILED_PRECONDITION when another process holds the lock (its pid, host and start
  // time; when that host is not this one, that it is another host and that the file may
  // be removed once that host is gone), or when `dir` is not a writable directory
  // (not a directory, read-only filesystem, permission denied, with the reason).
  static absl::StatusOr<std::unique_ptr<DirLock>> Acquire(const std::string& dir, const std::string& flag,
                                                          const std::string& program, absl::Time started);
  ~DirLock();  // empties the record, then releases the lock
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  const std::string& path() const { return path_; }
  // The holder a non-empty record named when the lock was taken: one that ended without
  // releasing it. nullopt after a clean release (or a new file).
  const std::optional<Holder>& previous() const { return previous_; }

  // The record of lock file `path` (nullopt when it is missing, empty or unreadable).
  static std::optional<Holder> ReadHolder(const std::string& path);
  // This machine's host name as lock files record it ("" when it cannot be read).
  static std::string ThisHost();

 private:
  DirLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}

  int fd_ = -1;
  std::string path_;
  std::optional<Holder> previous_;
};

}  // namespace trainyard
