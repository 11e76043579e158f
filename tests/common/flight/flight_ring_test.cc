// The flight recorder ring (common/flight): write a ring, read it back, dump a folder
// as JSON; hostile files (short, wrong magic or version, garbled sizes) give precise
// errors; the stall analysis over hand-built snapshots; profiling windows.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/artifact_name.h"
#include "common/flight/artifact_file.h"
#include "common/flight/flight_ring.h"
#include "common/flight/stall_analysis.h"

#include "tests/support/files.h"

namespace trainyard::flight {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string MakeTempDir() {
  std::string tmpl = ::testing::TempDir() + "flight_XXXXXX";
  char* d = mkdtemp(tmpl.data());
  EXPECT_NE(d, nullptr);
  return tmpl;
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

TEST(FlightRingTest, WritesAndReadsBack) {
  const std::string dir = MakeTempDir() + "/flight";
  std::string error;
  auto ring = FlightRing::Create(dir, 3, 4, &error, 8);
  ASSERT_NE(ring, nullptr) << error;
  EXPECT_EQ(ring->path(), dir + "/rank-00003.ring");
  const int world = ring->RegisterGroup("world", 4);
  const int dp = ring->RegisterGroup("dp0", 2);
  ASSERT_EQ(world, 0);
  ASSERT_EQ(dp, 1);
  ring->SetStep(7);
  ring->Exit(world, ring->Enter(world, "allreduce", 10));
  ring->Exit(dp, ring->Enter(dp, "allreduce", 20));
  const std::uint64_t open_id = ring->Enter(world, "alltoall", 30);
  EXPECT_EQ(ring->inflight_id(), open_id);
  EXPECT_EQ(ring->inflight_group(), world);
  EXPECT_EQ(ring->inflight_op(), "alltoall");
  EXPECT_EQ(ring->group_entered(world), 2u);

  RingSnapshot s;
  ASSERT_TRUE(ReadRing(ring->path(), 64, &s, &error)) << error;
  EXPECT_EQ(s.rank, 3);
  EXPECT_EQ(s.world_size, 4);
  EXPECT_EQ(s.pid, getpid());
  EXPECT_EQ(s.step, 7);
  EXPECT_GT(s.progress_real_ns, 0);
  EXPECT_EQ(s.total_entries, 3u);
  EXPECT_EQ(s.inflight_id, open_id);
  ASSERT_EQ(s.groups.size(), 2u);
  EXPECT_EQ(s.groups[0].name, "world");
  EXPECT_EQ(s.groups[0].size, 4);
  EXPECT_EQ(s.groups[0].entered, 2u);
  EXPECT_EQ(s.groups[0].completed, 1u);
  EXPECT_EQ(s.groups[1].name, "dp0");
  EXPECT_EQ(s.groups[1].completed, 1u);
  ASSERT_EQ(s.entries.size(), 3u);
  EXPECT_EQ(s.entries[0].op, "allreduce");
  EXPECT_EQ(s.entries[0].group_name, "world");
  EXPECT_EQ(s.entries[0].group_seq, 1u);
  EXPECT_EQ(s.entries[0].numel, 10);
  EXPECT_GT(s.entries[0].end_ns, 0);
  EXPECT_EQ(s.entries[1].group_name, "dp0");
  EXPECT_EQ(s.entries[2].op, "alltoall");
  EXPECT_EQ(s.entries[2].group_seq, 2u);
  EXPECT_EQ(s.entries[2].end_ns, 0);  // in flight
}

TEST(FlightRingTest, KeepsOnlyTheLastEntriesWhenItWraps) {
  const std::string dir = MakeTempDir();
  std::string error;
  auto ring = FlightRing::Create(dir, 0, 1, &error, 4);
  ASSERT_NE(ring, nullptr) << error;
  const int g = ring->RegisterGroup("a-very-long-group-name", 2);
  for (int i = 0; i < 10; ++i) ring->Exit(g, ring->Enter(g, "allreduce", i));
  RingSnapshot s;
  ASSERT_TRUE(ReadRing(ring->path(), 64, &s, &error)) << error;
  EXPECT_EQ(s.groups[0].name, std::string("a-very-long-group-name").substr(0, kMaxName));
  ASSERT_EQ(s.entries.size(), 4u);
  EXPECT_EQ(s.entries.front().id, 7u);
  EXPECT_EQ(s.entries.back().id, 10u);
  EXPECT_EQ(s.entries.back().numel, 9);
  ASSERT_TRUE(ReadRing(ring->path(), 2, &s, &error)) << error;
  ASSERT_EQ(s.entries.size(), 2u);
  EXPECT_EQ(s.entries.front().group_seq, 9u);
}

TEST(FlightRingTest, GroupTableFullIsReported) {
  std::string error;
  auto ring = FlightRing::Create(MakeTempDir(), 0, 1, &error, 4);
  ASSERT_NE(ring, nullptr) << error;
  for (int i = 0; i < kMaxGroups; ++i) EXPECT_EQ(ring->RegisterGroup("g" + std::to_string(i), 2), i);
  EXPECT_EQ(ring->RegisterGroup("one-too-many", 2), -1);
}

class HostileRingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    std::string error;
    auto ring = FlightRing::Create(dir_, 1, 2, &error, 4);
    ASSERT_NE(ring, nullptr) << error;
    ring->Enter(ring->RegisterGroup("world", 2), "allreduce", 1);
    good_ = testing::ReadFileOrEmpty(ring->path());
    path_ = dir_ + "/hostile.ring";
  }
  std::string Error(const std::string& bytes) {
    WriteAll(path_, bytes);
    RingSnapshot s;
    std::string error;
    EXPECT_FALSE(ReadRing(path_, 64, &s, &error));
    return error;
  }
  template <class T>
  std::string With(std::size_t offset, T value) {
    std::string b = good_;
    std::memcpy(b.data() + offset, &value, sizeof(value));
    return b;
  }
  std::string dir_, good_, path_;
};

