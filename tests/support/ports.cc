#include "tests/support/ports.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <stdexcept>

namespace trainyard::testing {
namespace {

constexpr int kFirstPort = 10000;
constexpr int kBlock = 40;

// The lowest ephemeral port of this kernel; Linux's default where the file is unreadable.
int EphemeralLow() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  if (in >> low && low > kFirstPort) return low;
  return 32768;
}

}  // namespace

int RendezvousPortBase(int count) {
  if (count < 1 || count > kBlock) throw std::invalid_argument("RendezvousPortBase: count must be 1..40");
  const int blocks = std::max(1, (EphemeralLow() - kFirstPort) / kBlock);
  return kFirstPort + static_cast<int>(getpid() % blocks) * kBlock;
}

}  // namespace trainyard::testing
