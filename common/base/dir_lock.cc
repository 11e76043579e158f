#include "common/base/dir_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/base/text.h"

namespace trainyard {
namespace {

constexpr std::size_t kMaxRecordBytes = 4096;

std::string Reason(int err) {
  std::string text = std::strerror(err);
  if (!text.empty()) text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
  return text;
}

std::string Record(const DirLock::Holder& h) {
  return absl::StrCat("pid ", h.pid, "\nhost ", h.host, "\nstarted ", h.started, "\nprogram ", h.program, "\n");
}

DirLock::Holder ParseRecord(absl::string_view text) {
  DirLock::Holder h;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const std::size_t space = line.find(' ');
    if (space == absl::string_view::npos) continue;
    const absl::string_view key = line.substr(0, space);
    const std::string value(line.substr(space + 1));
    if (key == "pid") {
      if (!absl::SimpleAtoi(value, &h.pid)) h.pid = 0;
    } else if (key == "host") {
      h.host = value;
    } else if (key == "started") {
      h.started = value;
    } else if (key == "program") {
      h.program = value;
    }
  }
  return h;
}

std::string ReadAll(int fd) {
  std::string out(kMaxRecordBytes, '\0');
  const ssize_t n = ::pread(fd, out.data(), out.size(), 0);
  out.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return out;
}

// The refusal: who holds `path` and what the operator can do about it.
std::string HeldBy(const std::optional<DirLock::Holder>& holder, const std::string& path, const std::string& flag) {
  if (!holder || (holder->pid <= 0 && holder->host.empty())) {
    return absl::StrCat("another process (its lock file ", path,
                        " names none yet: it may be starting); stop it first, or give this one another ", flag);
  }
  const std::string here = DirLock::ThisHost();
  const std::string program = holder->program.empty() ? std::string("a process") : Quote(holder->program);
  const std::string since = holder->started.empty() ? std::string() : absl::StrCat(" since ", Quote(holder->started));
  if (!holder->host.empty() && holder->host != here) {
    return absl::StrCat(program, " pid ", holder->pid, " on host ", Quote(holder->host), ", not this host (",
                        Quote(here), "),", since, " (lock file ", path,
                        "): the directory is shared with that host. If ", Quote(holder->host),
                        " is gone (a network filesystem can keep a dead host's lock for a while), remove ", path,
                        " and start again");
  }
  // A holder of this host whose pid is gone: the lock is held by a process that
  // inherited its descriptor, or by one that has not written its record yet.
  const bool gone = holder->pid > 0 && ::kill(static_cast<pid_t>(holder->pid), 0) != 0 && errno == ESRCH;
  return absl::StrCat(program, " pid ", holder->pid, " on this host (", Quote(here), ")", since,
                      gone ? " (that pid no longer runs: a process it started still holds the lock)" : "",
                      " (lock file ", path, "); stop it first, or give this one another ", flag);
}

}  // namespace

std::string DirLock::ThisHost() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}

std::optional<DirLock::Holder> DirLock::ReadHolder(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  const std::string text = ReadAll(fd);
  ::close(fd);
  if (text.empty()) return std::nullopt;
  return ParseRecord(text);
}

absl::StatusOr<std::unique_ptr<DirLock>> DirLock::Acquire(const std::string& dir, const std::string& flag,
                                                          const std::string& program, absl::Time started) {
  const std::string named = absl::StrCat(flag, " ", Quoted(dir));
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) return absl::FailedPreconditionError(absl::StrCat(named, " is not a directory"));
  } else if (errno != ENOENT) {
    return absl::FailedPreconditionError(absl::StrCat(named, ": ", Reason(errno)));
  } else {
    // Parent by parent, as mkdir -p, so the error names the step that failed.
    std::string partial;
    for (absl::string_view part : absl::StrSplit(dir, '/')) {
      if (part.empty()) {
        if (partial.empty()) partial = "/";
        continue;
      }
      if (!partial.empty() && partial.back() != '/') partial += '/';
      partial.append(part.data(), part.size());
      if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
        return absl::FailedPreconditionError(
            absl::StrCat(named, ": cannot create ", Quoted(partial), ": ", Reason(errno)));
      }
    }
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(named, " is not a directory"));
    }
  }
  // access() answers for the real filesystem too: a read-only mount is EROFS even for root.
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(named, " is not writable: ", Reason(errno), "; ", program, " keeps its files there"));
  }
  std::string path = dir;
  if (path.back() != '/') path += '/';
  path += program + ".lock";
  // O_CLOEXEC: a rank or preflight runner this process starts must not inherit the lock,
  // or it would outlive a crash of its parent and keep the directory held.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(named, ": cannot open its lock file ", path, ": ", Reason(errno)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string record = ReadAll(fd);
    ::close(fd);
    if (err != EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(named, ": cannot lock ", path, ": ", Reason(err)));
    }
    std::optional<Holder> holder;
    if (!record.empty()) holder = ParseRecord(record);
    return absl::FailedPreconditionError(absl::StrCat(named, " is in use by ", HeldBy(holder, path, flag)));
  }
  std::unique_ptr<DirLock> lock(new DirLock(fd, path));
  if (const std::string record = ReadAll(fd); !record.empty()) lock->previous_ = ParseRecord(record);
  Holder self;
  self.pid = ::getpid();
  self.host = ThisHost();
  self.started = absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", started, absl::UTCTimeZone());
  self.program = program;
  const std::string text = Record(self);
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()) ||
      ::fdatasync(fd) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(named, ": cannot write its lock file ", path, ": ", Reason(errno)));
  }
  return lock;
}

DirLock::~DirLock() {
  if (fd_ < 0) return;
  // An empty record tells the next holder that this one ended cleanly.
  if (::ftruncate(fd_, 0) == 0) ::fdatasync(fd_);
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
}

}  // namespace trainyard
