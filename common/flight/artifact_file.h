// Writing an artifact file the way readers may trust it: to a temporary name in the
// same folder, fsync, rename, fsync the folder; and its SHA-256 (OpenSSL EVP, lowercase
// hex). Torch-free. Used by the rank's watchdog (flight dumps) and profiler (traces).
// Thread contract: thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace trainyard::flight {

struct WrittenArtifact {
  std::string path;  // absolute
  std::int64_t size_bytes = 0;
  std::string sha256;  // lowercase hex
};

// Creates `dir` if needed and writes dir/name with `bytes`. Returns false and sets
// *error naming the path on failure.
bool WriteArtifactFile(const std::string& dir, const std::string& name, std::string_view bytes,
                       WrittenArtifact* out, std::string* error);

// True for [A-Za-z0-9][A-Za-z0-9._-]{0,127} (the ArtifactRef name rule).
bool IsValidArtifactName(std::string_view name);

std::string Sha256Hex(std::string_view bytes);

}  // namespace trainyard::flight
