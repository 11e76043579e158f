// Point-to-point ops in the flight recorder: send/recv entries round-trip their peer,
// microbatch and p2p seq (and leave the group's collective seqs alone), the dump shows
// them, hostile values in the new fields and a ring of another version are refused,
// and the stall analysis of a stuck send/recv names the microbatch, the peer and what
// the peer is doing, over hand-built snapshots and over real rings.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/flight/flight_ring.h"
#include "common/flight/stall_analysis.h"
#include "tests/support/files.h"

namespace trainyard::flight {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string MakeTempDir() {
  std::string tmpl = ::testing::TempDir() + "p2p_flight_XXXXXX";
  char* d = mkdtemp(tmpl.data());
  EXPECT_NE(d, nullptr);
  return tmpl;
}

TEST(P2PFlightRingTest, SendAndRecvEntriesRoundTrip) {
  const std::string dir = MakeTempDir();
  std::string error;
  auto ring = FlightRing::Create(dir, 3, 8, &error, 16);
  ASSERT_NE(ring, nullptr) << error;
  const int dp = ring->RegisterGroup("dp1", 2, 1);
  const int pp = ring->RegisterGroup("pp0", 4, 1);
  ring->Exit(dp, ring->Enter(dp, "allreduce", 10));
  ring->Exit(pp, ring->EnterP2P(pp, "send", 64, 5, 0, 1));
  ring->Exit(pp, ring->EnterP2P(pp, "send", 64, 5, 1, 2));
  ring->Exit(pp, ring->EnterP2P(pp, "recv", 64, 1, 0, 1));
  const std::uint64_t open = ring->EnterP2P(pp, "recv", 32, 1, 2, 5);
  EXPECT_EQ(ring->inflight_id(), open);
  EXPECT_EQ(ring->inflight_group(), pp);
  EXPECT_EQ(ring->inflight_op(), "recv");
  EXPECT_EQ(ring->inflight_peer(), 1);
  EXPECT_EQ(ring->inflight_microbatch(), 2);
  EXPECT_EQ(ring->inflight_p2p_seq(), 5u);
  // Send/recv are not collectives of the group.
  EXPECT_EQ(ring->group_entered(pp), 0u);

  RingSnapshot s;
  ASSERT_TRUE(ReadRing(ring->path(), 64, &s, &error)) << error;
  ASSERT_EQ(s.groups.size(), 2u);
  EXPECT_EQ(s.groups[0].member_rank, 1);
  EXPECT_EQ(s.groups[1].name, "pp0");
  EXPECT_EQ(s.groups[1].member_rank, 1);
  EXPECT_EQ(s.groups[1].entered, 0u);
  EXPECT_EQ(s.groups[1].completed, 0u);
  ASSERT_EQ(s.entries.size(), 5u);
  EXPECT_FALSE(s.entries[0].is_p2p());
  EXPECT_EQ(s.entries[0].peer, -1);
  EXPECT_EQ(s.entries[0].microbatch, -1);
  EXPECT_EQ(s.entries[0].p2p_seq, 0u);
  EXPECT_EQ(s.entries[0].group_seq, 1u);
  const EntrySnapshot& second_send = s.entries[2];
  EXPECT_EQ(second_send.op, "send");
  EXPECT_EQ(second_send.group_name, "pp0");
  EXPECT_EQ(second_send.group_seq, 0u);
  EXPECT_EQ(second_send.peer, 5);
  EXPECT_EQ(second_send.microbatch, 1);
  EXPECT_EQ(second_send.p2p_seq, 2u);
  EXPECT_GT(second_send.end_ns, 0);
  EXPECT_EQ(s.entries[4].end_ns, 0);
  // The in-flight entry comes with the snapshot even when no entries are asked for.
  ASSERT_TRUE(ReadRing(ring->path(), 0, &s, &error)) << error;
  EXPECT_THAT(s.entries, IsEmpty());
  EXPECT_EQ(s.inflight.id, open);
  EXPECT_EQ(s.inflight.op, "recv");
  EXPECT_EQ(s.inflight.peer, 1);
  EXPECT_EQ(s.inflight.microbatch, 2);
  EXPECT_EQ(s.inflight.p2p_seq, 5u);
  EXPECT_EQ(s.inflight.group_name, "pp0");

  ring->Exit(pp, open);
  EXPECT_EQ(ring->inflight_peer(), -1);
  EXPECT_EQ(ring->inflight_p2p_seq(), 0u);
  ASSERT_TRUE(ReadRing(ring->path(), 0, &s, &error)) << error;
  EXPECT_EQ(s.inflight.id, 0u);
}

TEST(P2PFlightRingTest, DumpShowsPeerMicrobatchAndSeq) {
  const std::string dir = MakeTempDir();
  std::string error;
  auto ring = FlightRing::Create(dir, 0, 2, &error, 8);
  ASSERT_NE(ring, nullptr) << error;
  const int pp = ring->RegisterGroup("pp0", 2, 0);
  ring->Exit(pp, ring->Enter(pp, "allreduce", 4));
  ring->EnterP2P(pp, "send", 8, 1, 3, 4);
  std::string json;
  ASSERT_TRUE(DumpFlightDirJson(dir, 64, &json, &error)) << error;
  const auto j = nlohmann::json::parse(json);
  const auto& r = j["rings"][0];
  EXPECT_EQ(r["groups"][0]["member_rank"], 0);
  const auto& collective = r["entries"][0];
  EXPECT_FALSE(collective.contains("peer"));
  const auto& send = r["entries"][1];
  EXPECT_EQ(send["op"], "send");
  EXPECT_EQ(send["peer"], 1);
  EXPECT_EQ(send["microbatch"], 3);
  EXPECT_EQ(send["p2p_seq"], 4);
  EXPECT_EQ(send["group_seq"], 0);
  EXPECT_EQ(send["in_flight"], true);
}

// A ring of rank 1 of 2 with one published send entry (id 1) to patch.
class HostileP2PRingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    std::string error;
    auto ring = FlightRing::Create(dir_, 1, 2, &error, 4);
    ASSERT_NE(ring, nullptr) << error;
    const int pp = ring->RegisterGroup("pp0", 2, 1);
    ring->Exit(pp, ring->EnterP2P(pp, "send", 8, 0, 2, 3));
    good_ = testing::ReadFileOrEmpty(ring->path());
    path_ = dir_ + "/hostile.ring";
  }
  std::string Error(const std::string& bytes) {
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << bytes;
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
  template <class T>
  std::string WithEntry(std::size_t field, T value) {
    return With(sizeof(RingHeader) + field, value);
  }
  std::string dir_, good_, path_;
};

