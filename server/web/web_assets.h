// The web UI's static files, embedded into the binary at build time (embed_assets.cmake
// turns server/web/static/* into the generated web_assets.cc), so an installed
// controller serves them without any file on disk.
#pragma once

#include <cstddef>
#include <string_view>

namespace trainyard::web {

struct WebAsset {
  std::string_view name;          // file name under static/, e.g. "app.js"
  std::string_view content_type;  // from the extension
  std::string_view data;
};

// The embedded file `name` (no leading slash), or null.
const WebAsset* FindWebAsset(std::string_view name);

}  // namespace trainyard::web
