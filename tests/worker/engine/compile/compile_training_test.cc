// The compile layer inside real training: trainyard-train (real trainyard-rank
// processes, Gloo on loopback) with the tiny preset, checked through the events it
// prints. TRAINYARD_TRAIN is set by tests/worker/engine/CMakeLists.txt.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

using nlohmann::json;

struct TrainRun {
  int exit_code = -1;
  std::vector<json> events;  // every JSON line on stdout, in order
  std::string stderr_text;

  std::vector<json> Compile(const std::string& kind, int rank = -1) const {
    std::vector<json> out;
    for (const auto& e : events) {
      if (e.contains("compile") && e["compile"].value("kind", "") == kind && (rank < 0 || e.value("rank", 0) == rank)) {
        out.push_back(e["compile"]);
      }
    }
    return out;
  }
  std::vector<json> Steps() const {
    std::vector<json> out;
    for (const auto& e : events) {
      if (e.contains("step_metrics")) out.push_back(e["step_metrics"]);
    }
    return out;
  }
  std::string All() const {
    std::string s = stderr_text;
    for (const auto& e : events) s += e.dump() + "\n";
    return s;
  }
};

std::string Quote(const std::string& s) { return "'" + s + "'"; }

// The [model] section and the environment of a run.
struct Job {
  std::string model = "preset = \"tiny\"\nn_layers = 4\n";
  std::string env;  // "NAME=value " prefixes for the command
};

// trainyard-train on the tiny preset with 4 layers (1 dense, 3 MoE) so "identical
// layers" exist (or `job.model`), plus `sets`.
TrainRun Train(const std::vector<std::string>& sets, const std::vector<std::string>& flags = {}, const Job& spec = {}) {
  char dir_template[] = "/tmp/trainyard-compile-test-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const std::string job = dir + "/job.toml";
  std::ofstream(job) << "[job]\nname = \"compile-test\"\n[model]\n"
                     << spec.model << "[training]\nseed = 7\nlr = 3e-3\nwarmup_steps = 2\n";
  std::string cmd = spec.env + std::string(TRAINYARD_TRAIN) + " " + Quote(job) + " --json --threads 1";
  for (const auto& s : sets) cmd += " --set " + Quote(s);
  for (const auto& f : flags) cmd += " " + f;
  const std::string err = dir + "/stderr.txt";
  cmd += " 2>" + Quote(err);
  TrainRun run;
  FILE* pipe = popen(cmd.c_str(), "r");
  EXPECT_NE(pipe, nullptr) << cmd;
  if (pipe == nullptr) return run;
  char buf[1 << 16];
  std::string line;
  while (fgets(buf, sizeof(buf), pipe) != nullptr) {
    line += buf;
    if (line.empty() || line.back() != '\n') continue;
    json e = json::parse(line, nullptr, false);
    if (!e.is_discarded()) run.events.push_back(e);
    line.clear();
  }
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream in(err);
  std::stringstream ss;
  ss << in.rdbuf();
  run.stderr_text = ss.str();
  std::remove(job.c_str());
  std::remove(err.c_str());
  rmdir(dir.c_str());
  return run;
}

std::string Kind(const std::string& region) { return region.substr(0, region.find('{')); }

double MaxRelativeLossDiff(const TrainRun& a, const TrainRun& b) {
  const auto sa = a.Steps(), sb = b.Steps();
  EXPECT_EQ(sa.size(), sb.size());
  double worst = 0;
  for (size_t i = 0; i < sa.size() && i < sb.size(); ++i) {
    const double la = sa[i]["loss"].get<double>(), lb = sb[i]["loss"].get<double>();
    EXPECT_TRUE(std::isfinite(la) && std::isfinite(lb));
    worst = std::max(worst, std::abs(la - lb) / std::abs(lb));
  }
  return worst;
}