TEST_F(HostileP2PRingTest, TheGoodRingReads) {
  RingSnapshot s;
  std::string error;
  ASSERT_TRUE(ReadRing(dir_ + "/" + RingFileName(1), 64, &s, &error)) << error;
  ASSERT_EQ(s.entries.size(), 1u);
  EXPECT_EQ(s.entries[0].peer, 0);
}

TEST_F(HostileP2PRingTest, AnotherVersionIsRefused) {
  EXPECT_THAT(Error(With<std::uint32_t>(offsetof(RingHeader, version), 1)),
              HasSubstr("version 1, this reader knows only version 2 (the ring was written by an older"));
  EXPECT_THAT(Error(With<std::uint32_t>(offsetof(RingHeader, version), 3)), HasSubstr("by a newer trainyard build"));
}

TEST_F(HostileP2PRingTest, GarbledP2PFieldsAreRefused) {
  EXPECT_THAT(Error(WithEntry<std::int64_t>(offsetof(EntrySlot, peer), 77)),
              HasSubstr("hostile.ring: entry 1 (send): peer 77 outside [-1, 2)"));
  EXPECT_THAT(Error(WithEntry<std::int64_t>(offsetof(EntrySlot, peer), -5)), HasSubstr("peer -5 outside [-1, 2)"));
  EXPECT_THAT(Error(WithEntry<std::int64_t>(offsetof(EntrySlot, microbatch), -2)),
              HasSubstr("entry 1 (send): microbatch -2 of a send/recv is negative"));
  EXPECT_THAT(Error(WithEntry<std::uint64_t>(offsetof(EntrySlot, p2p_seq), 0)),
              HasSubstr("entry 1 (send): p2p_seq 0 of a send/recv"));
  // A collective (peer -1) that claims a microbatch.
  EXPECT_THAT(Error(WithEntry<std::int64_t>(offsetof(EntrySlot, peer), -1)),
              HasSubstr("a collective with microbatch 2 and p2p_seq 3 (want -1 and 0)"));
  // A peer on an op that is neither send nor recv.
  std::string op(16, '\0');
  std::memcpy(op.data(), "allreduce", 9);
  std::string b = good_;
  std::memcpy(b.data() + sizeof(RingHeader) + offsetof(EntrySlot, op), op.data(), 16);
  EXPECT_THAT(Error(b), HasSubstr("entry 1 (allreduce): peer 0 on an op not send/recv"));
  EXPECT_THAT(Error(With<std::int64_t>(offsetof(RingHeader, groups) + offsetof(GroupSlot, member_rank), 2)),
              HasSubstr("group 0: member_rank 2 outside [-1, 2)"));
}