TEST_F(HostileRingTest, MissingFile) {
  RingSnapshot s;
  std::string error;
  EXPECT_FALSE(ReadRing(dir_ + "/nope.ring", 64, &s, &error));
  EXPECT_THAT(error, HasSubstr("nope.ring"));
  EXPECT_THAT(error, HasSubstr("No such file"));
}

TEST_F(HostileRingTest, EmptyAndTruncated) {
  EXPECT_THAT(Error(""), HasSubstr("truncated: 0 bytes"));
  EXPECT_THAT(Error(good_.substr(0, 100)), HasSubstr("truncated: 100 bytes"));
  // A whole header but entries cut off.
  EXPECT_THAT(Error(good_.substr(0, sizeof(RingHeader) + 10)), HasSubstr("entries need"));
  EXPECT_THAT(Error(good_ + "x"), HasSubstr("entries need"));
}

TEST_F(HostileRingTest, WrongMagicVersionAndSizes) {
  EXPECT_THAT(Error(With<std::uint64_t>(offsetof(RingHeader, magic), 0x1234)), HasSubstr("bad magic"));
  EXPECT_THAT(Error(With<std::uint32_t>(offsetof(RingHeader, version), 99)), HasSubstr("version 99"));
  EXPECT_THAT(Error(With<std::uint32_t>(offsetof(RingHeader, entry_bytes), 7)), HasSubstr("layout mismatch"));
  EXPECT_THAT(Error(With<std::uint32_t>(offsetof(RingHeader, entry_count), 0)), HasSubstr("entry_count 0"));
  EXPECT_THAT(Error(With<std::uint32_t>(offsetof(RingHeader, entry_count), 0xffffffffu)),
              HasSubstr("entry_count 4294967295"));
  EXPECT_THAT(Error(With<std::uint32_t>(offsetof(RingHeader, entry_count), 5)), HasSubstr("entries need"));
  EXPECT_THAT(Error(With<std::int64_t>(offsetof(RingHeader, group_count), -3)), HasSubstr("group_count -3"));
  EXPECT_THAT(Error(With<std::int64_t>(offsetof(RingHeader, group_count), 1000)), HasSubstr("group_count 1000"));
}

