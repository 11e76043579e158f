#include "common/flight/artifact_file.h"

#include <climits>
#include <cstdlib>

#include "common/artifact_name.h"
#include "common/base/file_io.h"
#include "common/base/text.h"
#include "common/base/sha256.h"

namespace trainyard::flight {

absl::StatusOr<WrittenArtifact> WriteArtifactFile(const std::string& dir, const std::string& name,
                                                  std::string_view bytes) {
  if (!IsArtifactName(name)) {
    return absl::InvalidArgumentError("artifact name \"" + Quote(name) +
                                      "\" does not match [A-Za-z0-9][A-Za-z0-9._-]{0,127}");
  }
  if (absl::Status made = MakeDirectories(dir); !made.ok()) return made;
  char resolved[PATH_MAX];
  const std::string abs_dir = realpath(dir.c_str(), resolved) != nullptr ? std::string(resolved) : dir;
  WrittenArtifact out;
  out.path = abs_dir + "/" + name;
  // Unique temporary names: a rank's watchdog and its profiler may write at once.
  if (absl::Status s = WriteFileAtomically(out.path, bytes, AtomicFileWriter::Options{/*unique_temp_name=*/true}); !s.ok()) return s;
  out.size_bytes = static_cast<std::int64_t>(bytes.size());
  out.sha256 = Sha256Hex(bytes);
  return out;
}

}  // namespace trainyard::flight
