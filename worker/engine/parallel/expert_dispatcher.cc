#include "worker/engine/parallel/expert_dispatcher.h"

#include "worker/engine/base/host_sync.h"
#include "worker/engine/parallel/mesh/collective_group.h"
#include "worker/engine/parallel/parallel_autograd.h"

namespace trainyard::engine {

ExpertDispatcher::ExpertDispatcher(int64_t n_experts, CollectiveGroup* ep_group)
    : n_experts_(n_experts), ep_(ep_group ? ep_group->world_size() : 1), group_(ep_group) {
  TORCH_CHECK(n_experts % ep_ == 0, "ExpertDispatcher: ep=", ep_, " must divide n_experts=", n_experts);
  n_local_ = n_experts / ep_;
}

Dispatched ExpertDispatcher::Dispatch(const torch::Tensor& rows, const torch::Tensor& counts) const {
  // The MoE layer's one declared graph break: the host sizes the expert slices.
  torch::Tensor c;
  {
    HostRead read("moe dispatch: tokens per expert");
    c = counts.to(torch::kCPU, torch::kInt64).contiguous();
  }
  TORCH_CHECK(c.numel() == n_experts_, "Dispatch: got ", c.numel(), " counts for ", n_experts_, " experts");
  const int64_t* cp = c.data_ptr<int64_t>();
  int64_t sent = 0;
  for (int64_t e = 0; e < n_experts_; ++e) sent += cp[e];
  TORCH_CHECK(sent <= rows.size(0), "Dispatch: counts sum to ", sent, " but there are ", rows.size(0), " rows");
  // With a capacity the router sorts dropped rows last: only the first `sent` go.
  const torch::Tensor kept = sent < rows.size(0) ? rows.narrow(0, 0, sent) : rows;
  Dispatched d;
  DispatchPlan& plan = d.plan;
  if (group_ == nullptr) {
    plan.local_counts.assign(cp, cp + n_experts_);
    d.tokens = kept;
    return d;
  }
  // recv[i·n_local + e]: rows peer i sends for my local expert e. The counts travel on
  // the group's device (NCCL takes no host tensors) and come back to the host, which
  // needs them to size the token exchange.
  const std::vector<int64_t> equal(ep_, n_local_);
  auto exchanged = group_->AllToAll(c.to(group_->device()), equal, equal);
  torch::Tensor recv;
  {
    HostRead read("moe dispatch: tokens per local expert from each EP peer");
    recv = exchanged.to(torch::kCPU).contiguous();
  }
  const int64_t* rp = recv.data_ptr<int64_t>();
  plan.send_splits.assign(ep_, 0);
  plan.recv_splits.assign(ep_, 0);
  plan.local_counts.assign(n_local_, 0);
  for (int j = 0; j < ep_; ++j) {
    for (int64_t e = 0; e < n_local_; ++e) {
      plan.send_splits[j] += cp[j * n_local_ + e];
      plan.recv_splits[j] += rp[j * n_local_ + e];
      plan.local_counts[e] += rp[j * n_local_ + e];
    }
  }
  auto received = AllToAllRows(kept, group_, plan.recv_splits, plan.send_splits);

  // Received rows are peer-major (peer i, then its experts in order); regroup them
  // expert-major, keeping peer order inside each expert so results are reproducible.
  std::vector<int64_t> start(ep_ * n_local_);
  int64_t offset = 0;
  for (int64_t k = 0; k < ep_ * n_local_; ++k) {
    start[k] = offset;
    offset += rp[k];
  }
  std::vector<int64_t> perm;
  perm.reserve(offset);
  for (int64_t e = 0; e < n_local_; ++e) {
    for (int i = 0; i < ep_; ++i) {
      const int64_t k = i * n_local_ + e;
      for (int64_t r = 0; r < rp[k]; ++r) perm.push_back(start[k] + r);
    }
  }
  // Built on the host, then moved next to the rows they index.
  auto to_expert_major = torch::tensor(perm, torch::kInt64);
  auto to_peer_major = torch::empty_like(to_expert_major);
  if (offset > 0) to_peer_major.index_put_({to_expert_major}, torch::arange(offset, torch::kInt64));
  plan.to_expert_major = to_expert_major.to(rows.device());
  plan.to_peer_major = to_peer_major.to(rows.device());
  d.tokens = received.index_select(0, plan.to_expert_major);
  return d;
}

torch::Tensor ExpertDispatcher::Combine(const torch::Tensor& expert_out, const DispatchPlan& plan) const {
  if (group_ == nullptr) return expert_out;
  auto peer_major = expert_out.index_select(0, plan.to_peer_major);
  return AllToAllRows(peer_major, group_, plan.send_splits, plan.recv_splits);
}

}  // namespace trainyard::engine
