#include "common/http/http_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/fakes/fake_http_server.h"
#include "common/base/free_port.h"

namespace trainyard::http {
namespace {

using ::testing::HasSubstr;
using trainyard::testing::FakeHttpRequest;
using trainyard::testing::FakeHttpServer;

TEST(ValidateEndpointUrlTest, TakesHttpAndHttps) {
  EXPECT_TRUE(ValidateEndpointUrl("http://127.0.0.1:5000/api", "--mlflow-uri").ok());
  EXPECT_TRUE(ValidateEndpointUrl("https://hooks.example.com/a?b=c", "url").ok());
  EXPECT_TRUE(ValidateEndpointUrl("http://[::1]:80/x", "url").ok());
}

TEST(ValidateEndpointUrlTest, RefusesWhatCannotBeSentSafely) {
  struct Case {
    std::string url;
    std::string why;
  };
  const std::vector<Case> cases = {
      {"", "empty URL"},
      {std::string(3000, 'a'), "more than the 2048 allowed"},
      {"ftp://host/x", "only http and https"},
      {"file:///etc/passwd", "only http and https"},
      {"gopher://h/", "only http and https"},
      {"http://user:pw@host/x", "user name or password"},
      {"http://host/a b", "space, control or non-ASCII"},
      {"http://h\xc3\xa9st/x", "space, control or non-ASCII"},
      {"http://host/\xff\xfe", "space, control or non-ASCII"},
      {"http://host/\n", "space, control or non-ASCII"},
      {"not a url", "space"},
      {"http://", "does not parse"},
      {"http://host:99999/", "does not parse"},
  };
  for (const Case& c : cases) {
    const absl::Status s = ValidateEndpointUrl(c.url, "webhooks.url");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.url;
    EXPECT_THAT(std::string(s.message()), HasSubstr("webhooks.url: ")) << c.url;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.why)) << c.url << " -> " << s.message();
  }
}

TEST(ValidateEndpointUrlTest, NeverEchoesAPassword) {
  const absl::Status s = ValidateEndpointUrl("https://alice:hunter2@host/x?token=abc", "url");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(std::string(s.message()).find("hunter2"), std::string::npos) << s.message();
  EXPECT_EQ(std::string(s.message()).find("token=abc"), std::string::npos) << s.message();
}

TEST(RedactUrlTest, KeepsWhereNotWhat) {
  EXPECT_EQ(RedactUrl("https://a:b@host:8443/p/q?secret=1#f"), "https://host:8443/p/q");
  EXPECT_EQ(RedactUrl("http://host"), "http://host/");
}

TEST(SendTest, PostsTheBodyAndHeadersAndReturnsTheAnswer) {
  FakeHttpServer server;
  server.Handle("/echo", [](mg_connection* conn, const FakeHttpRequest& r) {
    FakeHttpServer::Reply(conn, 201, absl::StrCat(r.method, "|", r.body, "|", r.headers.at("X-Sig")));
  });
  Request request;
  request.url = server.Url("/echo");
  request.body = std::string("{\"a\":1}\0tail", 12);
  request.headers = {{"X-Sig", "abc"}, {"Content-Type", "application/json"}};
  absl::StatusOr<Response> r = Send(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 201);
  EXPECT_EQ(r->body, absl::StrCat("POST|", request.body, "|abc"));
  EXPECT_EQ(r->content_type, "application/json");
  ASSERT_EQ(server.requests().size(), 1u);
  EXPECT_EQ(server.requests()[0].headers.count("Expect"), 0u);
}

TEST(SendTest, AnErrorStatusIsAResponseNotAnError) {
  FakeHttpServer server;
  server.Handle("/fail", [](mg_connection* conn, const FakeHttpRequest&) { FakeHttpServer::Reply(conn, 500, "boom"); });
  Request request;
  request.method = "GET";
  request.url = server.Url("/fail");
  absl::StatusOr<Response> r = Send(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 500);
  EXPECT_EQ(r->body, "boom");
  EXPECT_EQ(server.requests().at(0).method, "GET");
}

