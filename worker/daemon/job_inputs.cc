#include "worker/daemon/job_inputs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/data/corpus_paths.h"

namespace trainyard {
namespace {

// Opening is the test of readable that the rank will face (access(2) answers for the
// real uid, and says nothing of a FIFO that would block).
absl::Status CheckReadable(const std::string& key, const std::string& entry, const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int e = errno;
    const std::string why = absl::StrCat(key, ": entry \"", entry, "\": cannot read ", path, ": ", std::strerror(e));
    return e == EACCES ? absl::PermissionDeniedError(why) : absl::InvalidArgumentError(why);
  }
  ::close(fd);
  return absl::OkStatus();
}

absl::Status CheckDataset(const std::string& section, const std::string& kind, const std::string& path_list) {
  if (kind != "text" && kind != "tokens") return absl::OkStatus();  // synthetic: no files
  const std::string key = section + ".dataset_path";
  TY_ASSIGN_OR_RETURN(std::vector<data::CorpusFileSpec> files, data::ResolveDatasetPath(kind, path_list, key));
  for (const data::CorpusFileSpec& f : files) {
    TY_RETURN_IF_ERROR(CheckReadable(key, f.entry, f.path));
    if (!f.index_path.empty()) TY_RETURN_IF_ERROR(CheckReadable(key, f.entry, f.index_path));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckJobInputs(const v1::JobSpec& spec, bool resuming) {
  TY_RETURN_IF_ERROR(CheckDataset("training", spec.training().dataset(), spec.training().dataset_path()));
  TY_RETURN_IF_ERROR(CheckDataset("validation", spec.validation().dataset(), spec.validation().dataset_path()));
  // A restart resumes from its checkpoint and never reads the initial weights.
  const std::string& weights = spec.checkpoint().initial_load_path();
  if (!resuming && !weights.empty()) {
    struct stat st;
    if (::stat(weights.c_str(), &st) != 0) {
      const int e = errno;
      const std::string why = absl::StrCat("checkpoint.initial_load_path: ", weights,
                                           e == ENOENT ? " does not exist" : absl::StrCat(": ", std::strerror(e)));
      return e == ENOENT ? absl::NotFoundError(why) : absl::InvalidArgumentError(why);
    }
  }
  return absl::OkStatus();
}

}  // namespace trainyard
