#pragma once

// The tests' one way to read a file and to wait for something: every folder of tests/
// uses these instead of a local copy.

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

namespace trainyard::testing {

// The whole file (up to 1 GiB) through the base library's ReadFile; "" when it is missing
// or unreadable, which the asserting test then reports as a mismatch.
std::string ReadFileOrEmpty(const std::filesystem::path& path);

// `n` deterministic bytes that do not repeat in any short period (xorshift32 from
// `seed`): upload and digest tests' payloads.
std::string PseudoRandomBytes(std::size_t n, int seed = 1);

// Calls `done` every `poll` until it returns true or `timeout` has passed; returns its
// last answer. For waiting on another process (a file, a log line, a port): an
// in-process fake signals a condition variable instead.
template <typename Pred>
bool WaitUntil(Pred&& done, std::chrono::milliseconds timeout,
               std::chrono::milliseconds poll = std::chrono::milliseconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return done();
    std::this_thread::sleep_for(poll);
  }
  return true;
}

}  // namespace trainyard::testing
