// The pipeline-parallelism keys of [parallelism]: each rule once, with the field, the
// rule and the message written out here; the refusal of pp > 1 (no runtime yet) only
// after every other rule; and the keys through every reader (TOML, JSON, --set).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/spec/job_file_reader.h"
#include "common/spec/json_io.h"
#include "common/spec/overrides.h"
#include "common/spec/presets.h"
#include "common/spec/rules.h"
#include "tests/common/spec/rule_case.h"

namespace trainyard::spec {
namespace {

using ::testing::HasSubstr;

using rule_case::Case;
using rule_case::CaseName;
using rule_case::RuleTest;

constexpr SpecError::Kind kUnimplemented = SpecError::Kind::kUnimplemented;

INSTANTIATE_TEST_SUITE_P(
    Pipeline, RuleTest,
    ::testing::Values(
        Case{"PpZero", {"parallelism.pp=0"}, "parallelism.pp", "range", "parallelism.pp must be in [1, 65536], got 0"},
        Case{"PpNegative",
             {"parallelism.pp=-2"},
             "parallelism.pp",
             "range",
             "parallelism.pp must be in [1, 65536], got -2"},
        Case{"PpHuge",
             {"parallelism.pp=2147483647"},
             "parallelism.pp",
             "range",
             "parallelism.pp must be in [1, 65536], got 2147483647"},
        Case{"PpTimesDpTpOverTheWorldLimit",
             {"parallelism.pp=512", "parallelism.dp=128", "parallelism.tp=2"},
             "parallelism.pp",
             "range",
             "parallelism.pp=512 times dp*tp=256 = 131072 ranks, over the limit of 65536"},
        Case{"ScheduleUnknown",
             {"parallelism.pp_schedule=gpipe"},
             "parallelism.pp_schedule",
             "one_of",
             "parallelism.pp_schedule: unknown value \"gpipe\" (known: 1f1b, interleaved_1f1b)"},
        // torchtitan's spellings are not ours.
        Case{"ScheduleTorchtitanSpelling",
             {"parallelism.pp_schedule=\"Interleaved1F1B\""},
             "parallelism.pp_schedule",
             "one_of",
             "parallelism.pp_schedule: unknown value \"Interleaved1F1B\" (known: 1f1b, interleaved_1f1b)"},
        Case{"ScheduleEmpty",
             {"parallelism.pp_schedule=\"\""},
             "parallelism.pp_schedule",
             "one_of",
             "parallelism.pp_schedule: unknown value \"\" (known: 1f1b, interleaved_1f1b)"},
        Case{"ZeroBubbleIsNotBuilt",
             {"parallelism.pp_schedule=zbv"},
             "parallelism.pp_schedule",
             "unimplemented",
             "parallelism.pp_schedule=\"zbv\" (torchtitan's ZBVZeroBubble) is not built in this version; use "
             "\"1f1b\" or \"interleaved_1f1b\"",
             kUnimplemented},
        Case{"MicrobatchesNegative",
             {"parallelism.pp_microbatches=-1"},
             "parallelism.pp_microbatches",
             "range",
             "parallelism.pp_microbatches must be in [0, training.batch_size=8], got -1"},
        Case{"MicrobatchesAboveTheBatch",
             {"parallelism.pp_microbatches=16"},
             "parallelism.pp_microbatches",
             "range",
             "parallelism.pp_microbatches must be in [0, training.batch_size=8], got 16"},
        Case{"MicrobatchesDoNotDivideTheBatch",
             {"parallelism.pp_microbatches=3"},
             "parallelism.pp_microbatches",
             "divides",
             "parallelism.pp_microbatches=3 must divide training.batch_size=8 (a microbatch is batch_size / "
             "pp_microbatches whole sequences)"},
        Case{"VirtualStagesNegative",
             {"parallelism.pp_virtual_stages=-1"},
             "parallelism.pp_virtual_stages",
             "range",
             "parallelism.pp_virtual_stages must be in [0, 1024], got -1"},
        Case{"VirtualStagesHuge",
             {"parallelism.pp_schedule=interleaved_1f1b", "parallelism.pp_virtual_stages=1025"},
             "parallelism.pp_virtual_stages",
             "range",
             "parallelism.pp_virtual_stages must be in [0, 1024], got 1025"},
        Case{"VirtualStagesNeedTheInterleavedSchedule",
             {"parallelism.pp=2", "parallelism.pp_virtual_stages=2"},
             "parallelism.pp_virtual_stages",
             "requires",
             "parallelism.pp_virtual_stages=2 needs parallelism.pp_schedule=\"interleaved_1f1b\" "
             "(parallelism.pp_schedule=\"1f1b\" runs one stage a rank: leave the key out or set 1)"},
        Case{"InterleavedNeedsTwoVirtualStages",
             {"parallelism.pp=2", "parallelism.pp_schedule=interleaved_1f1b", "parallelism.pp_virtual_stages=1"},
             "parallelism.pp_virtual_stages",
             "range",
             "parallelism.pp_virtual_stages=1 must be at least 2 under parallelism.pp_schedule=\"interleaved_1f1b\" "
             "(0 means 2; for one stage a rank use pp_schedule=\"1f1b\")"},
        Case{"FewerLayersThanStages",
             {"parallelism.pp=5"},
             "parallelism.pp",
             "requires",
             "parallelism.pp=5 needs model.n_layers >= 5 pipeline stages (parallelism.pp=5 times 1 virtual stage a "
             "rank), got 4 (every stage holds at least one layer)"},
        // Interleaved's default of 2 virtual stages counts.
        Case{"FewerLayersThanInterleavedStages",
             {"parallelism.pp=4", "parallelism.pp_schedule=interleaved_1f1b"},
             "parallelism.pp",
             "requires",
             "parallelism.pp=4 needs model.n_layers >= 8 pipeline stages (parallelism.pp=4 times 2 virtual stages a "
             "rank), got 4 (every stage holds at least one layer)"},
        Case{"LayersPerStageNegative",
             {"parallelism.pp_layers_per_stage=-1"},
             "parallelism.pp_layers_per_stage",
             "range",
             "parallelism.pp_layers_per_stage must be in [0, model.n_layers=4], got -1"},
        Case{"LayersPerStageAboveTheModel",
             {"parallelism.pp_layers_per_stage=5"},
             "parallelism.pp_layers_per_stage",
             "range",
             "parallelism.pp_layers_per_stage must be in [0, model.n_layers=4], got 5"},
        Case{"LayersPerStageDoNotTileTheModel",
             {"parallelism.pp=2", "parallelism.pp_layers_per_stage=1"},
             "parallelism.pp_layers_per_stage",
             "requires",
             "parallelism.pp_layers_per_stage=1 times 2 pipeline stages (parallelism.pp=2 times 1 virtual stage a "
             "rank) must equal model.n_layers=4 (or leave pp_layers_per_stage out: the split is balanced)"},
        Case{"InterleavedMicrobatchesNotAMultipleOfPp",
             {"parallelism.pp=2", "parallelism.pp_schedule=interleaved_1f1b", "parallelism.pp_microbatches=1"},
             "parallelism.pp_microbatches",
             "divides",
             "parallelism.pp_microbatches=1 must be a multiple of parallelism.pp=2 under "
             "parallelism.pp_schedule=\"interleaved_1f1b\" (it runs the microbatches in rounds of pp, as Megatron's "
             "does)"},
        // Not given: one sequence a microbatch, so the batch itself must be a multiple of pp.
        Case{"InterleavedDefaultMicrobatchesNotAMultipleOfPp",
             {"parallelism.pp=2", "parallelism.pp_schedule=interleaved_1f1b", "training.batch_size=3"},
             "parallelism.pp_microbatches",
             "divides",
             "parallelism.pp_microbatches=0 (training.batch_size=3: a sequence a microbatch) must be a multiple of "
             "parallelism.pp=2 under parallelism.pp_schedule=\"interleaved_1f1b\" (it runs the microbatches in "
             "rounds of pp, as Megatron's does)"},
        Case{"PipelineRuntimeIsNotBuilt",
             {"parallelism.pp=2"},
             "parallelism.pp",
             "unimplemented",
             "parallelism.pp=2: pipeline parallelism is not built in this version (the pipeline keys are checked, but "
             "no engine runs pp > 1 yet); use parallelism.pp=1",
             kUnimplemented},
        Case{"InterleavedPipelineIsNotBuiltEither",
             {"parallelism.pp=2", "parallelism.pp_schedule=interleaved_1f1b", "parallelism.pp_microbatches=4"},
             "parallelism.pp",
             "unimplemented",
             "parallelism.pp=2: pipeline parallelism is not built in this version (the pipeline keys are checked, but "
             "no engine runs pp > 1 yet); use parallelism.pp=1",
             kUnimplemented},
        // Every invalid value is named before the refusal of pp > 1, rules of later
        // sections included.
        Case{"AnInvalidValueComesBeforeNotBuilt",
             {"parallelism.pp=2", "restart.backoff_s=-1"},
             "restart.backoff_s",
             "range",
             "restart.backoff_s must be in [0, 3600], got -1"}),
    CaseName);

TEST(PipelineRulesTest, DefaultsAreOneStageAndTheLayoutOfToday) {
  Result<JobSpec> r = ResolveAndValidate(SpecInput());
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  const ParallelismSpec& p = r.value().parallelism;
  EXPECT_EQ(p.pp, 1);
  EXPECT_EQ(p.pp_schedule, "1f1b");
  EXPECT_EQ(p.pp_microbatches, 0);      // not resolved in the spec: batch_size
  EXPECT_EQ(p.pp_virtual_stages, 0);    // not resolved in the spec: by the schedule
  EXPECT_EQ(p.pp_layers_per_stage, 0);  // balanced
  EXPECT_EQ(p.virtual_stages(), 1);
  EXPECT_EQ(p.pipeline_stages(), 1);
  Result<JobSpec> dp4 = FromPreset("debug", {"parallelism.dp=4", "parallelism.tp=2"});
  ASSERT_TRUE(dp4.ok()) << dp4.error().ToString();
  EXPECT_EQ(dp4.value().parallelism.world_size(), 8) << "pp = 1 adds no ranks";
}

TEST(PipelineRulesTest, KeysThatPassTheirRulesAreAcceptedAtPpOne) {
  // With pp = 1 the keys are checked and change nothing, so a job file can keep them.
  for (const std::vector<std::string>& sets : std::vector<std::vector<std::string>>{
           {"parallelism.pp=1"},
           {"parallelism.pp_schedule=\"1f1b\"", "parallelism.pp_virtual_stages=1"},
           {"parallelism.pp_microbatches=8"},
           {"parallelism.pp_microbatches=1"},
           {"parallelism.pp_schedule=interleaved_1f1b"},
           {"parallelism.pp_schedule=interleaved_1f1b", "parallelism.pp_virtual_stages=4",
            "parallelism.pp_layers_per_stage=1", "parallelism.pp_microbatches=2"},
           {"parallelism.pp_layers_per_stage=4"},
           {"parallelism.dp=65536"},  // world = pp·dp·tp = 65536: the limit itself
       }) {
    Result<JobSpec> spec = FromPreset("debug", sets);
    EXPECT_TRUE(spec.ok()) << sets.back() << ": " << (spec.ok() ? "" : spec.error().ToString());
  }
}

TEST(PipelineRulesTest, LegalPipelinesAreRefusedOnlyAsNotBuilt) {
  // Layouts that pass every rule: the refusal is UNIMPLEMENTED, never a rule.
  for (const std::vector<std::string>& sets : std::vector<std::vector<std::string>>{
           {"parallelism.pp=4"},                                   // one layer a stage
           {"parallelism.pp=2", "parallelism.pp_microbatches=1"},  // 1F1B takes m < pp
           {"parallelism.pp=2", "parallelism.pp_layers_per_stage=2"},
           {"parallelism.pp=2", "parallelism.pp_schedule=interleaved_1f1b", "parallelism.pp_layers_per_stage=1"},
           {"parallelism.pp=2", "parallelism.dp=2", "parallelism.tp=2", "parallelism.ep=4"},
       }) {
    Result<JobSpec> spec = FromPreset("debug", sets);
    ASSERT_FALSE(spec.ok()) << sets.back();
    EXPECT_EQ(spec.error().kind, SpecError::Kind::kUnimplemented) << spec.error().ToString();
    EXPECT_EQ(spec.error().field, "parallelism.pp");
    EXPECT_THAT(spec.error().message, HasSubstr("not built in this version"));
  }
}

TEST(PipelineReadersTest, TheKeysReadFromTomlJsonAndSet) {
  const char* toml = R"([parallelism]
pp = 2
pp_schedule = "interleaved_1f1b"
pp_microbatches = 4
pp_virtual_stages = 2
pp_layers_per_stage = 1
)";
  Result<SpecInput> from_toml = ParseJobText(toml, "job.toml");
  ASSERT_TRUE(from_toml.ok()) << from_toml.error().ToString();
  Result<SpecInput> from_json = ParseJobText(
      R"({"parallelism": {"pp": 2, "pp_schedule": "interleaved_1f1b", "pp_microbatches": "4",
          "pp_virtual_stages": 2, "pp_layers_per_stage": 1}})",
      "job.json");
  ASSERT_TRUE(from_json.ok()) << from_json.error().ToString();
  Result<SpecInput> from_set =
      ParseJobText("", "empty.toml",
                   {"parallelism.pp=2", "parallelism.pp_schedule=interleaved_1f1b", "parallelism.pp_microbatches=4",
                    "parallelism.pp_virtual_stages=2", "parallelism.pp_layers_per_stage=1"});
  ASSERT_TRUE(from_set.ok()) << from_set.error().ToString();
  for (const Result<SpecInput>* in : {&from_toml, &from_json, &from_set}) {
    Result<JobSpec> resolved = Resolve(in->value());
    ASSERT_TRUE(resolved.ok()) << resolved.error().ToString();
    const ParallelismSpec& p = resolved.value().parallelism;
    EXPECT_EQ(p.pp, 2);
    EXPECT_EQ(p.pp_schedule, "interleaved_1f1b");
    EXPECT_EQ(p.pp_microbatches, 4);
    EXPECT_EQ(p.pp_virtual_stages, 2);
    EXPECT_EQ(p.pp_layers_per_stage, 1);
    EXPECT_EQ(p.world_size(), 2);
    // The keys are legal; the layout is not built.
    Result<JobSpec> validated = ResolveAndValidate(in->value());
    ASSERT_FALSE(validated.ok());
    EXPECT_EQ(validated.error().kind, SpecError::Kind::kUnimplemented);
  }
  // The TOML refusal names where pp was given.
  EXPECT_EQ(ResolveAndValidate(from_toml.value()).error().origin, "job.toml:2:6");
  // JSON writes the keys and reads them back.
  const JobSpec written = Resolve(from_set.value()).value();
  Result<SpecInput> back = ParseJson(ToJson(written), "spec.json");
  ASSERT_TRUE(back.ok()) << back.error().ToString();
  EXPECT_EQ(ToJson(Resolve(back.value()).value()), ToJson(written));
  EXPECT_THAT(ToJson(written), HasSubstr("\"pp\":2,\"pp_schedule\":\"interleaved_1f1b\",\"pp_microbatches\":4,"
                                         "\"pp_virtual_stages\":2,\"pp_layers_per_stage\":1,"));
}

