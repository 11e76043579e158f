#include "common/spec_defaults.h"

#include <gmock/gmock.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <gtest/gtest.h>

#include "common/job_file.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

// Every optional scalar of every section; the defaults contract is that all are set.
std::vector<std::string> UnsetFields(const v1::JobSpec& spec) {
  std::vector<std::string> unset;
  const auto* d = v1::JobSpec::descriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const auto* section_field = d->field(i);
    const google::protobuf::Message& section =
        spec.GetReflection()->GetMessage(spec, section_field);
    const auto* sd = section.GetDescriptor();
    for (int j = 0; j < sd->field_count(); ++j) {
      if (!section.GetReflection()->HasField(section, sd->field(j))) {
        unset.push_back(section_field->name() + "." + sd->field(j)->name());
      }
    }
  }
  return unset;
}

TEST(SpecDefaultsTest, EmptySpecGetsDebugPresetAndEveryDefault) {
  v1::JobSpec spec;
  ASSERT_TRUE(ApplyPresetAndDefaults(&spec).ok());
  EXPECT_THAT(UnsetFields(spec), ::testing::IsEmpty());

  const v1::ModelSpec& m = spec.model();
  EXPECT_EQ(m.preset(), "debug");
  EXPECT_EQ(m.vocab_size(), 2048);
  EXPECT_EQ(m.dim(), 256);
  EXPECT_EQ(m.n_layers(), 4);
  EXPECT_EQ(m.n_dense_layers(), 1);
  EXPECT_EQ(m.n_heads(), 8);
  EXPECT_EQ(m.n_kv_heads(), 4);
  EXPECT_EQ(m.ffn_hidden(), 768);
  EXPECT_EQ(m.n_routed_experts(), 8);
  EXPECT_EQ(m.top_k(), 2);
  EXPECT_EQ(m.n_shared_experts(), 1);
  EXPECT_EQ(m.expert_hidden(), 256);
  EXPECT_EQ(m.score_func(), "sigmoid");
  EXPECT_TRUE(m.route_norm());
  EXPECT_DOUBLE_EQ(m.route_scale(), 1.0);
  EXPECT_DOUBLE_EQ(m.rope_theta(), 10000.0);
  EXPECT_DOUBLE_EQ(m.norm_eps(), 1e-5);
  EXPECT_DOUBLE_EQ(m.load_balance_coeff(), 1e-3);

  const v1::TrainingSpec& t = spec.training();
  EXPECT_EQ(t.seq_len(), 256);
  EXPECT_EQ(t.batch_size(), 8);
  EXPECT_EQ(t.steps(), 100);
  EXPECT_DOUBLE_EQ(t.lr(), 8e-4);
  EXPECT_EQ(t.warmup_steps(), 10);
  EXPECT_DOUBLE_EQ(t.max_norm(), 1.0);
  EXPECT_EQ(t.seed(), 42u);
  EXPECT_EQ(t.dataset(), "synthetic");
  EXPECT_EQ(t.dataset_path(), "");
  EXPECT_EQ(t.log_freq(), 1);

  EXPECT_EQ(spec.job().name(), "job");
  EXPECT_EQ(spec.job().priority(), 0);
  EXPECT_EQ(spec.parallelism().dp(), 1);
  EXPECT_EQ(spec.parallelism().tp(), 1);
  EXPECT_EQ(spec.parallelism().ep(), 1);
  EXPECT_DOUBLE_EQ(spec.parallelism().collective_timeout_s(), 300.0);
  EXPECT_EQ(spec.compile().backend(), "eager");
  EXPECT_EQ(spec.compile().regions(), "per_layer");
  EXPECT_EQ(spec.compile().recompile_limit(), 8);
  EXPECT_EQ(spec.compile().on_side_effect(), "error");
  EXPECT_FALSE(spec.compile().preflight());
  EXPECT_EQ(spec.compile().summary_every(), 100);
  EXPECT_FALSE(spec.compile().test_plant_side_effect());
  EXPECT_EQ(spec.activation_checkpoint().mode(), "none");
  EXPECT_FALSE(spec.profiling().enable());
  EXPECT_EQ(spec.profiling().freq(), 100);
  EXPECT_EQ(spec.profiling().warmup(), 3);
  EXPECT_EQ(spec.profiling().active(), 2);
  EXPECT_EQ(spec.checkpoint().interval(), 0);
  EXPECT_EQ(spec.checkpoint().keep(), 3);
  EXPECT_EQ(spec.checkpoint().initial_load_path(), "");
  EXPECT_EQ(spec.resources().device(), "cpu");
  EXPECT_EQ(spec.resources().ranks_per_worker(), 0);
  EXPECT_EQ(spec.restart().max_restarts(), 0);
}