TEST(CompileTraining, PerLayerJitCompilesOncePerRegionKindAndNeverRecompiles) {
  const TrainRun run = Train({"compile.backend=jit", "training.steps=200", "compile.summary_every=100"});
  ASSERT_EQ(run.exit_code, 0) << run.All();
  const auto compiles = run.Compile("COMPILE");
  std::map<std::string, int> per_kind;
  for (const auto& c : compiles) ++per_kind[Kind(c["region"].get<std::string>())];
  // 4 layers (3 of them MoE with 4 experts each), yet one compile per distinct region.
  const std::map<std::string, int> expected = {{"rms_norm", 1},   {"attention", 1}, {"ffn", 1},           {"router", 1},
                                               {"expert_ffn", 1}, {"combine", 1},   {"shared_expert", 1}, {"loss", 1}};
  EXPECT_EQ(per_kind, expected) << run.All();
  // Routed rows per expert change every step; the rows dimension is dynamic.
  EXPECT_TRUE(run.Compile("RECOMPILE").empty()) << run.All();
  EXPECT_TRUE(run.Compile("RECOMPILE_LIMIT").empty());
  EXPECT_EQ(run.Steps().size(), 200u);
  // Summaries at steps 100 and 200: one per region key each time.
  EXPECT_EQ(run.Compile("SUMMARY").size(), 2 * expected.size());
  // The MoE dispatch is a declared graph break, reported once.
  const auto breaks = run.Compile("GRAPH_BREAK");
  ASSERT_EQ(breaks.size(), 1u) << run.All();
  EXPECT_NE(breaks[0]["reason"].get<std::string>().find("host"), std::string::npos);
}

TEST(CompileTraining, ExpertParallelRunOnTwoRanksNeverRecompiles) {
  const TrainRun run = Train({"compile.backend=jit", "training.steps=200", "parallelism.dp=2", "parallelism.ep=2"});
  ASSERT_EQ(run.exit_code, 0) << run.All();
  for (int rank : {0, 1}) {
    std::set<std::string> kinds;
    for (const auto& c : run.Compile("COMPILE", rank)) {
      EXPECT_TRUE(kinds.insert(Kind(c["region"].get<std::string>())).second) << c.dump();
    }
    EXPECT_EQ(kinds.size(), 8u) << "rank " << rank;
    EXPECT_TRUE(run.Compile("RECOMPILE", rank).empty()) << run.All();
    // Host sync, the token all-to-all and the reverse all-to-all.
    EXPECT_EQ(run.Compile("GRAPH_BREAK", rank).size(), 3u) << run.All();
  }
}

TEST(CompileTraining, ModelRegionsCompileOneRegionPerBlockStretchAndMatchPerLayer) {
  const TrainRun per_layer = Train({"compile.backend=jit", "training.steps=20"});
  const TrainRun model =
      Train({"compile.backend=jit", "training.steps=20", "compile.regions=model", "activation_checkpoint.mode=full"});
  ASSERT_EQ(model.exit_code, 0) << model.All();
  std::map<std::string, int> per_kind;
  for (const auto& c : model.Compile("COMPILE")) ++per_kind[Kind(c["region"].get<std::string>())];
  // Full checkpointing: the block regions also run under no-grad (forward) and with
  // grad (recompute): one COMPILE, then a RECOMPILE naming grad_mode. The loss is not
  // checkpointed.
  const std::map<std::string, int> expected = {
      {"dense_block", 1}, {"moe_block_entry", 1}, {"expert_ffn", 1}, {"moe_block_exit", 1}, {"loss", 1}};
  EXPECT_EQ(per_kind, expected) << model.All();
  for (const auto& r : model.Compile("RECOMPILE")) {
    EXPECT_NE(r["reason"].get<std::string>().find("grad_mode"), std::string::npos) << r.dump();
  }
  EXPECT_EQ(model.Compile("RECOMPILE").size(), 4u) << model.All();
  EXPECT_LE(MaxRelativeLossDiff(model, per_layer), 1e-5);
}

