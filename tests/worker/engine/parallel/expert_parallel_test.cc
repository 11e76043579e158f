// Expert parallelism with real Gloo ranks: two threads of this process, each a rank of
// a ProcessGroupGloo over an in-process c10d::HashStore. The EP MoE's outputs and
// gradients must match one MoE that holds every expert, and the dispatch plan and
// load-balance counts must match a routing counted by hand.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/worker/engine/model/small_moe.h"
#include "worker/engine/config/engine_config.h"
#include "worker/engine/model/moe/moe_layer.h"
#include "worker/engine/parallel/expert_dispatcher.h"
#include "worker/engine/parallel/mesh/collective_group.h"

namespace trainyard::engine {
namespace {

using testing::SetOneHotRouter;
using testing::SmallMoEConfig;

// Runs fn(rank, group) on `n` threads that form one Gloo group; rethrows the first
// failure on the calling thread.
void RunRanks(int n, const std::function<void(int, CollectiveGroup&)>& fn) {
  auto store = compat::MakeHashStore();
  std::vector<std::thread> threads;
  std::mutex mu;
  std::exception_ptr error;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto group = CollectiveGroup::OverStore(store, r, n, "127.0.0.1", std::chrono::seconds(60));
        fn(r, *group);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

ParallelContext EpContext(int rank, CollectiveGroup& group) {
  ParallelContext ctx;
  ctx.rank = ctx.dp_rank = ctx.ep_rank = rank;
  ctx.world = ctx.dp = ctx.ep = group.world_size();
  ctx.ep_group = &group;
  return ctx;
}

// Copies the reference's weights into an EP rank's MoE (experts: its shard).
void CopyShard(MoE& ref, MoE& moe, int ep_rank, int ep) {
  torch::NoGradGuard g;
  auto ref_params = ref->named_parameters();
  for (auto& item : moe->named_parameters()) {
    auto full = ref_params[item.key()];
    if (item.key().rfind("experts.", 0) == 0) {
      const int64_t n = full.size(0) / ep;
      full = full.narrow(0, ep_rank * n, n);
    }
    item.value().copy_(full);
  }
  moe->expert_bias.copy_(ref->expert_bias);
}

void ExpectClose(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_TRUE(torch::allclose(got, want, 1e-4, 1e-5)) << what << ": max diff " << (got - want).abs().max();
}

// Forward + backward of `inputs[r]` on each EP rank against the all-experts reference
// (with `capacity`, model.capacity_factor: each rank's input is one sequence).
void CheckAgainstReference(const torch::Tensor& bias, double capacity = 0) {
  const ModelConfig c = SmallMoEConfig("sigmoid", capacity);
  const int ep = 2;
  torch::manual_seed(7);
  MoE ref(c);
  {
    torch::NoGradGuard g;
    for (auto& p : ref->parameters()) p.normal_(0, 0.5);
    ref->expert_bias.copy_(bias);
  }
  // Uneven token counts per rank exercise uneven all-to-all splits.
  std::vector<torch::Tensor> inputs = {torch::randn({7, c.dim}), torch::randn({5, c.dim})};
  std::vector<torch::Tensor> targets = {torch::randn({7, c.dim}), torch::randn({5, c.dim})};

  std::vector<torch::Tensor> ref_out, ref_dx;
  auto ref_counts = torch::zeros({c.n_routed_experts}, torch::kInt64);
  std::vector<int64_t> ref_dropped(ep, 0), dropped(ep, 0);
  for (int r = 0; r < ep; ++r) {
    auto x = inputs[r].clone().requires_grad_(true);
    MoEOutput o = ref(x);
    (o.out - targets[r]).pow(2).sum().backward();
    ref_out.push_back(o.out.detach());
    ref_dx.push_back(x.grad());
    ref_counts += o.tokens_per_expert;
    if (o.dropped.defined()) ref_dropped[r] = o.dropped.item<int64_t>();
  }
  auto ref_grads = ref->named_parameters();

  std::vector<std::map<std::string, torch::Tensor>> grads(ep);
  std::vector<torch::Tensor> counts(ep);
  RunRanks(ep, [&](int r, CollectiveGroup& group) {
    MoE moe(c, EpContext(r, group));
    CopyShard(ref, moe, r, ep);
    auto x = inputs[r].clone().requires_grad_(true);
    MoEOutput o = moe(x);
    (o.out - targets[r]).pow(2).sum().backward();
    ExpectClose(o.out, ref_out[r], "output of rank " + std::to_string(r));
    ExpectClose(x.grad(), ref_dx[r], "input grad of rank " + std::to_string(r));
    for (auto& item : moe->named_parameters()) {
      grads[r][item.key()] = item.value().grad().defined() ? item.value().grad() : torch::zeros_like(item.value());
    }
    counts[r] = o.tokens_per_expert;
    if (o.dropped.defined()) dropped[r] = o.dropped.item<int64_t>();
  });
  for (auto& item : ref_grads) {
    const std::string& name = item.key();
    const auto& want = item.value().grad();
    if (name.rfind("experts.", 0) == 0) {
      // Expert shards see every rank's tokens through the all-to-all: grads match whole.
      const int64_t n = want.size(0) / ep;
      for (int r = 0; r < ep; ++r) ExpectClose(grads[r][name], want.narrow(0, r * n, n), name);
    } else {
      // Replicated weights saw only their rank's tokens: grads are partial sums.
      ExpectClose(grads[0][name] + grads[1][name], want, name);
    }
  }
  EXPECT_TRUE(torch::equal(counts[0] + counts[1], ref_counts));
  EXPECT_EQ(dropped, ref_dropped);
  if (capacity > 0) EXPECT_GT(ref_dropped[0] + ref_dropped[1], 0) << "the capacity must drop";
}

TEST(ExpertParallelTest, OutputsAndGradientsMatchOneRankWithAllExperts) {
  CheckAgainstReference(torch::tensor({0.3f, -0.2f, 0.0f, 0.1f}));
}

// A capacity drops before the dispatch, on the source rank: the EP ranks send only the
// kept rows and match the all-experts MoE, drops included (ceil(7·2/4 · 0.5) = 2 rows
// per expert of rank 0's 7 tokens, 2 of rank 1's 5).
TEST(ExpertParallelTest, WithACapacityOnlyKeptRowsTravelAndAllMatchOneRank) {
  CheckAgainstReference(torch::tensor({0.3f, -0.2f, 0.0f, 0.1f}), 0.5);
  // Every token on experts 0 and 1 (rank 0): most rows are dropped, rank 1 gets none.
  CheckAgainstReference(torch::tensor({10.f, 10.f, 0.f, 0.f}), 0.5);
}

TEST(ExpertParallelTest, RankWhoseExpertsGetNoTokensStillJoinsBackward) {
  // Every token picks experts 0 and 1, both on rank 0; rank 1 computes nothing but must
  // still take part in both all-to-alls, forward and backward.
  CheckAgainstReference(torch::tensor({10.f, 10.f, 0.f, 0.f}));
}

TEST(ExpertParallelTest, DispatchPlanAndCountsMatchHandRouting) {
  ModelConfig c = SmallMoEConfig();
  c.dim = 4;
  // The one-hot router, as in moe_layer_test: top-2 per token is {0,3}, {0,2} on rank 0
  // and {2,3}, {3,1} on rank 1.
  std::vector<torch::Tensor> inputs = {torch::tensor({{1.f, 0.f, 0.f, 0.5f}, {1.f, 0.f, 0.2f, 0.f}}),
                                       torch::tensor({{0.f, 0.f, 1.f, 0.3f}, {0.f, 0.5f, 0.f, 1.f}})};
  // Rank 0 holds experts 0,1; rank 1 holds experts 2,3.
  const std::vector<std::vector<int64_t>> want_counts = {{2, 0, 1, 1}, {0, 1, 1, 2}};
  const std::vector<std::vector<int64_t>> want_send = {{2, 2}, {1, 3}};
  const std::vector<std::vector<int64_t>> want_recv = {{2, 1}, {2, 3}};
  const std::vector<std::vector<int64_t>> want_local = {{2, 1}, {2, 3}};
  // Row tags (10·source + index) grouped by local expert, source order within one.
  const std::vector<std::vector<float>> want_tokens = {{0, 1, 10}, {2, 11, 3, 12, 13}};
  RunRanks(2, [&](int r, CollectiveGroup& group) {
    MoE moe(c, EpContext(r, group));
    SetOneHotRouter(moe);
    auto counts = moe(inputs[r]).tokens_per_expert;
    EXPECT_EQ(std::vector<int64_t>(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + 4), want_counts[r]);

    ExpertDispatcher dispatcher(4, &group);
    // Rows tagged with their source rank and index, sorted by expert as the MoE sends them.
    auto rows = torch::arange(4, torch::kFloat32).unsqueeze(1).repeat({1, 4}) + 10 * r;
    Dispatched d = dispatcher.Dispatch(rows, counts);
    EXPECT_EQ(d.plan.send_splits, want_send[r]);
    EXPECT_EQ(d.plan.recv_splits, want_recv[r]);
    EXPECT_EQ(d.plan.local_counts, want_local[r]);
    auto tags = d.tokens.select(1, 0).contiguous();
    EXPECT_EQ(std::vector<float>(tags.data_ptr<float>(), tags.data_ptr<float>() + tags.numel()), want_tokens[r]);
    // Combine returns every row to its sender, in order.
    EXPECT_TRUE(torch::equal(dispatcher.Combine(d.tokens, d.plan), rows));
  });
}

// Gloo moves and sums bf16 itself: rows arrive unchanged (no detour through another
// type), sums stay bf16, and a reduce-scatter and an all-gather of bf16 round-trip.
TEST(ExpertParallelTest, Bf16RowsCrossGlooUnchangedAndSumInBf16) {
  RunRanks(2, [&](int r, CollectiveGroup& group) {
    // Values no fp16 can hold (1e30, 3e-30) prove no conversion happened on the way.
    auto rows = (torch::tensor({{1e30f, 3e-30f}, {-2.5f, 7.0f}, {0.1f, 1e-3f}}) * (r + 1)).to(torch::kBFloat16);
    const std::vector<int64_t> send = r == 0 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{2, 1};
    const std::vector<int64_t> recv = r == 0 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{2, 1};
    auto got = group.AllToAll(rows, recv, send);
    ASSERT_EQ(got.scalar_type(), torch::kBFloat16);
    // Rank 0 keeps its row 0 and gets rank 1's rows 0-1; rank 1 gets rank 0's rows 1-2
    // and keeps its row 2.
    auto one = (torch::tensor({{1e30f, 3e-30f}, {-2.5f, 7.0f}, {0.1f, 1e-3f}})).to(torch::kBFloat16);
    auto two = (torch::tensor({{1e30f, 3e-30f}, {-2.5f, 7.0f}, {0.1f, 1e-3f}}) * 2).to(torch::kBFloat16);
    auto want = r == 0 ? torch::cat({one.narrow(0, 0, 1), two.narrow(0, 0, 2)})
                       : torch::cat({one.narrow(0, 1, 2), two.narrow(0, 2, 1)});
    EXPECT_TRUE(torch::equal(got, want)) << got;

    // The sum, in bf16 in place.
    auto x = torch::tensor({1.5f * (r + 1), 1e30f, -0.375f}).to(torch::kBFloat16);
    group.AllReduceSum(x);
    ASSERT_EQ(x.scalar_type(), torch::kBFloat16);
    const auto want_sum = torch::tensor({4.5f, 2e30f, -0.75f}).to(torch::kBFloat16);
    EXPECT_TRUE(torch::equal(x, want_sum)) << x;

    // Reduce-scatter: member j keeps the sum of block j; then all-gather puts the blocks
    // back together on every member.
    auto blocks = (torch::tensor({1.0f, 2.0f, 1024.0f, -4.0f}) * (r + 1)).to(torch::kBFloat16);
    auto mine = torch::empty({2}, blocks.options());
    group.ReduceScatterSumAsync(blocks, mine).Wait();
    const auto sums = (torch::tensor({1.0f, 2.0f, 1024.0f, -4.0f}) * 3).to(torch::kBFloat16);
    EXPECT_TRUE(torch::equal(mine, sums.narrow(0, 2 * r, 2))) << mine;
    auto all = torch::empty({4}, blocks.options());
    group.AllGatherAsync(mine, all).Wait();
    EXPECT_TRUE(torch::equal(all, sums)) << all;
  });
}

}  // namespace
}  // namespace trainyard::engine
