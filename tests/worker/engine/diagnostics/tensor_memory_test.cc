// The counting CPU allocator of diagnostics/tensor_memory.h: exact bytes per tensor,
// frees, the peak and its reset, raw allocations (oneDNN's path), and many threads.
// Install() is process-wide and permanent: the other engine_tests cases in this binary
// then run on the counting allocator too, which must not change what they compute.
#include "worker/engine/diagnostics/tensor_memory.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <thread>
#include <vector>

#include <ATen/Parallel.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

namespace trainyard::engine {
namespace {

class TensorMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("TRAINYARD_TENSOR_MEMORY");
    ASSERT_TRUE(tensor_memory::Install());
    ASSERT_TRUE(tensor_memory::Installed());
    ASSERT_EQ(tensor_memory::Source(), "cpu_allocator");
  }
};

TEST_F(TensorMemoryTest, TensorRaisesCurrentAndPeakByItsBytes) {
  tensor_memory::ResetPeak();
  const int64_t before = tensor_memory::CurrentBytes();
  EXPECT_EQ(tensor_memory::PeakBytes(), before);
  {
    auto t = torch::empty({1000, 3}, torch::kFloat32);  // 12,000 bytes: not a multiple of 64
    ASSERT_EQ(t.nbytes(), 12000u);
    EXPECT_EQ(tensor_memory::CurrentBytes(), before + 12000);
    EXPECT_EQ(tensor_memory::PeakBytes(), before + 12000);
    auto u = torch::empty({7}, torch::kFloat64);  // 56 bytes: below the 64-byte alignment
    EXPECT_EQ(tensor_memory::CurrentBytes(), before + 12056);
    EXPECT_EQ(tensor_memory::PeakBytes(), before + 12056);
    // The data stays aligned as the default allocator's.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(u.data_ptr()) % 64, 0u);
  }
  // Freed: current back, the peak stays.
  EXPECT_EQ(tensor_memory::CurrentBytes(), before);
  EXPECT_EQ(tensor_memory::PeakBytes(), before + 12056);
}

TEST_F(TensorMemoryTest, ResetPeakSetsPeakToCurrent) {
  const int64_t before = tensor_memory::CurrentBytes();
  auto keep = torch::zeros({256}, torch::kInt64);  // 2,048 bytes, held
  { auto temp = torch::empty({1 << 20}, torch::kUInt8); }
  EXPECT_GE(tensor_memory::PeakBytes(), before + 2048 + (1 << 20));
  tensor_memory::ResetPeak();
  EXPECT_EQ(tensor_memory::PeakBytes(), before + 2048);
  EXPECT_EQ(tensor_memory::CurrentBytes(), before + 2048);
  // A smaller temporary after the reset sets the new peak.
  { auto temp = torch::empty({100}, torch::kUInt8); }
  EXPECT_EQ(tensor_memory::PeakBytes(), before + 2048 + 100);
  keep = torch::Tensor();
  EXPECT_EQ(tensor_memory::CurrentBytes(), before);
}

TEST_F(TensorMemoryTest, TensorsOnTheCountingAllocatorComputeAsBefore) {
  const int64_t before = tensor_memory::CurrentBytes();
  {
    auto t = torch::full({1000, 3}, 2.0f);
    EXPECT_EQ(t.sum().item<float>(), 6000.0f);
    auto grown = torch::cat({t, t}).matmul(torch::ones({3, 5}));
    EXPECT_EQ(grown.sizes(), (std::vector<int64_t>{2000, 5}));
    EXPECT_EQ(grown.sum().item<float>(), 2000.0f * 5 * 6);
  }
  EXPECT_EQ(tensor_memory::CurrentBytes(), before);
}

TEST_F(TensorMemoryTest, ZeroBytesCountNothing) {
  const int64_t before = tensor_memory::CurrentBytes();
  auto empty = torch::empty({0, 5});
  EXPECT_EQ(tensor_memory::CurrentBytes(), before);
}

TEST_F(TensorMemoryTest, RawAllocateAndDeallocateAreCounted) {
  // oneDNN (mkldnn) takes its scratch memory through these; they need data == context.
  c10::Allocator* allocator = c10::GetCPUAllocator();
  ASSERT_NE(allocator->raw_deleter(), nullptr);
  const int64_t before = tensor_memory::CurrentBytes();
  void* p = allocator->raw_allocate(333);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(tensor_memory::CurrentBytes(), before + 333);
  static_cast<char*>(p)[332] = 1;
  allocator->raw_deallocate(p);
  EXPECT_EQ(tensor_memory::CurrentBytes(), before);
}

TEST_F(TensorMemoryTest, GrowingStorageCountsTheNewSize) {
  const int64_t before = tensor_memory::CurrentBytes();
  auto t = torch::empty({10}, torch::kFloat32);
  t.resize_({1000});  // a new storage of 4,000 bytes replaces the 40
  EXPECT_EQ(tensor_memory::CurrentBytes(), before + 4000);
  t = torch::Tensor();
  EXPECT_EQ(tensor_memory::CurrentBytes(), before);
}

TEST_F(TensorMemoryTest, ManyThreadsEndWhereTheyStarted) {
  const int64_t before = tensor_memory::CurrentBytes();
  tensor_memory::ResetPeak();
  constexpr int kThreads = 8;
  constexpr int kRounds = 2000;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([i] {
      std::vector<torch::Tensor> held;
      for (int r = 0; r < kRounds; ++r) {
        held.push_back(torch::empty({1 + (r * 7 + i) % 513}, torch::kUInt8));
        if (held.size() > 16) held.erase(held.begin(), held.begin() + 8);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(tensor_memory::CurrentBytes(), before);
  // At least one thread held 9 tensors of >= 1 byte at once; at most all held 17 of 513.
  EXPECT_GT(tensor_memory::PeakBytes(), before + 8);
  EXPECT_LE(tensor_memory::PeakBytes(), before + kThreads * 17 * 513);
}

TEST_F(TensorMemoryTest, IntraOpThreadsAllocatingAreCounted) {
  const int64_t before = tensor_memory::CurrentBytes();
  tensor_memory::ResetPeak();
  // Each chunk of the intra-op pool holds one 1 KiB tensor while it waits for the
  // others' count to show, then frees it.
  std::atomic<int64_t> seen_max{0};
  at::parallel_for(0, 64, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      auto t = torch::empty({1024}, torch::kUInt8);
      int64_t now = tensor_memory::CurrentBytes() - before;
      int64_t prev = seen_max.load();
      while (now > prev && !seen_max.compare_exchange_weak(prev, now)) {
      }
    }
  });
  EXPECT_EQ(tensor_memory::CurrentBytes(), before);
  EXPECT_GE(tensor_memory::PeakBytes(), before + 1024);
  EXPECT_GE(tensor_memory::PeakBytes() - before, seen_max.load());
}

TEST_F(TensorMemoryTest, InstallAgainKeepsTheFirst) {
  c10::Allocator* installed = c10::GetCPUAllocator();
  EXPECT_TRUE(tensor_memory::Install());
  EXPECT_EQ(c10::GetCPUAllocator(), installed);
}

}  // namespace
}  // namespace trainyard::engine
