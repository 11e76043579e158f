#include "common/base/sha256.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <vector>

#include "absl/strings/str_cat.h"

namespace trainyard {

struct Sha256::Context {
  EVP_MD_CTX *md = nullptr;
};

Sha256::Sha256() : ctx_(std::make_unique<Context>()) {
  ctx_->md = EVP_MD_CTX_new();
  if (ctx_->md == nullptr || EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("sha256: EVP_DigestInit_ex failed");
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_->md); }

void Sha256::Update(std::string_view bytes) {
  if (!bytes.empty() && EVP_DigestUpdate(ctx_->md, bytes.data(), bytes.size()) != 1) {
    throw std::runtime_error("sha256: EVP_DigestUpdate failed");
  }
}

std::string Sha256::HexDigest() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(ctx_->md, digest, &length) != 1 ||
      EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("sha256: EVP_DigestFinal_ex failed");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * length);
  for (unsigned int i = 0; i < length; ++i) {
    hex.push_back(kHex[digest[i] >> 4]);
    hex.push_back(kHex[digest[i] & 15]);
  }
  return hex;
}

std::string Sha256Hex(std::string_view bytes) {
  Sha256 h;
  h.Update(bytes);
  return h.HexDigest();
}

absl::StatusOr<std::string> Sha256File(const std::string &path, long long limit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    return err == ENOENT ? absl::NotFoundError(absl::StrCat(path, ": no such file"))
                         : absl::InternalError(absl::StrCat(path, ": ", std::strerror(err)));
  }
  Sha256 h;
  std::vector<char> buffer(1 << 20);
  long long left = limit;
  while (limit < 0 || left > 0) {
    const std::streamsize want =
        limit < 0 ? static_cast<std::streamsize>(buffer.size())
                  : static_cast<std::streamsize>(std::min<long long>(left, static_cast<long long>(buffer.size())));
    in.read(buffer.data(), want);
    const std::streamsize got = in.gcount();
    h.Update(std::string_view(buffer.data(), static_cast<size_t>(got)));
    if (limit >= 0) left -= got;
    if (got < want) break;
  }
  if (in.bad()) return absl::InternalError(absl::StrCat(path, ": read failed"));
  if (limit >= 0 && left > 0) {
    return absl::OutOfRangeError(absl::StrCat(path, ": shorter than ", limit, " bytes"));
  }
  return h.HexDigest();
}

bool IsSha256Hex(std::string_view text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace trainyard
