// Who is calling WorkerService, when the controller serves TLS: the worker's name comes
// from its verified client certificate (subject CN, with OU=trainyard-worker in the
// subject), never from what the messages say. A CLI's certificate (OU=trainyard-client)
// or no certificate at all is not a worker. The gRPC part only copies the AuthContext's
// properties into PeerCertificate; the decisions are plain functions, tested with values.
#pragma once

#include <grpcpp/security/auth_context.h>

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainyard {

// The organisational unit deploy/make-certs.sh gives worker certificates.
inline constexpr std::string_view kWorkerCertificateOu = "trainyard-worker";

// What the TLS handshake established about the caller's certificate.
struct PeerCertificate {
  bool present = false;     // the caller presented a certificate the CA verified
  std::string common_name;  // "x509_common_name"
  // "x509_subject": RFC 2253, most specific first, e.g.
  // "CN=w1,OU=trainyard-worker,O=trainyard" (separators inside a value are escaped).
  std::string subject;
};

// Copies the properties gRPC's TLS handshake put into `context`.
PeerCertificate PeerCertificateOf(const grpc::AuthContext& context);

// The "TYPE=value" parts of an RFC 2253 name, split at unescaped ',' and '+' (values
// keep their escapes, so "CN=a\,OU=x" is one part).
std::vector<std::string> SubjectParts(std::string_view subject);

// The worker name `peer` proves: UNAUTHENTICATED without a certificate, PERMISSION_DENIED
// when its subject has no OU=trainyard-worker or its CN is not a valid worker name.
absl::StatusOr<std::string> WorkerNameFromCertificate(const PeerCertificate& peer);

// PERMISSION_DENIED quoting both names when `claimed` (the message's `field`) differs
// from the certificate's name.
absl::Status CheckClaimedWorkerName(std::string_view field, std::string_view claimed,
                                    std::string_view certified);

}  // namespace trainyard
