// Random-access reads of a file's bytes at explicit offsets.
//
// PreadFile reads with pread(2), never mmap: a mapped corpus counts in the process's
// RSS (as RssFile) while its pages are cached, and a file truncated under a mapping
// kills the reader with SIGBUS; pread keeps memory to the caller's buffer and turns a
// file that shrank into an error naming the file and the offset. MemorySource is the
// same interface over bytes in memory (the .idx fuzz target, tests).
//
// Thread contract: ReadAt is const and thread-safe (pread has no file position); one
// object serves every thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainyard::data {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // What errors call the source (a path).
  virtual const std::string& name() const = 0;
  virtual std::uint64_t size() const = 0;
  // Exactly `n` bytes from `offset` into `out`; DATA_LOSS "<name>: short read at byte
  // offset X: ..." when the source ends first (a file truncated since it was opened),
  // UNAVAILABLE with strerror on an I/O error (EIO, ESTALE: may pass on a retry).
  virtual absl::Status ReadAt(std::uint64_t offset, std::size_t n, void* out) const = 0;
};

class PreadFile : public ByteSource {
 public:
  // Opens `path` read-only. NOT_FOUND when it does not exist, FAILED_PRECONDITION when it
  // is not a regular file, PERMISSION_DENIED when it cannot be reached (EACCES, ENOTDIR,
  // ...), UNAVAILABLE otherwise (EIO, ESTALE, EMFILE: the filesystem or the process, not
  // the file); messages name the path.
  static absl::StatusOr<std::unique_ptr<PreadFile>> Open(const std::string& path);
  ~PreadFile() override;
  PreadFile(const PreadFile&) = delete;
  PreadFile& operator=(const PreadFile&) = delete;

  const std::string& name() const override { return path_; }
  // The size when the file was opened.
  std::uint64_t size() const override { return size_; }
  absl::Status ReadAt(std::uint64_t offset, std::size_t n, void* out) const override;

 private:
  PreadFile(std::string path, int fd, std::uint64_t size) : path_(std::move(path)), fd_(fd), size_(size) {}
  std::string path_;
  int fd_;
  std::uint64_t size_;
};

class MemorySource : public ByteSource {
 public:
  // `bytes` must outlive the source.
  MemorySource(std::string name, std::string_view bytes) : name_(std::move(name)), bytes_(bytes) {}
  const std::string& name() const override { return name_; }
  std::uint64_t size() const override { return bytes_.size(); }
  absl::Status ReadAt(std::uint64_t offset, std::size_t n, void* out) const override;

 private:
  std::string name_;
  std::string_view bytes_;
};

}  // namespace trainyard::data
