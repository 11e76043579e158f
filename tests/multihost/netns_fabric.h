// Hosts as Linux network namespaces on one machine, for the multi-host tests.
//
// A NetnsFabric makes a "fabric" namespace holding a bridge (br0) and, per AddHost, a
// host namespace whose eth0 is one end of a veth pair; the other end (named after the
// host) is a port of that bridge. Both ends are created directly inside their
// namespaces, so the root namespace's interfaces and routes are never touched, and every
// address is in 198.18.0.0/15 (the benchmarking range), reachable only between the
// fabric's hosts. Namespaces are named PREFIX-fabric, PREFIX-HOST with PREFIX
// "ty<pid of the test process>"; the destructor SIGKILLs every process left in them
// (daemons, ranks, CLIs) and deletes them, and the constructor first removes those of
// test processes that no longer run (a run that was SIGKILLed itself).
//
// Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and iproute2's `ip` and `tc`.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace trainyard::testing {

class NetnsFabric {
 public:
  NetnsFabric();
  ~NetnsFabric();
  NetnsFabric(const NetnsFabric&) = delete;
  NetnsFabric& operator=(const NetnsFabric&) = delete;

  // Why the multi-host tests cannot run here ("" when they can): not root, or no `ip`.
  static std::string Unsupported();
  // Removes the namespaces of test processes that no longer run; returns how many.
  static int RemoveLeftovers();
  // The `ip` binary (/usr/sbin/ip, /sbin/ip, ...), "" when there is none.
  static std::string IpBinary();

  // False when the fabric namespace or its bridge could not be made; error() says why.
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  const std::string& prefix() const { return prefix_; }

  // A host namespace `host` (1-8 of [a-z0-9]) with lo up and eth0 at `address`/15 on
  // the bridge. False (and error()) on failure.
  bool AddHost(const std::string& host, const std::string& address);
  std::string Namespace(const std::string& host) const { return prefix_ + "-" + host; }
  // `argv` run inside the host's namespace (`ip netns exec NS argv...`, which execs).
  std::vector<std::string> InHost(const std::string& host, const std::vector<std::string>& argv) const;

  // Takes the host's bridge port down (the cable pulled at the switch: the host's eth0
  // loses carrier, packets either way are dropped) or up again.
  bool SetLink(const std::string& host, bool up);
  // A token bucket (tc tbf, `rate`, burst 32kbit, latency 400ms) on both ends of the
  // host's veth, so traffic either way is shaped; rate "" removes it.
  bool SetRate(const std::string& host, const std::string& rate);

  // The pids of the processes in the host's namespace (`ip netns pids`).
  std::vector<pid_t> Pids(const std::string& host) const;
  // Those whose /proc/PID/comm is `comm` (e.g. "trainyard-rank").
  std::vector<pid_t> PidsNamed(const std::string& host, const std::string& comm) const;

 private:
  bool Ip(const std::vector<std::string>& args, const std::string& what);
  static void Remove(const std::string& ns);

  std::string prefix_;
  std::string error_;
  std::vector<std::string> namespaces_;  // made here, fabric first
};

}  // namespace trainyard::testing