TEST(SendTest, ATenMegabyteAnswerIsCutAtTheLimit) {
  FakeHttpServer server;
  server.Handle("/big", [](mg_connection* conn, const FakeHttpRequest&) {
    FakeHttpServer::Reply(conn, 200, std::string(10 << 20, 'x'));
  });
  Request request;
  request.url = server.Url("/big");
  request.max_response_bytes = 64 << 10;
  absl::StatusOr<Response> r = Send(request);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("more than 65536 bytes"));
}

TEST(SendTest, ARedirectLoopEndsWithAPreciseError) {
  FakeHttpServer server;
  const std::string self = server.Url("/loop");
  server.Handle("/loop", [self](mg_connection* conn, const FakeHttpRequest&) {
    FakeHttpServer::Reply(conn, 302, "", absl::StrCat("Location: ", self, "\r\n"));
  });
  Request request;
  request.url = self;
  request.max_redirects = 3;
  absl::StatusOr<Response> r = Send(request);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("more than 3 redirects"));
  EXPECT_EQ(server.requests().size(), 4u);

  request.max_redirects = 0;  // the default: a 3xx is the answer
  r = Send(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 302);
}

TEST(SendTest, ARedirectToAnotherSchemeIsNotFollowed) {
  FakeHttpServer server;
  server.Handle("/to-file", [](mg_connection* conn, const FakeHttpRequest&) {
    FakeHttpServer::Reply(conn, 302, "", "Location: file:///etc/passwd\r\n");
  });
  Request request;
  request.url = server.Url("/to-file");
  request.max_redirects = 5;
  absl::StatusOr<Response> r = Send(request);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
}

TEST(SendTest, ASlowServerTimesOut) {
  FakeHttpServer server;
  server.Handle("/slow", [](mg_connection* conn, const FakeHttpRequest&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    FakeHttpServer::Reply(conn, 200, "late");
  });
  Request request;
  request.url = server.Url("/slow");
  request.total_timeout = absl::Milliseconds(200);
  absl::StatusOr<Response> r = Send(request);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(server.Url("/slow")));
}

TEST(SendTest, CancelEndsATransferEarly) {
  FakeHttpServer server;
  server.Handle("/slow", [](mg_connection* conn, const FakeHttpRequest&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    FakeHttpServer::Reply(conn, 200, "late");
  });
  std::atomic<bool> cancel{true};
  Request request;
  request.url = server.Url("/slow");
  request.cancel = &cancel;
  absl::StatusOr<Response> r = Send(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled) << r.status();
}

TEST(SendTest, NothingListeningIsUnavailable) {
  Request request;
  absl::StatusOr<int> port = FreeLoopbackPort();
  ASSERT_TRUE(port.ok());
  request.url = absl::StrCat("http://127.0.0.1:", *port, "/x");
  absl::StatusOr<Response> r = Send(request);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
}

TEST(SendTest, TlsToAPlaintextPortIsATlsError) {
  FakeHttpServer server;
  server.Handle("/x", [](mg_connection* conn, const FakeHttpRequest&) { FakeHttpServer::Reply(conn, 200, "ok"); });
  Request request;
  request.url = absl::StrCat("https://127.0.0.1:", server.port(), "/x");
  absl::StatusOr<Response> r = Send(request);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("TLS"));
}

TEST(SendTest, RefusesBadMethodsAndUrlsBeforeConnecting) {
  Request request;
  request.method = "DELETE";
  request.url = "http://127.0.0.1:1/";
  EXPECT_EQ(Send(request).status().code(), absl::StatusCode::kInvalidArgument);
  request.method = "POST";
  request.url = "file:///etc/passwd";
  EXPECT_EQ(Send(request).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace trainyard::http