TEST_F(HostileRingTest, GarbageEntriesAreSkippedNotTrusted) {
  // next_id claims far more entries than ever published; slots whose seqlock does not
  // match their id are skipped.
  RingSnapshot s;
  std::string error;
  WriteAll(path_, With<std::uint64_t>(offsetof(RingHeader, next_id), 1000000));
  ASSERT_TRUE(ReadRing(path_, 64, &s, &error)) << error;
  EXPECT_TRUE(s.entries.empty());
}

TEST_F(HostileRingTest, DumpListsGoodRingsAndNamesBadOnes) {
  WriteAll(path_, "garbage");
  std::string json, error;
  ASSERT_TRUE(DumpFlightDirJson(dir_, 64, &json, &error)) << error;
  const auto j = nlohmann::json::parse(json);
  ASSERT_EQ(j["rings"].size(), 1u);
  EXPECT_EQ(j["rings"][0]["rank"], 1);
  EXPECT_EQ(j["rings"][0]["groups"][0]["name"], "world");
  EXPECT_EQ(j["rings"][0]["entries"][0]["op"], "allreduce");
  EXPECT_EQ(j["rings"][0]["entries"][0]["in_flight"], true);
  ASSERT_EQ(j["errors"].size(), 1u);
  EXPECT_THAT(j["errors"][0].get<std::string>(), HasSubstr("hostile.ring: truncated"));
  EXPECT_FALSE(DumpFlightDirJson(dir_ + "/absent", 64, &json, &error));
  EXPECT_THAT(error, HasSubstr("absent"));
}

RingSnapshot Ring(int rank, std::vector<GroupSnapshot> groups) {
  RingSnapshot s;
  s.rank = rank;
  s.groups = std::move(groups);
  return s;
}

TEST(StallAnalysisTest, NamesTheMemberThatNeverEntered) {
  // dp0 = {0, 2}; rank 1 is in another dp group; rank 2 stopped before seq 5.
  const std::vector<RingSnapshot> rings = {
      Ring(0, {{"world", 4, 9, 9}, {"dp0", 2, 5, 4}}),
      Ring(1, {{"world", 4, 9, 9}, {"dp1", 2, 5, 4}}),
      Ring(2, {{"world", 4, 9, 9}, {"dp0", 2, 4, 4}}),
  };
  const StallVerdict v = AnalyzeCollectiveStall(rings, "dp0", 5, 2);
  EXPECT_EQ(v.lagging_rank, 2);
  EXPECT_THAT(v.waiting_ranks, ElementsAre(0));
  EXPECT_THAT(v.missing_ranks, ElementsAre(2));
  EXPECT_EQ(v.members_seen, 2);
  EXPECT_THAT(v.summary, HasSubstr("lagging rank 2 last entered seq 4"));
}

TEST(StallAnalysisTest, TheFurthestBehindLags) {
  const std::vector<RingSnapshot> rings = {
      Ring(0, {{"world", 4, 7, 6}}), Ring(1, {{"world", 4, 6, 6}}),
      Ring(2, {{"world", 4, 3, 3}}), Ring(3, {{"world", 4, 7, 6}}),
  };
  const StallVerdict v = AnalyzeCollectiveStall(rings, "world", 7, 4);
  EXPECT_EQ(v.lagging_rank, 2);
  EXPECT_THAT(v.missing_ranks, ElementsAre(1, 2));
  EXPECT_THAT(v.waiting_ranks, ElementsAre(0, 3));
}

