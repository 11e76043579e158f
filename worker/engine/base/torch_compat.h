// The one place that knows which LibTorch we build against and which devices it has:
// LibTorch 2.x (the supported minors: cmake/trainyard_torch.cmake), normally the PyPI
// wheel's CUDA build, which also runs on a machine without a GPU. Everything else in the
// engine calls these helpers instead of the c10d or CUDA API directly, and holds a group
// through BackendPtr (c10d::Backend, the common base of ProcessGroupGloo and
// ProcessGroupNCCL).
//
// CUDA-only code is compiled only when TRAINYARD_TORCH_NCCL is 1 (a CUDA LibTorch with
// the NCCL headers; the build defines USE_C10D_NCCL then) and reached only after
// CudaUnavailableReason() came back empty, so a process on a machine without a GPU
// never touches CUDA, and a LibTorch built without CUDA still compiles the engine.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <utility>
#include <vector>

#if !defined(TORCH_VERSION_MAJOR) || TORCH_VERSION_MAJOR < 2
#error "the engine needs LibTorch 2.x (cmake/trainyard_torch.cmake names the supported minors)"
#endif

#if defined(TRAINYARD_TORCH_CUDA) && defined(USE_C10D_NCCL)
#define TRAINYARD_TORCH_NCCL 1
#include <thread>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#else
#define TRAINYARD_TORCH_NCCL 0
#endif

// CUDA_VERSION (cuda.h) names the CUDA a CUDA LibTorch build compiles against.
#if defined(TRAINYARD_TORCH_CUDA) && __has_include(<cuda.h>)
#include <cuda.h>
#endif

namespace trainyard::engine::compat {

using StorePtr = c10::intrusive_ptr<c10d::Store>;
// The common base of ProcessGroupGloo and ProcessGroupNCCL.
using CollectiveBackend = c10d::Backend;
using BackendPtr = c10::intrusive_ptr<CollectiveBackend>;

// Rank 0 hosts the store; the others connect and wait up to `timeout` for it.
inline StorePtr MakeTcpStore(const std::string& host, int port, bool is_server, int world_size,
                             std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(port);
  opts.isServer = is_server;
  opts.numWorkers = static_cast<std::size_t>(world_size);
  opts.waitWorkers = true;
  opts.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(host, opts);
}

// A further client of the TCPStore at host:port (rank 0's), that neither counts as a
// worker nor waits for the others: for side traffic such as the watchdog's progress
// keys. Every call on it gives up after `timeout`.
inline StorePtr MakeTcpStoreClient(const std::string& host, int port, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(port);
  opts.isServer = false;
  opts.waitWorkers = false;
  opts.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(host, opts);
}

// A view of `store` whose keys all start with `prefix`, so several groups can
// rendezvous on one TCPStore without their keys colliding.
inline StorePtr MakePrefixStore(const std::string& prefix, const StorePtr& store) {
  return c10::make_intrusive<c10d::PrefixStore>(prefix, store);
}

// An in-process store: lets tests run several Gloo ranks as threads of one process.
inline StorePtr MakeHashStore() { return c10::make_intrusive<c10d::HashStore>(); }

inline BackendPtr MakeGlooGroup(const StorePtr& store, int rank, int world_size, const std::string& gloo_host,
                                std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(gloo_host));
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, options);
}

// "2.11.0": the LibTorch this engine was compiled against.
inline std::string TorchVersion() { return TORCH_VERSION; }

// Compile-time facts of this build, as `trainyard-rank --capabilities` reports them
// (launch/engine_capabilities.h).
// "MAJOR.MINOR.PATCH" of the LibTorch headers (TORCH_VERSION_MAJOR/MINOR/PATCH).
inline std::string TorchVersionNumber() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
}
// Built against a CUDA LibTorch (TRAINYARD_TORCH_CUDA, from TorchConfig.cmake's
// TORCH_CUDA_LIBRARIES).
#if defined(TRAINYARD_TORCH_CUDA)
inline constexpr bool kBuiltWithCuda = true;
#else
inline constexpr bool kBuiltWithCuda = false;
#endif
// c10d's ProcessGroupNCCL compiled in (USE_C10D_NCCL: a CUDA LibTorch with nccl.h).
#if defined(USE_C10D_NCCL)
inline constexpr bool kBuiltWithNccl = true;
#else
inline constexpr bool kBuiltWithNccl = false;
#endif
// "12.8" from CUDA_VERSION (1000 * major + 10 * minor) of a CUDA build (CUDART_VERSION,
// the same encoding, when cuda.h is not on the include path); "" without CUDA.
inline std::string CudaBuildVersion() {
#if defined(TRAINYARD_TORCH_CUDA) && defined(CUDA_VERSION)
  return std::to_string(CUDA_VERSION / 1000) + "." + std::to_string(CUDA_VERSION % 1000 / 10);
#elif defined(TRAINYARD_TORCH_CUDA) && defined(CUDART_VERSION)
  return std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10);
