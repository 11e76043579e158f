// The controller admits exactly the jobs its ranks accept. 10,000 random job specs
// (every field, boundary and hostile values: negatives, zero, limits ± 1, NaN, inf,
// huge strings, invalid UTF-8) go through the controller's admission
// (AdmissionPolicy::Admit on the submitted proto) and through a rank's config loading
// (the proto as the worker writes it, proto3 JSON, read by LoadEngineConfigJson). Both
// must accept the same specs, refuse the same ones with the same message (so the same
// field), and agree on the normalised result. The only allowed difference is the
// fleet: this test's fleet has slots but no GPU worker and no engine capability, so the
// controller also refuses resources.device=cuda, compile.backend=cudagraph and
// training.mixed_precision=bf16 that a rank's config accepts (the engine refuses the
// last two itself, later: worker/engine/launch/engine_capabilities.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/events/proto_json.h"
#include "common/spec/json_io.h"
#include "common/spec/schema.h"
#include "common/spec_proto.h"
#include "server/policy/admission_policy.h"
#include "worker/engine/config/engine_config.h"

namespace trainyard {
namespace {

constexpr int kSpecs = 10000;

// Values each kind of field draws from: typical ones (so that a good share of the
// specs is valid) and boundary or hostile ones.
std::vector<spec::FieldValue> Candidates(const spec::FieldInfo& f, const spec::JobSpec& typical) {
  const spec::FieldValue usual = spec::GetField(typical, f.section, f.key);
  const double inf = std::numeric_limits<double>::infinity();
  switch (f.kind) {
    case spec::FieldKind::kInt32:
      return {usual,
              usual,
              usual,
              -1,
              0,
              1,
              2,
              3,
              4,
              8,
              64,
              65,
              1000,
              1001,
              1024,
              1025,
              4096,
              65536,
              65537,
              1 << 20,
              (1 << 20) + 1,
              1 << 24,
              (1 << 24) + 1,
              1000000000,
              1000000001,
              std::numeric_limits<int>::max(),
              std::numeric_limits<int>::min()};
    case spec::FieldKind::kUint64:
      return {usual, std::uint64_t{0}, std::uint64_t{1}, std::numeric_limits<std::uint64_t>::max()};
    case spec::FieldKind::kDouble:
      return {usual,
              usual,
              usual,
              0.0,
              -0.0,
              -1.0,
              1e-4,
              1e-3,
              0.5,
              1.0,
              2.0,
              10.0,
              10.000001,
              20.0,
              1e6,
              1e6 + 1,
              1e7,
              1e12,
              1e13,
              std::nan(""),
              inf,
              -inf,
              std::numeric_limits<double>::denorm_min()};
    case spec::FieldKind::kBool:
      return {true, false};
    case spec::FieldKind::kString:
      break;
  }
  std::vector<spec::FieldValue> out = {usual,
                                       usual,
                                       usual,
                                       usual,
                                       std::string(),
                                       std::string("bogus"),
                                       std::string(200, 'z'),
                                       std::string("caf\xc3\x28\xff", 6)};
  const std::map<std::string, std::vector<std::string>> known = {
      {"model.preset", {"debug", "tiny", "huge"}},
      {"model.score_func", {"sigmoid", "softmax"}},
      {"training.dataset", {"synthetic", "synthetic", "text", "tokens"}},
      {"training.dataset_path",
       {"/data/t.u16", "/data/t.u32", "/data/a.txt", "/data/a.idx,/data/b-*.bin", "/d/a.bin,", std::string(5000, 'p')}},
      {"validation.dataset", {"", "", "synthetic", "tokens"}},
      {"validation.dataset_path", {"", "/data/v.idx", "/data/../v.idx"}},
      {"training.mixed_precision", {"fp32", "fp32", "bf16"}},
      {"compile.backend", {"eager", "jit", "cudagraph"}},
      {"compile.regions", {"per_layer", "model"}},
      {"compile.on_side_effect", {"error", "fallback"}},
      {"activation_checkpoint.mode", {"none", "full", "selective"}},
      {"resources.device", {"cpu", "cpu", "cuda"}},
      {"checkpoint.initial_load_path", {"/w.safetensors"}},
      {"job.name", {"job", "run-1.a_b", std::string(128, 'n'), std::string(129, 'n'), "a b"}},
      {"job.after", {"", "job-1", "job-1:failed, job-2", "job-1,,", "job-1:soon", "job-1,job-1"}},
  };
  if (auto it = known.find(f.path()); it != known.end()) {
    for (const std::string& v : it->second) out.push_back(v);
  }
  return out;
}

// Straight onto the proto, as a raw gRPC client could (NaN and invalid UTF-8 included).
void SetProto(v1::JobSpec& proto, const spec::FieldInfo& f, const spec::FieldValue& v) {
  google::protobuf::Message* section =
      proto.GetReflection()->MutableMessage(&proto, v1::JobSpec::descriptor()->FindFieldByName(f.section));
  const auto* field = section->GetDescriptor()->FindFieldByName(f.key);
  const auto* refl = section->GetReflection();
  if (const int* i = std::get_if<int>(&v)) refl->SetInt32(section, field, *i);
  if (const auto* u = std::get_if<std::uint64_t>(&v)) refl->SetUInt64(section, field, *u);
  if (const double* d = std::get_if<double>(&v)) refl->SetDouble(section, field, *d);
  if (const bool* b = std::get_if<bool>(&v)) refl->SetBool(section, field, *b);
  if (const auto* s = std::get_if<std::string>(&v)) refl->SetString(section, field, *s);
}

bool IsInvalidUtf8(const spec::FieldValue& v) {
  const auto* s = std::get_if<std::string>(&v);
  return s != nullptr && s->find('\xff') != std::string::npos;  // only the hostile candidate has 0xff
}

// A random submitted spec: each field given with probability `p`. `*not_utf8` tells
// whether a string got the invalid UTF-8 candidate.
v1::JobSpec RandomSpec(std::mt19937_64& rng, double p, const spec::JobSpec& typical, bool* not_utf8) {
  v1::JobSpec proto;
  *not_utf8 = false;
  std::uniform_real_distribution<double> coin(0, 1);
  for (const spec::FieldInfo& f : spec::Fields()) {
    if (coin(rng) >= p) continue;
    const std::vector<spec::FieldValue> c = Candidates(f, typical);
    const spec::FieldValue& v = c[rng() % c.size()];
    *not_utf8 = *not_utf8 || IsInvalidUtf8(v);
    SetProto(proto, f, v);
  }
  return proto;
}

// A refusal that only the fleet explains: the spec core alone accepts the submitted spec,
// and the controller's message names a setting that needs something of the workers (a
// GPU for resources.device=cuda; an engine capability for compile.backend=cudagraph and
// training.mixed_precision=bf16, which no engine of this release has).
bool FleetOnly(const v1::JobSpec& submitted, const absl::Status& s) {
  if (!ResolveAndValidateProto(submitted).ok()) return false;
  for (const char* key : {"resources.device=", "compile.backend=cudagraph", "training.mixed_precision=bf16"}) {
    if (absl::StartsWith(s.message(), key)) return true;
  }
  return false;
}

TEST(SpecAgreementTest, ControllerAdmitsExactlyWhatRanksAccept) {
  std::mt19937_64 rng(0x7a11a4d);
  const spec::JobSpec typical = engine::TinyEngineConfig();
  FleetView fleet;
  fleet.connected_slots = 1 << 20;  // the fleet checks aside from devices and files
  int accepted = 0, refused = 0, fleet_only = 0, not_json = 0;
  std::map<std::string, int> refused_by_field;
  for (int n = 0; n < kSpecs; ++n) {
    // Few keys (mostly valid specs) to many keys (mostly invalid ones).
    bool not_utf8 = false;
    const v1::JobSpec submitted = RandomSpec(rng, 0.02 + 0.3 * (n % 10) / 10.0, typical, &not_utf8);
    const absl::StatusOr<v1::JobSpec> admitted = AdmissionPolicy::Admit(submitted, fleet);
    if (not_utf8) {
      // Neither gRPC (proto3 strings) nor proto3 JSON carries invalid UTF-8, so no
      // worker could hand this spec to a rank: the controller must refuse it by the
      // UTF-8 rule (unless an earlier rule already refused it).
      ASSERT_FALSE(admitted.ok());
      ++not_json;
      continue;
    }
    // What a rank reads: the worker writes the spec it was sent as proto3 JSON.
    const std::string as_json = ToJsonLine(submitted);
    SCOPED_TRACE(as_json.substr(0, 2000));
    const spec::Result<engine::EngineConfig> loaded = engine::LoadEngineConfigJson(as_json, "");
    if (loaded.ok()) {
      if (!admitted.ok()) {
        ASSERT_TRUE(FleetOnly(submitted, admitted.status())) << admitted.status();
        ++fleet_only;
        continue;
      }
      ++accepted;
      // The same normalised job, and the spec the controller stores reads back equal.
      EXPECT_EQ(ToJsonLine(ProtoFromSpec(loaded.value())), ToJsonLine(*admitted));
      const spec::Result<engine::EngineConfig> stored = engine::LoadEngineConfigJson(ToJsonLine(*admitted), "");
      ASSERT_TRUE(stored.ok()) << stored.error().ToString();
      EXPECT_EQ(spec::ToJson(stored.value()), spec::ToJson(loaded.value()));
    } else {
      ++refused;
      ASSERT_FALSE(admitted.ok()) << "the controller admits what a rank refuses: " << loaded.error().ToString();
      EXPECT_EQ(admitted.status().code(), loaded.error().kind == spec::SpecError::Kind::kUnimplemented
                                              ? absl::StatusCode::kUnimplemented
                                              : absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(admitted.status().message(), loaded.error().ToString());
      EXPECT_EQ(loaded.error().message.rfind(loaded.error().field, 0), 0u) << loaded.error().message;
      ++refused_by_field[loaded.error().field];
    }
  }
  // Both verdicts are well represented, and refusals cover many different fields.
  EXPECT_GT(accepted, kSpecs / 20);
  EXPECT_GT(refused, kSpecs / 20);
  EXPECT_GT(fleet_only, 0);
  EXPECT_GE(refused_by_field.size(), 30u);
  std::string fields;
  for (const auto& [field, count] : refused_by_field) fields += " " + field + "=" + std::to_string(count);
  std::printf(
      "specs %d: accepted %d, refused by both %d, refused only for the fleet %d, not UTF-8 %d; "
      "refusals by field:%s\n",
      kSpecs, accepted, refused, fleet_only, not_json, fields.c_str());
}

}  // namespace
}  // namespace trainyard
