#include "worker/engine/diagnostics/tensor_memory.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>
#include <utility>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/alignment.h>

#include "worker/engine/base/torch_compat.h"

#if TRAINYARD_TORCH_NCCL
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace trainyard::engine::tensor_memory {
namespace {

enum class Mode { kNone, kCpu, kCuda };

std::atomic<int64_t> g_current{0};
std::atomic<int64_t> g_peak{0};
// Written once, inside Install's call_once; atomic so a reader on another thread is no
// data race even when Install runs late.
std::atomic<Mode> g_mode{Mode::kNone};
int g_cuda_index = 0;  // written before g_mode

// Relaxed order is enough: each counter is one atomic object, whose read-modify-writes
// are totally ordered; no other memory is published through them.
void RaisePeak(int64_t value) {
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (value > peak && !g_peak.compare_exchange_weak(peak, value, std::memory_order_relaxed)) {
  }
}

void Add(int64_t n) { RaisePeak(g_current.fetch_add(n, std::memory_order_relaxed) + n); }
void Sub(int64_t n) { g_current.fetch_sub(n, std::memory_order_relaxed); }

// Lives in the first kHeaderBytes of each block: the inner allocator's DataPtr (which
// owns the block) and the bytes the caller asked for.
struct Header {
  c10::DataPtr inner;
  size_t nbytes;
};
constexpr size_t kHeaderBytes = c10::gAlignment;
static_assert(sizeof(Header) <= kHeaderBytes, "the header must fit before the data");
static_assert(kHeaderBytes % alignof(Header) == 0, "the header must stay aligned");

void DeleteCounted(void* data) {
  if (data == nullptr) return;
  auto* header = reinterpret_cast<Header*>(static_cast<char*>(data) - kHeaderBytes);
  const size_t nbytes = header->nbytes;
  // Move the owner out first: destroying it frees the block the header lives in.
  c10::DataPtr inner = std::move(header->inner);
  header->~Header();
  Sub(static_cast<int64_t>(nbytes));
  inner.clear();
}

class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(size_t nbytes) override {
    const c10::Device cpu(c10::DeviceType::CPU);
    if (nbytes == 0) return {nullptr, nullptr, &DeleteCounted, cpu};
    TORCH_CHECK(nbytes <= std::numeric_limits<size_t>::max() - kHeaderBytes,
                "tensor_memory: allocation of ", nbytes, " bytes is too large");
    c10::DataPtr inner = inner_->allocate(nbytes + kHeaderBytes);
    char* block = static_cast<char*>(inner.get());
    void* data = block + kHeaderBytes;
    new (block) Header{std::move(inner), nbytes};
    Add(static_cast<int64_t>(nbytes));
    return {data, data, &DeleteCounted, cpu};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &DeleteCounted; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count > 0) std::memcpy(dest, src, count);
  }

 private:
  c10::Allocator* inner_;
};

bool SwitchedOff() {
  const char* v = std::getenv("TRAINYARD_TENSOR_MEMORY");
  if (v == nullptr) return false;
  const std::string s(v);
  return s == "0" || s == "off" || s == "false";
}

Mode InstallOnce(const c10::Device& device) {
  if (SwitchedOff()) return Mode::kNone;
  if (device.is_cuda()) {
#if TRAINYARD_TORCH_NCCL
    if (!compat::CudaUnavailableReason().empty()) return Mode::kNone;
    g_cuda_index = device.has_index() ? device.index() : 0;
    c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(g_cuda_index));
    return Mode::kCuda;
#else
    return Mode::kNone;
#endif
  }
  if (!device.is_cpu()) return Mode::kNone;
  // c10's registry keeps the pointer and never frees it: static lifetime, leaked.
  static CountingCpuAllocator* counting = new CountingCpuAllocator(c10::GetCPUAllocator());
  c10::SetCPUAllocator(counting, static_cast<uint8_t>(kInstallPriority));
  return c10::GetCPUAllocator() == counting ? Mode::kCpu : Mode::kNone;
}

#if TRAINYARD_TORCH_NCCL
int64_t CudaAllocated(bool peak) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(g_cuda_index));
  const auto& aggregate = stats.allocated_bytes[0];  // StatType::AGGREGATE
  return peak ? aggregate.peak : aggregate.current;
}
#endif

}  // namespace

bool Install(const c10::Device& device) {
  static std::once_flag once;
  std::call_once(once, [&] { g_mode = InstallOnce(device); });
  return g_mode != Mode::kNone;
}

bool Installed() { return g_mode != Mode::kNone; }

std::string Source() {
  switch (g_mode) {
    case Mode::kCpu:
      return "cpu_allocator";
    case Mode::kCuda:
      return "cuda_caching_allocator:" + std::to_string(g_cuda_index);
    case Mode::kNone:
      break;
  }
  return "";
}

int64_t CurrentBytes() {
  if (g_mode == Mode::kCpu) return g_current.load(std::memory_order_relaxed);
#if TRAINYARD_TORCH_NCCL
  if (g_mode == Mode::kCuda) return CudaAllocated(false);
#endif
  return 0;
}

int64_t PeakBytes() {
  if (g_mode == Mode::kCpu) return g_peak.load(std::memory_order_relaxed);
#if TRAINYARD_TORCH_NCCL
  if (g_mode == Mode::kCuda) return CudaAllocated(true);
#endif
  return 0;
}

void ResetPeak() {
  if (g_mode == Mode::kCpu) {
    g_peak.store(g_current.load(std::memory_order_relaxed), std::memory_order_relaxed);
    // An allocation that raced the store above may have been overwritten: take the
    // count again (the peak can only be raised by this).
    RaisePeak(g_current.load(std::memory_order_relaxed));
  }
#if TRAINYARD_TORCH_NCCL
  if (g_mode == Mode::kCuda) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(g_cuda_index));
  }
#endif
}

}  // namespace trainyard::engine::tensor_memory
