#include "common/job_file.h"

#include "common/spec_proto.h"

namespace trainyard {
namespace {

absl::StatusOr<v1::JobSpec> ToProto(const spec::Result<spec::SpecInput>& input) {
  if (!input.ok()) return SpecErrorToStatus(input.error());
  return ProtoFromInput(input.value());
}

}  // namespace

absl::StatusOr<v1::JobSpec> LoadJobFile(const std::string& path,
                                        const std::vector<std::string>& overrides) {
  return ToProto(spec::LoadJobFile(path, overrides));
}

absl::StatusOr<v1::JobSpec> ParseJobToml(std::string_view text, std::string_view source_name,
                                         const std::vector<std::string>& overrides) {
  return ToProto(spec::ParseJobText(text, source_name, overrides));
}

}  // namespace trainyard
