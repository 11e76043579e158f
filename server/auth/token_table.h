// The controller's bearer tokens: who a presented token is (role and owner).
//
// A token file holds one line per token, `<sha256 hex of the token> <role> <owner>`
// (docs/security.md, "Authorization"). Only hashes are stored, so the file is no
// secret; but whoever can write it can make themselves admin, so a world-writable file
// is refused. Every problem is an error naming the file and line; a message never
// holds a whole hash (at most a few characters of one) nor more than ~100 characters of
// any field, and a presented token never appears in any message.
//
// Lookup hashes the presented token and compares the digest with every entry using
// CRYPTO_memcmp, never stopping at the first match, so its time does not depend on
// which entry (if any) matches or on how much of a digest does.
//
// Thread contract: immutable after Parse/ReadFile; Lookup is safe from any thread.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace trainyard {

// viewer: reads every job and the fleet, changes nothing. submitter: submits jobs, and
// sees and changes only its own. admin: everything.
enum class Role { kViewer, kSubmitter, kAdmin };

// "viewer", "submitter", "admin".
const char* RoleName(Role role);

// Who is calling: the role and owner of the token presented.
struct Caller {
  Role role = Role::kViewer;
  std::string owner;
};

class TokenTable {
 public:
  static constexpr size_t kMaxFileBytes = 1 << 20;
  static constexpr size_t kMaxOwnerLength = 64;

  // Parses the contents of a token file; `origin` (its path) prefixes every message as
  // "origin:LINE: ...". INVALID_ARGUMENT for any bad line, for text past kMaxFileBytes,
  // and for a file without a single token.
  static absl::StatusOr<TokenTable> Parse(std::string_view text, const std::string& origin);

  // Reads and parses the file at `path`: NOT_FOUND when it does not exist,
  // PERMISSION_DENIED when it cannot be read, FAILED_PRECONDITION when it is not a
  // regular file or is world-writable, INVALID_ARGUMENT when it is larger than
  // kMaxFileBytes or a line is bad.
  static absl::StatusOr<TokenTable> ReadFile(const std::string& path);

  // The caller whose token hashes to an entry, or nullopt. Compares against every
  // entry in constant time (see above).
  std::optional<Caller> Lookup(std::string_view token) const;

  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string hash_hex;  // 64 lowercase hex digits
    Caller caller;
  };

  std::vector<Entry> entries_;
};

// Whether `owner` is 1..kMaxOwnerLength characters of [A-Za-z0-9._@-].
bool IsValidOwner(std::string_view owner);

}  // namespace trainyard
