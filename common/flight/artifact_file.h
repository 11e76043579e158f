// Writing an artifact file the way readers may trust it (common/base/file_io.h: a
// temporary file in the same folder, fsync, rename, fsync the folder) and its SHA-256
// (lowercase hex). Torch-free. Used by the rank's watchdog (flight dumps) and profiler
// (traces). Thread contract: thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace trainyard::flight {

struct WrittenArtifact {
  std::string path;  // absolute
  std::int64_t size_bytes = 0;
  std::string sha256;  // lowercase hex
};

// Creates `dir` if needed and writes dir/name with `bytes`. INVALID_ARGUMENT for a name
// that breaks the artifact name rule (common/artifact_name.h), else the write's error,
// naming the path.
absl::StatusOr<WrittenArtifact> WriteArtifactFile(const std::string& dir, const std::string& name,
                                                  std::string_view bytes);

}  // namespace trainyard::flight