TEST(SpecDefaultsTest, TinyPresetFillsItsSizes) {
  v1::JobSpec spec;
  spec.mutable_model()->set_preset("tiny");
  ASSERT_TRUE(ApplyPresetAndDefaults(&spec).ok());
  EXPECT_THAT(UnsetFields(spec), ::testing::IsEmpty());
  const v1::ModelSpec& m = spec.model();
  EXPECT_EQ(m.preset(), "tiny");
  EXPECT_EQ(m.vocab_size(), 256);
  EXPECT_EQ(m.dim(), 64);
  EXPECT_EQ(m.n_layers(), 2);
  EXPECT_EQ(m.n_dense_layers(), 1);
  EXPECT_EQ(m.n_heads(), 4);
  EXPECT_EQ(m.n_kv_heads(), 2);
  EXPECT_EQ(m.ffn_hidden(), 128);
  EXPECT_EQ(m.n_routed_experts(), 4);
  EXPECT_EQ(m.top_k(), 2);
  EXPECT_EQ(m.n_shared_experts(), 1);
  EXPECT_EQ(m.expert_hidden(), 32);
  EXPECT_EQ(m.score_func(), "sigmoid");  // "rest as debug"
  EXPECT_DOUBLE_EQ(m.rope_theta(), 10000.0);
  EXPECT_EQ(spec.training().seq_len(), 32);
  EXPECT_EQ(spec.training().batch_size(), 4);
}

TEST(SpecDefaultsTest, ExplicitKeysBeatThePreset) {
  auto parsed = ParseJobToml(
      "[model]\npreset = \"tiny\"\ndim = 128\nroute_norm = false\n[training]\nseq_len = 64\n",
      "t.toml", {"model.n_layers=3", "training.batch_size=2"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  v1::JobSpec spec = *parsed;
  ASSERT_TRUE(ApplyPresetAndDefaults(&spec).ok());
  EXPECT_EQ(spec.model().dim(), 128);
  EXPECT_FALSE(spec.model().route_norm());  // explicit false is not "unset"
  EXPECT_EQ(spec.model().n_layers(), 3);
  EXPECT_EQ(spec.model().n_heads(), 4);  // from tiny
  EXPECT_EQ(spec.training().seq_len(), 64);
  EXPECT_EQ(spec.training().batch_size(), 2);
}

TEST(SpecDefaultsTest, ExplicitZeroIsKept) {
  v1::JobSpec spec;
  spec.mutable_model()->set_n_dense_layers(0);
  spec.mutable_training()->set_seed(0);
  spec.mutable_model()->set_load_balance_coeff(0.0);
  ASSERT_TRUE(ApplyPresetAndDefaults(&spec).ok());
  EXPECT_EQ(spec.model().n_dense_layers(), 0);
  EXPECT_EQ(spec.training().seed(), 0u);
  EXPECT_DOUBLE_EQ(spec.model().load_balance_coeff(), 0.0);
}

TEST(SpecDefaultsTest, DefaultWarmupIsClampedToSteps) {
  v1::JobSpec spec;
  spec.mutable_training()->set_steps(4);
  ASSERT_TRUE(ApplyPresetAndDefaults(&spec).ok());
  EXPECT_EQ(spec.training().warmup_steps(), 4);
}

TEST(SpecDefaultsTest, ExplicitWarmupIsNotClamped) {
  v1::JobSpec spec;
  spec.mutable_training()->set_steps(4);
  spec.mutable_training()->set_warmup_steps(7);
  ASSERT_TRUE(ApplyPresetAndDefaults(&spec).ok());
  EXPECT_EQ(spec.training().warmup_steps(), 7);
}

TEST(SpecDefaultsTest, UnknownPresetIsInvalidArgument) {
  v1::JobSpec spec;
  spec.mutable_model()->set_preset("huge");
  spec.mutable_model()->set_dim(12);
  absl::Status status = ApplyPresetAndDefaults(&spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "model.preset: unknown preset \"huge\" (known: debug, tiny)");
  EXPECT_EQ(spec.model().dim(), 12);  // left untouched
  EXPECT_FALSE(spec.model().has_n_heads());
}

TEST(SpecDefaultsTest, IsIdempotent) {
  v1::JobSpec spec;
  spec.mutable_model()->set_preset("tiny");
  spec.mutable_training()->set_steps(3);
  ASSERT_TRUE(ApplyPresetAndDefaults(&spec).ok());
  v1::JobSpec again = spec;
  ASSERT_TRUE(ApplyPresetAndDefaults(&again).ok());
  EXPECT_EQ(again.SerializeAsString(), spec.SerializeAsString());
}

TEST(SpecDefaultsTest, WorldSizeIsDpTimesTp) {
  v1::JobSpec spec;
  EXPECT_EQ(WorldSize(spec), 1);
  spec.mutable_parallelism()->set_dp(3);
  spec.mutable_parallelism()->set_tp(2);
  spec.mutable_parallelism()->set_ep(6);
  EXPECT_EQ(WorldSize(spec), 6);
  spec.mutable_parallelism()->set_dp(1 << 20);
  spec.mutable_parallelism()->set_tp(1 << 20);
  EXPECT_EQ(WorldSize(spec), std::numeric_limits<int>::max());
}

}  // namespace
}  // namespace trainyard
