#include <cmath>

#include <gtest/gtest.h>

#include "worker/engine/optim/lr_schedule.h"

namespace trainyard::engine {
namespace {

TEST(LrScheduleTest, WarmupThenCosineToTenPercent) {
  LrSchedule s(1.0, 4, 24);
  EXPECT_DOUBLE_EQ(s.At(1), 0.25);
  EXPECT_DOUBLE_EQ(s.At(4), 1.0);
  EXPECT_NEAR(s.At(14), 0.1 + 0.9 * 0.5, 1e-12);  // halfway through the decay
  EXPECT_NEAR(s.At(24), 0.1, 1e-12);
  for (int i = 5; i < 24; ++i) EXPECT_LT(s.At(i + 1), s.At(i));
}

TEST(LrScheduleTest, NoWarmupStartsNearPeak) {
  LrSchedule s(2.0, 0, 10);
  EXPECT_NEAR(s.At(1), 0.2 + 1.8 * 0.5 * (1 + std::cos(M_PI * 0.1)), 1e-12);
  EXPECT_NEAR(s.At(10), 0.2, 1e-12);
}

}  // namespace
}  // namespace trainyard::engine
