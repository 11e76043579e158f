// The engine's one exception for a problem in the job's own inputs — its dataset files,
// the weights it starts from, its spec — that no retry can fix. trainyard-rank exits
// with kRankExitInputError (common/events/rank_exit.h) on it, so the controller fails
// the job at once rather than restarting it (docs/data.md, "Errors"). The message
// names the key, the file and, where there is one, the byte offset.
// Header-only, torch-free.
#pragma once

#include <stdexcept>
#include <string>

namespace trainyard::engine {

class InputError : public std::invalid_argument {
 public:
  explicit InputError(const std::string& what) : std::invalid_argument(what) {}
};

}  // namespace trainyard::engine
