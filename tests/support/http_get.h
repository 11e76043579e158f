#pragma once

// A plain HTTP/1.0 client for tests that scrape the controller's /metrics or query a
// real Prometheus on loopback.

#include <string>

namespace trainyard::testing {

// The body of GET `target` from 127.0.0.1:`port`, "" when the connection or the
// response failed.
std::string HttpGet(int port, const std::string& target);

// `s` percent-encoded for a URL's query (unreserved characters kept).
std::string UrlEncode(const std::string& s);

}  // namespace trainyard::testing
