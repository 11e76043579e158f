// TLS material from PEM files, shared by the controller, the worker and the CLI: the
// --tls-cert/--tls-key/--tls-ca rule (all three or none), reading each file with a size
// cap, and checking it with OpenSSL before gRPC sees it. gRPC reports a bad PEM only as a
// failed handshake or a listener that does not start, long after the flag that caused
// it; here each problem names its flag and file. Also the gRPC credentials built from
// the material, and the certificate's CN (a worker's default name).
#pragma once

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainyard {

// A PEM file larger than this is refused (a certificate chain is a few KiB).
inline constexpr std::size_t kMaxPemFileBytes = 1 << 20;

// The paths of --tls-cert, --tls-key and --tls-ca ("" when not given).
struct TlsFilePaths {
  std::string cert;
  std::string key;
  std::string ca;
  bool any() const { return !cert.empty() || !key.empty() || !ca.empty(); }
};

// OK when all three or none are given; else INVALID_ARGUMENT naming the missing flags.
absl::Status CheckTlsFlags(const TlsFilePaths& paths);

// True for "127.x.x.x:P" (an IPv4 literal), "localhost:P" and "[::1]:P": the addresses
// where plaintext (and a bearer token in it) never leaves the machine.
bool IsLoopbackAddress(const std::string& host_port);

// The checked PEM text of the three files.
struct TlsMaterial {
  std::string cert_pem;  // this process's certificate (chain), leaf first
  std::string key_pem;   // its private key
  std::string ca_pem;    // the CA(s) the peer's certificate must chain to
};

// Reads `path` (at most kMaxPemFileBytes, not empty); errors name `flag` and the path.
absl::StatusOr<std::string> ReadPemFile(const std::string& flag, const std::string& path);

// Checks that `pem` holds at least one X.509 certificate; errors name `flag` and `path`.
absl::Status CheckCertificatePem(const std::string& pem, const std::string& flag,
                                 const std::string& path);

// Reads the three files (CheckTlsFlags first) and checks that the certificate and the CA
// parse, that the key is a private key, and that it is the certificate's key.
absl::StatusOr<TlsMaterial> LoadTlsMaterial(const TlsFilePaths& paths);

// Reads and checks a CA file alone (the CLI's --tls-ca).
absl::StatusOr<std::string> LoadCaPem(const std::string& path);

// The subject CN of the first certificate in `pem`; NOT_FOUND when it has none.
absl::StatusOr<std::string> CertificateCommonName(const std::string& pem);

// The controller's listener: serves `material`'s certificate and asks every client for
// one, verifying a presented certificate against the CA; a client without one (a CLI
// with a bearer token) is let through, so services must check the peer themselves.
std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(const TlsMaterial& material);
// A channel that verifies the server against the CA and presents `material`'s
// certificate (mutual TLS, the worker's).
std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(const TlsMaterial& material);
// A channel that verifies the server against `ca_pem` and presents no certificate.
std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(const std::string& ca_pem);

}  // namespace trainyard
