#include "worker/engine/checkpoint/checkpoint_pin.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <sstream>

#include "common/base/file_io.h"
#include "worker/engine/checkpoint/checkpoint_layout.h"

namespace trainyard::engine {
namespace {

namespace fs = std::filesystem;

std::string HostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

// A pin naming this host and a pid that no longer exists was left by a crash.
bool IsStale(const fs::path& pin) {
  absl::StatusOr<std::string> text = ReadFile(pin.string(), 4096);
  if (!text.ok()) return false;  // unreadable: keep honouring it
  std::istringstream in(*text);
  std::string host;
  long pid = 0;
  if (!(in >> host >> pid) || pid <= 0) return false;
  return host == HostName() && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CheckpointPin>> CheckpointPin::Acquire(const std::string& dir,
                                                                      const std::string& owner) {
  const fs::path manifest = fs::path(dir) / kManifestName;
  const auto present = [&manifest] {
    std::error_code ec;
    return fs::exists(manifest, ec);
  };
  if (!present()) {
    return absl::NotFoundError("checkpoint " + dir + " holds no manifest.json (incomplete, or being deleted)");
  }
  // A pruner that renamed the directory away meanwhile makes the pin's own writes fail
  // (its folder is gone from this name): that is the checkpoint being deleted, not a
  // file system that cannot hold pins.
  const auto refused = [&](const std::string& why) -> absl::Status {
    if (!present()) return absl::NotFoundError("checkpoint " + dir + " is being deleted");
    return absl::InternalError("cannot pin checkpoint " + dir + ": " + why);
  };
  std::error_code ec;
  const fs::path pins = fs::path(dir) / kPinsDirName;
  fs::create_directory(pins, ec);
  if (ec) return refused(ec.message());
  const std::string host = HostName();
  const std::string path = (pins / (owner + "-" + host + "-" + std::to_string(::getpid()))).string();
  if (absl::Status s = WriteFileAtomically(path, host + " " + std::to_string(::getpid()) + "\n"); !s.ok()) {
    return refused(std::string(s.message()));
  }
  std::unique_ptr<CheckpointPin> pin(new CheckpointPin(path));
  // A pruner may have renamed the directory after the pin landed: it then sees the pin
  // and renames the directory back, so give it a moment before calling it deleted.
  for (int i = 0; i < 20 && !present(); ++i) ::usleep(50 * 1000);
  if (!present()) return absl::NotFoundError("checkpoint " + dir + " is being deleted");
  return pin;
}

CheckpointPin::~CheckpointPin() {
  std::error_code ec;
  fs::remove(path_, ec);
}

bool HasLivePin(const std::string& dir) {
  std::error_code ec;
  const fs::path pins = fs::path(dir) / kPinsDirName;
  if (!fs::is_directory(pins, ec)) return false;
  for (const auto& entry : fs::directory_iterator(pins, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.') continue;  // WriteFileAtomically's temporary
    if (!IsStale(entry.path())) return true;
  }
  return false;
}

}  // namespace trainyard::engine
