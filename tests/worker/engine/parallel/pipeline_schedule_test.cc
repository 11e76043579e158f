// Pipeline schedules as tables (pipeline_schedule.h), without torch. The timelines are
// drawn by hand from the dependency rules (forward needs the previous stage's forward,
// backward the next stage's backward and its own forward; one action at a time per
// rank, in list order), not printed by the code; the bubbles are the closed forms
// (p-1)/(m+p-1) and (p-1)/(v·m+p-1); broken tables are written by hand too.
#include "worker/engine/parallel/pipeline/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace trainyard::engine {
namespace {

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "message: " << (haystack)

PipeAction F(int mb, int stage) { return {PipeOp::kForward, mb, stage}; }
PipeAction B(int mb, int stage) { return {PipeOp::kBackward, mb, stage}; }

PipelineSchedule Table(int pp, int v, int m, std::vector<std::vector<PipeAction>> ranks) {
  return PipelineSchedule{"hand", pp, v, m, std::move(ranks)};
}

// Forwards before the first backward, per rank: the warm-up, plus the first
// steady-state forward when the warm-up does not already hold all of them.
std::vector<int> Warmups(const PipelineSchedule& s) {
  std::vector<int> out;
  for (const auto& list : s.ranks) {
    int n = 0;
    while (n < static_cast<int>(list.size()) && list[n].op == PipeOp::kForward) ++n;
    out.push_back(n);
  }
  return out;
}

std::string Render(const absl::StatusOr<PipelineSchedule>& s, double forward_cost, double backward_cost) {
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return "";
  absl::StatusOr<PipelineTimeline> t = Simulate(*s, forward_cost, backward_cost);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? RenderTimeline(*t) : "";
}

// Forward and backward both 1 tick. Rank 3 alternates from the start; each rank above
// it holds one more forward in flight and waits for the gradient from below.
TEST(PipelineScheduleTest, OneFOneBFourRanksFourMicrobatchesUnitCost) {
  const std::string want =
      "rank 0: F0 F1 F2 F3 .  .  .  B0 .  B1 .  B2 .  B3\n"
      "rank 1: .  F0 F1 F2 .  .  B0 F3 B1 .  B2 .  B3 .\n"
      "rank 2: .  .  F0 F1 .  B0 F2 B1 F3 B2 .  B3 .  .\n"
      "rank 3: .  .  .  F0 B0 F1 B1 F2 B2 F3 B3 .  .  .\n";
  EXPECT_EQ(Render(Make1F1B(4, 4), 1, 1), want);
}

// Forward 1 tick, backward 2: "--" is the backward's second tick.
TEST(PipelineScheduleTest, OneFOneBTwoRanksBackwardTwiceForward) {
  const std::string want =
      "rank 0: F0 F1 .  .  B0 -- .  B1 --\n"
      "rank 1: .  F0 B0 -- F1 B1 -- .  .\n";
  EXPECT_EQ(Render(Make1F1B(2, 2), 1, 2), want);
}

// pp=2, v=2, m=4, unit costs. Rank 0 holds stages 0 and 2, rank 1 stages 1 and 3.
// Forwards walk microbatches {0,1} through chunk 0 then chunk 1, then {2,3}; backwards
// the same with the chunks reversed. Warm-up: 4 forwards on rank 0, 2 on rank 1.
TEST(PipelineScheduleTest, InterleavedTwoRanksTwoChunksFourMicrobatchesUnitCost) {
  const std::string want =
      "rank 0: F0s0 F1s0 F0s2 F1s2 F2s0 B0s2 F3s0 B1s2 F2s2 B0s0 F3s2 B1s0 .    B2s2 .    B3s2 B2s0 B3s0\n"
      "rank 1: .    F0s1 F1s1 F0s3 B0s3 F1s3 B1s3 F2s1 B0s1 F3s1 B1s1 F2s3 B2s3 F3s3 B3s3 B2s1 B3s1 .\n";
  EXPECT_EQ(Render(MakeInterleaved1F1B(2, 2, 4), 1, 1), want);
}

TEST(PipelineScheduleTest, InterleavedTableOfRankZero) {
  absl::StatusOr<PipelineSchedule> s = MakeInterleaved1F1B(2, 2, 4);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->kind, "Interleaved1F1B");
  EXPECT_EQ(s->num_stages(), 4);
  const std::vector<PipeAction> want = {F(0, 0), F(1, 0), F(0, 2), F(1, 2), F(2, 0), B(0, 2), F(3, 0), B(1, 2),
                                        F(2, 2), B(0, 0), F(3, 2), B(1, 0), B(2, 2), B(3, 2), B(2, 0), B(3, 0)};
  EXPECT_EQ(s->ranks[0], want);
}

