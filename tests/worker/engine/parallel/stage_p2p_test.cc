// Point-to-point stage communication (CollectiveGroup::SendAsync/RecvAsync) with real
// Gloo ranks: threads of this process over an in-process c10d::HashStore, each rank
// with its own flight ring in one folder. Tensors arrive intact and in order, both
// directions at once do not deadlock, bad arguments are refused, the rings record
// peer, microbatch and p2p seq, and a recv that is never matched is the in-flight
// entry that the stall analysis explains.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/flight/flight_ring.h"
#include "common/flight/stall_analysis.h"
#include "worker/engine/parallel/mesh/collective_group.h"

namespace trainyard::engine {
namespace {

std::string MakeTempDir() {
  std::string tmpl = ::testing::TempDir() + "stage_p2p_XXXXXX";
  EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
  return tmpl;
}

// Runs fn(rank, world) on `n` threads that form one Gloo world, each recording into
// its own ring in `dir` with the world named `name`; rethrows the first failure on the
// calling thread.
void RunRanks(int n, const std::string& dir, std::chrono::milliseconds timeout,
              const std::function<void(int, CollectiveGroup&, flight::FlightRing&)>& fn,
              const std::string& name = "world") {
  auto store = compat::MakeHashStore();
  std::vector<std::thread> threads;
  std::mutex mu;
  std::exception_ptr error;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        std::string why;
        auto ring = flight::FlightRing::Create(dir, r, n, &why, 64);
        if (ring == nullptr) throw std::runtime_error(why);
        auto world = CollectiveGroup::OverStore(store, r, n, "127.0.0.1", timeout);
        world->AttachRecorder(ring.get(), name);
        fn(r, *world, *ring);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

flight::RingSnapshot ReadRank(const std::string& dir, int rank) {
  flight::RingSnapshot s;
  std::string error;
  EXPECT_TRUE(flight::ReadRing(dir + "/" + flight::RingFileName(rank), 64, &s, &error)) << error;
  return s;
}

std::vector<flight::EntrySnapshot> P2PEntries(const flight::RingSnapshot& s) {
  std::vector<flight::EntrySnapshot> out;
  for (const auto& e : s.entries) {
    if (e.is_p2p()) out.push_back(e);
  }
  return out;
}

torch::Tensor Payload(int64_t microbatch, int64_t n, torch::Dtype dtype) {
  return (torch::arange(n, torch::kFloat32) + 100 * microbatch).to(dtype);
}

TEST(StageP2PTest, MicrobatchesArriveInOrderAsFp32AndBf16) {
  // World {0, 1, 2}; the pipeline group pp0 = {0, 2}, so group rank 1 is world rank 2
  // and the rings must name world ranks.
  const std::string dir = MakeTempDir();
  constexpr int kMicrobatches = 4;
  RunRanks(3, dir, std::chrono::seconds(60), [&](int rank, CollectiveGroup& world, flight::FlightRing&) {
    if (rank == 1) return;
    auto pp = world.NewSubgroup("pp0", {0, 2});
    EXPECT_EQ(pp->WorldRank(1), 2);
    if (rank == 0) {
      std::vector<CollectiveGroup::Pending> sends;
      for (int mb = 0; mb < kMicrobatches; ++mb) {
        sends.push_back(pp->SendAsync(Payload(mb, 1000, torch::kFloat32), 1, mb));
        sends.push_back(pp->SendAsync(Payload(mb, 24, torch::kBFloat16).view({4, 6}), 1, mb));
      }
      for (auto& p : sends) p.Wait();
      EXPECT_EQ(pp->seq(), 0u);  // send/recv are not collectives
      return;
    }
    // Every recv posted first, then waited for last to first.
    std::vector<torch::Tensor> fp32, bf16;
    std::vector<CollectiveGroup::Pending> recvs;
    for (int mb = 0; mb < kMicrobatches; ++mb) {
      fp32.push_back(torch::full({1000}, -1.0f));
      bf16.push_back(torch::zeros({4, 6}, torch::kBFloat16));
      recvs.push_back(pp->RecvAsync(fp32.back(), 0, mb));
      recvs.push_back(pp->RecvAsync(bf16.back(), 0, mb));
    }
    for (auto it = recvs.rbegin(); it != recvs.rend(); ++it) it->Wait();
    for (int mb = 0; mb < kMicrobatches; ++mb) {
      EXPECT_TRUE(torch::equal(fp32[mb], Payload(mb, 1000, torch::kFloat32))) << "fp32 microbatch " << mb;
      EXPECT_TRUE(torch::equal(bf16[mb], Payload(mb, 24, torch::kBFloat16).view({4, 6}))) << "bf16 microbatch " << mb;
    }
  });
  for (int rank : {0, 2}) {
    const flight::RingSnapshot s = ReadRank(dir, rank);
    const int g = s.FindGroup("pp0");
    ASSERT_GE(g, 0);
    EXPECT_EQ(s.groups[g].member_rank, rank == 0 ? 0 : 1);
    EXPECT_EQ(s.groups[g].entered, 0u);
    const auto entries = P2PEntries(s);
    ASSERT_EQ(entries.size(), 2u * kMicrobatches) << "rank " << rank;
    std::vector<uint64_t> seqs;
    for (const auto& e : entries) seqs.push_back(e.p2p_seq);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const auto& e = entries[i];
      EXPECT_EQ(e.op, rank == 0 ? "send" : "recv");
      EXPECT_EQ(e.group_name, "pp0");
      EXPECT_EQ(e.peer, rank == 0 ? 2 : 0);
      EXPECT_GT(e.end_ns, 0);
      if (rank == 0) {
        // Waited in posting order: seq i+1 carries microbatch i/2.
        EXPECT_EQ(e.p2p_seq, i + 1);
        EXPECT_EQ(e.microbatch, static_cast<int64_t>(i / 2));
        EXPECT_EQ(e.numel, i % 2 == 0 ? 1000 : 24);
      } else {
        // Waited last to first.
        EXPECT_EQ(e.p2p_seq, entries.size() - i);
        EXPECT_EQ(e.microbatch, static_cast<int64_t>((entries.size() - 1 - i) / 2));
      }
    }
  }
}

TEST(StageP2PTest, BothDirectionsAtOnceDoNotDeadlock) {
  // 1F1B's steady state between two stages: stage 0 sends microbatch k's activation
  // while stage 1 sends microbatch k-1's gradient. Each rank posts its pair before
  // waiting for either (stage 0 its send first, stage 1 its recv first: the order that
  // also suits NCCL) and waits for its recv before its send.
  const std::string dir = MakeTempDir();
  constexpr int kMicrobatches = 4;
  constexpr int64_t kNumel = 1 << 20;  // 4 MiB: larger than any transport buffer
  RunRanks(2, dir, std::chrono::seconds(60), [&](int rank, CollectiveGroup& pp, flight::FlightRing&) {
    for (int k = 0; k <= kMicrobatches; ++k) {
      const bool forward = k < kMicrobatches;  // activation k: 0 -> 1
      const bool backward = k >= 1;            // gradient k-1: 1 -> 0
      torch::Tensor in = torch::empty({kNumel});
      CollectiveGroup::Pending send, recv;
      if (rank == 0) {
        if (forward) send = pp.SendAsync(Payload(k, kNumel, torch::kFloat32), 1, k);
        if (backward) recv = pp.RecvAsync(in, 1, k - 1);
      } else {
        if (forward) recv = pp.RecvAsync(in, 0, k);
        if (backward) send = pp.SendAsync(-Payload(k - 1, kNumel, torch::kFloat32), 0, k - 1);
      }
      recv.Wait();
      send.Wait();
      if (rank == 0 && backward) {
        EXPECT_TRUE(torch::equal(in, -Payload(k - 1, kNumel, torch::kFloat32))) << "gradient " << k - 1;
      }
      if (rank == 1 && forward) {
        EXPECT_TRUE(torch::equal(in, Payload(k, kNumel, torch::kFloat32))) << "activation " << k;
      }
    }
  });
  for (int rank : {0, 1}) {
    const auto entries = P2PEntries(ReadRank(dir, rank));
    ASSERT_EQ(entries.size(), 2u * kMicrobatches);
    uint64_t sends = 0, recvs = 0;
    for (const auto& e : entries) {
      EXPECT_EQ(e.peer, 1 - rank);
      const uint64_t seq = e.op == "send" ? ++sends : ++recvs;
      EXPECT_EQ(e.p2p_seq, seq) << e.op;  // one seq per direction
      EXPECT_EQ(e.microbatch, static_cast<int64_t>(seq - 1)) << e.op;
    }
    EXPECT_EQ(sends, static_cast<uint64_t>(kMicrobatches));
    EXPECT_EQ(recvs, static_cast<uint64_t>(kMicrobatches));
  }
}

// The message of the std::invalid_argument that fn throws ("" when none).
std::string InvalidArgument(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

void ExpectContains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "\"" << text << "\" lacks \"" << part << "\"";
}

TEST(StageP2PTest, RefusesBadPeersAndTensors) {
  const std::string dir = MakeTempDir();
  RunRanks(2, dir, std::chrono::seconds(60), [&](int rank, CollectiveGroup& pp, flight::FlightRing&) {
    if (rank == 1) return;
    torch::Tensor t = torch::zeros({4, 3});
    ExpectContains(InvalidArgument([&] { pp.SendAsync(t, 2, 0); }),
                   "SendAsync on group \"world\" (rank 0 of 2): peer 2 is outside [0, 2)");
    ExpectContains(InvalidArgument([&] { pp.RecvAsync(t, -1, 0); }),
                   "RecvAsync on group \"world\" (rank 0 of 2): "
                   "peer -1 is outside [0, 2)");
    ExpectContains(InvalidArgument([&] { pp.SendAsync(t, 0, 0); }), "peer 0 is this rank itself");
    ExpectContains(InvalidArgument([&] { pp.SendAsync(t, 1, -1); }), "microbatch -1 is negative");
    torch::Tensor transposed = t.t();
    ExpectContains(InvalidArgument([&] { pp.RecvAsync(transposed, 1, 0); }),
                   "tensor [3, 4] Float is not contiguous (strides [1, 3]); pass .contiguous()");
    torch::Tensor meta = torch::empty({2}, torch::TensorOptions().device(torch::kMeta));
    ExpectContains(InvalidArgument([&] { pp.SendAsync(meta, 1, 0); }),
                   "tensor [2] Float is on meta, but this group runs on cpu (gloo); move it to cpu first");
    torch::Tensor undefined;
    ExpectContains(InvalidArgument([&] { pp.RecvAsync(undefined, 1, 0); }), "the tensor is undefined");
    // Nothing was started, so nothing was counted or recorded.
    EXPECT_EQ(pp.seq(), 0u);
  });
  EXPECT_TRUE(P2PEntries(ReadRank(dir, 0)).empty());
  // A group of one has no peer at all.
  auto solo = CollectiveGroup::OverStore(compat::MakeHashStore(), 0, 1, "127.0.0.1", std::chrono::seconds(5));
  ExpectContains(InvalidArgument([&] { solo->SendAsync(torch::zeros({1}), 1, 0); }), "peer 1 is outside [0, 1)");
  ExpectContains(InvalidArgument([&] { solo->SendAsync(torch::zeros({1}), 0, 0); }), "peer 0 is this rank itself");
}

TEST(StageP2PTest, AStuckRecvIsInFlightAndTheStallNamesMicrobatchAndPeer) {
  // Rank 0 sends microbatch 0 and then stops outside any op at step 5 until rank 1 is
  // done; rank 1 waits for microbatch 1, which never comes. Another thread reads the
  // rings while rank 1 waits; the group's short timeout then ends the wait with an
  // error.
  const std::string dir = MakeTempDir();
  std::promise<void> analysed;
  std::shared_future<void> analysed_done = analysed.get_future().share();
  std::promise<void> rank1_done;
  std::shared_future<void> rank1_finished = rank1_done.get_future().share();
  std::string recv_error;
  std::string summary;
  int lagging = -2;
  std::thread watcher([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      std::vector<std::string> bad;
      std::string error;
      const auto rings = flight::ReadRingDir(dir, flight::kDefaultEntries, &bad, &error);
      if (rings.size() == 2 && rings[1].inflight.id != 0 && rings[1].inflight.microbatch == 1) {
        const flight::StallVerdict v = flight::AnalyzeP2PStall(rings, 1, rings[1].inflight);
        summary = v.summary;
        lagging = v.lagging_rank;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    analysed.set_value();
  });
  const auto started = std::chrono::steady_clock::now();
  RunRanks(
      2, dir, std::chrono::seconds(1),
      [&](int rank, CollectiveGroup& pp, flight::FlightRing& ring) {
        if (rank == 0) {
          pp.SendAsync(torch::ones({8}), 1, 0).Wait();
          ring.SetStep(5);
          analysed_done.wait();
          rank1_finished.wait();
          return;
        }
        // Rank 0 leaves once rank 1 is done, also when rank 1 fails early.
        struct Done {
          std::promise<void>& done;
          ~Done() { done.set_value(); }
        } done{rank1_done};
        torch::Tensor first = torch::zeros({8});
        pp.RecvAsync(first, 0, 0).Wait();
        EXPECT_TRUE(torch::equal(first, torch::ones({8})));
        torch::Tensor second = torch::zeros({8});
        try {
          pp.RecvAsync(second, 0, 1).Wait();
        } catch (const std::exception& e) {
          recv_error = e.what();
        }
      },
      "pp0");
  watcher.join();
  // Gloo: "... Timed out waiting 1000ms for recv operation to complete".
  ExpectContains(recv_error, "Timed out");
  EXPECT_GE(std::chrono::steady_clock::now() - started, std::chrono::seconds(1));
  EXPECT_EQ(lagging, 0);
  EXPECT_EQ(summary,
            "rank 1 (stage 1) waits in recv of microbatch 1 from rank 0 on group \"pp0\" (p2p seq 2); rank 0 "
            "(stage 0) has not reached the matching send (its last send to rank 1 on \"pp0\" was p2p seq 1, "
            "microbatch 0) and is in no collective or send/recv at step 5: lagging rank 0");
  // The failed wait still closed its entry.
  const auto entries = P2PEntries(ReadRank(dir, 1));
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[1].microbatch, 1);
  EXPECT_EQ(entries[1].p2p_seq, 2u);
  EXPECT_GT(entries[1].end_ns, 0);
}

}  // namespace
}  // namespace trainyard::engine
