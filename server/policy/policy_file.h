// The controller's --policy-file (re-read on SIGHUP): quotas, groups and the fair-share
// half-life, in TOML:
//
//   half_life_hours = 24.0   # fair-share usage decay, > 0, at most 8760
//
//   [defaults]               # owners the file does not list (optional)
//   slots = 0                # 0 or absent: no limit
//   gpus = 0
//
//   [[group]]
//   name = "research"
//   slots = 16
//   gpus = 8
//   weight = 2.0             # > 0 and finite, at most 1000000; default 1
//
//   [[owner]]
//   name = "alice"
//   group = "research"       # optional; must name a [[group]] of the file
//   slots = 8                # a listed owner's absent limits are 0 (no limit), not [defaults]
//   gpus = 4
//
// The file is written by an operator but read by the controller, so every problem is
// reported, never tolerated: INVALID_ARGUMENT "FILE:LINE: ..." for the earliest problem
// in the file (with a count of the others), e.g.
//   policy.toml:7: unknown key 'wieght' in [[group]] (allowed: name, slots, gpus, weight)
//   policy.toml:12: duplicate owner 'alice' (first at line 8)
// Keys and values from the file are quoted (common/base/text.h), never echoed raw.
//
// Thread-safe (stateless). ParsePolicyFile is pure; LoadPolicyFile reads the file.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "server/policy/sharing_policy.h"

namespace trainyard {

inline constexpr std::size_t kMaxPolicyFileBytes = 1 << 20;
inline constexpr int kMaxPolicyLimit = 1000000;          // slots and gpus: 0 ..this
inline constexpr double kMaxPolicyHalfLifeHours = 8760;  // one year
inline constexpr double kMaxPolicyWeight = 1000000;
// Owner and group names: 1 ..this many bytes of printable ASCII without spaces (owners
// are auth owners, server/auth/token_table.h: [A-Za-z0-9._@-], at most 64).
inline constexpr std::size_t kMaxPolicyNameBytes = 64;

// `text` as a policy; `file_name` prefixes every error.
absl::StatusOr<SharingPolicy> ParsePolicyFile(std::string_view text, const std::string& file_name);

// The file at `path` (read with a kMaxPolicyFileBytes cap) as a policy. Errors reading
// it keep ReadFile's code and say "policy file 'PATH': no such file".
absl::StatusOr<SharingPolicy> LoadPolicyFile(const std::string& path);

}  // namespace trainyard
