#include "common/job_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "common/spec_proto.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

absl::StatusOr<v1::JobSpec> Parse(const std::string& text,
                                  const std::vector<std::string>& overrides = {}) {
  return ParseJobToml(text, "debug.toml", overrides);
}

TEST(JobFileTest, ParsesEverySectionWithTypedValues) {
  auto spec = Parse(R"(
[job]
name = "moe-debug"
priority = 5

[model]
preset = "tiny"
dim = 128
score_func = "softmax"
route_norm = false
route_scale = 2.5
norm_eps = 1e-6

[training]
steps = 20
lr = 3e-4
seed = 7
dataset = "synthetic"

[parallelism]
dp = 2
collective_timeout_s = 60

[compile]
backend = "jit"
preflight = true
summary_every = 25
test_plant_side_effect = true

[activation_checkpoint]
mode = "full"

[profiling]
enable = true
active = 4

[checkpoint]
interval = 10
initial_load_path = "/ckpt/step-10"

[resources]
device = "cuda"
ranks_per_worker = 4

[restart]
max_restarts = 2
)");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->job().name(), "moe-debug");
  EXPECT_EQ(spec->job().priority(), 5);
  EXPECT_EQ(spec->model().preset(), "tiny");
  EXPECT_EQ(spec->model().dim(), 128);
  EXPECT_EQ(spec->model().score_func(), "softmax");
  EXPECT_TRUE(spec->model().has_route_norm());
  EXPECT_FALSE(spec->model().route_norm());
  EXPECT_DOUBLE_EQ(spec->model().route_scale(), 2.5);
  EXPECT_DOUBLE_EQ(spec->model().norm_eps(), 1e-6);
  EXPECT_EQ(spec->training().steps(), 20);
  EXPECT_DOUBLE_EQ(spec->training().lr(), 3e-4);
  EXPECT_EQ(spec->training().seed(), 7u);
  EXPECT_EQ(spec->parallelism().dp(), 2);
  // An integer where a float is expected is accepted.
  EXPECT_DOUBLE_EQ(spec->parallelism().collective_timeout_s(), 60.0);
  EXPECT_EQ(spec->compile().backend(), "jit");
  EXPECT_TRUE(spec->compile().preflight());
  EXPECT_EQ(spec->compile().summary_every(), 25);
  EXPECT_TRUE(spec->compile().test_plant_side_effect());
  EXPECT_EQ(spec->activation_checkpoint().mode(), "full");
  EXPECT_TRUE(spec->profiling().enable());
  EXPECT_EQ(spec->profiling().active(), 4);
  EXPECT_EQ(spec->checkpoint().interval(), 10);
  EXPECT_EQ(spec->checkpoint().initial_load_path(), "/ckpt/step-10");
  EXPECT_EQ(spec->resources().device(), "cuda");
  EXPECT_EQ(spec->resources().ranks_per_worker(), 4);
  EXPECT_EQ(spec->restart().max_restarts(), 2);
}

TEST(JobFileTest, OnlyPresentKeysAreSet) {
  auto spec = Parse("[model]\ndim = 64\n[training]\nsteps = 3\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->model().has_dim());
  EXPECT_FALSE(spec->model().has_preset());
  EXPECT_FALSE(spec->model().has_n_heads());
  EXPECT_FALSE(spec->model().has_route_norm());
  EXPECT_FALSE(spec->training().has_lr());
  EXPECT_FALSE(spec->has_parallelism());
}

TEST(JobFileTest, EmptyFileIsAnEmptySpec) {
  auto spec = Parse("# nothing here\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->has_model());
  EXPECT_FALSE(spec->has_training());
}

TEST(JobFileTest, DottedKeysAndInlineTablesWork) {
  auto spec = Parse("model.dim = 96\ntraining = { steps = 4 }\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model().dim(), 96);
  EXPECT_EQ(spec->training().steps(), 4);
}

TEST(JobFileTest, UnknownKeyNamesFileLineColumnAndField) {
  auto spec = Parse("[job]\nname = \"x\"\n\n[model]\ndim = 256\nn_layers = 4\ndimm = 3\n");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(spec.status().message()),
              StartsWith("debug.toml:7:1: unknown key model.dimm"));
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("did you mean model.dim?"));
}

TEST(JobFileTest, UnknownSection) {
  auto spec = Parse("[job]\nname = \"x\"\n[modle]\ndim = 3\n");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(spec.status().message()), StartsWith("debug.toml:3:"));
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("unknown section [modle]"));
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("did you mean model?"));
}