TEST_F(HostileP2PRingTest, AGarbledEntryStillBeingWrittenIsSkipped) {
  // An odd seqlock word: the writer is inside the entry; its fields are not checked.
  std::string b = WithEntry<std::int64_t>(offsetof(EntrySlot, peer), 77);
  std::memcpy(b.data() + sizeof(RingHeader) + offsetof(EntrySlot, seq), "\x03\0\0\0\0\0\0\0", 8);
  std::ofstream(path_, std::ios::binary | std::ios::trunc) << b;
  RingSnapshot s;
  std::string error;
  ASSERT_TRUE(ReadRing(path_, 64, &s, &error)) << error;
  EXPECT_THAT(s.entries, IsEmpty());
}

EntrySnapshot P2P(const std::string& op, int peer, std::int64_t microbatch, std::uint64_t seq, bool done,
                  const std::string& group = "pp0") {
  EntrySnapshot e;
  e.id = seq + 100;
  e.group_name = group;
  e.op = op;
  e.peer = peer;
  e.microbatch = microbatch;
  e.p2p_seq = seq;
  e.start_ns = 1;
  e.end_ns = done ? 2 : 0;
  return e;
}

EntrySnapshot Collective(const std::string& group, const std::string& op, std::uint64_t seq) {
  EntrySnapshot e;
  e.id = 500;
  e.group_name = group;
  e.op = op;
  e.group_seq = seq;
  return e;
}

// Ring of world rank `rank`, stage `stage` of pp0 (4 members).
RingSnapshot Stage(int rank, int stage, std::int64_t step = 12) {
  RingSnapshot s;
  s.rank = rank;
  s.world_size = 8;
  s.step = step;
  s.groups.push_back({"pp0", 4, 0, 0, stage});
  return s;
}

TEST(P2PStallTest, NamesThePeerThatHasNotSent) {
  RingSnapshot waiting = Stage(3, 1);
  waiting.inflight = P2P("recv", 1, 2, 5, false);
  RingSnapshot peer = Stage(1, 0);
  peer.groups.push_back({"dp0", 2, 7, 6, 0});
  peer.entries = {P2P("send", 3, 0, 3, true), P2P("send", 3, 1, 4, true), P2P("recv", 3, 0, 4, true),
                  P2P("send", 5, 2, 5, true)};
  peer.inflight = Collective("dp0", "allreduce", 7);
  const StallVerdict v = AnalyzeP2PStall({peer, waiting}, 3, waiting.inflight);
  EXPECT_EQ(v.lagging_rank, 1);
  EXPECT_THAT(v.waiting_ranks, ElementsAre(3));
  EXPECT_THAT(v.missing_ranks, ElementsAre(1));
  EXPECT_EQ(v.members_seen, 2);
  EXPECT_EQ(v.summary,
            "rank 3 (stage 1) waits in recv of microbatch 2 from rank 1 on group \"pp0\" (p2p seq 5); rank 1 "
            "(stage 0) has not reached the matching send (its last send to rank 3 on \"pp0\" was p2p seq 4, "
            "microbatch 1) and waits in allreduce on group \"dp0\" (seq 7) at step 12: lagging rank 1");
}

TEST(P2PStallTest, AStuckSendNamesAPeerWithNothingInFlight) {
  RingSnapshot waiting = Stage(1, 0);
  waiting.inflight = P2P("send", 3, 0, 1, false);
  RingSnapshot peer = Stage(3, 1, 4);
  const StallVerdict v = AnalyzeP2PStall({waiting, peer}, 1, waiting.inflight);
  EXPECT_EQ(v.lagging_rank, 3);
  EXPECT_EQ(v.summary,
            "rank 1 (stage 0) waits in send of microbatch 0 to rank 3 on group \"pp0\" (p2p seq 1); rank 3 "
            "(stage 1) has not reached the matching recv (no recv from rank 1 completed in its last 0 entries) "
            "and is in no collective or send/recv at step 4: lagging rank 3");
}