TEST(PipelineReadersTest, WrongTypesAndOutOfRangeNumbersAreNamed) {
  struct Bad {
    const char* text;  // a TOML job file
    const char* error;
  };
  for (const Bad& b : {
           Bad{"[parallelism]\npp = \"2\"\n", "job.toml:2:6: parallelism.pp: expected integer, got string"},
           Bad{"[parallelism]\npp = 2.5\n", "job.toml:2:6: parallelism.pp: expected integer, got float"},
           Bad{"[parallelism]\npp = true\n", "job.toml:2:6: parallelism.pp: expected integer, got boolean"},
           Bad{"[parallelism]\npp_schedule = 1\n",
               "job.toml:2:15: parallelism.pp_schedule: expected string, got integer"},
           Bad{"[parallelism]\npp_microbatches = [4]\n",
               "job.toml:2:19: parallelism.pp_microbatches: expected integer, got array"},
       }) {
    Result<SpecInput> in = ParseJobText(b.text, "job.toml");
    ASSERT_FALSE(in.ok()) << b.text;
    EXPECT_EQ(in.error().ToString(), b.error) << b.text;
  }
  // Beyond int32: the reader refuses it before any rule.
  Result<SpecInput> huge = ParseJobText("[parallelism]\npp_virtual_stages = 3000000000\n", "job.toml");
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.error().field, "parallelism.pp_virtual_stages");
  EXPECT_THAT(huge.error().message, HasSubstr("out of range"));

  SpecInput in;
  std::optional<SpecError> set = ApplyOverride("parallelism.pp=two", in);
  ASSERT_TRUE(set.has_value());
  EXPECT_EQ(set->ToString(), "--set parallelism.pp: expected integer, got string");
  std::optional<SpecError> typo = ApplyOverride("parallelism.ppp=2", in);
  ASSERT_TRUE(typo.has_value());
  EXPECT_EQ(typo->ToString(), "--set parallelism.ppp: unknown key parallelism.ppp (did you mean parallelism.pp?)");
  std::optional<SpecError> near = ApplyOverride("parallelism.pp_scedule=1f1b", in);
  ASSERT_TRUE(near.has_value());
  EXPECT_THAT(near->ToString(), HasSubstr("(did you mean parallelism.pp_schedule?)"));
}

}  // namespace
}  // namespace trainyard::spec
