#include "worker/engine/launch/job_config.h"

#include <stdexcept>

#include "common/spec/job_file_reader.h"
#include "common/spec/presets.h"
#include "common/spec/rules.h"

namespace trainyard::engine {
namespace {

spec::JobSpec ValueOrThrow(spec::Result<spec::JobSpec> result) {
  if (!result.ok()) throw std::invalid_argument(result.error().ToString());
  return std::move(result).value();
}

}  // namespace

spec::JobSpec LoadLocalJob(const std::string& path, const std::vector<std::string>& overrides) {
  spec::Result<spec::SpecInput> input = spec::LoadJobFile(path, overrides);
  if (!input.ok()) throw std::invalid_argument(input.error().ToString());
  return ValueOrThrow(spec::ResolveAndValidate(input.value()));
}

spec::JobSpec PresetJob(const std::string& preset, const std::vector<std::string>& overrides) {
  return ValueOrThrow(spec::FromPreset(preset, overrides));
}

void RequireValid(const spec::JobSpec& spec) {
  if (std::optional<spec::SpecError> e = spec::Validate(spec)) throw std::invalid_argument(e->ToString());
}

}  // namespace trainyard::engine
