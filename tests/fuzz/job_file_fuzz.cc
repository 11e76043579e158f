// Fuzz target: a job file as `trainyard submit` reads it (common/job_file: TOML, or JSON
// for text starting with '{', through the spec core), then what the controller does with
// the proto it would send (AdmissionPolicy::Admit: preset, defaults, every rule, the
// fleet). Invariants: errors stay short, and an admitted job is one that the spec core
// alone (trainyard-train, preflight) and a rank loading its config.json both accept.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/job_file.h"
#include "common/events/proto_json.h"
#include "common/spec/job_file_reader.h"
#include "common/spec/presets.h"
#include "server/policy/admission_policy.h"
#include "tests/fuzz/fuzz_check.h"
#include "worker/engine/config/engine_config.h"

namespace trainyard {
namespace {

void Run(std::string_view text) {
  absl::StatusOr<v1::JobSpec> proto = ParseJobToml(text, "fuzz.toml");
  if (!proto.ok()) {
    fuzz::CheckErrorSize("ParseJobToml", std::string(proto.status().message()));
    return;
  }
  FleetView fleet;
  fleet.connected_slots = 1 << 20;  // every fleet check but devices and files
  absl::StatusOr<v1::JobSpec> admitted = AdmissionPolicy::Admit(*proto, fleet);
  if (!admitted.ok()) {
    fuzz::CheckErrorSize("Admit", std::string(admitted.status().message()));
    return;
  }
  spec::Result<spec::SpecInput> input = spec::ParseJobText(text, "fuzz.toml");
  if (!input.ok()) fuzz::Violated("the spec core refuses a text that common/job_file parsed: " + input.error().ToString());
  spec::Result<spec::JobSpec> core = spec::ResolveAndValidate(input.value());
  if (!core.ok()) fuzz::Violated("admitted, but the spec core refuses it: " + core.error().ToString());
  spec::Result<engine::EngineConfig> rank = engine::LoadEngineConfigJson(ToJsonLine(*admitted), "config.json");
  if (!rank.ok()) fuzz::Violated("admitted, but a rank refuses its config.json: " + rank.error().ToString());
}

}  // namespace
}  // namespace trainyard

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  trainyard::Run(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
