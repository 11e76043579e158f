#include "worker/engine/parallel/mesh/collective_group.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <sstream>
#include <stdexcept>

namespace trainyard::engine {

std::string CollectiveRangeName(const std::string& group, const char* op, uint64_t seq) {
  return "collective:" + group + ":" + op + "#" + std::to_string(seq);
}

std::string P2PRangeName(const std::string& group, const char* op, int peer, int64_t microbatch, uint64_t seq) {
  return "p2p:" + group + ":" + op + ":rank" + std::to_string(peer) + ":mb" + std::to_string(microbatch) + "#" +
         std::to_string(seq);
}

// One collective of a group of more than one rank: counts its seq, records it in the
// flight ring and, while a RecordFunction observer runs, is a named profiler range. A
// send/recv (peer >= 0) has its seq already and leaves the group's collective seq alone.
class CollectiveScope {
 public:
  CollectiveScope(CollectiveGroup& g, const char* op, int64_t numel) : g_(g), range_(at::RecordScope::USER_SCOPE) {
    const uint64_t seq = ++g.seq_;
    if (range_.isActive()) range_.before(CollectiveRangeName(g.name_.empty() ? "group" : g.name_, op, seq));
    if (g.ring_ != nullptr && g.ring_group_ >= 0) id_ = g.ring_->Enter(g.ring_group_, op, numel);
  }
  CollectiveScope(CollectiveGroup& g, const char* op, int64_t numel, int peer, int64_t microbatch, uint64_t p2p_seq)
      : g_(g), range_(at::RecordScope::USER_SCOPE) {
    if (range_.isActive()) {
      range_.before(P2PRangeName(g.name_.empty() ? "group" : g.name_, op, peer, microbatch, p2p_seq));
    }
    if (g.ring_ != nullptr && g.ring_group_ >= 0) {
      id_ = g.ring_->EnterP2P(g.ring_group_, op, numel, peer, microbatch, p2p_seq);
    }
  }
  ~CollectiveScope() {
    if (id_ != 0) g_.ring_->Exit(g_.ring_group_, id_);
  }
  CollectiveScope(const CollectiveScope&) = delete;
  CollectiveScope& operator=(const CollectiveScope&) = delete;

 private:
  CollectiveGroup& g_;
  at::RecordFunction range_;
  uint64_t id_ = 0;
};

std::unique_ptr<CollectiveGroup> CollectiveGroup::Connect(const RendezvousOptions& o) {
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    throw std::invalid_argument("rendezvous: rank " + std::to_string(o.rank) + " is outside world size " +
                                std::to_string(o.world_size));
  }
  if (o.device.is_cuda()) {
    const std::string why = compat::CudaUnavailableReason();
    if (!why.empty()) throw std::invalid_argument("rendezvous: device " + o.device.str() + ": " + why);
  }
  if (o.world_size == 1) return std::unique_ptr<CollectiveGroup>(new CollectiveGroup(0, 1, o.device));
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
    throw std::runtime_error("rendezvous: TCPStore at " + where + " (rank " + std::to_string(o.rank) +
                             "): " + e.what());
  }
  const std::string host = o.gloo_host.empty() ? o.master_addr : o.gloo_host;
  try {
    const auto group_timeout = o.collective_timeout_s > 0
                                   ? std::chrono::milliseconds(static_cast<int64_t>(o.collective_timeout_s * 1000))
                                   : timeout;
    return OverStore(store, o.rank, o.world_size, host, group_timeout, o.device);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("rendezvous: ") + (o.device.is_cuda() ? "NCCL" : "Gloo") + " group via " +
                             where + (o.device.is_cuda() ? " on " + o.device.str() : " on host " + host) + ": " +
                             e.what());
  }
}

std::unique_ptr<CollectiveGroup> CollectiveGroup::OverStore(compat::StorePtr store, int rank, int world_size,
                                                            std::string gloo_host, std::chrono::milliseconds timeout,
                                                            c10::Device device) {
  if (device.is_cuda()) {
    const std::string why = compat::CudaUnavailableReason();
    if (!why.empty()) throw std::invalid_argument("collective group on " + device.str() + ": " + why);
  }
  std::unique_ptr<CollectiveGroup> g(new CollectiveGroup(rank, world_size, device));
  g->store_ = std::move(store);
  g->gloo_host_ = std::move(gloo_host);
  g->timeout_ = timeout;
  if (world_size > 1) {
    // The world group keeps its keys apart from the sub-groups' prefixes too.
    g->group_ = g->MakeBackend(compat::MakePrefixStore("world", g->store_), rank, world_size);
  }
  return g;
}

compat::BackendPtr CollectiveGroup::MakeBackend(const compat::StorePtr& store, int rank, int size) const {
  if (!device_.is_cuda()) return compat::MakeGlooGroup(store, rank, size, gloo_host_, timeout_);
#if TRAINYARD_TORCH_NCCL
  return compat::MakeNcclGroup(store, rank, size, timeout_);
#else
  // OverStore refused CUDA already; reaching this is a broken invariant.
  throw std::logic_error("collective group on " + device_.str() + ": " + compat::CudaUnavailableReason());
#endif
}

