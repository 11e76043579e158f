// The one place that knows which LibTorch we build against. Debian ships 1.13 (CPU);
// the accelerator box has 2.x, where c10d moved some headers and types around (most
// visibly: ProcessGroupGloo derives from c10d::Backend instead of c10d::ProcessGroup).
// Everything else in the engine calls these helpers instead of the c10d API directly,
// and only ever holds a ProcessGroupGloo, whose collective signatures are the same in
// both versions.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#if defined(TORCH_VERSION_MAJOR) && TORCH_VERSION_MAJOR >= 2
#define TRAINYARD_TORCH2 1
#else
#define TRAINYARD_TORCH2 0
#endif

namespace trainyard::engine::compat {

using StorePtr = c10::intrusive_ptr<c10d::Store>;
using GlooGroupPtr = c10::intrusive_ptr<c10d::ProcessGroupGloo>;

// Rank 0 hosts the store; the others connect and wait up to `timeout` for it.
inline StorePtr MakeTcpStore(const std::string& host, int port, bool is_server,
                             int world_size, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(port);
  opts.isServer = is_server;
  opts.numWorkers = static_cast<std::size_t>(world_size);
  opts.waitWorkers = true;
  opts.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(host, opts);
}

// A view of `store` whose keys all start with `prefix`, so several groups can
// rendezvous on one TCPStore without their keys colliding. Both 1.13 and 2.x take
// (std::string, intrusive_ptr<Store>).
inline StorePtr MakePrefixStore(const std::string& prefix, const StorePtr& store) {
  return c10::make_intrusive<c10d::PrefixStore>(prefix, store);
}

// An in-process store: lets tests run several Gloo ranks as threads of one process.
inline StorePtr MakeHashStore() { return c10::make_intrusive<c10d::HashStore>(); }

inline GlooGroupPtr MakeGlooGroup(const StorePtr& store, int rank, int world_size,
                                  const std::string& gloo_host,
                                  std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(gloo_host));
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, options);
}

// Blocking in-place sum over the group.
inline void AllReduceSum(c10d::ProcessGroupGloo& group, at::Tensor& tensor) {
  std::vector<at::Tensor> tensors{tensor};
  group.allreduce(tensors)->wait();
}

// Blocking all-to-all along dim 0 with explicit row counts per peer. Both tensors must
// be contiguous; `output` is preallocated with sum(output_splits) rows. Empty split
// vectors mean "equal split". 1.13 and 2.x take non-const references.
inline void AllToAll(c10d::ProcessGroupGloo& group, at::Tensor& output, at::Tensor& input,
                     std::vector<int64_t> output_splits, std::vector<int64_t> input_splits) {
  group.alltoall_base(output, input, output_splits, input_splits)->wait();
}

}  // namespace trainyard::engine::compat