TEST(P2PStallTest, BothInsideThePairIsNoLaggardUnlessOneIsFrozen) {
  RingSnapshot waiting = Stage(3, 1);
  waiting.inflight = P2P("recv", 1, 2, 5, false);
  RingSnapshot peer = Stage(1, 0);
  peer.inflight = P2P("send", 3, 2, 5, false);
  StallVerdict v = AnalyzeP2PStall({waiting, peer}, 3, waiting.inflight);
  EXPECT_EQ(v.lagging_rank, -1);
  EXPECT_THAT(v.waiting_ranks, ElementsAre(1, 3));
  EXPECT_THAT(v.summary, HasSubstr("rank 1 (stage 0) waits in the matching send of microbatch 2 to rank 3 on "
                                   "group \"pp0\" (p2p seq 5) too; no rank lags"));
  // The peer's watchdog stopped beating 5 s ago: it is frozen inside the send.
  const std::int64_t now = 100'000'000'000;
  waiting.heartbeat_mono_ns = now - 100'000'000;
  peer.heartbeat_mono_ns = now - 5'000'000'000;
  v = AnalyzeP2PStall({waiting, peer}, 3, waiting.inflight, now, 1'000'000'000);
  EXPECT_EQ(v.lagging_rank, 1);
  EXPECT_THAT(v.waiting_ranks, ElementsAre(3));
  EXPECT_THAT(v.summary, HasSubstr("too and is frozen (no watchdog heartbeat for 5000 ms): lagging rank 1"));
}

TEST(P2PStallTest, MislabelledMicrobatchesAreShown) {
  RingSnapshot waiting = Stage(3, 1);
  waiting.inflight = P2P("recv", 1, 2, 5, false);
  RingSnapshot peer = Stage(1, 0);
  peer.entries = {P2P("send", 3, 3, 5, true)};
  const StallVerdict v = AnalyzeP2PStall({waiting, peer}, 3, waiting.inflight);
  EXPECT_EQ(v.lagging_rank, -1);
  EXPECT_THAT(v.summary, HasSubstr("rank 1 (stage 0) has completed the matching send (p2p seq 5) (microbatch 3 "
                                   "there, 2 here: the two sides label their ops differently)"));
}

TEST(P2PStallTest, APeerOffThisHostOrWithoutTheGroupIsNamed) {
  RingSnapshot waiting = Stage(3, 1);
  waiting.inflight = P2P("recv", 1, 2, 5, false);
  StallVerdict v = AnalyzeP2PStall({waiting}, 3, waiting.inflight);
  EXPECT_EQ(v.lagging_rank, 1);
  EXPECT_EQ(v.members_seen, 1);
  EXPECT_THAT(v.summary, HasSubstr("; rank 1's ring is not on this host: naming it, the only other party of the "
                                   "recv: lagging rank 1"));
  RingSnapshot stranger;
  stranger.rank = 1;
  v = AnalyzeP2PStall({waiting, stranger}, 3, waiting.inflight);
  EXPECT_EQ(v.lagging_rank, 1);
  EXPECT_THAT(v.summary, HasSubstr("rank 1 has no group \"pp0\" in its ring"));
}

TEST(P2PStallTest, OverRealRings) {
  // Rank 0 (stage 0) sent microbatches 0 and 1 to rank 1 and then entered a dp
  // all-reduce; rank 1 (stage 1) received both and waits for microbatch 2.
  const std::string dir = MakeTempDir();
  std::string error;
  auto r0 = FlightRing::Create(dir, 0, 4, &error, 8);
  auto r1 = FlightRing::Create(dir, 1, 4, &error, 8);
  ASSERT_NE(r0, nullptr) << error;
  ASSERT_NE(r1, nullptr) << error;
  const int pp0 = r0->RegisterGroup("pp0", 2, 0);
  const int dp0 = r0->RegisterGroup("dp0", 2, 0);
  const int pp1 = r1->RegisterGroup("pp0", 2, 1);
  for (int mb = 0; mb < 2; ++mb) {
    r0->Exit(pp0, r0->EnterP2P(pp0, "send", 16, 1, mb, mb + 1));
    r1->Exit(pp1, r1->EnterP2P(pp1, "recv", 16, 0, mb, mb + 1));
  }
  r0->SetStep(3);
  r0->Enter(dp0, "allreduce", 100);
  r1->EnterP2P(pp1, "recv", 16, 0, 2, 3);

  std::vector<std::string> bad;
  const std::vector<RingSnapshot> rings = ReadRingDir(dir, kDefaultEntries, &bad, &error);
  ASSERT_EQ(rings.size(), 2u) << error;
  EXPECT_THAT(bad, IsEmpty());
  const StallVerdict v = AnalyzeP2PStall(rings, 1, rings[1].inflight);
  EXPECT_EQ(v.lagging_rank, 0);
  EXPECT_EQ(v.summary,
            "rank 1 (stage 1) waits in recv of microbatch 2 from rank 0 on group \"pp0\" (p2p seq 3); rank 0 "
            "(stage 0) has not reached the matching send (its last send to rank 1 on \"pp0\" was p2p seq 2, "
            "microbatch 1) and waits in allreduce on group \"dp0\" (seq 1) at step 3: lagging rank 0");
}

TEST(P2PStallTest, DescribesEntries) {
  EXPECT_EQ(DescribeEntry(P2P("send", 4, 7, 9, false, "pp1")),
            "send of microbatch 7 to rank 4 on group \"pp1\" (p2p seq 9)");
  EXPECT_EQ(DescribeEntry(Collective("world", "alltoall", 3)), "alltoall on group \"world\" (seq 3)");
}

}  // namespace
}  // namespace trainyard::flight
