#include "worker/engine/collective_group.h"

#include <chrono>
#include <stdexcept>

namespace trainyard::engine {

std::unique_ptr<CollectiveGroup> CollectiveGroup::Connect(const RendezvousOptions& o) {
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    throw std::invalid_argument("rendezvous: rank " + std::to_string(o.rank) +
                                " is outside world size " + std::to_string(o.world_size));
  }
  std::unique_ptr<CollectiveGroup> g(new CollectiveGroup(o.rank, o.world_size));
  if (o.world_size == 1) return g;
  if (o.master_port <= 0 || o.master_port > 65535) {
    throw std::invalid_argument("rendezvous: --master-port " + std::to_string(o.master_port) +
                                " must be in [1, 65535]");
  }
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  const std::string where = o.master_addr + ":" + std::to_string(o.master_port);
  try {
    g->store_ = compat::MakeTcpStore(o.master_addr, o.master_port, o.rank == 0, o.world_size, timeout);
  } catch (const std::exception& e) {
    throw std::runtime_error("rendezvous: TCPStore at " + where + " (rank " +
                             std::to_string(o.rank) + "): " + e.what());
  }
  const std::string host = o.gloo_host.empty() ? o.master_addr : o.gloo_host;
  try {
    g->group_ = compat::MakeGlooGroup(g->store_, o.rank, o.world_size, host, timeout);
  } catch (const std::exception& e) {
    throw std::runtime_error("rendezvous: Gloo group via " + where + " on host " + host + ": " + e.what());
  }
  return g;
}

void CollectiveGroup::AllReduceSum(torch::Tensor& tensor) {
  if (world_size_ == 1) return;
  compat::AllReduceSum(*group_, tensor);
}

}  // namespace trainyard::engine
