#include "tests/multihost/netns_fabric.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <regex>
#include <sstream>
#include <thread>

#include "tests/support/files.h"
#include "tests/support/test_process.h"

namespace trainyard::testing {
namespace {

std::string FindSbin(const std::string& name) {
  for (const char* dir : {"/usr/sbin/", "/sbin/", "/usr/bin/", "/bin/"}) {
    const std::string path = std::string(dir) + name;
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

std::vector<std::string> Words(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string w;
  while (in >> w) out.push_back(w);
  return out;
}

// The names `ip netns list` prints (each line: NAME [(id: N)]).
std::vector<std::string> NamespaceNames() {
  const CommandResult r = RunCommand({NetnsFabric::IpBinary(), "netns", "list"});
  std::vector<std::string> out;
  std::istringstream in(r.out);
  std::string line;
  while (std::getline(in, line)) {
    const std::vector<std::string> words = Words(line);
    if (!words.empty()) out.push_back(words[0]);
  }
  return out;
}

std::vector<pid_t> PidsOf(const std::string& ns) {
  const CommandResult r = RunCommand({NetnsFabric::IpBinary(), "netns", "pids", ns});
  std::vector<pid_t> out;
  for (const std::string& w : Words(r.out)) out.push_back(static_cast<pid_t>(std::stol(w)));
  return out;
}

bool PidRuns(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

}  // namespace

std::string NetnsFabric::IpBinary() { return FindSbin("ip"); }

std::string NetnsFabric::Unsupported() {
  if (geteuid() != 0) {
    return "the multi-host tests make network namespaces and need root (euid " +
           std::to_string(geteuid()) + "); CI runs them as root";
  }
  if (IpBinary().empty()) return "no `ip` (apt-get install iproute2; deploy/install-deps.sh does)";
  if (FindSbin("tc").empty()) return "no `tc` (apt-get install iproute2; deploy/install-deps.sh does)";
  return "";
}

void NetnsFabric::Remove(const std::string& ns) {
  // Everything still inside dies first (a namespace with processes outlives its name).
  for (int round = 0; round < 50; ++round) {
    const std::vector<pid_t> pids = PidsOf(ns);
    if (pids.empty()) break;
    for (pid_t pid : pids) kill(pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  RunCommand({IpBinary(), "netns", "del", ns});  // its veth ends (and their peers) go with it
}

int NetnsFabric::RemoveLeftovers() {
  static const std::regex kOurs("^ty([0-9]{1,9})-[a-z0-9]+$");
  int removed = 0;
  for (const std::string& ns : NamespaceNames()) {
    std::smatch m;
    if (!std::regex_match(ns, m, kOurs)) continue;
    const pid_t owner = static_cast<pid_t>(std::stol(m[1].str()));
    if (owner != getpid() && PidRuns(owner)) continue;  // another live run's
    Remove(ns);
    ++removed;
  }
  return removed;
}

NetnsFabric::NetnsFabric() : prefix_("ty" + std::to_string(getpid())) {
  if (std::string why = Unsupported(); !why.empty()) {
    error_ = why;
    return;
  }
  RemoveLeftovers();
  const std::string fabric = Namespace("fabric");
  if (!Ip({"netns", "add", fabric}, "add the fabric namespace")) return;
  namespaces_.push_back(fabric);
  Ip({"-n", fabric, "link", "set", "lo", "up"}, "lo up in the fabric") &&
      Ip({"-n", fabric, "link", "add", "br0", "type", "bridge"}, "add the bridge") &&
      Ip({"-n", fabric, "link", "set", "br0", "up"}, "bridge up");
}

NetnsFabric::~NetnsFabric() {
  // Hosts first (their processes), the fabric last.
  for (auto it = namespaces_.rbegin(); it != namespaces_.rend(); ++it) Remove(*it);
}

bool NetnsFabric::Ip(const std::vector<std::string>& args, const std::string& what) {
  std::vector<std::string> argv = {IpBinary()};
  argv.insert(argv.end(), args.begin(), args.end());
  const CommandResult r = RunCommand(argv);
  if (r.exit_code == 0) return true;
  std::string line;
  for (const std::string& a : argv) line += a + " ";
  if (error_.empty()) error_ = what + ": `" + line + "` exited " + std::to_string(r.exit_code) + ": " + r.err;
  return false;
}

bool NetnsFabric::AddHost(const std::string& host, const std::string& address) {
  static const std::regex kHost("^[a-z0-9]{1,8}$");
  if (!ok()) return false;
  if (!std::regex_match(host, kHost)) {
    error_ = "host name '" + host + "' must be 1-8 of [a-z0-9]";
    return false;
  }
  if (address.rfind("198.18.", 0) != 0 && address.rfind("198.19.", 0) != 0) {
    error_ = "address " + address + " is outside 198.18.0.0/15";
    return false;
  }
  const std::string ns = Namespace(host), fabric = Namespace("fabric");
  if (!Ip({"netns", "add", ns}, "add namespace " + ns)) return false;
  namespaces_.push_back(ns);
  return Ip({"-n", ns, "link", "set", "lo", "up"}, "lo up in " + ns) &&
         // Both ends made inside their namespaces: nothing appears in the root namespace.
         Ip({"link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", host, "netns", fabric},
            "add the veth of " + host) &&
         Ip({"-n", ns, "addr", "add", address + "/15", "dev", "eth0"}, "address of " + host) &&
         Ip({"-n", ns, "link", "set", "eth0", "up"}, "eth0 up in " + ns) &&
         Ip({"-n", fabric, "link", "set", host, "master", "br0"}, "bridge port " + host) &&
         Ip({"-n", fabric, "link", "set", host, "up"}, "bridge port " + host + " up");
}

std::vector<std::string> NetnsFabric::InHost(const std::string& host,
                                             const std::vector<std::string>& argv) const {
  std::vector<std::string> out = {IpBinary(), "netns", "exec", Namespace(host)};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

bool NetnsFabric::SetLink(const std::string& host, bool up) {
  return Ip({"-n", Namespace("fabric"), "link", "set", host, up ? "up" : "down"},
            std::string("link ") + (up ? "up" : "down") + " of " + host);
}

bool NetnsFabric::SetRate(const std::string& host, const std::string& rate) {
  const std::string tc = FindSbin("tc");
  bool all = true;
  for (const auto& [ns, dev] : std::vector<std::pair<std::string, std::string>>{
           {Namespace(host), "eth0"}, {Namespace("fabric"), host}}) {
    std::vector<std::string> argv = {tc, "-n", ns, "qdisc"};
    if (rate.empty()) {
      argv.insert(argv.end(), {"del", "dev", dev, "root"});
    } else {
      argv.insert(argv.end(), {"replace", "dev", dev, "root", "tbf", "rate", rate, "burst", "32kbit",
                               "latency", "400ms"});
    }
    const CommandResult r = RunCommand(argv);
    if (r.exit_code != 0) {
      if (error_.empty()) error_ = "tc on " + ns + "/" + dev + ": " + r.err;
      all = false;
    }
  }
  return all;
}

std::vector<pid_t> NetnsFabric::Pids(const std::string& host) const { return PidsOf(Namespace(host)); }

std::vector<pid_t> NetnsFabric::PidsNamed(const std::string& host, const std::string& comm) const {
  std::vector<pid_t> out;
  for (pid_t pid : Pids(host)) {
    std::string name = ReadFileOrEmpty("/proc/" + std::to_string(pid) + "/comm");
    while (!name.empty() && name.back() == '\n') name.pop_back();
    if (name == comm) out.push_back(pid);
  }
  return out;
}

}  // namespace trainyard::testing
