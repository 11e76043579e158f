// The one mapping between the spec core and trainyard.v1.JobSpec: the key sets are
// equal, and every field survives proto -> core -> proto with and without presence.
#include "common/spec_proto.h"

#include <gmock/gmock.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>

#include "common/spec/json_io.h"
#include "common/spec/presets.h"
#include "common/spec/schema.h"

namespace trainyard {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

spec::FieldKind KindOfProto(const FieldDescriptor* f) {
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return spec::FieldKind::kInt32;
    case FieldDescriptor::CPPTYPE_UINT64:
      return spec::FieldKind::kUint64;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return spec::FieldKind::kDouble;
    case FieldDescriptor::CPPTYPE_BOOL:
      return spec::FieldKind::kBool;
    case FieldDescriptor::CPPTYPE_STRING:
      return spec::FieldKind::kString;
    default:
      ADD_FAILURE() << f->full_name() << " has a kind the spec core cannot hold";
      return spec::FieldKind::kString;
  }
}

TEST(SpecProtoTest, EveryProtoFieldIsASpecKeyAndBack) {
  std::set<std::string> proto_keys;
  const Descriptor* top = v1::JobSpec::descriptor();
  for (int s = 0; s < top->field_count(); ++s) {
    const FieldDescriptor* section = top->field(s);
    ASSERT_EQ(section->cpp_type(), FieldDescriptor::CPPTYPE_MESSAGE) << section->name();
    const Descriptor* d = section->message_type();
    for (int i = 0; i < d->field_count(); ++i) {
      const FieldDescriptor* f = d->field(i);
      EXPECT_TRUE(f->has_presence()) << f->full_name() << " must be `optional` (given vs default)";
      EXPECT_FALSE(f->is_repeated()) << f->full_name();
      const spec::FieldInfo* info = spec::FindField(section->name(), f->name());
      ASSERT_NE(info, nullptr) << section->name() << "." << f->name() << " is not a key of the spec core";
      EXPECT_EQ(info->kind, KindOfProto(f)) << info->path();
      proto_keys.insert(info->path());
    }
  }
  std::set<std::string> core_keys;
  for (const spec::FieldInfo& f : spec::Fields()) core_keys.insert(f.path());
  EXPECT_EQ(core_keys, proto_keys);
  // The count in job_spec.h (66 + dp_shard, dp_replicate + checkpoint.keep_best,
  // best_metric + job.after + model.capacity_factor + the architectures' 14: architecture,
  // five latent widths, five YaRN keys, two routing groups, head_dim + the pipeline's 5:
  // pp, pp_schedule, pp_microbatches, pp_virtual_stages, pp_layers_per_stage), so a drop
  // is noticed.
  EXPECT_EQ(core_keys.size(), 91u);
  // The pipeline keys are ParallelismSpec's fields 7 to 11.
  const Descriptor* parallelism = v1::ParallelismSpec::descriptor();
  int number = 7;
  for (const char* key : {"pp", "pp_schedule", "pp_microbatches", "pp_virtual_stages", "pp_layers_per_stage"}) {
    const FieldDescriptor* f = parallelism->FindFieldByName(key);
    ASSERT_NE(f, nullptr) << key;
    EXPECT_EQ(f->number(), number++) << key;
  }
}

// Sets a random subset of fields to random values of their kind.
v1::JobSpec RandomProto(std::mt19937_64& rng) {
  v1::JobSpec proto;
  const Descriptor* top = v1::JobSpec::descriptor();
  for (int s = 0; s < top->field_count(); ++s) {
    // An empty section means nothing (it maps to no key), so create one only for a field.
    const Descriptor* d = top->field(s)->message_type();
    for (int i = 0; i < d->field_count(); ++i) {
      if (rng() % 3 == 0) continue;
      Message* section = proto.GetReflection()->MutableMessage(&proto, top->field(s));
      const FieldDescriptor* f = d->field(i);
      const auto* refl = section->GetReflection();
      switch (f->cpp_type()) {
        case FieldDescriptor::CPPTYPE_INT32:
          refl->SetInt32(section, f, static_cast<int32_t>(rng()));
          break;
        case FieldDescriptor::CPPTYPE_UINT64:
          refl->SetUInt64(section, f, rng());
          break;
        case FieldDescriptor::CPPTYPE_DOUBLE:
          refl->SetDouble(section, f, std::uniform_real_distribution<double>(-1e9, 1e9)(rng));
          break;
        case FieldDescriptor::CPPTYPE_BOOL:
          refl->SetBool(section, f, rng() % 2 == 0);
          break;
        case FieldDescriptor::CPPTYPE_STRING: {
          std::string v(rng() % 12, '\0');
          for (char& c : v) c = static_cast<char>(rng());  // any bytes, even invalid UTF-8
          refl->SetString(section, f, v);
          break;
        }
        default:
          break;
      }
    }
  }
  return proto;
}

TEST(SpecProtoTest, GivenKeysRoundTripWithPresence) {
  std::mt19937_64 rng(20261130);
  for (int n = 0; n < 500; ++n) {
    const v1::JobSpec proto = RandomProto(rng);
    spec::Result<spec::SpecInput> input = InputFromProto(proto);
    ASSERT_TRUE(input.ok()) << input.error().ToString();
    const v1::JobSpec back = ProtoFromInput(input.value());
    std::string diff;
    google::protobuf::util::MessageDifferencer differ;
    differ.ReportDifferencesToString(&diff);
    EXPECT_TRUE(differ.Compare(proto, back)) << diff;
  }
}