TEST(PipelineScheduleTest, WarmupCounts) {
  // Warm-up min(pp-1-r, m): 3, 2, 1, 0 for m=8; 2, 2, 1, 0 for m=2 (ranks 0 and 1 have
  // no steady state).
  EXPECT_EQ(Warmups(*Make1F1B(4, 8)), (std::vector<int>{4, 3, 2, 1}));
  EXPECT_EQ(Warmups(*Make1F1B(4, 2)), (std::vector<int>{2, 2, 2, 1}));
  // Warm-up min((pp-r-1)*2 + (v-1)*pp, m*v): pp=4, v=2 gives 10, 8, 6, 4; for m=4 the
  // cap of 8 leaves ranks 0 and 1 no steady state.
  EXPECT_EQ(Warmups(*MakeInterleaved1F1B(4, 2, 8)), (std::vector<int>{11, 9, 7, 5}));
  EXPECT_EQ(Warmups(*MakeInterleaved1F1B(4, 2, 4)), (std::vector<int>{8, 8, 7, 5}));
}

TEST(PipelineScheduleTest, EveryShapeValidates) {
  for (int pp = 1; pp <= 8; ++pp) {
    for (int m = 1; m <= 16; ++m) {
      absl::StatusOr<PipelineSchedule> s = Make1F1B(pp, m);
      ASSERT_TRUE(s.ok()) << s.status();
      EXPECT_EQ(s->kind, "1F1B");
      EXPECT_TRUE(ValidateSchedule(*s).ok()) << "pp=" << pp << " m=" << m << ": " << ValidateSchedule(*s);
    }
  }
  for (int pp = 2; pp <= 8; ++pp) {
    for (int v = 2; v <= 4; ++v) {
      for (int m = pp; m <= 16; m += pp) {
        absl::StatusOr<PipelineSchedule> s = MakeInterleaved1F1B(pp, v, m);
        ASSERT_TRUE(s.ok()) << s.status();
        EXPECT_TRUE(ValidateSchedule(*s).ok())
            << "pp=" << pp << " v=" << v << " m=" << m << ": " << ValidateSchedule(*s);
      }
    }
  }
}

// Forward 1, backward 2: the makespan is (m+p-1)·3 and each rank is busy 3m.
TEST(PipelineScheduleTest, OneFOneBBubbleIsTheory) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 16; ++m) {
      absl::StatusOr<PipelineTimeline> t = Simulate(*Make1F1B(p, m), 1, 2);
      ASSERT_TRUE(t.ok()) << t.status();
      EXPECT_NEAR(t->bubble_fraction, double(p - 1) / (m + p - 1), 1e-12) << "p=" << p << " m=" << m;
      EXPECT_NEAR(t->makespan, 3.0 * (m + p - 1), 1e-12) << "p=" << p << " m=" << m;
    }
  }
}

