// What every fuzz target asserts beyond "no crash, no sanitizer report": an invariant
// that fails prints its input's problem and aborts, so libFuzzer saves the input as a
// crash like any other finding.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace trainyard::fuzz {

// Errors quote at most ~100 characters of what was sent (spec::Quote): a message this
// long echoes the input.
inline constexpr std::size_t kMaxErrorBytes = 1024;

[[noreturn]] inline void Violated(const std::string& what) {
  std::fprintf(stderr, "fuzz invariant violated: %s\n", what.substr(0, 4000).c_str());
  std::abort();
}

inline void CheckErrorSize(std::string_view where, std::string_view message) {
  if (message.size() > kMaxErrorBytes) {
    Violated(std::string(where) + ": error of " + std::to_string(message.size()) +
             " bytes: " + std::string(message.substr(0, 300)));
  }
}

}  // namespace trainyard::fuzz
