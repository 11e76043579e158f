// The GEMM peak probe's CPU shapes: kept as they are for a fast kernel, shrunk for a
// slow one (bf16 through LibTorch's reference loop) so the probe keeps to its time.
#include "worker/engine/train/gemm_peak_probe.h"

#include <gtest/gtest.h>

#include <array>

namespace trainyard::engine {
namespace {

using Shape = std::array<int, 3>;

TEST(GemmPeakProbeTest, AFastKernelKeepsTheShapes) {
  // 50 GFLOP/s (MKL fp32 on two cores): one 1024³ multiply is 43 ms, under 0.1 s.
  EXPECT_EQ(GemmPeakProbe::FitShape({1024, 1024, 1024}, 50e9, 0.1), (Shape{1024, 1024, 1024}));
  EXPECT_EQ(GemmPeakProbe::FitShape({2048, 256, 1024}, 50e9, 0.1), (Shape{2048, 256, 1024}));
}

TEST(GemmPeakProbeTest, ASlowKernelShrinksTheLargestSideUntilOneMultiplyFits) {
  // 1 GFLOP/s (bf16 without oneDNN): at most 0.1 s, so 2·m·k·n <= 1e8.
  const Shape square = GemmPeakProbe::FitShape({1024, 1024, 1024}, 1e9, 0.1);
  EXPECT_EQ(square, (Shape{256, 256, 512}));
  EXPECT_LE(2.0 * square[0] * square[1] * square[2], 1e8);
  EXPECT_GT(2.0 * square[0] * square[1] * square[2] * 2, 1e8) << "one halving fewer would not fit";
  const Shape skinny = GemmPeakProbe::FitShape({2048, 256, 1024}, 1e9, 0.1);
  EXPECT_EQ(skinny, (Shape{256, 256, 512}));
  // A hopeless rate stops at 64 on every side rather than at nothing.
  EXPECT_EQ(GemmPeakProbe::FitShape({1024, 2048, 256}, 1.0, 0.1), (Shape{64, 64, 64}));
}

}  // namespace
}  // namespace trainyard::engine