// Per-chunk costs 1/v and 2/v (one rank's whole forward still costs 1 per microbatch):
// the bubble shrinks by v.
TEST(PipelineScheduleTest, InterleavedBubbleIsTheory) {
  for (int p = 2; p <= 8; ++p) {
    for (int v = 2; v <= 4; ++v) {
      for (int m = p; m <= 16; m += p) {
        absl::StatusOr<PipelineTimeline> t = Simulate(*MakeInterleaved1F1B(p, v, m), 1.0 / v, 2.0 / v);
        ASSERT_TRUE(t.ok()) << t.status();
        EXPECT_NEAR(t->bubble_fraction, double(p - 1) / (v * m + p - 1), 1e-12)
            << "p=" << p << " v=" << v << " m=" << m;
      }
    }
  }
}

TEST(PipelineScheduleTest, BadShapesAreRefused) {
  auto message = [](const absl::Status& s) { return std::string(s.message()); };
  EXPECT_EQ(message(Make1F1B(0, 4).status()), "1F1B needs pp >= 1, got 0");
  EXPECT_EQ(message(Make1F1B(4, 0).status()), "1F1B needs microbatches >= 1, got 0");
  EXPECT_EQ(message(MakeInterleaved1F1B(0, 2, 4).status()), "Interleaved1F1B needs pp >= 1, got 0");
  EXPECT_EQ(message(MakeInterleaved1F1B(2, 2, 0).status()), "Interleaved1F1B needs microbatches >= 1, got 0");
  EXPECT_EQ(message(MakeInterleaved1F1B(2, 1, 4).status()),
            "Interleaved1F1B needs virtual_stages >= 2, got 1 (one stage per rank is 1F1B)");
  EXPECT_EQ(message(MakeInterleaved1F1B(4, 2, 6).status()),
            "Interleaved1F1B needs microbatches to be a multiple of pp, got 6 microbatches for pp = 4");
  EXPECT_EQ(Make1F1B(-1, 4).status().code(), absl::StatusCode::kInvalidArgument);

  absl::StatusOr<PipelineSchedule> s = Make1F1B(2, 2);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(message(Simulate(*s, 0, 2).status()), "costs must be positive and finite, got forward 0 and backward 2");
  EXPECT_FALSE(Simulate(*s, 1, -2).ok());
}

// GPipe's order (all forwards, then all backwards in reverse) is legal too: the
// validator checks the rules, not Make1F1B's output.
TEST(PipelineScheduleTest, HandWrittenGPipeIsValid) {
  PipelineSchedule s = Table(2, 1, 2, {{F(0, 0), F(1, 0), B(1, 0), B(0, 0)}, {F(0, 1), F(1, 1), B(1, 1), B(0, 1)}});
  EXPECT_TRUE(ValidateSchedule(s).ok()) << ValidateSchedule(s);
  absl::StatusOr<PipelineTimeline> t = Simulate(s, 1, 1);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(RenderTimeline(*t),
            "rank 0: F0 F1 .  .  B1 B0\n"
            "rank 1: .  F0 F1 B1 B0 .\n");
}

TEST(PipelineScheduleTest, MissingBackwardIsRefused) {
  PipelineSchedule s = *Make1F1B(2, 2);
  ASSERT_EQ(s.ranks[0].back(), B(1, 0));
  s.ranks[0].pop_back();
  EXPECT_EQ(ValidateSchedule(s).message(), "backward of microbatch 1 at stage 0 never runs: rank 0 has no such action");
  EXPECT_FALSE(Simulate(s).ok());
}

