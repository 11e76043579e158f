// Whether a TCP listener could take an address now, and why not, in words. The servers
// Trainyard runs (gRPC, civetweb under prometheus-cpp and the web UI) report a failed
// bind as "cannot bind" or "null context ... Possible problem binding to port" at best;
// a bind of our own on the same address gets the kernel's reason. Every listener flag
// (the controller's --listen, --metrics-listen and --web-listen, the worker's
// --health-listen) is probed before its process touches its data, and again after a
// server failed to bind, to say which address and why.
//
// A probe binds (with SO_REUSEADDR, as those servers do, so connections left in
// TIME_WAIT by a process just killed do not count) and closes at once; it never
// listens. A port taken between the probe and the server's own bind is still caught
// by the server, which never shares a port (no SO_REUSEPORT anywhere). Thread-safe.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace trainyard {

// OK when every address `host_port` resolves to can be bound now (HOST:PORT, [V6]:PORT
// or :PORT; HOST a literal or a name; port 0 checks only that the address is this
// host's). A name that resolves to several addresses passes when one can be bound and
// none is in use or forbidden (a host without IPv6 has no ::1 for "localhost").
// Targets that are not TCP (unix:PATH) are the server's to check: OK. Errors name
// `flag`, the address and the reason: UNAVAILABLE "address already in use" (another
// process listens there), PERMISSION_DENIED (a port below 1024 without
// CAP_NET_BIND_SERVICE), INVALID_ARGUMENT (no such address on this host, an unknown
// name, a malformed value).
absl::Status ProbeListen(const std::string& flag, const std::string& host_port);

// The port of `host_port` (HOST:PORT), or -1 when it has none.
int ListenPort(const std::string& host_port);

}  // namespace trainyard
