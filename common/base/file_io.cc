#include "common/base/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace trainyard {
namespace {

std::string ErrnoText(int err) { return std::strerror(err); }

}  // namespace

absl::StatusOr<std::string> ReadFile(const std::string& path, std::size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError("no such file");
    return absl::InternalError(absl::StrCat("cannot open: ", ErrnoText(err)));
  }
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    return absl::FailedPreconditionError("is a directory");
  }
  // Read one byte past the cap, so a file of exactly max_bytes is accepted and a longer
  // one is told apart without trusting st_size (pipes, /proc files).
  std::string text;
  char buf[64 * 1024];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return absl::InternalError(absl::StrCat("cannot read: ", ErrnoText(err)));
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > max_bytes) {
      ::close(fd);
      return absl::OutOfRangeError(absl::StrCat("larger than the limit of ", max_bytes, " bytes"));
    }
  }
  ::close(fd);
  return text;
}

absl::Status FsyncPath(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot open ", path, " to fsync: ", ErrnoText(errno)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return absl::InternalError(absl::StrCat("fsync of ", path, " failed: ", ErrnoText(err)));
  return absl::OkStatus();
}

std::string DirectoryOf(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

absl::Status MakeDirectories(const std::string& dir) {
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    const std::string prefix = dir.substr(0, pos);
    if (prefix.empty()) continue;
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      const std::string why = ErrnoText(errno);
      return absl::InternalError(
          absl::StrCat("cannot create ", dir, prefix == dir ? "" : absl::StrCat(" (at ", prefix, ")"), ": ", why));
    }
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::InternalError(absl::StrCat("cannot create ", dir, ": not a directory"));
  }
  return absl::OkStatus();
}

absl::Status RenameDurably(const std::string& from, const std::string& to) {
  if (absl::Status s = FsyncPath(from); !s.ok()) return s;
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("rename from ", from, " to ", to, " failed: ", ErrnoText(errno)));
  }
  return FsyncPath(DirectoryOf(to), /*directory=*/true);
}

absl::StatusOr<AtomicFileWriter> AtomicFileWriter::Create(const std::string& path, Options options) {
  std::string temp;
  int fd = -1;
  if (options.unique_temp_name) {
    const std::size_t slash = path.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
    const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
    temp = dir + "." + name + ".tmp-XXXXXX";
    fd = ::mkostemp(temp.data(), O_CLOEXEC);
    if (fd >= 0) {
      // mkostemp makes 0600; give the file the mode a plain create would (umask).
      const mode_t mask = ::umask(0);
      ::umask(mask);
      if (::fchmod(fd, 0666 & ~mask) != 0) {
        const int err = errno;
        ::close(fd);
        ::unlink(temp.c_str());
        return absl::InternalError(absl::StrCat("cannot set the mode of ", temp, ": ", ErrnoText(err)));
      }
    }
  } else {
    temp = path + ".tmp";
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  }
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("cannot create ", temp, ": ", ErrnoText(errno)));
  }
  return AtomicFileWriter(path, std::move(temp), fd);
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : path_(std::move(other.path_)),
      temp_path_(std::move(other.temp_path_)),
      fd_(std::exchange(other.fd_, -1)),
      written_(other.written_),
      committed_(std::exchange(other.committed_, true)) {}

AtomicFileWriter& AtomicFileWriter::operator=(AtomicFileWriter&& other) noexcept {
  if (this != &other) {
    Abandon();
    path_ = std::move(other.path_);
    temp_path_ = std::move(other.temp_path_);
    fd_ = std::exchange(other.fd_, -1);
    written_ = other.written_;
    committed_ = std::exchange(other.committed_, true);
  }
  return *this;
}

AtomicFileWriter::~AtomicFileWriter() { Abandon(); }

void AtomicFileWriter::Abandon() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!committed_ && !temp_path_.empty()) ::unlink(temp_path_.c_str());
  committed_ = true;
}

absl::Status AtomicFileWriter::Append(std::string_view bytes) { return Append(bytes.data(), bytes.size()); }

absl::Status AtomicFileWriter::Append(const void* data, std::size_t size) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": write after commit or failure"));
  const char* p = static_cast<const char*>(data);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd_, p + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? ErrnoText(errno) : "wrote nothing";
      return absl::InternalError(absl::StrCat("cannot write ", temp_path_, ": ", why));
    }
    done += static_cast<std::size_t>(n);
  }
  written_ += static_cast<std::int64_t>(size);
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Commit() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": commit after commit or failure"));
  if (::fsync(fd_) != 0) return absl::InternalError(absl::StrCat("fsync of ", temp_path_, " failed: ", ErrnoText(errno)));
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) return absl::InternalError(absl::StrCat("close of ", temp_path_, " failed: ", ErrnoText(errno)));
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("rename from ", temp_path_, " to ", path_, " failed: ", ErrnoText(errno)));
  }
  committed_ = true;
  return FsyncPath(DirectoryOf(path_), /*directory=*/true);
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view bytes,
                                 AtomicFileWriter::Options options) {
  absl::StatusOr<AtomicFileWriter> writer = AtomicFileWriter::Create(path, options);
  if (!writer.ok()) return writer.status();
  if (absl::Status s = writer->Append(bytes); !s.ok()) return s;
  return writer->Commit();
}

}  // namespace trainyard
