#include "client/cli/command_runner.h"

#include <string>
#include <vector>

#include "client/artifact_pull.h"
#include "client/cli/cli_format.h"
#include "common/events/proto_json.h"

namespace trainyard::cli {

int Runner::ListArtifacts(const std::string& id) {
  absl::StatusOr<std::vector<v1::ArtifactInfo>> artifacts = client_->ListArtifacts(id);
  if (!artifacts.ok()) return Fail(artifacts.status());
  if (options_.Json()) {
    for (const v1::ArtifactInfo& a : *artifacts) out_ << ToJsonLine(a) << '\n';
  } else {
    out_ << TerminalSafe(FormatArtifactsTable(*artifacts), /*keep_newlines=*/true);
  }
  out_.flush();
  return kExitOk;
}

int Runner::PullArtifacts(const std::string& id, const std::string& name, const std::string& dir) {
  std::vector<std::string> names;
  if (!name.empty()) {
    names.push_back(name);
  } else {
    absl::StatusOr<std::vector<v1::ArtifactInfo>> artifacts = client_->ListArtifacts(id);
    if (!artifacts.ok()) return Fail(artifacts.status());
    if (artifacts->empty()) {
      err_ << "trainyard: job " << id << " has no artifacts" << std::endl;
      return kExitOk;
    }
    for (const v1::ArtifactInfo& a : *artifacts) names.push_back(a.name());
  }
  int failed = 0;
  int last_error = kExitError;
  for (const std::string& n : names) {
    absl::StatusOr<PulledArtifact> pulled = PullArtifactToDir(*client_, id, n, dir);
    if (!pulled.ok()) {
      last_error = Fail(pulled.status());
      ++failed;
      continue;
    }
    out_ << "wrote " << TerminalSafe(pulled->path) << " (" << FormatBytes(pulled->info.size_bytes())
         << ", sha256 " << pulled->info.sha256().substr(0, 12) << ")" << std::endl;
  }
  if (failed > 0 && names.size() > 1) {
    err_ << "trainyard: " << failed << " of " << names.size() << " artifacts not pulled"
         << std::endl;
  }
  return failed > 0 ? last_error : kExitOk;
}

}  // namespace trainyard::cli
