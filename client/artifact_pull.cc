#include "client/artifact_pull.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/artifact_name.h"
#include "common/sha256.h"

namespace trainyard::cli {

namespace {

// The temporary file of one pull; removed unless Commit renamed it.
class PartialFile {
 public:
  explicit PartialFile(std::string path) : path_(std::move(path)) {}
  ~PartialFile() {
    if (fd_ >= 0) close(fd_);
    if (!committed_ && !path_.empty()) unlink(path_.c_str());
  }
  PartialFile(const PartialFile&) = delete;
  PartialFile& operator=(const PartialFile&) = delete;

  absl::Status Create() {
    fd_ = mkstemp(path_.data());
    if (fd_ < 0) {
      const std::string error = std::strerror(errno);
      path_.clear();  // nothing to remove
      return absl::InternalError(absl::StrCat("cannot create a file in the output directory: ", error));
    }
    // mkstemp makes 0600; a pulled file gets the mode a plain create would (umask).
    const mode_t mask = umask(0);
    umask(mask);
    if (fchmod(fd_, 0666 & ~mask) != 0) {
      return absl::InternalError(absl::StrCat("cannot set the mode of ", path_, ": ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }
  absl::Status Write(const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = write(fd_, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return absl::InternalError(absl::StrCat("cannot write ", path_, ": ", std::strerror(errno)));
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }
  absl::Status Commit(const std::string& final_path) {
    if (fsync(fd_) != 0 || close(fd_) != 0) {
      fd_ = -1;
      return absl::InternalError(absl::StrCat("cannot write ", path_, ": ", std::strerror(errno)));
    }
    fd_ = -1;
    if (rename(path_.c_str(), final_path.c_str()) != 0) {
      return absl::InternalError(
          absl::StrCat("cannot rename ", path_, " to ", final_path, ": ", std::strerror(errno)));
    }
    committed_ = true;
    // The rename is durable once the directory is.
    const std::string dir = final_path.substr(0, final_path.find_last_of('/') + 1);
    const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd) != 0) {
      const std::string error = std::strerror(errno);
      if (dfd >= 0) close(dfd);
      return absl::InternalError(absl::StrCat("cannot sync the directory of ", final_path, ": ", error));
    }
    close(dfd);
    return absl::OkStatus();
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

absl::StatusOr<PulledArtifact> PullArtifactToDir(JobClient& client, const std::string& job_id,
                                                 const std::string& name,
                                                 const std::string& dir) {
  if (!IsArtifactName(name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "artifact name '", name.substr(0, 100), "' must match [A-Za-z0-9][A-Za-z0-9._-]{0,127}"));
  }
  const std::string out_dir = dir.empty() ? "." : dir;
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", out_dir, ": ", ec.message()));
  const std::string final_path = (std::filesystem::path(out_dir) / name).string();
  PartialFile partial((std::filesystem::path(out_dir) / ("." + name + ".partial-XXXXXX")).string());
  if (absl::Status created = partial.Create(); !created.ok()) return created;

  PulledArtifact pulled;
  bool have_info = false;
  int64_t received = 0;
  Sha256 sha;
  absl::Status status = client.PullArtifact(job_id, name, [&](const v1::ArtifactData& message) {
    if (!have_info) {
      if (!message.has_info()) {
        return absl::DataLossError(absl::StrCat("the pull of ", name, " did not start with its info"));
      }
      const v1::ArtifactInfo& info = message.info();
      if (info.name() != name || !IsSha256Hex(info.sha256()) || info.size_bytes() < 0) {
        return absl::DataLossError(absl::StrCat(
            "the controller answered the pull of ", name, " with artifact '",
            info.name().substr(0, 100), "' (sha256 '", info.sha256().substr(0, 64), "', ",
            info.size_bytes(), " bytes)"));
      }
      pulled.info = info;
      have_info = true;
    }
    received += static_cast<int64_t>(message.data().size());
    if (received > pulled.info.size_bytes()) {
      return absl::DataLossError(absl::StrCat("artifact ", name, ": more than the ",
                                              pulled.info.size_bytes(), " bytes announced"));
    }
    sha.Update(message.data());
    return partial.Write(message.data());
  });
  if (!status.ok()) return status;
  if (!have_info) {
    return absl::DataLossError(absl::StrCat("the pull of ", name, " ended without its info"));
  }
  if (received != pulled.info.size_bytes()) {
    return absl::DataLossError(absl::StrCat("artifact ", name, ": received ", received, " of ",
                                            pulled.info.size_bytes(), " bytes"));
  }
  const std::string digest = sha.HexDigest();
  if (digest != pulled.info.sha256()) {
    return absl::DataLossError(absl::StrCat("artifact ", name, ": sha256 ", digest,
                                            " does not match the controller's ",
                                            pulled.info.sha256()));
  }
  if (absl::Status committed = partial.Commit(final_path); !committed.ok()) return committed;
  pulled.path = final_path;
  return pulled;
}

}  // namespace trainyard::cli
