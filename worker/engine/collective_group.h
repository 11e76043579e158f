// The data-parallel process group: rendezvous through a c10d TCPStore hosted by rank 0
// at master_addr:master_port, then a c10d ProcessGroupGloo on a device bound to
// gloo_host. With world_size 1 there is no store and no group, and every collective is
// the identity, so single-rank runs need no free port.
// Not thread-safe: one training thread issues collectives, in the same order on every
// rank (c10d requirement).
#pragma once

#include <memory>
#include <string>

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

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

  // In-place sum across ranks (blocking).
  void AllReduceSum(torch::Tensor& tensor);

 private:
  CollectiveGroup(int rank, int world_size) : rank_(rank), world_size_(world_size) {}

  int rank_;
  int world_size_;
  compat::StorePtr store_;
  compat::GlooGroupPtr group_;
};

}  // namespace trainyard::engine