TEST(PipelineScheduleTest, ActionOnTheWrongRankIsRefused) {
  PipelineSchedule s = *Make1F1B(2, 2);
  ASSERT_EQ(s.ranks[1].back(), B(1, 1));
  s.ranks[1].pop_back();
  s.ranks[0].push_back(B(1, 1));
  EXPECT_EQ(
      ValidateSchedule(s).message(),
      "rank 0 tick 4: backward of microbatch 1 at stage 1 is on rank 0, but stage 1 lives on rank 1 (stage % pp)");

  // Interleaved placement: stage 2 of pp=2 belongs to rank 0, not rank 1.
  PipelineSchedule t = *MakeInterleaved1F1B(2, 2, 2);
  t.ranks[0].erase(t.ranks[0].begin() + 2);  // F0s2
  t.ranks[1].insert(t.ranks[1].begin(), F(0, 2));
  EXPECT_EQ(ValidateSchedule(t).message(),
            "rank 1 tick 0: forward of microbatch 0 at stage 2 is on rank 1, but stage 2 lives on rank 0 (stage % pp)");
}

TEST(PipelineScheduleTest, DuplicatesAndOutOfRangeAreRefused) {
  PipelineSchedule s = *Make1F1B(2, 2);
  s.ranks[1].push_back(F(0, 1));
  EXPECT_EQ(ValidateSchedule(s).message(),
            "rank 1 tick 4: forward of microbatch 0 at stage 1 runs twice (first at rank 1 tick 0)");

  PipelineSchedule t = *Make1F1B(2, 2);
  t.ranks[0][1].microbatch = 2;
  EXPECT_EQ(ValidateSchedule(t).message(),
            "rank 0 tick 1: forward of microbatch 2 at stage 0: microbatch out of range [0, 2)");

  PipelineSchedule u = *Make1F1B(2, 2);
  u.ranks.pop_back();
  EXPECT_EQ(ValidateSchedule(u).message(), "schedule has 1 rank lists for pp = 2");
}

// Rank 0 starts with a backward: it waits for rank 1's backward, which waits for rank
// 1's forward, which waits for rank 0's forward behind that backward.
TEST(PipelineScheduleTest, CrossRankDeadlockIsRefused) {
  PipelineSchedule s = Table(2, 1, 2, {{B(0, 0), F(0, 0), F(1, 0), B(1, 0)}, {F(0, 1), B(0, 1), F(1, 1), B(1, 1)}});
  absl::Status st = ValidateSchedule(s);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      st.message(),
      "deadlock: rank 0 tick 0: backward of microbatch 0 at stage 0 waits for backward of microbatch 0 at stage 1 "
      "(rank 1 tick 1), which never runs; rank 1 tick 0: forward of microbatch 0 at stage 1 waits for forward of "
      "microbatch 0 at stage 0 (rank 0 tick 1), which never runs");
}

// 1F1B pp=4 m=4 with rank 3's F1 and B1 swapped: B1 at stage 3 waits for its own
// forward behind it, and ranks 0..2 stop at their B1, each waiting for the rank below.
TEST(PipelineScheduleTest, ReorderedTableDeadlockNamesEveryStuckRank) {
  PipelineSchedule s = *Make1F1B(4, 4);
  ASSERT_EQ(s.ranks[3][2], F(1, 3));
  ASSERT_EQ(s.ranks[3][3], B(1, 3));
  std::swap(s.ranks[3][2], s.ranks[3][3]);
  const std::string message(ValidateSchedule(s).message());
  EXPECT_EQ(message,
            "deadlock: "
            "rank 0 tick 5: backward of microbatch 1 at stage 0 waits for backward of microbatch 1 at stage 1 "
            "(rank 1 tick 5), which never runs; "
            "rank 1 tick 5: backward of microbatch 1 at stage 1 waits for backward of microbatch 1 at stage 2 "
            "(rank 2 tick 4), which never runs; "
            "rank 2 tick 4: backward of microbatch 1 at stage 2 waits for backward of microbatch 1 at stage 3 "
            "(rank 3 tick 2), which never runs; "
            "rank 3 tick 2: backward of microbatch 1 at stage 3 waits for forward of microbatch 1 at stage 3 "
            "(rank 3 tick 3), which never runs");
  EXPECT_HAS(std::string(Simulate(s).status().message()), "deadlock: rank 0 tick 5");
}

}  // namespace
}  // namespace trainyard::engine