#else
  return "";
#endif
}

// Empty when this process can put tensors on CUDA, else why not, in words that name
// the build or the device count ("this engine was built against LibTorch 2.11.0
// with CUDA, but no CUDA device is visible ...").
inline std::string CudaUnavailableReason() {
#if TRAINYARD_TORCH_NCCL
  const std::size_t count = torch::cuda::device_count();
  if (!torch::cuda::is_available() || count == 0) {
    return "this engine was built against LibTorch " + TorchVersion() +
           " with CUDA, but no CUDA device is visible (torch::cuda::device_count()=" + std::to_string(count) +
           "; check CUDA_VISIBLE_DEVICES and the driver)";
  }
  return "";
#elif defined(TRAINYARD_TORCH_CUDA)
  return "this engine was built against LibTorch " + TorchVersion() +
         " with CUDA but without the NCCL headers (USE_C10D_NCCL), so it has no ProcessGroupNCCL";
#else
  return "this engine was built against LibTorch " + TorchVersion() + " without CUDA";
#endif
}

inline int CudaDeviceCount() { return static_cast<int>(torch::cuda::device_count()); }

// Makes `device` the current CUDA device of this process (the caching allocator's and
// NCCL's default), through the device-guard registry so no CUDA header is needed.
inline void SetCurrentDevice(const c10::Device& device) {
  if (device.is_cuda()) c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->setDevice(device);
}

// fp32 matmuls in full fp32: TF32 off for cuBLAS and cuDNN, so CUDA losses are
// comparable with CPU ones and the GEMM peak is the fp32 one. No-op on CPU.
inline void DisableTf32() {
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setAllowTF32CuDNN(false);
}

inline bool Tf32Enabled() { return at::globalContext().allowTF32CuBLAS(); }

// The states of this process's default random generators, for checkpoints: "cpu",
// then "cuda.<i>" for each visible device when CUDA is usable (never touched
// otherwise, so a CPU build needs no CUDA). Each state is a CPU uint8 tensor.
inline std::vector<std::pair<std::string, at::Tensor>> RngStates() {
  std::vector<std::pair<std::string, at::Tensor>> states;
  states.emplace_back("cpu", at::detail::getDefaultCPUGenerator().get_state());
#if TRAINYARD_TORCH_NCCL
  if (CudaUnavailableReason().empty()) {
    for (int i = 0; i < CudaDeviceCount(); ++i) {
      const at::Generator& g = at::globalContext().defaultGenerator(c10::Device(c10::DeviceType::CUDA, i));
      states.emplace_back("cuda." + std::to_string(i), g.get_state());
    }
  }
#endif
  return states;
}

// Restores one state RngStates() returned. Returns false when this process has no such
// generator (a CUDA state on a CPU-only rank), which the caller may ignore.
inline bool SetRngState(const std::string& name, const at::Tensor& state) {
  if (name == "cpu") {
    at::Generator g = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(g.mutex());
    g.set_state(state);
    return true;
  }
#if TRAINYARD_TORCH_NCCL
  if (name.rfind("cuda.", 0) == 0 && CudaUnavailableReason().empty()) {
    const int i = std::stoi(name.substr(5));
    if (i >= CudaDeviceCount()) return false;
    at::Generator g = at::globalContext().defaultGenerator(c10::Device(c10::DeviceType::CUDA, i));
    std::lock_guard<std::mutex> lock(g.mutex());
    g.set_state(state);
    return true;
  }
#endif
  return false;
}

// Blocks until every kernel queued on `device` has finished; no-op on CPU.
inline void Synchronize(const c10::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

#if TRAINYARD_TORCH_NCCL
// An NCCL group: its communicator is created lazily, on the device of the first
// collective's tensors, with the unique id exchanged through `store`. NCCL refuses two
// ranks of one communicator on the same GPU.
inline BackendPtr MakeNcclGroup(const StorePtr& store, int rank, int world_size, std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, options);
}
#endif