TEST(JobFileTest, TopLevelKeyOutsideASectionIsUnknown) {
  auto spec = Parse("steps = 3\n");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()),
              StartsWith("debug.toml:1:1: unknown key steps"));
}

TEST(JobFileTest, SectionThatIsNotATable) {
  auto spec = Parse("model = 3\n");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("debug.toml:1:"));
  EXPECT_THAT(std::string(spec.status().message()),
              HasSubstr("model: expected table, got integer"));
}

TEST(JobFileTest, NestedTableInsideSectionIsUnknownKey) {
  auto spec = Parse("[model.extra]\nx = 1\n");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("unknown key model.extra"));
}

TEST(JobFileTest, WrongTypeNamesFieldAndTypes) {
  auto spec = Parse("[training]\nseed = 1\nsteps = \"ten\"\n");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(spec.status().message(),
            "debug.toml:3:9: training.steps: expected integer, got string");
}

TEST(JobFileTest, WrongTypeForEachKindOfField) {
  struct Case {
    std::string toml;
    std::string message;
  };
  const Case cases[] = {
      {"[model]\nroute_norm = 1\n", "model.route_norm: expected boolean, got integer"},
      {"[model]\nscore_func = 3\n", "model.score_func: expected string, got integer"},
      {"[model]\nrope_theta = \"big\"\n", "model.rope_theta: expected float, got string"},
      {"[model]\ndim = 2.5\n", "model.dim: expected integer, got float"},
      {"[model]\ndim = [1, 2]\n", "model.dim: expected integer, got array"},
      {"[training]\nseed = true\n", "training.seed: expected integer, got boolean"},
      {"[compile]\npreflight = \"yes\"\n", "compile.preflight: expected boolean, got string"},
      {"[compile]\nsummary_every = 1.5\n", "compile.summary_every: expected integer, got float"},
      {"[compile]\ntest_plant_side_effect = 1\n",
       "compile.test_plant_side_effect: expected boolean, got integer"},
  };
  for (const Case& c : cases) {
    auto spec = Parse(c.toml);
    ASSERT_FALSE(spec.ok()) << c.toml;
    EXPECT_THAT(std::string(spec.status().message()), HasSubstr(c.message)) << c.toml;
    EXPECT_THAT(std::string(spec.status().message()), StartsWith("debug.toml:2:")) << c.toml;
  }
}

TEST(JobFileTest, IntegerOutOfInt32Range) {
  auto spec = Parse("[training]\nsteps = 3000000000\n");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), StartsWith("debug.toml:2:9: training.steps: "));
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("3000000000 is out of range"));
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("32-bit"));
}

TEST(JobFileTest, Int32BoundaryIsAccepted) {
  auto spec = Parse("[training]\nsteps = 2147483647\n[job]\npriority = -2147483648\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->training().steps(), 2147483647);
  EXPECT_EQ(spec->job().priority(), -2147483647 - 1);
}

TEST(JobFileTest, NegativeSeedIsOutOfRange) {
  auto spec = Parse("[training]\nseed = -1\n");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("training.seed: -1 is out of range"));
}

TEST(JobFileTest, NonFiniteFloatIsRejected) {
  auto spec = Parse("[training]\nlr = nan\n");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()),
              HasSubstr("training.lr: expected a finite number"));
}