TEST(SpecProtoTest, ResolvedSpecRoundTripsThroughTheProto) {
  spec::JobSpec s = spec::FromPreset("tiny", {"model.route_scale=0.25", "compile.backend=jit",
                                              "parallelism.collective_timeout_s=12.5", "job.name=\"x\"",
                                              "parallelism.dp=4", "parallelism.dp_shard=2"})
                        .value();
  s.training.seed = 18446744073709551615u;
  const v1::JobSpec proto = ProtoFromSpec(s);
  EXPECT_EQ(proto.training().seed(), 18446744073709551615u);
  EXPECT_DOUBLE_EQ(proto.parallelism().collective_timeout_s(), 12.5);
  EXPECT_EQ(proto.parallelism().dp_shard(), 2);
  EXPECT_TRUE(proto.parallelism().has_dp_replicate()) << "every key is given, 0 too";
  EXPECT_EQ(proto.parallelism().dp_replicate(), 0);
  spec::Result<spec::SpecInput> input = InputFromProto(proto);
  ASSERT_TRUE(input.ok());
  EXPECT_EQ(input.value().assignments().size(), spec::Fields().size());
  spec::Result<spec::JobSpec> back = spec::ResolveAndValidate(input.value());
  ASSERT_TRUE(back.ok()) << back.error().ToString();
  EXPECT_EQ(spec::ToJson(back.value()), spec::ToJson(s));
}

TEST(SpecProtoTest, PipelineKeysRoundTripAndPpAboveOneIsUnimplemented) {
  // Given keys keep their presence and values both ways, 0 and the defaults too.
  v1::JobSpec given;
  given.mutable_parallelism()->set_pp(2);
  given.mutable_parallelism()->set_pp_schedule("interleaved_1f1b");
  given.mutable_parallelism()->set_pp_microbatches(4);
  given.mutable_parallelism()->set_pp_virtual_stages(0);
  given.mutable_parallelism()->set_pp_layers_per_stage(1);
  spec::Result<spec::SpecInput> input = InputFromProto(given);
  ASSERT_TRUE(input.ok()) << input.error().ToString();
  const v1::JobSpec back = ProtoFromInput(input.value());
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(given, back)) << back.DebugString();
  EXPECT_TRUE(back.parallelism().has_pp_virtual_stages());
  EXPECT_FALSE(back.parallelism().has_dp());

  // Every pipeline key passes its rules (debug: 4 layers, batch_size 8), so the refusal
  // is the missing runtime: UNIMPLEMENTED, naming the key.
  absl::StatusOr<v1::JobSpec> refused = ResolveAndValidateProto(given);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(refused.status().message()),
              ::testing::StartsWith("parallelism.pp=2: pipeline parallelism is not built in this version"));
  // A key that breaks a rule is INVALID_ARGUMENT, even with pp > 1.
  v1::JobSpec bad = given;
  bad.mutable_parallelism()->set_pp_microbatches(3);
  EXPECT_EQ(ResolveAndValidateProto(bad).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ResolveAndValidateProto(bad).status().message(),
            "parallelism.pp_microbatches=3 must divide training.batch_size=8 (a microbatch is batch_size / "
            "pp_microbatches whole sequences)");
  v1::JobSpec zbv;
  zbv.mutable_parallelism()->set_pp_schedule("zbv");
  EXPECT_EQ(ResolveAndValidateProto(zbv).status().code(), absl::StatusCode::kUnimplemented);

  // At pp = 1 the keys are accepted, and the stored spec has every one of them.
  v1::JobSpec one = given;
  one.mutable_parallelism()->set_pp(1);
  one.mutable_parallelism()->set_pp_layers_per_stage(2);
  absl::StatusOr<v1::JobSpec> stored = ResolveAndValidateProto(one);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->parallelism().pp(), 1);
  EXPECT_EQ(stored->parallelism().pp_schedule(), "interleaved_1f1b");
  EXPECT_EQ(stored->parallelism().pp_microbatches(), 4);
  EXPECT_TRUE(stored->parallelism().has_pp_virtual_stages());
  EXPECT_EQ(stored->parallelism().pp_virtual_stages(), 0);
  EXPECT_EQ(stored->parallelism().pp_layers_per_stage(), 2);
  // Defaults, as a spec without the keys is stored.
  absl::StatusOr<v1::JobSpec> plain = ResolveAndValidateProto(v1::JobSpec());
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->parallelism().pp(), 1);
  EXPECT_EQ(plain->parallelism().pp_schedule(), "1f1b");
  EXPECT_TRUE(plain->parallelism().has_pp_microbatches());
  EXPECT_EQ(plain->parallelism().pp_microbatches(), 0);
}

TEST(SpecProtoTest, ResolveAndValidateProtoMapsErrorKinds) {
  v1::JobSpec lr;
  lr.mutable_training()->set_lr(20);
  absl::StatusOr<v1::JobSpec> a = ResolveAndValidateProto(lr);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a.status().message(), "training.lr must be in (0, 10], got 20");

  v1::JobSpec nan;
  nan.mutable_model()->set_norm_eps(std::nan(""));
  EXPECT_EQ(ResolveAndValidateProto(nan).status().message(), "model.norm_eps: expected a finite number, got nan");

  v1::JobSpec prof;
  prof.mutable_profiling()->set_enable(true);
  EXPECT_TRUE(ResolveAndValidateProto(prof).ok());

  absl::StatusOr<v1::JobSpec> ok = ResolveAndValidateProto(v1::JobSpec());
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->model().preset(), "debug");
  EXPECT_TRUE(ok->training().has_warmup_steps());
}

}  // namespace
}  // namespace trainyard
