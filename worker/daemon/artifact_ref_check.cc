#include "worker/daemon/artifact_ref_check.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <string_view>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/base/text.h"

namespace trainyard {

namespace {

constexpr std::string_view kFileScheme = "file://";

// realpath(3), or "" when the path does not resolve.
std::string RealPath(const std::string &path) {
  std::unique_ptr<char, decltype(&free)> resolved(realpath(path.c_str(), nullptr), &free);
  return resolved ? std::string(resolved.get()) : std::string();
}

}  // namespace

absl::StatusOr<std::string> CheckArtifactRef(const v1::ArtifactRef &ref,
                                             const std::string &artifacts_dir) {
  if (!IsArtifactName(ref.name())) {
    return absl::InvalidArgumentError(
        absl::StrCat("artifact name ", Quoted(ref.name()),
                     " must match [A-Za-z0-9][A-Za-z0-9._-]{0,127}"));
  }
  if (!IsArtifactKind(ref.kind())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "artifact ", ref.name(), ": kind ", Quoted(ref.kind()), " must be trace or flight_recorder"));
  }
  const std::string &uri = ref.uri();
  if (uri.compare(0, kFileScheme.size(), kFileScheme) != 0 || uri.size() <= kFileScheme.size() ||
      uri[kFileScheme.size()] != '/' || uri.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "artifact ", ref.name(), ": uri ", Quoted(uri), " must be file:// and an absolute path"));
  }
  const std::string path = uri.substr(kFileScheme.size());
  const std::string dir = RealPath(artifacts_dir);
  if (dir.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "artifact ", ref.name(), ": the artifacts directory ", Quoted(artifacts_dir),
        " does not exist"));
  }
  const std::string resolved = RealPath(path);
  struct stat st;
  if (resolved.empty() || stat(resolved.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("artifact ", ref.name(), ": ", Quoted(path),
                                                   " is not an existing regular file"));
  }
  if (resolved.compare(0, dir.size() + 1, dir + "/") != 0) {
    return absl::InvalidArgumentError(absl::StrCat("artifact ", ref.name(), ": ", Quoted(path),
                                                   " is not inside ", Quoted(artifacts_dir)));
  }
  return resolved;
}

}  // namespace trainyard
