// A reader's claim on one checkpoint directory: while a CheckpointPin lives, pruning
// (checkpoint_retention.h) never removes that directory. `trainyard export` holds one
// while it copies a checkpoint, and each rank of a job holds one on the checkpoint it
// loads as checkpoint.initial_load_path.
//
// A pin is the file <dir>/pins/<owner>-<host>-<pid> holding "<host> <pid>". The pruner
// skips a directory with a live pin, renames the rest to .deleting-* and looks at their
// pins again afterwards, renaming a directory back if one appeared; a pin made after
// the rename fails (the directory is gone from its name), and Acquire then checks that
// the manifest is still there. So either the reader holds the directory, or it is told
// that the checkpoint is being deleted. A pin left by a process that died on this host
// is stale (its pid is gone) and ignored; one from another host counts until it is
// removed (`rm DIR/pins/*`). Thread-safe; the destructor removes the file.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace trainyard::engine {

inline constexpr const char* kPinsDirName = "pins";

class CheckpointPin {
 public:
  // Pins `dir` (a checkpoint directory holding manifest.json) for `owner` (a short
  // [A-Za-z0-9._-] word such as "export" or "load-rank-3"). NOT_FOUND when `dir` holds
  // no manifest (deleted meanwhile, or incomplete); the filesystem's error otherwise
  // (a read-only mount: the caller may read unpinned).
  static absl::StatusOr<std::unique_ptr<CheckpointPin>> Acquire(const std::string& dir, const std::string& owner);
  ~CheckpointPin();
  CheckpointPin(const CheckpointPin&) = delete;
  CheckpointPin& operator=(const CheckpointPin&) = delete;

  const std::string& path() const { return path_; }

 private:
  explicit CheckpointPin(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// Whether `dir` holds a live pin (see above).
bool HasLivePin(const std::string& dir);

}  // namespace trainyard::engine
