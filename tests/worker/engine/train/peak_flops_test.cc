// PeakFlops, the denominator of MFU, with a scripted probe in place of the GEMM
// measurement: which steps re-measure the peak, and the MFU that results, worked out by
// hand from the figures the probe returns. No timing: the probe returns fixed numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "worker/engine/train/step_report.h"

namespace trainyard::engine {
namespace {

// A probe that returns `figures` in turn (the last one again once they run out) and
// records the step the run was at when it was called.
class ScriptedProbe {
 public:
  explicit ScriptedProbe(std::vector<double> figures) : figures_(std::move(figures)) {}

  PeakFlops::Probe AsProbe() {
    return [this] {
      probed_at_.push_back(step_);
      const double f = figures_[std::min(next_, figures_.size() - 1)];
      ++next_;
      return f;
    };
  }
  void AtStep(int step) { step_ = step; }
  const std::vector<int>& probed_at() const { return probed_at_; }

 private:
  std::vector<double> figures_;
  std::size_t next_ = 0;
  int step_ = 0;
  std::vector<int> probed_at_;
};

// One PeakFlops driven as the Trainer drives it: BeforeStep, then Mfu with the step's
// achieved FLOP/s; returns the MFU.
double RunStep(PeakFlops& peak, ScriptedProbe& probe, int step, double achieved) {
  probe.AtStep(step);
  peak.BeforeStep(step);
  return peak.Mfu(step, achieved);
}

TEST(PeakFlopsTest, AnUnknownPeakReportsZeroAndNeverProbes) {
  ScriptedProbe probe({1e12});
  PeakFlops peak(0, probe.AsProbe());
  for (int s = 1; s <= 12; ++s) EXPECT_EQ(RunStep(peak, probe, s, 5e9), 0.0) << "step " << s;
  EXPECT_TRUE(probe.probed_at().empty());
}

TEST(PeakFlopsTest, TheStartOfStepThreeProbesOnceAndKeepsTheHigherPeak) {
  ASSERT_EQ(PeakFlops::kReprobeStep, 3);
  // 100 at start-up, 150 measured before step 3: steps 1-2 against 100, then 150.
  ScriptedProbe higher({150});
  PeakFlops raised(100, higher.AsProbe());
  for (int s = 1; s <= 12; ++s) EXPECT_DOUBLE_EQ(RunStep(raised, higher, s, 75), s < 3 ? 0.75 : 0.5) << "step " << s;
  EXPECT_EQ(higher.probed_at(), (std::vector<int>{3}));

  // 80 measured before step 3 is below the start-up figure: 100 stays.
  ScriptedProbe lower({80});
  PeakFlops kept(100, lower.AsProbe());
  for (int s = 1; s <= 6; ++s) EXPECT_DOUBLE_EQ(RunStep(kept, lower, s, 50), 0.5) << "step " << s;
  EXPECT_EQ(lower.probed_at(), (std::vector<int>{3}));
}

TEST(PeakFlopsTest, StepsAtOrBelowThePeakNeverReprobe) {
  // Peak 100; step 1 reaches it exactly, the others a quarter of it.
  ScriptedProbe probe({100});
  PeakFlops peak(100, probe.AsProbe());
  for (int s = 1; s <= 12; ++s) {
    const double achieved = s == 1 ? 100 : 25;
    EXPECT_DOUBLE_EQ(RunStep(peak, probe, s, achieved), achieved / 100) << "step " << s;
  }
  EXPECT_EQ(probe.probed_at(), (std::vector<int>{3}));  // the start of step 3 only
}

// Steps faster than the peak re-measure it, at most once every kReprobeInterval (5)
// steps counted from the last re-measure, while each re-measure beats its step.
TEST(PeakFlopsTest, StepsThatBeatThePeakReprobeAtMostOnceAnInterval) {
  ASSERT_EQ(PeakFlops::kReprobeInterval, 5);
  // Peak 100 at start-up. By hand:
  //   step 1: 250 > 100, probe 260 (not below 250); peak 260, next re-probe from step 6.
  //   step 3: the start-of-step probe, 255: peak stays 260.
  //   step 6: 265 > 260, probe 270; next from step 11.
  //   steps 7-10: 275 > 270, too early: no probe, MFU above 1.
  //   step 11: 275 > 270, probe 280; next from 16. Steps 12-15: 285, no probe.
  //   step 16: 285 > 280, probe 290.
  ScriptedProbe probe({260, 255, 270, 280, 290});
  PeakFlops peak(100, probe.AsProbe());
  for (int s = 1; s <= 5; ++s) EXPECT_DOUBLE_EQ(RunStep(peak, probe, s, 250), 250.0 / 260) << "step " << s;
  EXPECT_DOUBLE_EQ(RunStep(peak, probe, 6, 265), 265.0 / 270);
  for (int s = 7; s <= 10; ++s) EXPECT_DOUBLE_EQ(RunStep(peak, probe, s, 275), 275.0 / 270) << "step " << s;
  EXPECT_DOUBLE_EQ(RunStep(peak, probe, 11, 275), 275.0 / 280);
  for (int s = 12; s <= 15; ++s) EXPECT_DOUBLE_EQ(RunStep(peak, probe, s, 285), 285.0 / 280) << "step " << s;
  EXPECT_DOUBLE_EQ(RunStep(peak, probe, 16, 285), 285.0 / 290);
  EXPECT_EQ(probe.probed_at(), (std::vector<int>{1, 3, 6, 11, 16}));
}

// A re-measure below the step that prompted it ends the re-measures that steps prompt:
// from then on the fastest step's rate is the peak, so MFU is at most 1.
TEST(PeakFlopsTest, AReprobeBelowItsStepEndsReprobingAndTheFastestStepIsThePeak) {
  // Peak 100 at start-up. By hand:
  //   step 1: 150 > 100, probe 120 (below 150): no more re-probes; peak 150, MFU 1.
  //   step 3: the start-of-step probe still runs, 90: peak stays 150.
  //   step 6: 180 > 150 where a re-probe would be due: none; peak 180, MFU 1.
  //   step 20: 200 > 180: none; peak 200, MFU 1. The probe's 10000 is never asked for.
  ScriptedProbe probe({120, 90, 10000});
  PeakFlops peak(100, probe.AsProbe());
  EXPECT_DOUBLE_EQ(RunStep(peak, probe, 1, 150), 1.0);
  EXPECT_DOUBLE_EQ(RunStep(peak, probe, 2, 75), 0.5);
  EXPECT_DOUBLE_EQ(RunStep(peak, probe, 3, 75), 0.5);
  EXPECT_DOUBLE_EQ(RunStep(peak, probe, 6, 180), 1.0);
  EXPECT_DOUBLE_EQ(RunStep(peak, probe, 9, 90), 0.5);
  EXPECT_DOUBLE_EQ(RunStep(peak, probe, 20, 200), 1.0);
  EXPECT_DOUBLE_EQ(RunStep(peak, probe, 21, 50), 0.25);
  EXPECT_EQ(probe.probed_at(), (std::vector<int>{1, 3}));
}

}  // namespace
}  // namespace trainyard::engine
