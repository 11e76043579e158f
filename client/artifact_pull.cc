#include "client/artifact_pull.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/artifact_name.h"
#include "common/base/file_io.h"
#include "common/base/sha256.h"

namespace trainyard::cli {

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
  // A hidden, unique temporary file beside the final one, renamed over it only once the
  // bytes are complete and their digest matched (common/base/file_io.h).
  absl::StatusOr<AtomicFileWriter> partial = AtomicFileWriter::Create(final_path, {/*unique_temp_name=*/true});
  if (!partial.ok()) return partial.status();

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
    return partial->Append(message.data());
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
  if (absl::Status committed = partial->Commit(); !committed.ok()) return committed;
  pulled.path = final_path;
  return pulled;
}

}  // namespace trainyard::cli
