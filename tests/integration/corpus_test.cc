// Real corpora end to end: Python standard library sources that Debian ships, tokenized
// by trainyard-tokenize into Megatron indexed datasets with a SentencePiece model it
// trains, trained through the real controller, worker and ranks with shuffle on and a
// held-out validation split; the same job on trainyard-train; a shuffled job killed
// mid-epoch; dp=2 against dp=1 with grad_accum_steps=2; broken data that fails once;
// the trained model exported, loaded back, and fine-tuned under another layout; a bf16
// job against the same job in fp32.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/test_cluster.h"

namespace trainyard::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::string kDebugJob = TRAINYARD_EXAMPLES "/debug.toml";
const fs::path kPythonLib = "/usr/lib/python3.11";

// The corpus, tokenized once for the whole suite: the training split (modules whose
// names start with a-r and u-z), the held-out split (s*, t*), and a small one-file
// corpus whose epoch lasts a few steps.
struct Corpus {
  fs::path dir;
  fs::path model, train, val, small;
};
Corpus* g_corpus = nullptr;

std::vector<std::string> PythonSources(bool held_out) {
  std::vector<std::string> out;
  for (const auto& entry : fs::directory_iterator(kPythonLib)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() != ".py" || !entry.is_regular_file()) continue;
    if ((name[0] == 's' || name[0] == 't') == held_out) out.push_back(entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::map<int64_t, double> ValidationByStep(const std::vector<json>& events, int attempt) {
  std::map<int64_t, double> out;
  for (const json& e : events) {
    if (!e.contains("validation") || (attempt != 0 && e.value("attempt", 0) != attempt)) continue;
    const json& v = e.at("validation");
    out[v.contains("step") ? JsonInt(v.at("step")) : 0] = v.at("loss").get<double>();
  }
  return out;
}

std::map<int64_t, int64_t> EpochByStep(const std::vector<json>& events, int attempt) {
  std::map<int64_t, int64_t> out;
  for (const json& e : events) {
    if (!e.contains("step_metrics") || (attempt != 0 && e.value("attempt", 0) != attempt)) continue;
    const json& m = e.at("step_metrics");
    out[JsonInt(m.at("step"))] = m.contains("epoch") ? JsonInt(m.at("epoch")) : 0;
  }
  return out;
}

// A safetensors file's tensors as (dtype, shape, bytes), by name, read with nothing
// but the format's definition: an 8-byte little-endian header length, the JSON header,
// the data buffer.
std::map<std::string, std::string> SafetensorsTensors(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::map<std::string, std::string> out;
  if (bytes.size() < 8) return out;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  const json header = json::parse(bytes.substr(8, n));
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const uint64_t begin = entry.at("data_offsets").at(0), end = entry.at("data_offsets").at(1);
    out[name] =
        entry.at("dtype").get<std::string>() + entry.at("shape").dump() + bytes.substr(8 + n + begin, end - begin);
  }
  return out;
}

bool LogSays(const std::vector<json>& events, const std::string& text) {
  for (const json& e : events) {
    if (e.contains("log") && e.at("log").value("message", "").find(text) != std::string::npos) return true;
  }
  return false;
}

// The corpus job: the debug model on the training split, shuffled, evaluated on the
// held-out split before step 1 and every 10 steps.
std::vector<std::string> CorpusJob(int steps) {
  return {"training.steps=" + std::to_string(steps),
          "training.seq_len=64",
          "training.lr=3e-3",
          "training.dataset=tokens",
          "training.dataset_path=" + g_corpus->train.string(),
          "training.shuffle=true",
          "validation.dataset=tokens",
          "validation.dataset_path=" + g_corpus->val.string(),
          "validation.freq=10",
          "validation.steps=4",
          "parallelism.collective_timeout_s=60"};
}

std::vector<std::string> With(std::vector<std::string> base, const std::vector<std::string>& more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

// trainyard-train on `sets` (and `flags`); its event lines.
std::vector<json> TrainLocally(const std::vector<std::string>& sets, const std::vector<std::string>& flags = {}) {
  std::vector<std::string> argv = {TRAINYARD_TRAIN, kDebugJob, "--json"};
  for (const std::string& s : sets) argv.insert(argv.end(), {"--set", s});
  argv.insert(argv.end(), flags.begin(), flags.end());
  const CommandResult r = RunCommand(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return JsonLines(r.out);
}

class CorpusTest : public ::testing::Test {
 protected:
  // Tokenized once per build of trainyard-tokenize, under the build tree, and shared by
  // the suite's test processes (ctest runs each case in its own; training the
  // SentencePiece model is most of the cost). A "done" file marks a complete cache.
  static void SetUpTestSuite() {
    g_corpus = new Corpus;
    const auto stamp = static_cast<uint64_t>(fs::last_write_time(TRAINYARD_TOKENIZE).time_since_epoch().count());
    g_corpus->dir = fs::path(TRAINYARD_TEST_CACHE_DIR) / ("corpus-" + std::to_string(stamp));
    const fs::path& d = g_corpus->dir;
    g_corpus->model = d / "py.model";
    g_corpus->train = d / "train.idx";
    g_corpus->val = d / "val.idx";
    g_corpus->small = d / "small.idx";
    if (fs::exists(d / "done")) return;
    std::error_code ec;
    fs::remove_all(d, ec);
    fs::create_directories(d);
    auto tokenize = [&](const fs::path& prefix, std::vector<std::string> args, const std::vector<std::string>& in) {
      std::vector<std::string> argv = {TRAINYARD_TOKENIZE, "-o", prefix.string()};
      argv.insert(argv.end(), args.begin(), args.end());
      argv.insert(argv.end(), in.begin(), in.end());
      const CommandResult r = RunCommand(argv);
      ASSERT_EQ(r.exit_code, 0) << r.err;
      std::printf("[figures] %s", r.out.c_str());
    };
    const std::vector<std::string> train = PythonSources(false), held_out = PythonSources(true);
    ASSERT_GT(train.size(), 50u) << "expected Python's standard library under " << kPythonLib;
    ASSERT_GT(held_out.size(), 10u);
    tokenize(d / "train", {"--train-vocab", "2048", "--model-out", g_corpus->model.string()}, train);
    tokenize(d / "val", {"--model", g_corpus->model.string()}, held_out);
    tokenize(d / "small", {"--model", g_corpus->model.string()}, {(kPythonLib / "abc.py").string()});
    std::ofstream(d / "done") << "ok\n";
  }
  static void TearDownTestSuite() {
    delete g_corpus;
    g_corpus = nullptr;
  }

  void StartCluster(int slots) {
    cluster_ = std::make_unique<TestCluster>(kBuiltBinaries, "corpus");
    ASSERT_TRUE(cluster_->StartController({"--heartbeat-timeout", "3"}))
        << "controller did not start; see " << cluster_->dir() / "controller.log";
    cluster_->StartWorker({"w1", slots, {}});
    ASSERT_TRUE(cluster_->WaitConnected({"w1"}, 20000)) << "worker never registered; see " << cluster_->dir();
  }

  // Submits `sets` and follows the job to its end; its events.
  std::vector<json> RunToEnd(const std::vector<std::string>& sets, const std::string& name, std::string* id_out) {
    const std::string id = cluster_->Submit(kDebugJob, sets);
    EXPECT_FALSE(id.empty());
    if (id.empty()) return {};
    if (id_out != nullptr) *id_out = id;
    return cluster_->Follow(id, name + ".jsonl")->WaitEnd();
  }

  std::unique_ptr<TestCluster> cluster_;
};

TEST_F(CorpusTest, AShuffledIndexedCorpusTrainsThroughTheServiceAndItsValidationLossFalls) {
  StartCluster(1);
  const fs::path ck = cluster_->dir() / "ck";
  std::string id;
  const std::vector<json> events =
      RunToEnd(With(CorpusJob(40), {"checkpoint.interval=20", "checkpoint.dir=" + ck.string()}), "corpus", &id);
  ASSERT_EQ(cluster_->Get(id).value("state", ""), "SUCCEEDED");
  EXPECT_TRUE(LogSays(events, "megatron uint16")) << "the rank reports the files it found";
  const std::map<int64_t, double> val = ValidationByStep(events, 1);
  ASSERT_EQ(val.size(), 5u) << "before step 1, after steps 10, 20, 30 and 40";
  for (const auto& [step, loss] : val)
    std::printf("[figures] validation loss after step %lld: %.4f\n", static_cast<long long>(step), loss);
  // From ln(2048) = 7.62 at the start; measured 7.62 -> 5.5 on this corpus.
  EXPECT_LT(val.at(40), val.at(0) - 1.0) << "the held-out loss must fall by more than 1 nat";
  for (const auto& [step, epoch] : EpochByStep(events, 1)) EXPECT_EQ(epoch, 1) << "step " << step;

  // The same job on trainyard-train: bit-identical losses, training and held-out.
  const fs::path final_weights = cluster_->dir() / "final.safetensors";
  const std::vector<json> local = TrainLocally(CorpusJob(40), {"--save-final", final_weights.string()});
  const std::map<int64_t, double> want = LossesByStep(local, 0);
  const std::map<int64_t, double> got = LossesByStep(events, 1);
  ASSERT_EQ(got.size(), 40u);
  for (const auto& [step, loss] : got) EXPECT_EQ(loss, want.at(step)) << "step " << step;
  EXPECT_EQ(ValidationByStep(local, 0), val);

  // The trained model out: the step-40 checkpoint as one file, which loads back
  // through initial_load_path with the held-out loss of the model that wrote it.
  const fs::path model = cluster_->dir() / "model.safetensors";
  const CommandResult exported = cluster_->Cli({"export", id, "-o", model.string()});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  ASSERT_TRUE(fs::exists(model));
  std::printf("[figures] %s", exported.out.c_str());
  // Every parameter and buffer at its step-40 value: the same run's final weights
  // (bit-identical training), tensor by tensor, dtype, shape and bytes.
  const std::map<std::string, std::string> want_weights = SafetensorsTensors(final_weights);
  const std::map<std::string, std::string> got_weights = SafetensorsTensors(model);
  ASSERT_FALSE(want_weights.empty());
  EXPECT_EQ(got_weights.size(), want_weights.size());
  for (const auto& [name, blob] : want_weights) {
    EXPECT_TRUE(got_weights.count(name) && got_weights.at(name) == blob) << name;
  }
  std::string again_id;
  const std::vector<json> again =
      RunToEnd(With(CorpusJob(1), {"checkpoint.initial_load_path=" + model.string()}), "from-export", &again_id);
  EXPECT_EQ(cluster_->Get(again_id).value("state", ""), "SUCCEEDED");
  EXPECT_EQ(ValidationByStep(again, 1).at(0), val.at(40)) << "the exported weights are the step-40 weights";

  // Fine-tuning from the job's checkpoint folder under another layout, dp=2 ep=2 with
  // half the batch per rank: the held-out set is the same samples (steps x
  // batch_size x dp), so the loss starts where the first job ended, to fp32 tolerance.
  cluster_->StartWorker({"w2", 2, {}});
  ASSERT_TRUE(cluster_->WaitConnected({"w2"}, 20000));
  std::string tune_id;
  const std::vector<json> tune =
      RunToEnd(With(CorpusJob(10), {"parallelism.dp=2", "parallelism.ep=2", "training.batch_size=4",
                                    "checkpoint.initial_load_path=" + (ck / id).string()}),
               "fine-tune", &tune_id);
  EXPECT_EQ(cluster_->Get(tune_id).value("state", ""), "SUCCEEDED");
  const std::map<int64_t, double> tune_val = ValidationByStep(tune, 1);
  ASSERT_EQ(tune_val.count(0), 1u);
  EXPECT_NEAR(tune_val.at(0), val.at(40), 1e-4 * val.at(40)) << "dp=2 ep=2 starts from the dp=1 checkpoint";
  EXPECT_TRUE(LogSays(tune, "initial weights: checkpoint"));
}

// Killed mid-epoch on a corpus whose epoch lasts about ten steps: the restart resumes
// from its checkpoint and every step, across the next epoch boundary, is bit-identical.
TEST_F(CorpusTest, AShuffledJobKilledMidEpochResumesBitForBitAcrossTheEpochBoundary) {
  StartCluster(2);
  auto job = [&](const fs::path& ck) {
    return With(CorpusJob(24), {"training.dataset_path=" + g_corpus->small.string(), "parallelism.dp=2",
                                "parallelism.ep=2", "checkpoint.interval=5", "checkpoint.dir=" + ck.string(),
                                "restart.max_restarts=2", "restart.backoff_s=0"});
  };
  const std::vector<json> reference = RunToEnd(job(cluster_->dir() / "ck-ref"), "reference", nullptr);
  const std::map<int64_t, double> want = LossesByStep(reference, 1);
  ASSERT_EQ(want.size(), 24u);
  const std::map<int64_t, int64_t> epochs = EpochByStep(reference, 1);
  ASSERT_GE(epochs.at(24), 2) << "the small corpus must last fewer than 24 steps";

  const std::string id = cluster_->Submit(kDebugJob, job(cluster_->dir() / "ck"));
  ASSERT_FALSE(id.empty());
  auto follow = cluster_->Follow(id, "killed.jsonl");
  const int64_t kill_at = 12;
  ASSERT_TRUE(follow->WaitFor(
      [&](const json& e) {
        return e.value("attempt", 0) == 1 && e.contains("step_metrics") &&
               JsonInt(e.at("step_metrics").at("step")) >= kill_at;
      },
      300000));
  const std::map<int, pid_t> pids = RankPids(follow->Events(), 1);
  ASSERT_EQ(pids.count(1), 1u);
  ASSERT_EQ(kill(pids.at(1), SIGKILL), 0);
  const std::vector<json> events = follow->WaitEnd();
  EXPECT_EQ(cluster_->Get(id).value("state", ""), "SUCCEEDED");
  const std::map<int64_t, double> resumed = LossesByStep(events, 2);
  ASSERT_FALSE(resumed.empty()) << "attempt 2 never trained";
  const int64_t from = resumed.begin()->first - 1;
  EXPECT_GE(from, 10);
  EXPECT_LT(epochs.at(from + 1), epochs.at(24)) << "the resumed steps must cross an epoch boundary";
  for (int attempt : {1, 2}) {
    for (const auto& [step, loss] : LossesByStep(events, attempt)) {
      EXPECT_EQ(loss, want.at(step)) << "attempt " << attempt << " step " << step;
    }
  }
  EXPECT_EQ(EpochByStep(events, 2).at(24), epochs.at(24));
}

// With shuffle on, dp=2 and one rank with grad_accum_steps=2 train on the same samples
// per step: the losses agree to fp32 tolerance (a different sample set would not).
TEST_F(CorpusTest, TwoRanksAndOneRankWithTwoMicroBatchesSeeTheSameShuffledSamples) {
  const std::vector<std::string> base = CorpusJob(6);
  const std::map<int64_t, double> dp2 = LossesByStep(
      TrainLocally(With(base, {"parallelism.dp=2", "validation.dataset=\"\"", "validation.dataset_path=\"\""})), 0);
  const std::map<int64_t, double> a2 = LossesByStep(
      TrainLocally(
          With(base, {"training.grad_accum_steps=2", "validation.dataset=\"\"", "validation.dataset_path=\"\""})),
      0);
  const std::map<int64_t, double> other_seed = LossesByStep(
      TrainLocally(With(
          base, {"parallelism.dp=2", "training.seed=43", "validation.dataset=\"\"", "validation.dataset_path=\"\""})),
      0);
  ASSERT_EQ(dp2.size(), 6u);
  ASSERT_EQ(a2.size(), 6u);
  for (int s = 1; s <= 6; ++s) EXPECT_NEAR(a2.at(s), dp2.at(s), 1e-5 * dp2.at(s)) << "step " << s;
  EXPECT_GT(std::abs(other_seed.at(1) - dp2.at(1)), 1e-3) << "another seed's samples must give another loss";
}

// bf16 mixed precision on real text, through the controller, worker and ranks: 50 steps
// end within 2 % of the same job in fp32 (run on trainyard-train), training and held-out,
// and the losses are not fp32's (the job really computed in bf16). Batches of 4
// sequences, not the preset's 8: a CPU without AVX-512 BF16 runs ATen's bf16 reference
// GEMMs, and 8 took over three minutes. (Batches of 2 drift apart: 2.4 % at step 50.)
TEST_F(CorpusTest, ABf16JobOnRealTextRunsThroughTheServiceAndEndsWithinTwoPercentOfFp32) {
  StartCluster(1);
  const std::vector<std::string> job = With(CorpusJob(50), {"validation.freq=25", "training.batch_size=4"});
  std::string id;
  const std::vector<json> bf16 = RunToEnd(With(job, {"training.mixed_precision=\"bf16\""}), "bf16", &id);
  ASSERT_EQ(cluster_->Get(id).value("state", ""), "SUCCEEDED");
  EXPECT_TRUE(LogSays(bf16, "mixed_precision=bf16 bf16_gemm=")) << "the rank names the bf16 GEMM path it runs";
  const std::vector<json> fp32 = TrainLocally(With(job, {"training.mixed_precision=\"fp32\""}));
  const std::map<int64_t, double> got = LossesByStep(bf16, 1), want = LossesByStep(fp32, 0);
  ASSERT_EQ(got.size(), 50u);
  ASSERT_EQ(want.size(), 50u);
  int differing = 0;
  for (const auto& [step, loss] : want) differing += got.at(step) != loss;
  EXPECT_GT(differing, 25) << "bf16 losses equal to fp32's: the job did not compute in bf16";
  auto tail_mean = [](const std::map<int64_t, double>& m) {
    double sum = 0;
    for (int64_t s = 41; s <= 50; ++s) sum += m.at(s);
    return sum / 10;
  };
  const double final_rel = std::abs(got.at(50) - want.at(50)) / want.at(50);
  const double tail_rel = std::abs(tail_mean(got) - tail_mean(want)) / tail_mean(want);
  EXPECT_LT(final_rel, 0.02) << "step 50: bf16 " << got.at(50) << ", fp32 " << want.at(50);
  EXPECT_LT(tail_rel, 0.02);
  const std::map<int64_t, double> val16 = ValidationByStep(bf16, 1), val32 = ValidationByStep(fp32, 0);
  ASSERT_EQ(val16.count(50), 1u);
  ASSERT_EQ(val32.count(50), 1u);
  EXPECT_LT(std::abs(val16.at(50) - val32.at(50)) / val32.at(50), 0.02);
  EXPECT_LT(val32.at(50), val32.at(0) - 1.0) << "training moved, so the comparison is not vacuous";
  std::printf(
      "[figures] 50 steps on real text: loss at step 50 bf16 %.4f fp32 %.4f (%.2f%%); mean of steps "
      "41-50 bf16 %.4f fp32 %.4f (%.2f%%); held-out after 50 bf16 %.4f fp32 %.4f\n",
      got.at(50), want.at(50), 100 * final_rel, tail_mean(got), tail_mean(want), 100 * tail_rel, val16.at(50),
      val32.at(50));
}

// Evaluation is invisible to training: under the jit backend (whose region guards hold
// the grad mode), a run with [validation] has the losses of a run without, bit for bit,
// and compiles nothing again.
TEST_F(CorpusTest, ValidationLeavesTheTrainingLossesAndTheCompiledRegionsAlone) {
  const std::vector<std::string> jit = With(CorpusJob(4), {"compile.backend=jit", "validation.freq=2"});
  const std::vector<json> with = TrainLocally(jit);
  const std::vector<json> without =
      TrainLocally(With(jit, {"validation.dataset=\"\"", "validation.dataset_path=\"\""}));
  EXPECT_EQ(ValidationByStep(with, 0).size(), 3u) << "before step 1, after steps 2 and 4";
  EXPECT_TRUE(ValidationByStep(without, 0).empty());
  const std::map<int64_t, double> want = LossesByStep(without, 0);
  ASSERT_EQ(want.size(), 4u);
  EXPECT_EQ(LossesByStep(with, 0), want);
  auto recompiles = [](const std::vector<json>& events) {
    int n = 0;
    for (const json& e : events) n += e.contains("compile") && e.at("compile").value("kind", "") == "RECOMPILE";
    return n;
  };
  EXPECT_EQ(recompiles(with), recompiles(without));
  EXPECT_EQ(recompiles(with), 0);
}

// The corpus is read in windows, never held: a rank training over a 2 GiB token file
// peaks within 200 MiB of the same rank over a 10 MiB one (sparse files; zeros are
// valid tokens; shuffled, so the reads land all over the big file).
TEST_F(CorpusTest, ARankOverATwoGibCorpusPeaksWithinTwoHundredMibOfOneOverTenMib) {
  auto peak_mb = [&](const fs::path& file, int64_t bytes) {
    { std::ofstream(file, std::ios::binary); }
    fs::resize_file(file, static_cast<uintmax_t>(bytes));
    const std::vector<json> events =
        TrainLocally(With(CorpusJob(4), {"training.dataset_path=" + file.string(), "validation.dataset=\"\"",
                                         "validation.dataset_path=\"\""}));
    double peak = 0;
    for (const json& e : events) {
      if (e.contains("step_metrics")) peak = std::max(peak, e.at("step_metrics").value("peak_rss_mb", 0.0));
    }
    fs::remove(file);
    return peak;
  };
  const fs::path dir = fs::temp_directory_path() / ("trainyard-rss-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const double small = peak_mb(dir / "small-10m.u16", int64_t{10} << 20);
  const double big = peak_mb(dir / "big-2g.u16", (int64_t{2} << 30) + 4096);
  fs::remove_all(dir);
  std::printf("[figures] rank peak RSS: %.1f MiB over a 10 MiB token file, %.1f MiB over a 2 GiB one\n", small, big);
  ASSERT_GT(small, 0);
  EXPECT_LT(big - small, 200.0);
}

// A broken .idx and a token the model's vocabulary does not have: the job FAILS on its
// first attempt with the file and the offset, its three restarts unused.
TEST_F(CorpusTest, BrokenDataFailsTheJobOnceNamingTheFileAndOffset) {
  StartCluster(1);
  const fs::path bad = cluster_->dir() / "bad.idx";
  fs::copy_file(g_corpus->small, bad);
  fs::copy_file(fs::path(g_corpus->small).replace_extension(".bin"), cluster_->dir() / "bad.bin");
  {
    std::fstream f(bad, std::ios::in | std::ios::out | std::ios::binary);
    f.write("XXIDIDX", 7);  // the magic
  }
  struct Case {
    std::vector<std::string> sets;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {{"training.dataset_path=" + bad.string()}, {bad.string(), "magic"}},
      {{"training.dataset_path=" + g_corpus->small.string(), "model.vocab_size=512", "validation.dataset=\"\"",
        "validation.dataset_path=\"\""},
       {fs::path(g_corpus->small).replace_extension(".bin").string(), "offset"}},
  };
  for (const Case& c : cases) {
    std::string id;
    const std::vector<json> events =
        RunToEnd(With(CorpusJob(5), With(c.sets, {"restart.max_restarts=3", "restart.backoff_s=0"})), "bad", &id);
    const json job = cluster_->Get(id);
    EXPECT_EQ(job.value("state", ""), "FAILED");
    EXPECT_EQ(job.value("attempt", 0), 1) << "no restart";
    // The reason (cut to 200 bytes) says it is permanent; the rank's error event says
    // the whole of it: the file and the offset.
    const std::string reason = job.value("failure_reason", "");
    EXPECT_NE(reason.find("permanent"), std::string::npos) << reason;
    std::string error;
    for (const json& e : events) {
      if (e.contains("log") && e.at("log").value("level", "") == "error") error = e.at("log").value("message", "");
    }
    for (const std::string& s : c.says) EXPECT_NE(error.find(s), std::string::npos) << s << " in: " << error;
    std::printf("[figures] refused: %s\n", error.c_str());
  }
}

}  // namespace
}  // namespace trainyard::testing
