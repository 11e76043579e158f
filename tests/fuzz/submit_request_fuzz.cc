// Fuzz target: the bytes of a JobService.SubmitJob request as the controller handles
// them (server/service/job_service.cc): ParseRequest (UTF-8 checked, the field named), then the
// admission JobManager::Validate and Submit run (AdmissionPolicy::Admit on a fleet of
// two idle 4-slot workers, and on an unbounded one). Invariants: errors stay short, and a
// job the controller admits is one a rank accepts when it loads the config.json its
// worker writes (the proto3 JSON of the normalised spec), with the same normalised spec.
#include <cstddef>
#include <cstdint>
#include <string>

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include "common/events/proto_json.h"
#include "common/spec_proto.h"
#include "server/policy/admission_policy.h"
#include "server/service/wire_codec.h"
#include "tests/fuzz/fuzz_check.h"
#include "trainyard/v1/job_service.pb.h"
#include "worker/engine/config/engine_config.h"

namespace trainyard {
namespace {

void CheckAdmitted(const v1::JobSpec& admitted) {
  const std::string json = ToJsonLine(admitted);
  spec::Result<engine::EngineConfig> rank = engine::LoadEngineConfigJson(json, "config.json");
  if (!rank.ok()) fuzz::Violated("admitted, but a rank refuses its config.json: " + rank.error().ToString());
  if (ToJsonLine(ProtoFromSpec(rank.value())) != json) {
    fuzz::Violated("a rank normalises the admitted spec differently: " + json);
  }
}

void Run(const std::uint8_t* data, std::size_t size) {
  grpc::Slice slice(data, size);
  grpc::ByteBuffer bytes(&slice, 1);
  v1::SubmitJobRequest request;
  if (absl::Status s = ParseRequest(bytes, &request); !s.ok()) {
    fuzz::CheckErrorSize("ParseRequest", std::string(s.message()));
    return;
  }
  FleetView small;
  small.connected_slots = 8;
  small.idle_workers = {{"w1", 4}, {"w2", 4}};
  small.largest_memory_worker = "w1";
  small.largest_memory_bytes = int64_t{8} << 30;
  FleetView unbounded;
  unbounded.connected_slots = 1 << 20;
  for (const FleetView* fleet : {&small, &unbounded}) {
    absl::StatusOr<v1::JobSpec> admitted = AdmissionPolicy::Admit(request.spec(), *fleet);
    if (!admitted.ok()) {
      fuzz::CheckErrorSize("Admit", std::string(admitted.status().message()));
      continue;
    }
    CheckAdmitted(*admitted);
    // What the controller stores is admitted again unchanged after a restart.
    absl::StatusOr<v1::JobSpec> again = AdmissionPolicy::Admit(*admitted, *fleet);
    if (!again.ok()) fuzz::Violated("a normalised spec is refused when admitted again: " + again.status().ToString());
    if (ToJsonLine(*again) != ToJsonLine(*admitted)) fuzz::Violated("admission is not idempotent");
  }
}

}  // namespace
}  // namespace trainyard

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  trainyard::Run(data, size);
  return 0;
}
