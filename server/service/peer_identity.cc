#include "server/service/peer_identity.h"

#include "common/base/text.h"

#include <grpc/grpc_security_constants.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/spec/spec_error.h"
#include "common/worker_identity.h"

namespace trainyard {
namespace {

std::string FirstProperty(const grpc::AuthContext& context, const char* name) {
  std::vector<grpc::string_ref> values = context.FindPropertyValues(name);
  return values.empty() ? std::string() : std::string(values.front().data(), values.front().size());
}

}  // namespace

PeerCertificate PeerCertificateOf(const grpc::AuthContext& context) {
  PeerCertificate peer;
  peer.common_name = FirstProperty(context, GRPC_X509_CN_PROPERTY_NAME);
  peer.subject = FirstProperty(context, GRPC_X509_SUBJECT_PROPERTY_NAME);
  // A certificate is in the context only when the handshake verified it against the CA
  // (GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY fails the handshake otherwise).
  peer.present = context.IsPeerAuthenticated() ||
                 !FirstProperty(context, GRPC_X509_PEM_CERT_PROPERTY_NAME).empty();
  return peer;
}

std::vector<std::string> SubjectParts(std::string_view subject) {
  std::vector<std::string> parts;
  std::string current;
  for (std::size_t i = 0; i < subject.size(); ++i) {
    const char c = subject[i];
    if (c == '\\' && i + 1 < subject.size()) {
      current.push_back(c);
      current.push_back(subject[++i]);
    } else if (c == ',' || c == '+') {
      parts.push_back(std::move(current));
      current.clear();
    } else {
      current.push_back(c);
    }
  }
  parts.push_back(std::move(current));
  return parts;
}

absl::StatusOr<std::string> WorkerNameFromCertificate(const PeerCertificate& peer) {
  if (!peer.present) {
    return absl::UnauthenticatedError(
        "WorkerService needs a worker certificate: the caller presented no client certificate "
        "(start trainyard-worker with --tls-cert, --tls-key and --tls-ca)");
  }
  const std::vector<std::string> parts = SubjectParts(peer.subject);
  const std::string wanted = absl::StrCat("OU=", std::string(kWorkerCertificateOu));
  if (std::find(parts.begin(), parts.end(), wanted) == parts.end()) {
    return absl::PermissionDeniedError(absl::StrCat("the client certificate ", Quoted(peer.subject),
                                                    " is not a worker certificate (its subject has no ",
                                                    wanted, ")"));
  }
  if (std::string problem = WorkerNameProblem(peer.common_name); !problem.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the worker certificate's CN, the worker's name, ", problem, " (subject ", Quoted(peer.subject), ")"));
  }
  return peer.common_name;
}

absl::Status CheckClaimedWorkerName(std::string_view field, std::string_view claimed,
                                    std::string_view certified) {
  if (claimed == certified) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(std::string(field), " ", Quoted(claimed),
                                                  " differs from the name in the worker's certificate ",
                                                  Quoted(certified)));
}

}  // namespace trainyard
