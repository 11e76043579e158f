// Fuzz target: a checkpoint's manifest.json as a resuming rank reads it
// (worker/engine/checkpoint/checkpoint_layout: ParseManifest, the part of
// ReadVerifiedManifest that trusts nothing). Every refusal is a std::runtime_error
// ("checkpoint manifest.json: ..."); anything else escaping (a JSON library exception, a
// crash) is a finding. Invariants: an accepted manifest names exactly one plain rank
// file per rank, and writes back (ManifestToJson) to a manifest that parses equal.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "tests/fuzz/fuzz_check.h"
#include "worker/engine/checkpoint/checkpoint_layout.h"

namespace trainyard::engine {
namespace {

bool Same(const CheckpointManifest& a, const CheckpointManifest& b) {
  if (a.files.size() != b.files.size()) return false;
  for (std::size_t i = 0; i < a.files.size(); ++i) {
    if (a.files[i].name != b.files[i].name || a.files[i].rank != b.files[i].rank ||
        a.files[i].bytes != b.files[i].bytes) {
      return false;
    }
  }
  return a.step == b.step && a.attempt == b.attempt && a.dp == b.dp && a.tp == b.tp && a.ep == b.ep &&
         a.optimizer_step == b.optimizer_step && a.global_batch == b.global_batch &&
         a.samples_consumed == b.samples_consumed && a.dataset == b.dataset && a.seed == b.seed &&
         a.total_bytes == b.total_bytes;
}

void Run(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  CheckpointManifest m;
  try {
    m = ParseManifest(text, "manifest.json");
  } catch (const std::runtime_error& e) {
    if (std::strncmp(e.what(), "checkpoint manifest.json", 24) != 0) {
      fuzz::Violated(std::string("unexpected error: ") + e.what());
    }
    fuzz::CheckErrorSize("ParseManifest", e.what());
    return;
  }
  if (m.files.size() != static_cast<std::size_t>(m.world())) fuzz::Violated("accepted: files != dp*tp");
  for (std::size_t i = 0; i < m.files.size(); ++i) {
    if (m.files[i].name != RankFileName(static_cast<int>(i))) fuzz::Violated("accepted file name " + m.files[i].name);
  }
  CheckpointManifest again;
  try {
    again = ParseManifest(ManifestToJson(m), "manifest.json");
  } catch (const std::runtime_error& e) {
    fuzz::Violated(std::string("an accepted manifest, written back, is refused: ") + e.what());
  }
  if (!Same(m, again)) fuzz::Violated("an accepted manifest, written back, parses different");
}

}  // namespace
}  // namespace trainyard::engine

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  trainyard::engine::Run(data, size);
  return 0;
}
