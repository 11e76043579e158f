#include "worker/engine/config/engine_config.h"

#include <stdexcept>

#include "common/spec/job_file_reader.h"
#include "common/spec/json_io.h"
#include "common/spec/presets.h"
#include "common/spec/rules.h"

namespace trainyard::engine {
namespace {

[[noreturn]] void Throw(const spec::SpecError& error) {
  throw std::invalid_argument("config: " + error.ToString());
}

EngineConfig ValueOrThrow(spec::Result<EngineConfig> result) {
  if (!result.ok()) throw std::invalid_argument(result.error().ToString());
  return std::move(result).value();
}

}  // namespace

spec::Result<EngineConfig> LoadEngineConfigJson(std::string_view json_text, std::string_view source_name) {
  spec::Result<spec::SpecInput> input = spec::ParseJson(json_text, source_name);
  if (!input.ok()) return input.error();
  return spec::ResolveAndValidate(input.value());
}

EngineConfig ParseEngineConfig(const std::string& json_text) {
  spec::Result<EngineConfig> config = LoadEngineConfigJson(json_text, "");
  if (!config.ok()) Throw(config.error());
  return std::move(config).value();
}

EngineConfig LoadEngineConfigFile(const std::string& path) {
  spec::Result<spec::SpecInput> input = spec::LoadJobFile(path);
  if (!input.ok()) Throw(input.error());
  spec::Result<EngineConfig> config = spec::ResolveAndValidate(input.value());
  if (!config.ok()) {
    spec::SpecError e = config.error();
    if (e.origin.empty()) e.origin = path;
    Throw(e);
  }
  return std::move(config).value();
}

EngineConfig TinyEngineConfig() {
  spec::Result<EngineConfig> config =
      spec::FromPreset("tiny", {"training.steps=10", "training.lr=3e-3", "training.warmup_steps=2"});
  if (!config.ok()) Throw(config.error());  // the preset and these values are valid
  return std::move(config).value();
}

EngineConfig LoadLocalJob(const std::string& path, const std::vector<std::string>& overrides) {
  spec::Result<spec::SpecInput> input = spec::LoadJobFile(path, overrides);
  if (!input.ok()) throw std::invalid_argument(input.error().ToString());
  return ValueOrThrow(spec::ResolveAndValidate(input.value()));
}

EngineConfig PresetJob(const std::string& preset, const std::vector<std::string>& overrides) {
  return ValueOrThrow(spec::FromPreset(preset, overrides));
}

void RequireValid(const EngineConfig& spec) {
  if (std::optional<spec::SpecError> e = spec::Validate(spec)) throw std::invalid_argument(e->ToString());
}

}  // namespace trainyard::engine
