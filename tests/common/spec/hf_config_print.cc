// Test-only: `hf_config_print PRESET` prints the config.json the engine writes for a
// preset; `hf_config_print --read PATH` prints the model keys ReadHuggingFaceConfig
// finds in a config.json as one JSON object. hf_config_test.py checks both against
// transformers.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/spec/hf_config.h"
#include "common/spec/presets.h"

namespace {

int HfPrintFail(const trainyard::spec::SpecError& e) {
  std::cerr << e.ToString() << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace trainyard::spec;
  if (argc == 3 && std::string(argv[1]) == "--read") {
    Result<std::vector<HuggingFaceKey>> keys = ReadHuggingFaceConfig(argv[2]);
    if (!keys.ok()) return HfPrintFail(keys.error());
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    for (const HuggingFaceKey& k : keys.value()) {
      std::visit([&](const auto& v) { out[k.key] = v; }, k.value);
    }
    std::cout << out.dump() << "\n";
    return 0;
  }
  if (argc != 2) {
    std::cerr << "usage: hf_config_print PRESET | --read CONFIG_JSON\n";
    return 2;
  }
  Result<JobSpec> spec = FromPreset(argv[1]);
  if (!spec.ok()) return HfPrintFail(spec.error());
  Result<std::string> text = HuggingFaceConfigJson(spec.value());
  if (!text.ok()) return HfPrintFail(text.error());
  std::cout << text.value();
  return 0;
}
