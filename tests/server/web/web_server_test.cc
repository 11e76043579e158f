// The web UI's listener (server/web/web_server.h): which Host headers name an address,
// --web-listen's addresses and the secure-by-default rule, and real HTTP through
// civetweb (a %2F stays inside an id, 405 with HEAD on a kept-alive connection, a
// 600 kB artifact streamed whole).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "server/controller_server.h"
#include "server/web/web_server.h"
#include "tests/server/web/web_api_fixture.h"

namespace trainyard::testing {
namespace {

TEST(WebListenerTest, HostHeadersThatNameAnAddress) {
  for (const char* yes : {"127.0.0.1", "127.0.0.1:1", "localhost", "LOCALHOST:8080", "[::1]", "[::1]:65535",
                          "[fe80::1]:80", "192.168.0.10:8080"}) {
    EXPECT_TRUE(web::HostIsAddress(yes)) << yes;
  }
  for (const char* no : {"example.com", "example.com:80", "127.0.0.1.example.com", "127.1", "256.0.0.1",
                         "127.0.0.1:", "127.0.0.1:123456", "127.0.0.1:8a", "[::1", "[::1]:", "[::1]80", "[]",
                         "[example.com]", "::1", "localhost.", "sub.localhost", ""}) {
    EXPECT_FALSE(web::HostIsAddress(no)) << no;
  }
}

TEST(WebListenerTest, AddressesAndTheSecureByDefaultRule) {
  EXPECT_EQ(web::CivetwebListeningPorts("127.0.0.1:8080").value(), "127.0.0.1:8080");
  EXPECT_EQ(web::CivetwebListeningPorts("localhost:0").value(), "127.0.0.1:0");
  EXPECT_EQ(web::CivetwebListeningPorts("[::1]:9000").value(), "[::1]:9000");
  EXPECT_EQ(web::CivetwebListeningPorts("0.0.0.0:80").value(), "0.0.0.0:80");
  for (const char* bad : {"127.0.0.1", "127.0.0.1:8080,8081", "127.0.0.1:80s", "127.0.0.1:65536", "web.example:80",
                          "256.0.0.1:80", "[zz]:80", ":80", "127.0.0.1:"}) {
    auto r = web::CivetwebListeningPorts(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("--web-listen"), std::string::npos) << bad;
  }

  ControllerOptions options;
  options.web_listen = "0.0.0.0:8080";
  absl::Status s = CheckListenerSecurity(options, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("--web-listen '0.0.0.0:8080' is not a loopback address"), std::string::npos) << s;
  options.insecure = true;
  std::vector<std::string> warnings;
  EXPECT_TRUE(CheckListenerSecurity(options, &warnings).ok());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("--web-listen 0.0.0.0:8080 serves the web UI beyond this machine"), std::string::npos)
      << warnings[0];
  options.insecure = false;
  options.web_listen = "127.0.0.1:0";
  EXPECT_TRUE(CheckListenerSecurity(options, nullptr).ok());
}

// One HTTP/1.1 exchange on loopback; the whole response (headers and body).
std::string HttpGet(int port, const std::string& raw_request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return "";
  }
  size_t sent = 0;
  while (sent < raw_request.size()) {
    const ssize_t n = ::send(fd, raw_request.data() + sent, raw_request.size() - sent, 0);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  std::string out;
  char buffer[65536];
  ssize_t n;
  while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) out.append(buffer, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

TEST_F(WebApiTest, ServedOverHttpByCivetweb) {
  std::string content(600000, 'z');
  content[0] = 'A';
  content.back() = 'Z';
  StoreArtifact(alice_job_, "big.trace", content);
  auto server = web::WebServer::Start("127.0.0.1:0", api_.get(), 2);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  ASSERT_GT(port, 0);

  std::string r = HttpGet(port, "GET /api/me HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 401", 0), 0u) << r.substr(0, 200);
  r = HttpGet(port, std::string("GET /api/me HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ") + kViewer +
                        "\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r.substr(0, 200);
  EXPECT_NE(r.find("\"owner\":\"dashboard\""), std::string::npos) << r;
  // The raw path reaches the api: %2F is not a separator.
  r = HttpGet(port, "GET /api/jobs/" + alice_job_ + "%2Fevents HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                        kAdmin + "\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 404", 0), 0u) << r.substr(0, 200);
  EXPECT_NE(r.find("job " + alice_job_ + "/events not found"), std::string::npos) << r;
  r = HttpGet(port, "POST /api/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 405", 0), 0u) << r.substr(0, 200);
  // HEAD: the headers alone. A body would be read as the next response on a kept-alive
  // connection, so two requests on one connection must give two whole responses.
  r = HttpGet(port, "HEAD /api/jobs HTTP/1.1\r\nHost: x\r\n\r\nGET /style.css HTTP/1.1\r\nHost: x\r\n"
                    "Connection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 405", 0), 0u) << r.substr(0, 200);
  const size_t head_end = r.find("\r\n\r\n");
  ASSERT_NE(head_end, std::string::npos) << r.substr(0, 300);
  EXPECT_EQ(r.compare(head_end + 4, 17, "HTTP/1.1 200 OK\r\n"), 0) << r.substr(0, 600);
  EXPECT_NE(r.find("text/css"), std::string::npos) << r.substr(0, 600);
  // The artifact streamed whole, after its headers.
  r = HttpGet(port, "GET /api/jobs/" + alice_job_ + "/artifacts/big.trace HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                        kAlice + "\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r.substr(0, 200);
  const size_t body = r.find("\r\n\r\n");
  ASSERT_NE(body, std::string::npos);
  EXPECT_NE(r.substr(0, body).find("Content-Length: 600000"), std::string::npos) << r.substr(0, body);
  // Compared as a bool: a mismatch must not print 600 kB.
  EXPECT_EQ(r.size() - body - 4, content.size());
  EXPECT_TRUE(r.compare(body + 4, std::string::npos, content) == 0);
  (*server)->Stop();
}

}  // namespace
}  // namespace trainyard::testing