TEST(CompileTraining, ModelRegionsWithTensorParallelismAreRefusedWithTheReason) {
  const TrainRun run = Train({"compile.regions=model", "parallelism.tp=2"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.stderr_text.find("compile.regions=\"model\" needs parallelism.tp=1"), std::string::npos)
      << run.stderr_text;
}

TEST(CompileTraining, JitLossesMatchEager) {
  const TrainRun eager = Train({"compile.backend=eager", "training.steps=20"});
  const TrainRun jit = Train({"compile.backend=jit", "training.steps=20"});
  ASSERT_EQ(eager.exit_code, 0) << eager.All();
  ASSERT_EQ(jit.exit_code, 0) << jit.All();
  const double diff = MaxRelativeLossDiff(jit, eager);
  std::printf("[compile] jit vs eager max relative loss diff %g\n", diff);
  EXPECT_LE(diff, 1e-4);
}

// On CPU both backends run the fused operators: a traced region calls the same
// kernels in the same order as the eager step, so the losses agree to the last bit
// (1e-6 allows only for a platform where they might not).
TEST(CompileTraining, DebugPresetJitRunsTheFusedOperatorsWithEagerLosses) {
  const Job debug{"preset = \"debug\"\n", ""};
  const TrainRun eager = Train({"compile.backend=eager", "training.steps=20"}, {}, debug);
  const TrainRun jit = Train({"compile.backend=jit", "training.steps=20"}, {}, debug);
  ASSERT_EQ(eager.exit_code, 0) << eager.All();
  ASSERT_EQ(jit.exit_code, 0) << jit.All();
  EXPECT_FALSE(jit.Compile("COMPILE").empty()) << jit.All();
  EXPECT_TRUE(jit.Compile("RECOMPILE").empty()) << jit.All();
  const double diff = MaxRelativeLossDiff(jit, eager);
  std::printf("[compile] debug preset, fused operators: jit vs eager max relative loss diff %g\n", diff);
  EXPECT_LE(diff, 1e-6);
}

// The other architectures through the jit backend: the same losses as eager, nothing
// compiled twice.
TEST(CompileTraining, EveryArchitectureTracesUnderJitWithEagerLosses) {
  for (const char* preset : {"deepseek_v3_debug", "qwen3_moe_debug"}) {
    const Job job{std::string("preset = \"") + preset + "\"\n", ""};
    const std::vector<std::string> sets = {"training.steps=4", "training.seq_len=128"};
    auto with = [&](const char* backend) {
      std::vector<std::string> all = sets;
      all.push_back(std::string("compile.backend=") + backend);
      return all;
    };
    const TrainRun eager = Train(with("eager"), {}, job);
    const TrainRun jit = Train(with("jit"), {}, job);
    ASSERT_EQ(eager.exit_code, 0) << preset << "\n" << eager.All();
    ASSERT_EQ(jit.exit_code, 0) << preset << "\n" << jit.All();
    EXPECT_FALSE(jit.Compile("COMPILE").empty()) << jit.All();
    EXPECT_TRUE(jit.Compile("RECOMPILE").empty()) << jit.All();
    const double diff = MaxRelativeLossDiff(jit, eager);
    std::printf("[compile] %s: jit vs eager max relative loss diff %g\n", preset, diff);
    EXPECT_LE(diff, 1e-6) << preset;
  }
}

// TRAINYARD_FUSED_CPU_KERNELS=0 is the A/B switch for both backends: the traced
// operators then run their references.
TEST(CompileTraining, WithTheFusedKernelsOffJitRunsTheReferencesAndMatchesEager) {
  const Job off{Job().model, "TRAINYARD_FUSED_CPU_KERNELS=0 "};
  const TrainRun eager = Train({"compile.backend=eager", "training.steps=10"}, {}, off);
  const TrainRun jit = Train({"compile.backend=jit", "training.steps=10"}, {}, off);
  ASSERT_EQ(eager.exit_code, 0) << eager.All();
  ASSERT_EQ(jit.exit_code, 0) << jit.All();
  const double diff = MaxRelativeLossDiff(jit, eager);
  std::printf("[compile] fused kernels off: jit vs eager max relative loss diff %g\n", diff);
  EXPECT_LE(diff, 1e-4);
  // The composite step differs from the fused one in summation order only.
  const TrainRun fused = Train({"compile.backend=jit", "training.steps=10"});
  ASSERT_EQ(fused.exit_code, 0) << fused.All();
  const double vs_fused = MaxRelativeLossDiff(jit, fused);
  std::printf("[compile] jit composite vs jit fused max relative loss diff %g\n", vs_fused);
  EXPECT_GT(vs_fused, 0.0) << "the switch changed nothing";
  EXPECT_LE(vs_fused, 1e-4);
}

class CheckpointTest : public ::testing::TestWithParam<int> {};

TEST_P(CheckpointTest, FullCheckpointMatchesNoCheckpointAndCountsTokensOnce) {
  const int ep = GetParam();
  std::vector<std::string> common = {"compile.backend=jit", "training.steps=10"};
  if (ep > 1) {
    common.push_back("parallelism.dp=" + std::to_string(ep));
    common.push_back("parallelism.ep=" + std::to_string(ep));
  }
  auto with = [&](const std::string& mode) {
    auto sets = common;
    sets.push_back("activation_checkpoint.mode=" + mode);
    return Train(sets);
  };
  const TrainRun none = with("none"), full = with("full"), selective = with("selective");
  ASSERT_EQ(none.exit_code, 0) << none.All();
  ASSERT_EQ(full.exit_code, 0) << full.All();
  ASSERT_EQ(selective.exit_code, 0) << selective.All();
  const double diff_full = MaxRelativeLossDiff(full, none);
  const double diff_sel = MaxRelativeLossDiff(selective, none);
  std::printf("[compile] ep=%d full AC vs none %g, selective vs none %g\n", ep, diff_full, diff_sel);
  EXPECT_LE(diff_full, 1e-5);
  EXPECT_LE(diff_sel, 1e-5);
  // The recompute really ran through the regions: grad mode is guarded, so a
  // checkpointed region holds a no-grad entry (forward) and a grad entry (recompute).
  auto entries = [](const TrainRun& run, const std::string& kind) {
    for (const auto& s : run.Compile("SUMMARY", 0)) {
      if (Kind(s["region"].get<std::string>()) == kind) return s["cache_entries"].get<int>();
    }
    return -1;
  };
  EXPECT_EQ(entries(none, "attention"), 1);
  EXPECT_EQ(entries(full, "attention"), 2);
  EXPECT_EQ(entries(full, "expert_ffn"), 2);
  EXPECT_EQ(entries(selective, "attention"), 2);
  EXPECT_EQ(entries(selective, "expert_ffn"), 1);
  const auto a = none.Steps(), b = full.Steps();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["expert_load"], b[i]["expert_load"]) << "step " << i + 1;
  }
}

