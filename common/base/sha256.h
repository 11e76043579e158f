// SHA-256 through OpenSSL's libcrypto (EVP), for artifact checksums: the worker hashes
// a file before uploading it, the controller hashes what it received, and the CLI
// checks what it pulled. Digests are lowercase hex (64 characters).
//
// Thread contract: a Sha256 object is used by one thread at a time; the free
// functions are thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace trainyard {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256 &) = delete;
  Sha256 &operator=(const Sha256 &) = delete;

  void Update(std::string_view bytes);
  // The digest of everything passed to Update; the object is then reset.
  std::string HexDigest();

 private:
  struct Context;
  std::unique_ptr<Context> ctx_;
};

std::string Sha256Hex(std::string_view bytes);

// The digest of the file's first `limit` bytes (all of it when limit < 0); NOT_FOUND or
// INTERNAL naming the path when it cannot be read, OUT_OF_RANGE when it is shorter.
absl::StatusOr<std::string> Sha256File(const std::string &path, long long limit = -1);

// True for 64 lowercase hex characters.
bool IsSha256Hex(std::string_view text);

}  // namespace trainyard
