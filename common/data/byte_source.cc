#include "common/data/byte_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace trainyard::data {
namespace {

absl::Status ShortRead(const std::string& name, std::uint64_t offset, std::uint64_t now, std::uint64_t size) {
  return absl::DataLossError(absl::StrCat(name, ": short read at byte offset ", offset, ": the file ends at byte ",
                                          now, " but was ", size, " bytes when opened (truncated while in use?)"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<PreadFile>> PreadFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    if (err == EACCES || err == EPERM || err == ENOTDIR || err == ELOOP || err == ENAMETOOLONG) {
      return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open: ", std::strerror(err)));
    }
    // EIO, ESTALE, EMFILE, ENOMEM, ...: the filesystem or the process, not the file.
    return absl::UnavailableError(absl::StrCat(path, ": cannot open: ", std::strerror(err)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::UnavailableError(absl::StrCat(path, ": cannot stat: ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat(path, ": not a regular file"));
  }
  return std::unique_ptr<PreadFile>(new PreadFile(path, fd, static_cast<std::uint64_t>(st.st_size)));
}

PreadFile::~PreadFile() { ::close(fd_); }

absl::Status PreadFile::ReadAt(std::uint64_t offset, std::size_t n, void* out) const {
  auto* dst = static_cast<unsigned char*>(out);
  std::size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd_, dst + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(
          absl::StrCat(path_, ": cannot read at byte offset ", offset + done, ": ", std::strerror(errno)));
    }
    if (got == 0) {
      struct stat st;
      const std::uint64_t now = ::fstat(fd_, &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : offset + done;
      return ShortRead(path_, offset, now, size_);
    }
    done += static_cast<std::size_t>(got);
  }
  return absl::OkStatus();
}

absl::Status MemorySource::ReadAt(std::uint64_t offset, std::size_t n, void* out) const {
  if (offset > bytes_.size() || n > bytes_.size() - offset) {
    return ShortRead(name_, offset, bytes_.size(), bytes_.size());
  }
  if (n > 0) std::memcpy(out, bytes_.data() + offset, n);
  return absl::OkStatus();
}

}  // namespace trainyard::data
