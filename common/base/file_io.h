// Reading a whole file with a size cap, and writing files the way readers may trust
// them after a crash: to a temporary file in the same folder, fsync, rename over the
// final name, fsync the folder. Every part of Trainyard that writes a file another
// process reads (checkpoints, safetensors, manifests, artifacts, the rank config, the
// controller's port file, pulled artifacts) writes it through here.
//
// Write errors name the path. Thread contract: the free functions are thread-safe; an
// AtomicFileWriter is used by one thread at a time.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainyard {

// The whole of `path`, which may be at most `max_bytes` long. NOT_FOUND ("no such
// file") when it does not exist, OUT_OF_RANGE ("larger than the limit of N bytes") when
// it is longer, FAILED_PRECONDITION ("is a directory"), INTERNAL ("cannot open: ...",
// "cannot read: ..." with strerror) otherwise. The messages do not name the path: the
// caller says what the file is ("--tls-ca 'ca.pem': no such file").
absl::StatusOr<std::string> ReadFile(const std::string& path, std::size_t max_bytes);

// fsync of `path` (a file or, with `directory`, a folder, so entries created or renamed
// in it are durable).
absl::Status FsyncPath(const std::string& path, bool directory = false);
// The folder holding `path` ("." for a bare name).
std::string DirectoryOf(const std::string& path);
// Creates `dir` and its missing parents (mode 0755 before umask).
absl::Status MakeDirectories(const std::string& dir);

// fsync(from), rename(from, to), fsync of to's folder: `to` then names the bytes that
// were in `from`, durably. For files written in several sittings (resumable uploads).
absl::Status RenameDurably(const std::string& from, const std::string& to);

// A file that appears under its final name complete or not at all.
//
//   TY_ASSIGN_OR_RETURN(AtomicFileWriter w, AtomicFileWriter::Create(path));
//   TY_RETURN_IF_ERROR(w.Append(bytes));
//   TY_RETURN_IF_ERROR(w.Commit());
//
// The bytes go to a temporary file next to `path`: `path`.tmp, or with
// `unique_temp_name` a hidden `.NAME.tmp-XXXXXX` (mkstemp) for folders where two writers
// may race on one name. Commit fsyncs, closes, renames over `path` and fsyncs the folder.
// Destroyed without a successful Commit, the temporary file is removed and `path` is
// untouched. The file gets mode 0666 less the umask, as a plain create would.
class AtomicFileWriter {
 public:
  struct Options {
    bool unique_temp_name = false;
  };

  static absl::StatusOr<AtomicFileWriter> Create(const std::string& path, Options options);
  static absl::StatusOr<AtomicFileWriter> Create(const std::string& path) { return Create(path, Options{}); }

  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  absl::Status Append(std::string_view bytes);
  absl::Status Append(const void* data, std::size_t size);
  absl::Status Commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }
  std::int64_t bytes_written() const { return written_; }

 private:
  AtomicFileWriter(std::string path, std::string temp_path, int fd)
      : path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(fd) {}
  void Abandon();

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  std::int64_t written_ = 0;
  bool committed_ = false;
};

// AtomicFileWriter in one call.
absl::Status WriteFileAtomically(const std::string& path, std::string_view bytes,
                                 AtomicFileWriter::Options options = {});

}  // namespace trainyard
