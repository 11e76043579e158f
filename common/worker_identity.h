// The rules for what a worker calls itself, shared by the worker (checked at start-up,
// so a bad --name fails at once instead of being refused at every reconnect) and the
// controller (request_validation, for any client of WorkerService).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace trainyard {

inline constexpr std::size_t kMaxWorkerNameBytes = 128;
inline constexpr std::size_t kMaxWorkerAddressBytes = 255;  // a DNS name

// Why `name` is not a worker name (1-128 printable ASCII bytes, no spaces, no '/' or
// '\\', not "." or ".."), or "".
std::string WorkerNameProblem(std::string_view name);
// Why `address` is not a worker address (at most 255 printable ASCII bytes, no
// spaces; empty is allowed), or "".
std::string WorkerAddressProblem(std::string_view address);

}  // namespace trainyard
