// ProbeListen: a port another socket listens on is "address already in use" naming the
// flag, the address and the port, even when that socket allows SO_REUSEPORT (as gRPC's
// do by default); an address not on this host, a malformed value and an unknown name
// are refused with the reason; a free port, port 0 and a non-TCP target pass. (No test
// resolves an unknown name: without a reachable DNS server that takes seconds.)
#include "common/base/listen_probe.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace trainyard {
namespace {

using ::testing::HasSubstr;

// A socket listening on 127.0.0.1:<some port>, with SO_REUSEPORT when asked.
class Listener {
 public:
  explicit Listener(bool reuseport) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (reuseport) ::setsockopt(fd_, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 4), 0);
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port_ = ntohs(a.sin_port);
  }
  ~Listener() { ::close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(ListenProbeTest, APortSomeoneListensOnIsInUseNamingFlagAddressAndPort) {
  for (bool reuseport : {false, true}) {
    Listener busy(reuseport);
    const std::string address = "127.0.0.1:" + std::to_string(busy.port());
    const absl::Status s = ProbeListen("--listen", address);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << "reuseport=" << reuseport;
    EXPECT_EQ(s.message(), "--listen '" + address + "': cannot listen: address already in use: another process "
                               "listens on port " + std::to_string(busy.port()) + " (`ss -ltnp 'sport = :" +
                               std::to_string(busy.port()) + "'` names it)");
    // The wildcard address overlaps it too.
    const absl::Status any = ProbeListen("--web-listen", "0.0.0.0:" + std::to_string(busy.port()));
    EXPECT_THAT(any.message(), HasSubstr("address already in use")) << any;
  }
}

TEST(ListenProbeTest, AFreePortPortZeroAndNonTcpTargetsPass) {
  int port = 0;
  {
    Listener gone(false);
    port = gone.port();
  }
  EXPECT_TRUE(ProbeListen("--listen", "127.0.0.1:" + std::to_string(port)).ok());
  EXPECT_TRUE(ProbeListen("--listen", "127.0.0.1:0").ok());
  EXPECT_TRUE(ProbeListen("--listen", "localhost:0").ok());
  EXPECT_TRUE(ProbeListen("--listen", "unix:/tmp/some.sock").ok());
}

TEST(ListenProbeTest, AnAddressNotOnThisHostIsRefusedAsSuch) {
  // 192.0.2.0/24 is TEST-NET-1; .213 is assigned to no interface here.
  const absl::Status s = ProbeListen("--metrics-listen", "192.0.2.213:9464");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message(), "--metrics-listen '192.0.2.213:9464': cannot listen: cannot assign requested address: "
                         "'192.0.2.213' is not an address of this host");
}

TEST(ListenProbeTest, MalformedValuesAreRefused) {
  for (const char* bad : {"7070", "127.0.0.1:", "127.0.0.1:70700", "127.0.0.1:-1", "127.0.0.1:7o70"}) {
    const absl::Status s = ProbeListen("--health-listen", bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr("expected HOST:PORT with a port in 0-65535")) << bad;
  }
}

TEST(ListenProbeTest, ListenPortReadsThePort) {
  EXPECT_EQ(ListenPort("127.0.0.1:7070"), 7070);
  EXPECT_EQ(ListenPort("[::1]:0"), 0);
  EXPECT_EQ(ListenPort("7070"), -1);
  EXPECT_EQ(ListenPort("h:+70"), -1);
}

}  // namespace
}  // namespace trainyard
