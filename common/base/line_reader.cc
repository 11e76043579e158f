#include "common/base/line_reader.h"

#include <errno.h>
#include <unistd.h>

namespace trainyard {

void ReadLines(int fd, const std::function<void(std::string)> &on_line, size_t max_line) {
  std::string line;
  bool skipping = false;  // inside the remainder of an over-long line
  char buf[65536];
  auto deliver = [&] {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    on_line(std::move(line));
    line.clear();
  };
  while (true) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      char c = buf[i];
      if (c == '\n') {
        if (!skipping) deliver();
        skipping = false;
        line.clear();
      } else if (!skipping) {
        line.push_back(c);
        if (line.size() >= max_line) {
          deliver();
          skipping = true;
        }
      }
    }
  }
  if (!line.empty() && !skipping) deliver();
  close(fd);
}

}  // namespace trainyard
