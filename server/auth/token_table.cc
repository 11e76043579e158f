#include "server/auth/token_table.h"
#include "common/base/text.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/base/sha256.h"
#include "common/spec/rules.h"
#include "common/spec/spec_error.h"

namespace trainyard {
namespace {

constexpr size_t kHashLength = 64;

bool IsBlank(char c) { return c == ' ' || c == '\t'; }

// The fields of `line`, separated by runs of spaces and tabs.
std::vector<std::string_view> Fields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && IsBlank(line[i])) ++i;
    const size_t start = i;
    while (i < line.size() && !IsBlank(line[i])) ++i;
    if (i > start) fields.push_back(line.substr(start, i - start));
  }
  return fields;
}

std::optional<Role> ParseRole(std::string_view name) {
  if (name == "viewer") return Role::kViewer;
  if (name == "submitter") return Role::kSubmitter;
  if (name == "admin") return Role::kAdmin;
  return std::nullopt;
}

// Why `hash` is not 64 lowercase hex digits, or "". Shows at most one character of it.
std::string HashProblem(std::string_view hash) {
  if (hash.size() != kHashLength) {
    return absl::StrCat("the token hash must be the sha256 of the token as ", kHashLength,
                        " lowercase hex digits; got ", hash.size(), " characters");
  }
  for (size_t i = 0; i < hash.size(); ++i) {
    const char c = hash[i];
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) continue;
    return absl::StrCat("the token hash must be lowercase hex digits; character ", i + 1, " is ",
                        Quoted(hash.substr(i, 1)));
  }
  return "";
}

// A line problem as "origin:line: message".
absl::Status LineError(const std::string& origin, size_t line, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(origin, ":", line, ": ", message));
}

}  // namespace

const char* RoleName(Role role) {
  switch (role) {
    case Role::kViewer:
      return "viewer";
    case Role::kSubmitter:
      return "submitter";
    case Role::kAdmin:
      return "admin";
  }
  return "unknown";
}

bool IsValidOwner(std::string_view owner) {
  if (owner.empty() || owner.size() > TokenTable::kMaxOwnerLength) return false;
  for (char c : owner) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '@' || c == '-';
    if (!ok) return false;
  }
  return true;
}

absl::StatusOr<TokenTable> TokenTable::Parse(std::string_view text, const std::string& origin) {
  if (text.size() > kMaxFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": is more than ", kMaxFileBytes,
                                                   " bytes; a token file holds at most that"));
  }
  TokenTable table;
  absl::flat_hash_map<std::string, size_t> line_of_hash;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    ++line_no;
    const size_t end = std::min(text.find('\n', pos), text.size());
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (!IsUtf8(line)) return LineError(origin, line_no, "is not valid UTF-8");
    if (!line.empty() && line.back() == '\r') {
      return LineError(origin, line_no, "ends in a carriage return (CRLF); use LF line endings");
    }
    for (size_t i = 0; i < line.size(); ++i) {
      const unsigned char c = static_cast<unsigned char>(line[i]);
      if ((c < 0x20 && c != '\t') || c == 0x7f) {
        return LineError(origin, line_no,
                         absl::StrCat("control character ", Quoted(line.substr(i, 1)),
                                      " at column ", i + 1));
      }
    }
    const std::vector<std::string_view> fields = Fields(line);
    if (fields.empty() || fields[0][0] == '#') continue;  // blank line or comment
    if (fields.size() != 3) {
      return LineError(origin, line_no,
                       absl::StrCat("expected 3 fields `<sha256 hex of the token> <role> <owner>`, got ",
                                    fields.size(), " (comments are whole lines starting with #)"));
    }
    if (std::string p = HashProblem(fields[0]); !p.empty()) return LineError(origin, line_no, p);
    const std::optional<Role> role = ParseRole(fields[1]);
    if (!role) {
      return LineError(origin, line_no,
                       absl::StrCat("unknown role ", Quoted(fields[1]),
                                    "; the role is one of viewer, submitter, admin"));
    }
    if (!IsValidOwner(fields[2])) {
      return LineError(origin, line_no,
                       absl::StrCat("owner ", Quoted(fields[2]), " must be 1 to ", kMaxOwnerLength,
                                    " characters of [A-Za-z0-9._@-]"));
    }
    std::string hash(fields[0]);
    if (auto [it, inserted] = line_of_hash.emplace(hash, line_no); !inserted) {
      return LineError(origin, line_no,
                       absl::StrCat("the same token hash as line ", it->second, "; each token is listed once"));
    }
    table.entries_.push_back(Entry{std::move(hash), Caller{*role, std::string(fields[2])}});
  }
  if (table.entries_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": holds no tokens, so nobody could call the controller"));
  }
  return table;
}

absl::StatusOr<TokenTable> TokenTable::ReadFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such token file"));
    if (err == EACCES) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot read the token file"));
    return absl::UnavailableError(absl::StrCat(path, ": ", std::strerror(err)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::UnavailableError(absl::StrCat(path, ": ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat(path, ": the token file is not a regular file"));
  }
  if ((st.st_mode & S_IWOTH) != 0) {
    ::close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": the token file is world-writable, so anyone could make themselves admin; "
                           "chmod o-w it"));
  }
  // Read one byte past the cap, so a file that grows while being read is refused too.
  std::string text;
  char buffer[64 << 10];
  while (text.size() <= kMaxFileBytes) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return absl::UnavailableError(absl::StrCat(path, ": ", std::strerror(err)));
    }
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return Parse(text, path);
}

std::optional<Caller> TokenTable::Lookup(std::string_view token) const {
  const std::string digest = Sha256Hex(token);
  // Every entry is compared; the match (hashes are unique, so at most one) is picked
  // without leaving the loop early.
  size_t found = entries_.size();
  for (size_t i = 0; i < entries_.size(); ++i) {
    const int differs = CRYPTO_memcmp(digest.data(), entries_[i].hash_hex.data(), kHashLength);
    found = differs == 0 ? i : found;
  }
  if (found == entries_.size()) return std::nullopt;
  return entries_[found].caller;
}

}  // namespace trainyard