void CollectiveGroup::CheckDevice(const torch::Tensor& tensor, const char* op) const {
  TORCH_CHECK(tensor.device() == device_, op, ": tensor ", tensor.sizes(), " ", tensor.scalar_type(), " is on ",
              tensor.device().str(), ", but this group's collectives run on ", device_.str(), " (", backend_name(),
              "); move it to ", device_.str(), " first");
}

std::unique_ptr<CollectiveGroup> CollectiveGroup::NewSubgroup(const std::string& name,
                                                              const std::vector<int>& ranks) const {
  auto it = std::find(ranks.begin(), ranks.end(), rank_);
  if (it == ranks.end()) {
    throw std::logic_error("group " + name + ": rank " + std::to_string(rank_) + " is not a member");
  }
  const int sub_rank = static_cast<int>(it - ranks.begin());
  const int sub_size = static_cast<int>(ranks.size());
  std::unique_ptr<CollectiveGroup> g(new CollectiveGroup(sub_rank, sub_size, device_));
  g->members_ = ranks;
  g->AttachRecorder(ring_, name);
  if (sub_size == 1) return g;
  g->store_ = compat::MakePrefixStore(name, store_);
  g->gloo_host_ = gloo_host_;
  g->timeout_ = timeout_;
  try {
    g->group_ = g->MakeBackend(g->store_, sub_rank, sub_size);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("rendezvous: ") + backend_name() + " sub-group " + name + ": " + e.what());
  }
  return g;
}

void CollectiveGroup::AttachRecorder(flight::FlightRing* ring, const std::string& name) {
  name_ = name;
  ring_ = ring;
  // A group of one rank runs no collective: nothing to record or wait for.
  ring_group_ = ring != nullptr && world_size_ > 1 ? ring->RegisterGroup(name, world_size_, rank_) : -1;
}

void CollectiveGroup::AllReduceSum(torch::Tensor& tensor) {
  CheckDevice(tensor, "AllReduceSum");
  if (world_size_ == 1) return;
  CollectiveScope scope(*this, "allreduce", tensor.numel());
  compat::AllReduceSum(*group_, tensor);
}

CollectiveGroup::Pending CollectiveGroup::AllReduceSumAsync(torch::Tensor& tensor) {
  CheckDevice(tensor, "AllReduceSumAsync");
  Pending pending;
  if (world_size_ == 1) return pending;
  pending.group_ = this;
  pending.op_ = "allreduce";
  pending.tensor_ = tensor;
  pending.work_ = compat::StartAllReduceSum(*group_, tensor);
  return pending;
}

CollectiveGroup::Pending CollectiveGroup::AllGatherAsync(const torch::Tensor& shard, torch::Tensor& out) {
  CheckDevice(shard, "AllGatherAsync");
  CheckDevice(out, "AllGatherAsync");
  TORCH_CHECK(shard.is_contiguous() && out.is_contiguous(), "AllGatherAsync: tensors must be contiguous");
  TORCH_CHECK(shard.dim() >= 1 && out.dim() == shard.dim() && out.size(0) == shard.size(0) * world_size_ &&
                  out.sizes().slice(1) == shard.sizes().slice(1) && out.scalar_type() == shard.scalar_type(),
              "AllGatherAsync: output ", out.sizes(), " ", out.scalar_type(), " cannot hold ", world_size_,
              " shards of ", shard.sizes(), " ", shard.scalar_type());
  Pending pending;
  if (world_size_ == 1) {
    out.copy_(shard);
    return pending;
  }
  torch::Tensor in = shard;
  pending.group_ = this;
  pending.op_ = "allgather";
  pending.tensor_ = out;
  pending.work_ = compat::StartAllGather(*group_, out, in);
  return pending;
}

CollectiveGroup::Pending CollectiveGroup::ReduceScatterSumAsync(const torch::Tensor& input, torch::Tensor& out) {
  CheckDevice(input, "ReduceScatterSumAsync");
  CheckDevice(out, "ReduceScatterSumAsync");
  TORCH_CHECK(input.is_contiguous() && out.is_contiguous(), "ReduceScatterSumAsync: tensors must be contiguous");
  TORCH_CHECK(input.dim() == 1 && out.dim() == 1 && input.numel() == out.numel() * world_size_ &&
                  out.scalar_type() == input.scalar_type(),
              "ReduceScatterSumAsync: input ", input.sizes(), " ", input.scalar_type(), " is not ", world_size_,
              " blocks of the output ", out.sizes(), " ", out.scalar_type());
  Pending pending;
  if (world_size_ == 1) {
    out.copy_(input);
    return pending;
  }
  torch::Tensor in = input;
  pending.group_ = this;
  pending.op_ = "reduce_scatter";
  pending.tensor_ = out;
  pending.work_ = compat::StartReduceScatterSum(*group_, out, in);
  return pending;
}

