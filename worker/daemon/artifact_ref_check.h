// Checks an ArtifactRef event a rank printed before the worker uploads the file it
// names: the rank is a separate, less trusted process, so its ref must name a regular
// file inside its own attempt's artifacts directory and carry a valid name and kind.
//
// Thread contract: stateless free functions; thread-safe.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/artifact_name.h"
#include "trainyard/v1/event.pb.h"

namespace trainyard {

// The resolved path of the file `ref` names, when ref.name is an artifact name,
// ref.kind an artifact kind, ref.uri "file://" plus an absolute path, and that path,
// after realpath (symlinks resolved), is a regular file inside realpath(artifacts_dir).
// INVALID_ARGUMENT otherwise, saying why and quoting at most 100 characters of the
// offending value.
absl::StatusOr<std::string> CheckArtifactRef(const trainyard::v1::ArtifactRef &ref,
                                             const std::string &artifacts_dir);

}  // namespace trainyard