TEST(StallAnalysisTest, UnknownWhenTheLaggardIsNotOnThisHost) {
  const std::vector<RingSnapshot> rings = {Ring(0, {{"world", 4, 7, 6}}), Ring(1, {{"world", 4, 7, 6}})};
  const StallVerdict v = AnalyzeCollectiveStall(rings, "world", 7, 4);
  EXPECT_EQ(v.lagging_rank, -1);
  EXPECT_THAT(v.waiting_ranks, ElementsAre(0, 1));
  EXPECT_THAT(v.summary, HasSubstr("not on this host"));
}

TEST(StallAnalysisTest, EveryMemberInsideMeansNoLaggard) {
  const std::vector<RingSnapshot> rings = {Ring(0, {{"world", 2, 7, 6}}), Ring(1, {{"world", 2, 7, 6}})};
  const StallVerdict v = AnalyzeCollectiveStall(rings, "world", 7, 2);
  EXPECT_EQ(v.lagging_rank, -1);
  EXPECT_THAT(v.summary, HasSubstr("stuck inside"));
}

TEST(StallAnalysisTest, AFrozenMemberInsideTheCollectiveLags) {
  // Both entered seq 7; rank 1's watchdog stopped beating 5 s ago (SIGSTOP).
  std::vector<RingSnapshot> rings = {Ring(0, {{"world", 2, 7, 6}}), Ring(1, {{"world", 2, 7, 6}})};
  const std::int64_t now = 100'000'000'000;
  rings[0].heartbeat_mono_ns = now - 100'000'000;
  rings[1].heartbeat_mono_ns = now - 5'000'000'000;
  const StallVerdict v = AnalyzeCollectiveStall(rings, "world", 7, 2, now, 1'000'000'000);
  EXPECT_EQ(v.lagging_rank, 1);
  EXPECT_THAT(v.waiting_ranks, ElementsAre(0));
  EXPECT_THAT(v.summary, HasSubstr("frozen"));
  // Without the heartbeat rule nobody lags.
  EXPECT_EQ(AnalyzeCollectiveStall(rings, "world", 7, 2).lagging_rank, -1);
  // A member behind in seq wins over a frozen one.
  rings[0].groups[0].entered = 6;
  EXPECT_EQ(AnalyzeCollectiveStall(rings, "world", 7, 2, now, 1'000'000'000).lagging_rank, 0);
}

TEST(ProfileWindowTest, StepsInsideTheWindow) {
  // freq 5, warmup 1, active 2: steps 2,3 then 7,8 ...
  std::vector<int> profiled;
  for (int s = 1; s <= 10; ++s) {
    if (IsProfiledStep(s, 5, 1, 2)) profiled.push_back(s);
  }
  EXPECT_THAT(profiled, ElementsAre(2, 3, 7, 8));
  EXPECT_EQ(ProfileWindowStart(3, 5, 1, 2), 2);
  EXPECT_EQ(ProfileWindowStart(8, 5, 1, 2), 7);
  EXPECT_EQ(ProfileWindowStart(4, 5, 1, 2), 0);
  EXPECT_TRUE(IsProfiledStep(1, 1, 0, 1));
  EXPECT_FALSE(IsProfiledStep(0, 5, 0, 1));
}

TEST(ArtifactFileTest, WritesAtomicallyWithDigest) {
  const std::string dir = MakeTempDir() + "/artifacts";
  absl::StatusOr<WrittenArtifact> a = WriteArtifactFile(dir, "flight-a1-r0.json", "abc");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(testing::ReadFileOrEmpty(a->path), "abc");
  EXPECT_EQ(a->size_bytes, 3);
  EXPECT_EQ(a->sha256, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  absl::StatusOr<WrittenArtifact> evil = WriteArtifactFile(dir, "../evil", "x");
  EXPECT_FALSE(evil.ok());
  EXPECT_THAT(std::string(evil.status().message()), HasSubstr("does not match"));
  EXPECT_FALSE(IsArtifactName(".hidden"));
  EXPECT_TRUE(IsArtifactName("trace-a1-r0-s00000002.json"));
}

}  // namespace
}  // namespace trainyard::flight
