#pragma once

namespace trainyard::testing {

// The first of `count` (at most 40) consecutive ports this test process may give its
// workers as --rendezvous-ports. They lie below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range): outgoing connections and Gloo's listeners take ports
// from that range, and a rank's TCPStore cannot bind a port one of them holds. The
// block depends on the pid, so test processes running side by side do not share one.
int RendezvousPortBase(int count = 10);

}  // namespace trainyard::testing