INSTANTIATE_TEST_SUITE_P(Ep, CheckpointTest, ::testing::Values(1, 2),
                         [](const auto& info) { return "ep" + std::to_string(info.param); });

TEST(CompileTraining, PlantedSideEffectFailsTheJobNamingTheTensor) {
  const TrainRun run = Train({"compile.backend=jit", "training.steps=3", "compile.test_plant_side_effect=true",
                              "compile.on_side_effect=error"});
  EXPECT_NE(run.exit_code, 0);
  const auto found = run.Compile("UNSAFE_SIDE_EFFECT");
  ASSERT_FALSE(found.empty()) << run.All();
  EXPECT_NE(found[0]["reason"].get<std::string>().find("layers.1.moe.tokens_per_expert"), std::string::npos);
  EXPECT_NE(run.stderr_text.find("layers.1.moe.tokens_per_expert"), std::string::npos) << run.stderr_text;
}

TEST(CompileTraining, PlantedSideEffectUnderFallbackTrainsCorrectly) {
  const TrainRun clean = Train({"compile.backend=jit", "training.steps=8"});
  const TrainRun planted = Train({"compile.backend=jit", "training.steps=8", "compile.test_plant_side_effect=true",
                                  "compile.on_side_effect=fallback"});
  ASSERT_EQ(planted.exit_code, 0) << planted.All();
  EXPECT_FALSE(planted.Compile("UNSAFE_SIDE_EFFECT").empty());
  EXPECT_FALSE(planted.Compile("FALLBACK").empty());
  EXPECT_LE(MaxRelativeLossDiff(planted, clean), 1e-5);
}

TEST(CompileTraining, PreflightFindsThePlantedSideEffect) {
  // A GPU job (cudagraph needs resources.device=cuda): the preflight checks its
  // structure on CPU ranks, through jit.
  const TrainRun planted =
      Train({"compile.backend=cudagraph", "resources.device=cuda", "compile.test_plant_side_effect=true"},
            {"--preflight", "--shrink"});
  EXPECT_EQ(planted.exit_code, 3) << planted.All();
  EXPECT_NE(planted.All().find("layers.1.moe.tokens_per_expert"), std::string::npos);
  const TrainRun clean = Train({"compile.backend=jit"}, {"--preflight", "--shrink"});
  EXPECT_EQ(clean.exit_code, 0) << clean.All();
  EXPECT_EQ(clean.Steps().size(), 3u);
  EXPECT_FALSE(clean.Compile("COMPILE").empty());
}

}  // namespace
