// A c10d process group over some ranks: the world group rendezvouses through a c10d
// TCPStore hosted by rank 0 at master_addr:master_port; sub-groups (TP, DP, EP, ...)
// are carved from it with NewSubgroup, each on its own PrefixStore of that TCPStore.
// A group has one device: on CPU every process group is a ProcessGroupGloo bound to
// gloo_host; on CUDA it is a ProcessGroupNCCL, and one GPU serves one rank (NCCL
// refuses two ranks of a communicator on one GPU). Every collective checks that its
// tensors live on the group's device, even in a group of size 1, so a call site that
// would hand NCCL a host tensor fails on a single-GPU run too. A group of size 1 has
// no store and no c10d group, and every collective is the identity, so single-rank
// runs need no free port.
// Flight recorder (common/flight): once AttachRecorder gave the world group a ring, it
// and every sub-group created from it afterwards record each collective of a group of
// more than one rank in that ring (enter: a handful of atomic stores; exit: three), with
// a 1-based per-group seq and the op ("allreduce", "alltoall"). Without a ring nothing
// is recorded. While a LibTorch profiler (or any RecordFunction observer) runs, each
// collective is also a range named CollectiveRangeName(group, op, seq). Point-to-point
// ops (SendAsync/RecvAsync, for pipeline stages) are recorded as "send"/"recv" with the
// peer's world rank, the microbatch and a 1-based seq per (group, peer, direction),
// leave the group's collective seq alone, and are ranges named P2PRangeName(...).
// Not thread-safe: one training thread issues collectives, in the same order on every
// member (c10d requirement).
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/flight/flight_ring.h"
#include "worker/engine/base/torch_compat.h"

namespace trainyard::engine {

struct RendezvousOptions {
  int rank = 0;
  int world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string gloo_host;   // empty: master_addr
  double timeout_s = 300;  // joining the TCPStore and forming the groups
  // Gloo/NCCL's own timeout for each collective; 0: timeout_s. trainyard-rank sets it
  // to parallelism.collective_timeout_s + kBackstopS so its watchdog reports first.
  double collective_timeout_s = 0;
  c10::Device device = c10::Device(c10::DeviceType::CPU);  // CPU: Gloo; CUDA: NCCL
};

class CollectiveGroup {
 public:
  // Blocks until every rank has joined or the timeout passes; throws
  // std::runtime_error naming the address on failure.
  static std::unique_ptr<CollectiveGroup> Connect(const RendezvousOptions& options);

  // A world group over an existing store (tests use an in-process c10d::HashStore).
  // Throws std::invalid_argument for a CUDA device when this build or machine has no
  // CUDA (compat::CudaUnavailableReason).
  static std::unique_ptr<CollectiveGroup> OverStore(compat::StorePtr store, int rank, int world_size,
                                                    std::string gloo_host, std::chrono::milliseconds timeout,
                                                    c10::Device device = c10::Device(c10::DeviceType::CPU));

  // The group of `ranks` (world ranks, ascending), named `name` (unique per world).
  // Only members may call it; members must create their groups in the same global
  // order, which makes the blocking Gloo rendezvous deadlock-free.
  std::unique_ptr<CollectiveGroup> NewSubgroup(const std::string& name, const std::vector<int>& ranks) const;

  // Records this group's collectives (registered as `name`) in `ring`, which must
  // outlive the group and every sub-group made from it later; those register under
  // their own names. Call before the first collective; `ring` may be null (off).
  void AttachRecorder(flight::FlightRing* ring, const std::string& name);

  // The group's name in the recorder ("world", "dp0", ...; "" before AttachRecorder).
  const std::string& name() const { return name_; }
  // Collectives issued so far on this group (the seq of the last one).
  uint64_t seq() const { return seq_; }

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  // Where every tensor handed to a collective of this group must live.
  const c10::Device& device() const { return device_; }
  // "gloo" or "nccl" (what a group of this device uses when it has more than one rank).
  const char* backend_name() const { return device_.is_cuda() ? "nccl" : "gloo"; }

  // In-place sum across ranks (blocking). `tensor` must be on device().
  void AllReduceSum(torch::Tensor& tensor);

  // A collective started by AllReduceSumAsync, AllGatherAsync or ReduceScatterSumAsync,
  // or a send/recv started by SendAsync/RecvAsync, and not yet waited for.
  // Wait() blocks until it has ended (rethrowing its error; a no-op when nothing was
  // started). The flight recorder and the profiler see the op around Wait only:
  // the ring holds one in-flight entry, written by the training thread, and Wait is where
  // that thread stands in it (a hang shows as a rank stuck there, with the group and
  // seq). Every rank must wait for its pending collectives of a group in the order it
  // started them; pending sends/recvs may be waited for in any order.
  class Pending {
   public:
    Pending() = default;
    void Wait();