void CollectiveGroup::CheckP2P(const torch::Tensor& tensor, int peer, int64_t microbatch, const char* op) const {
  const std::string where = std::string(op) + " on group \"" + (name_.empty() ? "group" : name_) + "\" (rank " +
                            std::to_string(rank_) + " of " + std::to_string(world_size_) + "): ";
  if (peer < 0 || peer >= world_size_) {
    throw std::invalid_argument(where + "peer " + std::to_string(peer) + " is outside [0, " +
                                std::to_string(world_size_) + ") (peers are ranks within this group)");
  }
  if (peer == rank_) {
    throw std::invalid_argument(where + "peer " + std::to_string(peer) + " is this rank itself");
  }
  if (microbatch < 0) {
    throw std::invalid_argument(where + "microbatch " + std::to_string(microbatch) + " is negative");
  }
  if (!tensor.defined()) throw std::invalid_argument(where + "the tensor is undefined");
  std::ostringstream what;
  what << "tensor " << tensor.sizes() << " " << tensor.scalar_type();
  if (tensor.device() != device_) {
    throw std::invalid_argument(where + what.str() + " is on " + tensor.device().str() + ", but this group runs on " +
                                device_.str() + " (" + backend_name() + "); move it to " + device_.str() + " first");
  }
  if (!tensor.is_contiguous()) {
    std::ostringstream strides;
    strides << tensor.strides();
    throw std::invalid_argument(where + what.str() + " is not contiguous (strides " + strides.str() +
                                "); pass .contiguous()");
  }
}

CollectiveGroup::Pending CollectiveGroup::StartP2P(torch::Tensor tensor, int peer, int64_t microbatch, bool send) {
  // Counted only once c10d accepted the op, so a refused one shifts no later pairing.
  uint64_t& count = send ? sends_to_[peer] : recvs_from_[peer];
  const uint64_t seq = count + 1;
  const int tag = static_cast<int>(seq % (uint64_t{1} << 31));
  Pending pending;
  pending.group_ = this;
  pending.op_ = send ? "send" : "recv";
  pending.tensor_ = tensor;
  pending.peer_ = members_[peer];
  pending.microbatch_ = microbatch;
  pending.p2p_seq_ = seq;
  pending.work_ = send ? compat::StartSend(*group_, tensor, peer, tag) : compat::StartRecv(*group_, tensor, peer, tag);
  count = seq;
  return pending;
}

CollectiveGroup::Pending CollectiveGroup::SendAsync(const torch::Tensor& tensor, int peer, int64_t microbatch) {
  CheckP2P(tensor, peer, microbatch, "SendAsync");
  return StartP2P(tensor, peer, microbatch, /*send=*/true);
}

CollectiveGroup::Pending CollectiveGroup::RecvAsync(torch::Tensor& tensor, int peer, int64_t microbatch) {
  CheckP2P(tensor, peer, microbatch, "RecvAsync");
  return StartP2P(tensor, peer, microbatch, /*send=*/false);
}

void CollectiveGroup::Pending::Wait() {
  if (group_ == nullptr) return;
  CollectiveGroup* g = group_;
  group_ = nullptr;
  if (peer_ >= 0) {
    CollectiveScope scope(*g, op_, tensor_.numel(), peer_, microbatch_, p2p_seq_);
    compat::WaitCollective(work_, tensor_);
  } else {
    CollectiveScope scope(*g, op_, tensor_.numel());
    compat::WaitCollective(work_, tensor_);
  }
  work_ = compat::WorkPtr();
}

torch::Tensor CollectiveGroup::AllToAll(const torch::Tensor& input, const std::vector<int64_t>& out_splits,
                                        const std::vector<int64_t>& in_splits) {
  TORCH_CHECK(static_cast<int>(out_splits.size()) == world_size_ && static_cast<int>(in_splits.size()) == world_size_,
              "AllToAll: need ", world_size_, " splits, got ", in_splits.size(), "/", out_splits.size());
  const int64_t in_rows = std::accumulate(in_splits.begin(), in_splits.end(), int64_t{0});
  TORCH_CHECK(in_rows == input.size(0), "AllToAll: splits sum to ", in_rows, " but input has ", input.size(0), " rows");
  CheckDevice(input, "AllToAll");
  if (world_size_ == 1) return input.clone();
  const int64_t out_rows = std::accumulate(out_splits.begin(), out_splits.end(), int64_t{0});
  std::vector<int64_t> shape = input.sizes().vec();
  shape[0] = out_rows;
  auto in = input.contiguous();
  auto out = torch::empty(shape, input.options());
  CollectiveScope scope(*this, "alltoall", in.numel());
  compat::AllToAll(*group_, out, in, out_splits, in_splits);
  return out;
}

}  // namespace trainyard::engine
