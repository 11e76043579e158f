#include "common/base/listen_probe.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/text.h"

namespace trainyard {
namespace {

std::string Lowered(const char* text) {
  std::string s = text;
  if (!s.empty()) s[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
  return s;
}

std::string Printed(const sockaddr* addr) {
  char host[INET6_ADDRSTRLEN] = {};
  int port = 0;
  if (addr->sa_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(addr);
    ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
    return absl::StrCat("[", host, "]:", port);
  }
  const auto* a = reinterpret_cast<const sockaddr_in*>(addr);
  ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
  port = ntohs(a->sin_port);
  return absl::StrCat(host, ":", port);
}

struct Failure {
  int err = 0;
  std::string address;
};

// errno of a bind of `ai`'s address, 0 when it succeeds.
int TryBind(const addrinfo* ai) {
  const int fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const int err = ::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : errno;
  ::close(fd);
  return err;
}

// Errors that say this address cannot exist here (as opposed to "it is taken").
bool NotHere(int err) { return err == EADDRNOTAVAIL || err == EAFNOSUPPORT || err == EPROTONOSUPPORT; }

}  // namespace

int ListenPort(const std::string& host_port) {
  const std::size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) return -1;
  const std::string text = host_port.substr(colon + 1);
  int port = -1;
  if (text.empty() || text.size() > 5 || !absl::SimpleAtoi(text, &port) || port < 0 || port > 65535) return -1;
  for (char c : text) {
    if (c < '0' || c > '9') return -1;
  }
  return port;
}

absl::Status ProbeListen(const std::string& flag, const std::string& host_port) {
  if (absl::StartsWith(host_port, "unix:") || absl::StartsWith(host_port, "unix-abstract:") ||
      absl::StrContains(host_port, "://")) {
    return absl::OkStatus();
  }
  const std::string named = absl::StrCat(flag, " ", Quoted(host_port));
  const std::size_t colon = host_port.rfind(':');
  const int port = ListenPort(host_port);
  if (colon == std::string::npos || port < 0) {
    return absl::InvalidArgumentError(absl::StrCat(named, ": expected HOST:PORT with a port in 0-65535"));
  }
  std::string host = host_port.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(named, ": cannot resolve ", Quoted(host), ": ", Lowered(::gai_strerror(rc))));
  }
  std::vector<Failure> failures;
  int bound = 0;
  for (const addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    const int err = TryBind(ai);
    if (err == 0) {
      ++bound;
    } else {
      failures.push_back({err, Printed(ai->ai_addr)});
    }
  }
  ::freeaddrinfo(found);
  // In use or forbidden anywhere fails; "not an address here" fails only when no
  // address could be bound at all.
  const Failure* worst = nullptr;
  for (const Failure& f : failures) {
    if (!NotHere(f.err)) {
      worst = &f;
      break;
    }
  }
  if (worst == nullptr && bound == 0 && !failures.empty()) worst = &failures.front();
  if (worst == nullptr) return absl::OkStatus();
  const std::string where =
      worst->address == host_port ? std::string() : absl::StrCat(" (", worst->address, ")");
  const std::string prefix = absl::StrCat(named, ": cannot listen", where, ": ", Lowered(std::strerror(worst->err)));
  switch (worst->err) {
    case EADDRINUSE:
      return absl::UnavailableError(absl::StrCat(prefix, ": another process listens on port ", port,
                                                 " (`ss -ltnp 'sport = :", port, "'` names it)"));
    case EACCES:
      return absl::PermissionDeniedError(absl::StrCat(
          prefix, port < 1024 ? ": ports below 1024 need root or CAP_NET_BIND_SERVICE" : ""));
    default:
      if (NotHere(worst->err)) {
        return absl::InvalidArgumentError(
            absl::StrCat(prefix, ": ", Quoted(host), " is not an address of this host"));
      }
      return absl::UnavailableError(prefix);
  }
}

}  // namespace trainyard