TEST(JobFileTest, SyntaxErrorCarriesTomlPosition) {
  auto spec = Parse("[job]\nname = \"x\"\n[model]\ndim = = 3\n");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(spec.status().message()), StartsWith("debug.toml:4:"));
}

TEST(JobFileTest, DuplicateKeyIsASyntaxError) {
  auto spec = Parse("[model]\ndim = 1\ndim = 2\n");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), StartsWith("debug.toml:3:"));
}

TEST(JobFileTest, EarliestProblemInTheFileIsReported) {
  // toml++ iterates keys alphabetically; the report must follow the file instead.
  auto spec = Parse("[training]\nzzz = 1\naaa = 2\n");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()),
              StartsWith("debug.toml:2:1: unknown key training.zzz"));
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("and 1 more problem"));
}

TEST(JobFileTest, OverridesParseTomlValues) {
  auto spec =
      Parse("[training]\nsteps = 100\n[model]\nroute_norm = true\n",
            {"training.steps=20", "model.score_func=softmax", "model.route_norm=false",
             "training.lr=1e-3", "parallelism.collective_timeout_s=30", "job.name=\"quoted\""});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->training().steps(), 20);
  EXPECT_EQ(spec->model().score_func(), "softmax");
  EXPECT_TRUE(spec->model().has_route_norm());
  EXPECT_FALSE(spec->model().route_norm());
  EXPECT_DOUBLE_EQ(spec->training().lr(), 1e-3);
  EXPECT_DOUBLE_EQ(spec->parallelism().collective_timeout_s(), 30.0);
  EXPECT_EQ(spec->job().name(), "quoted");
}

TEST(JobFileTest, QuotedAndBareStringOverridesAgree) {
  auto quoted = Parse("", {"model.score_func=\"softmax\""});
  auto bare = Parse("", {"model.score_func=softmax"});
  ASSERT_TRUE(quoted.ok()) << quoted.status();
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(quoted->model().score_func(), "softmax");
  EXPECT_EQ(bare->model().score_func(), "softmax");
}

TEST(JobFileTest, UnquotedValueForStringFieldIsTakenLiterally) {
  auto spec = Parse(
      "", {"job.name=123", "training.dataset_path=/data/a b.bin", "checkpoint.initial_load_path="});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->job().name(), "123");
  EXPECT_EQ(spec->training().dataset_path(), "/data/a b.bin");
  EXPECT_TRUE(spec->checkpoint().has_initial_load_path());
  EXPECT_EQ(spec->checkpoint().initial_load_path(), "");
}

TEST(JobFileTest, CompileSummaryAndPlantedSideEffectKeys) {
  auto spec = Parse("[compile]\nsummary_every = 7\n",
                    {"compile.test_plant_side_effect=true", "compile.preflight=true"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->compile().summary_every(), 7);
  EXPECT_TRUE(spec->compile().test_plant_side_effect());
  EXPECT_TRUE(spec->compile().preflight());

  auto typo = Parse("[compile]\nsummary_evry = 7\n");
  ASSERT_FALSE(typo.ok());
  EXPECT_THAT(std::string(typo.status().message()),
              StartsWith("debug.toml:2:1: unknown key compile.summary_evry"));
  EXPECT_THAT(std::string(typo.status().message()),
              HasSubstr("did you mean compile.summary_every?"));
}

TEST(JobFileTest, LaterOverrideWins) {
  auto spec = Parse("", {"training.steps=5", "training.steps=6"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->training().steps(), 6);
}

TEST(JobFileTest, OverrideErrorsNameTheSetFlag) {
  struct Case {
    std::string override_text;
    std::string message;
  };
  const Case cases[] = {
      {"training.steps=ten", "--set training.steps: expected integer, got string"},
      {"training.steps=\"20\"", "--set training.steps: expected integer, got string"},
      {"model.route_norm=yes", "--set model.route_norm: expected boolean, got string"},
      {"training.steps=99999999999", "--set training.steps: 99999999999 is out of range"},
      {"model.dimm=3", "--set model.dimm: unknown key model.dimm"},
      {"modle.dim=3", "--set modle.dim: unknown section [modle]"},
      {"dim=3", "--set dim: expected section.key=value"},
      {"model.dim.x=3", "--set model.dim.x: expected section.key=value"},
      {"training.steps", "--set training.steps: expected section.key=value"},
  };
  for (const Case& c : cases) {
    auto spec = Parse("", {c.override_text});
    ASSERT_FALSE(spec.ok()) << c.override_text;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(spec.status().message()), StartsWith(c.message)) << c.override_text;
  }
}

TEST(JobFileTest, FileErrorsComeBeforeOverrides) {
  auto spec = Parse("[model]\ndimm = 1\n", {"training.steps=ten"});
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()),
              StartsWith("debug.toml:2:1: unknown key model.dimm"));
}