// Waits for one collective's work until it has ended. Gloo's wait() returns once the
// collective is done. NCCL's wait() only makes the current CUDA stream wait for it and
// returns at once, so for CUDA tensors the host then polls Work::isCompleted(), which
// for c10d's WorkNCCL is `exception() || finishedGPUExecutionInternal()`, a query of
// the work's end CUDA event (ncclEndEvent_, recorded on the NCCL stream after the
// collective; ProcessGroupNCCL.cpp in LibTorch 2.x). So the caller's end of the
// collective (the flight recorder's Exit) is the GPU's end, and a hung NCCL collective
// stays in flight where the watchdog sees it. An NCCL error or NCCL's own timeout
// completes the work with its exception, rethrown here. The CPU path is wait() alone.
template <class WorkPtr>
inline void WaitCollective(const WorkPtr& work, const at::Tensor& tensor) {
  work->wait();
#if TRAINYARD_TORCH_NCCL
  if (tensor.is_cuda()) {
    for (int polls = 0; !work->isCompleted(); ++polls) {
      // Yield first (a collective usually ends within microseconds of the stream
      // reaching it), then sleep so a long wait does not spin a core.
      if (polls < 1000) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
    if (std::exception_ptr e = work->exception()) std::rethrow_exception(e);
  }
#else
  (void)tensor;
#endif
}

// What a c10d collective returns.
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

// Starts an in-place sum over the group and returns its work; WaitCollective ends it.
inline WorkPtr StartAllReduceSum(CollectiveBackend& group, at::Tensor& tensor) {
  std::vector<at::Tensor> tensors{tensor};
  return group.allreduce(tensors);
}

// Starts gathering `input` from every member into `output` (member j's rows at
// [j·rows, (j+1)·rows), one flat tensor: NCCL's all-gather into a tensor, Gloo's via
// per-member views); WaitCollective ends it.
inline WorkPtr StartAllGather(CollectiveBackend& group, at::Tensor& output, at::Tensor& input) {
  return group._allgather_base(output, input);
}

// Starts the reduce-scatter of `input` (world_size() equal row blocks): member j gets
// the sum over members of block j in `output`. NCCL runs a real reduce-scatter (each
// rank sends and receives (n−1)/n of the bytes, half an all-reduce's); Gloo in 2.11
// sums the whole input with its all-reduce and keeps the block. WaitCollective ends it.
inline WorkPtr StartReduceScatterSum(CollectiveBackend& group, at::Tensor& output, at::Tensor& input) {
  return group._reduce_scatter_base(output, input);
}

// Starts sending `tensor` (contiguous) to group rank `dst` / receiving into `tensor`
// from group rank `src`; WaitCollective ends it. Gloo matches a send with the recv of
// the same (peer, tag), in order within a tag; NCCL ignores the tag and matches the
// k-th send to a peer with that peer's k-th recv from this rank (on CUDA the ops also
// run in order on one stream, so a send whose recv is queued behind the peer's own
// send waits for it). The tag must be in [0, 2^31).
inline WorkPtr StartSend(CollectiveBackend& group, at::Tensor& tensor, int dst, int tag) {
  std::vector<at::Tensor> tensors{tensor};
  return group.send(tensors, dst, tag);
}
inline WorkPtr StartRecv(CollectiveBackend& group, at::Tensor& tensor, int src, int tag) {
  std::vector<at::Tensor> tensors{tensor};
  return group.recv(tensors, src, tag);
}

// Blocking in-place sum over the group; under NCCL until the GPU has finished it
// (WaitCollective), so later kernels and the host both see the sum.
inline void AllReduceSum(CollectiveBackend& group, at::Tensor& tensor) {
  std::vector<at::Tensor> tensors{tensor};
  WaitCollective(group.allreduce(tensors), tensor);
}

// Blocking all-to-all along dim 0 with explicit row counts per peer. Both tensors must
// be contiguous; `output` is preallocated with sum(output_splits) rows. Empty split
// vectors mean "equal split".
inline void AllToAll(CollectiveBackend& group, at::Tensor& output, at::Tensor& input,
                     std::vector<int64_t> output_splits, std::vector<int64_t> input_splits) {
  WaitCollective(group.alltoall_base(output, input, output_splits, input_splits), output);
}

}  // namespace trainyard::engine::compat
