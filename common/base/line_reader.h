#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace trainyard {

// Reads `fd` until EOF, calling `on_line` for each line without its "\n" (or
// "\r\n"). A line longer than `max_line` is cut there, the rest of it skipped.
// A last line without a newline is delivered too. Closes `fd`. Blocking; call
// from a thread.
void ReadLines(int fd, const std::function<void(std::string)> &on_line, size_t max_line = 1 << 20);

}  // namespace trainyard
