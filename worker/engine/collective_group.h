// A c10d process group over some ranks: the world group rendezvouses through a c10d
// TCPStore hosted by rank 0 at master_addr:master_port; sub-groups (TP, DP, EP, ...)
// are carved from it with NewSubgroup, each on its own PrefixStore of that TCPStore.
// Every process group is a ProcessGroupGloo on a device bound to gloo_host. A group of
// size 1 has no store and no c10d group, and every collective is the identity, so
// single-rank runs need no free port.
// Not thread-safe: one training thread issues collectives, in the same order on every
// member (c10d requirement).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "worker/engine/torch_compat.h"

namespace trainyard::engine {

struct RendezvousOptions {
  int rank = 0;
  int world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string gloo_host;  // empty: master_addr
  double timeout_s = 300;
};

class CollectiveGroup {
 public:
  // Blocks until every rank has joined or the timeout passes; throws
  // std::runtime_error naming the address on failure.
  static std::unique_ptr<CollectiveGroup> Connect(const RendezvousOptions& options);

  // A world group over an existing store (tests use an in-process c10d::HashStore).
  static std::unique_ptr<CollectiveGroup> OverStore(compat::StorePtr store, int rank,
                                                    int world_size, std::string gloo_host,
                                                    std::chrono::milliseconds timeout);

  // The group of `ranks` (world ranks, ascending), named `name` (unique per world).
  // Only members may call it; members must create their groups in the same global
  // order, which makes the blocking Gloo rendezvous deadlock-free.
  std::unique_ptr<CollectiveGroup> NewSubgroup(const std::string& name,
                                               const std::vector<int>& ranks) const;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

  // In-place sum across ranks (blocking).
  void AllReduceSum(torch::Tensor& tensor);

  // Row all-to-all: rows [sum(in_splits[<j]), +in_splits[j]) of `input` go to member j;
  // returns the rows received, ordered by source member. Blocking.
  torch::Tensor AllToAll(const torch::Tensor& input, const std::vector<int64_t>& out_splits,
                         const std::vector<int64_t>& in_splits);

 private:
  CollectiveGroup(int rank, int world_size) : rank_(rank), world_size_(world_size) {}

  int rank_;
  int world_size_;
  compat::StorePtr store_;
  compat::GlooGroupPtr group_;
  std::string gloo_host_;
  std::chrono::milliseconds timeout_{0};
};

}  // namespace trainyard::engine