   private:
    friend class CollectiveGroup;
    CollectiveGroup* group_ = nullptr;
    const char* op_ = "";
    compat::WorkPtr work_;
    torch::Tensor tensor_;
    int peer_ = -1;  // send/recv: the peer's world rank
    int64_t microbatch_ = -1;
    uint64_t p2p_seq_ = 0;
  };
  // Starts an in-place sum of `tensor` (on device(), fp32 or another dtype the backend
  // reduces) and returns at once; `tensor` must stay untouched until Wait. Every rank
  // must start the group's collectives in the same order. A group of one starts nothing.
  Pending AllReduceSumAsync(torch::Tensor& tensor);

  // Starts gathering every member's `shard` (contiguous, the same shape on every member)
  // into `out` (contiguous, world_size()·shard.size(0) rows of the same shape and dtype
  // on device()): member j's rows land at [j·rows, (j+1)·rows). Returns at once; `shard`
  // and `out` must stay untouched until Wait. A group of one copies `shard` into `out`
  // and starts nothing.
  Pending AllGatherAsync(const torch::Tensor& shard, torch::Tensor& out);

  // Starts the sum over members of `input` (flat, world_size() equal blocks, on
  // device()) of which member j keeps block j, in `out` (flat, one block, same dtype).
  // Returns at once; both must stay untouched until Wait. A group of one copies.
  Pending ReduceScatterSumAsync(const torch::Tensor& input, torch::Tensor& out);

  // Point-to-point between pipeline stages. SendAsync starts sending `tensor` to group
  // rank `peer`; RecvAsync starts receiving into `tensor`, which must have the shape
  // and dtype the peer sends (an executor agrees shapes first by sending a small int64
  // shape tensor through these same calls). Both return at once; the tensor must stay
  // untouched until Wait.
  // Pairing contract: the k-th SendAsync from A to B on this group pairs with the k-th
  // RecvAsync on B from A. The c10d tag is that k (mod 2^31), so Gloo, which pairs by
  // (peer, tag), pairs exactly as NCCL, which ignores tags and pairs in posting order:
  // each side must post its sends to (recvs from) a peer in the order the peer posts
  // the matching recvs (sends). `microbatch` (>= 0) is a label only, for the flight
  // recorder and the profiler; the two sides should give the same one.
  // Sends to a peer and recvs from it are two independent sequences. Gloo runs posted
  // ops concurrently, so two ranks may send to each other at once (1F1B's steady
  // state). NCCL runs one pair's ops in posting order on one stream, where a send may
  // wait for its recv: when two ranks exchange both ways, the lower group rank posts
  // its send first and the higher its recv first.
  // Throws std::invalid_argument for a peer outside [0, world_size()) or equal to
  // rank(), a negative microbatch, or a tensor that is not contiguous or not on
  // device(); a group of one rank therefore refuses every peer.
  Pending SendAsync(const torch::Tensor& tensor, int peer, int64_t microbatch);
  Pending RecvAsync(torch::Tensor& tensor, int peer, int64_t microbatch);

  // The world rank of group rank `member`.
  int WorldRank(int member) const { return members_.at(member); }

  // Row all-to-all: rows [sum(in_splits[<j]), +in_splits[j]) of `input` go to member j;
  // returns the rows received, ordered by source member. Blocking. `input` must be on
  // device().
  torch::Tensor AllToAll(const torch::Tensor& input, const std::vector<int64_t>& out_splits,
                         const std::vector<int64_t>& in_splits);

 private:
  CollectiveGroup(int rank, int world_size, c10::Device device)
      : rank_(rank),
        world_size_(world_size),
        device_(device),
        members_(world_size),
        sends_to_(world_size),
        recvs_from_(world_size) {
    for (int i = 0; i < world_size; ++i) members_[i] = i;
  }

  // The c10d group for this device (Gloo or NCCL) over `store`.
  compat::BackendPtr MakeBackend(const compat::StorePtr& store, int rank, int size) const;
  void CheckDevice(const torch::Tensor& tensor, const char* op) const;
  void CheckP2P(const torch::Tensor& tensor, int peer, int64_t microbatch, const char* op) const;
  Pending StartP2P(torch::Tensor tensor, int peer, int64_t microbatch, bool send);
  friend class CollectiveScope;

  int rank_;
  int world_size_;
  c10::Device device_;
  compat::StorePtr store_;
  compat::BackendPtr group_;
  std::string gloo_host_;
  std::chrono::milliseconds timeout_{0};
  flight::FlightRing* ring_ = nullptr;
  int ring_group_ = -1;  // index in ring_'s group table; -1: not recorded
  std::string name_;
  uint64_t seq_ = 0;
  std::vector<int> members_;          // world rank of each group rank
  std::vector<uint64_t> sends_to_;    // per group rank: sends posted to it
  std::vector<uint64_t> recvs_from_;  // per group rank: recvs posted from it
};

// "collective:dp0:allreduce#12": the profiler range of a collective.
std::string CollectiveRangeName(const std::string& group, const char* op, uint64_t seq);
// "p2p:pp0:send:rank3:mb2#5": the profiler range of a send/recv (peer = world rank,
// seq = the pair's p2p seq).
std::string P2PRangeName(const std::string& group, const char* op, int peer, int64_t microbatch, uint64_t seq);

}  // namespace trainyard::engine
