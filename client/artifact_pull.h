// `trainyard artifacts pull`: writes a job's artifact, streamed by the controller, to
// DIR/NAME. The bytes go to a temporary file in DIR (".NAME.partial-XXXXXX", never a
// valid artifact name) and are renamed to DIR/NAME only once their size and sha256
// equal the stream's info; on any error the temporary file is removed and DIR/NAME is
// left as it was. Names, both asked for and sent back, must be artifact names
// (common/artifact_name.h), so a hostile controller cannot write outside DIR. An
// existing DIR/NAME is replaced. DIR is created when missing.
//
// Thread contract: free functions; concurrent calls are safe for distinct (dir, name)
// pairs (JobClient is thread-safe).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "client/job_client.h"
#include "trainyard/v1/job_service.pb.h"

namespace trainyard::cli {

struct PulledArtifact {
  v1::ArtifactInfo info;
  std::string path;  // DIR/NAME
};

// INVALID_ARGUMENT for a bad name; DATA_LOSS when the stream lacks its info, names
// another artifact, or its size or sha256 differ from the info; INTERNAL for a file
// system error; otherwise the pull's own error.
absl::StatusOr<PulledArtifact> PullArtifactToDir(JobClient& client, const std::string& job_id,
                                                 const std::string& name,
                                                 const std::string& dir);

}  // namespace trainyard::cli