TEST(JobFileTest, OversizedTextIsRejected) {
  std::string text = "[job]\nname = \"x\"\n";
  text.append(kMaxJobFileBytes, '#');
  auto spec = Parse(text);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("1 MiB"));
}

class JobFileOnDiskTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = ::testing::TempDir() + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    paths_.push_back(path);
    return path;
  }
  void TearDown() override {
    for (const auto& p : paths_) std::remove(p.c_str());
  }
  std::vector<std::string> paths_;
};

TEST_F(JobFileOnDiskTest, LoadsFileAndAppliesOverrides) {
  const std::string path = Write("load.toml", "[training]\nsteps = 100\n");
  auto spec = LoadJobFile(path, {"training.steps=20"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->training().steps(), 20);
}

TEST_F(JobFileOnDiskTest, ErrorsUseThePath) {
  const std::string path = Write("bad.toml", "[model]\n\ndimm = 1\n");
  auto spec = LoadJobFile(path);
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()),
              StartsWith(path + ":3:1: unknown key model.dimm"));
}

TEST_F(JobFileOnDiskTest, MissingFileIsNotFound) {
  auto spec = LoadJobFile(::testing::TempDir() + "/does-not-exist.toml");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("does-not-exist.toml"));
}

TEST_F(JobFileOnDiskTest, FileOverOneMebibyteIsRejected) {
  const std::string path = Write("big.toml", std::string(kMaxJobFileBytes + 1, '#'));
  auto spec = LoadJobFile(path);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("1 MiB"));
}

TEST_F(JobFileOnDiskTest, FileOfExactlyOneMebibyteIsAccepted) {
  std::string text = "[training]\nsteps = 9\n";
  text.append(kMaxJobFileBytes - text.size(), '\n');
  const std::string path = Write("edge.toml", text);
  auto spec = LoadJobFile(path);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->training().steps(), 9);
}

TEST(JobFileExamplesTest, ExamplesLoad) {
  auto debug = LoadJobFile(std::string(TRAINYARD_EXAMPLES) + "/debug.toml");
  ASSERT_TRUE(debug.ok()) << debug.status();
  EXPECT_EQ(debug->model().preset(), "debug");
  EXPECT_EQ(debug->training().steps(), 20);
  EXPECT_EQ(debug->parallelism().dp(), 1);
  auto tiny = LoadJobFile(std::string(TRAINYARD_EXAMPLES) + "/tiny.toml");
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  EXPECT_EQ(tiny->model().preset(), "tiny");

  // Both examples must be runnable by this release, not merely parseable.
  for (v1::JobSpec* spec : {&*debug, &*tiny}) {
    absl::StatusOr<v1::JobSpec> resolved = ResolveAndValidateProto(*spec);
    ASSERT_TRUE(resolved.ok()) << resolved.status();
    *spec = *resolved;
  }
  EXPECT_EQ(debug->model().dim(), 256);
  EXPECT_EQ(debug->training().seq_len(), 256);
  EXPECT_EQ(tiny->model().dim(), 64);
  EXPECT_EQ(tiny->training().seq_len(), 32);
}

}  // namespace
}  // namespace trainyard
