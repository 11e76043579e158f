#include "worker/engine/collective_group.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <stdexcept>

namespace trainyard::engine {

std::unique_ptr<CollectiveGroup> CollectiveGroup::Connect(const RendezvousOptions& o) {
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    throw std::invalid_argument("rendezvous: rank " + std::to_string(o.rank) +
                                " is outside world size " + std::to_string(o.world_size));
  }
  if (o.world_size == 1) return std::unique_ptr<CollectiveGroup>(new CollectiveGroup(0, 1));
  if (o.master_port <= 0 || o.master_port > 65535) {
    throw std::invalid_argument("rendezvous: --master-port " + std::to_string(o.master_port) +
                                " must be in [1, 65535]");
  }
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  const std::string where = o.master_addr + ":" + std::to_string(o.master_port);
  compat::StorePtr store;
  try {
    store = compat::MakeTcpStore(o.master_addr, o.master_port, o.rank == 0, o.world_size, timeout);
  } catch (const std::exception& e) {
    throw std::runtime_error("rendezvous: TCPStore at " + where + " (rank " +
                             std::to_string(o.rank) + "): " + e.what());
  }
  const std::string host = o.gloo_host.empty() ? o.master_addr : o.gloo_host;
  try {
    return OverStore(store, o.rank, o.world_size, host, timeout);
  } catch (const std::exception& e) {
    throw std::runtime_error("rendezvous: Gloo group via " + where + " on host " + host + ": " + e.what());
  }
}

std::unique_ptr<CollectiveGroup> CollectiveGroup::OverStore(compat::StorePtr store, int rank,
                                                            int world_size, std::string gloo_host,
                                                            std::chrono::milliseconds timeout) {
  std::unique_ptr<CollectiveGroup> g(new CollectiveGroup(rank, world_size));
  g->store_ = std::move(store);
  g->gloo_host_ = std::move(gloo_host);
  g->timeout_ = timeout;
  if (world_size > 1) {
    // The world group keeps its keys apart from the sub-groups' prefixes too.
    g->group_ = compat::MakeGlooGroup(compat::MakePrefixStore("world", g->store_), rank,
                                      world_size, g->gloo_host_, timeout);
  }
  return g;
}

std::unique_ptr<CollectiveGroup> CollectiveGroup::NewSubgroup(const std::string& name,
                                                              const std::vector<int>& ranks) const {
  auto it = std::find(ranks.begin(), ranks.end(), rank_);
  if (it == ranks.end()) {
    throw std::logic_error("group " + name + ": rank " + std::to_string(rank_) + " is not a member");
  }
  const int sub_rank = static_cast<int>(it - ranks.begin());
  const int sub_size = static_cast<int>(ranks.size());
  std::unique_ptr<CollectiveGroup> g(new CollectiveGroup(sub_rank, sub_size));
  if (sub_size == 1) return g;
  g->store_ = compat::MakePrefixStore(name, store_);
  g->gloo_host_ = gloo_host_;
  g->timeout_ = timeout_;
  try {
    g->group_ = compat::MakeGlooGroup(g->store_, sub_rank, sub_size, gloo_host_, timeout_);
  } catch (const std::exception& e) {
    throw std::runtime_error("rendezvous: Gloo sub-group " + name + ": " + e.what());
  }
  return g;
}

void CollectiveGroup::AllReduceSum(torch::Tensor& tensor) {
  if (world_size_ == 1) return;
  compat::AllReduceSum(*group_, tensor);
}

torch::Tensor CollectiveGroup::AllToAll(const torch::Tensor& input,
                                        const std::vector<int64_t>& out_splits,
                                        const std::vector<int64_t>& in_splits) {
  TORCH_CHECK(static_cast<int>(out_splits.size()) == world_size_ &&
                  static_cast<int>(in_splits.size()) == world_size_,
              "AllToAll: need ", world_size_, " splits, got ", in_splits.size(), "/", out_splits.size());
  const int64_t in_rows = std::accumulate(in_splits.begin(), in_splits.end(), int64_t{0});
  TORCH_CHECK(in_rows == input.size(0), "AllToAll: splits sum to ", in_rows, " but input has ",
              input.size(0), " rows");
  if (world_size_ == 1) return input.clone();
  const int64_t out_rows = std::accumulate(out_splits.begin(), out_splits.end(), int64_t{0});
  std::vector<int64_t> shape = input.sizes().vec();
  shape[0] = out_rows;
  auto in = input.contiguous();
  auto out = torch::empty(shape, input.options());
  compat::AllToAll(*group_, out, in, out_splits, in_splits);
  return out;
}

}  // namespace trainyard::engine
