#include "common/flight/artifact_file.h"

#include "common/artifact_name.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

namespace trainyard::flight {
namespace {

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

bool MakeDirs(const std::string& dir, std::string* error) {
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    const std::string prefix = dir.substr(0, pos);
    if (prefix.empty()) continue;
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      *error = Errno("mkdir " + prefix);
      return false;
    }
  }
  return true;
}

}  // namespace

bool IsValidArtifactName(std::string_view name) { return IsArtifactName(name); }

std::string Sha256Hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &len, EVP_sha256(), nullptr) != 1) return "";
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) {
    hex += kHex[digest[i] >> 4];
    hex += kHex[digest[i] & 15];
  }
  return hex;
}

bool WriteArtifactFile(const std::string& dir, const std::string& name, std::string_view bytes,
                       WrittenArtifact* out, std::string* error) {
  if (!IsValidArtifactName(name)) {
    *error = "artifact name \"" + name + "\" does not match [A-Za-z0-9][A-Za-z0-9._-]{0,127}";
    return false;
  }
  if (!MakeDirs(dir, error)) return false;
  char resolved[PATH_MAX];
  const std::string abs_dir = realpath(dir.c_str(), resolved) != nullptr ? std::string(resolved) : dir;
  const std::string path = abs_dir + "/" + name;
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = Errno("open " + tmp);
    return false;
  }
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *error = Errno("write " + tmp);
      close(fd);
      unlink(tmp.c_str());
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  if (fsync(fd) != 0) {
    *error = Errno("fsync " + tmp);
    close(fd);
    unlink(tmp.c_str());
    return false;
  }
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    *error = Errno("rename " + tmp + " to " + path);
    unlink(tmp.c_str());
    return false;
  }
  const int dfd = open(abs_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);  // best effort: the file itself is durable already
    close(dfd);
  }
  out->path = path;
  out->size_bytes = static_cast<std::int64_t>(bytes.size());
  out->sha256 = Sha256Hex(bytes);
  return true;
}

}  // namespace trainyard::flight
