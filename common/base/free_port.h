// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0 and released),
// for rendezvous stores and test servers. Another process may take it before the
// caller binds it; callers that cannot retry should bind port 0 themselves.
// Thread-safe.
#pragma once

#include "absl/status/statusor.h"

namespace trainyard {

absl::StatusOr<int> FreeLoopbackPort();

}  // namespace trainyard
