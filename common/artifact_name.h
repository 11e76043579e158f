// The artifact name and kind rules shared by the worker (checking what a rank
// announces) and the CLI (checking what a controller sends before writing DIR/NAME):
// a name is [A-Za-z0-9][A-Za-z0-9._-]{0,127}, so it is one safe path component (never
// "." or ".." or hidden), and never ends in ".part" (the controller's partial uploads
// are NAME.part beside NAME); a kind is "trace" or "flight_recorder". The controller
// applies the same rule (server/state/artifact_store.cc, with a reason per refusal).
//
// Thread contract: pure functions; thread-safe.
#pragma once

#include <string_view>

namespace trainyard {

inline bool IsArtifactName(std::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alnum = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (!alnum && (i == 0 || (c != '.' && c != '_' && c != '-'))) return false;
  }
  constexpr std::string_view kPart = ".part";
  return !(name.size() >= kPart.size() && name.substr(name.size() - kPart.size()) == kPart);
}

inline bool IsArtifactKind(std::string_view kind) {
  return kind == "trace" || kind == "flight_recorder";
}

}  // namespace trainyard
