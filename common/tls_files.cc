#include "common/tls_files.h"

#include "common/base/file_io.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/spec/spec_error.h"
#include "common/base/status_macros.h"

namespace trainyard {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

std::string Where(const std::string& flag, const std::string& path) {
  return absl::StrCat(flag, " '", Quote(path), "'");
}

// OpenSSL's reason for the last failure (and clears its queue), e.g. "no start line".
std::string OpenSslReason() {
  const unsigned long code = ERR_peek_last_error();
  ERR_clear_error();
  if (code == 0) return "OpenSSL gave no reason";
  const char* reason = ERR_reason_error_string(code);
  return absl::StrCat("OpenSSL: ", reason != nullptr ? reason : absl::StrCat("error ", code));
}

BioPtr MemBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

X509Ptr FirstCertificate(const std::string& pem) {
  BioPtr bio = MemBio(pem);
  return X509Ptr(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
}

}  // namespace

absl::Status CheckTlsFlags(const TlsFilePaths& paths) {
  if (!paths.any()) return absl::OkStatus();
  std::vector<std::string> missing;
  if (paths.cert.empty()) missing.push_back("--tls-cert");
  if (paths.key.empty()) missing.push_back("--tls-key");
  if (paths.ca.empty()) missing.push_back("--tls-ca");
  if (missing.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      absl::StrJoin(missing, " and "), missing.size() == 1 ? " is" : " are",
      " missing: TLS needs --tls-cert, --tls-key and --tls-ca together (or none of them)"));
}

absl::StatusOr<std::string> ReadPemFile(const std::string& flag, const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path, kMaxPemFileBytes);
  if (!text.ok()) {
    if (absl::IsOutOfRange(text.status())) {
      return absl::InvalidArgumentError(absl::StrCat(Where(flag, path), ": larger than the ",
                                                     kMaxPemFileBytes, " bytes a PEM file may have"));
    }
    return absl::Status(absl::IsInternal(text.status()) ? absl::StatusCode::kDataLoss : absl::StatusCode::kNotFound,
                        absl::StrCat(Where(flag, path), ": ", text.status().message()));
  }
  if (text->empty()) return absl::InvalidArgumentError(absl::StrCat(Where(flag, path), ": is empty"));
  return text;
}

absl::Status CheckCertificatePem(const std::string& pem, const std::string& flag,
                                 const std::string& path) {
  if (FirstCertificate(pem) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(Where(flag, path), ": not a PEM certificate (",
                                                   OpenSslReason(), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<TlsMaterial> LoadTlsMaterial(const TlsFilePaths& paths) {
  TY_RETURN_IF_ERROR(CheckTlsFlags(paths));
  if (!paths.any()) return absl::InvalidArgumentError("no TLS files were given");
  TlsMaterial m;
  TY_ASSIGN_OR_RETURN(m.cert_pem, ReadPemFile("--tls-cert", paths.cert));
  TY_ASSIGN_OR_RETURN(m.key_pem, ReadPemFile("--tls-key", paths.key));
  TY_ASSIGN_OR_RETURN(m.ca_pem, ReadPemFile("--tls-ca", paths.ca));
  TY_RETURN_IF_ERROR(CheckCertificatePem(m.ca_pem, "--tls-ca", paths.ca));
  X509Ptr cert = FirstCertificate(m.cert_pem);
  if (cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(Where("--tls-cert", paths.cert),
                                                   ": not a PEM certificate (", OpenSslReason(), ")"));
  }
  BioPtr key_bio = MemBio(m.key_pem);
  PkeyPtr key(key_bio ? PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where("--tls-key", paths.key), ": not an unencrypted PEM private key (", OpenSslReason(), ")"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(Where("--tls-key", paths.key),
                                                   " is not the key of the certificate ",
                                                   Where("--tls-cert", paths.cert)));
  }
  return m;
}

absl::StatusOr<std::string> LoadCaPem(const std::string& path) {
  TY_ASSIGN_OR_RETURN(std::string pem, ReadPemFile("--tls-ca", path));
  TY_RETURN_IF_ERROR(CheckCertificatePem(pem, "--tls-ca", path));
  return pem;
}

absl::StatusOr<std::string> CertificateCommonName(const std::string& pem) {
  X509Ptr cert = FirstCertificate(pem);
  if (cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("not a PEM certificate (", OpenSslReason(), ")"));
  }
  X509_NAME* subject = X509_get_subject_name(cert.get());
  const int len = subject ? X509_NAME_get_text_by_NID(subject, NID_commonName, nullptr, 0) : -1;
  if (len <= 0) return absl::NotFoundError("the certificate's subject has no CN");
  std::string cn(static_cast<std::size_t>(len) + 1, '\0');
  X509_NAME_get_text_by_NID(subject, NID_commonName, cn.data(), len + 1);
  cn.resize(static_cast<std::size_t>(len));
  return cn;
}

std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(const TlsMaterial& material) {
  grpc::SslServerCredentialsOptions options(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = material.ca_pem;
  options.pem_key_cert_pairs.push_back({material.key_pem, material.cert_pem});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(const TlsMaterial& material) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = material.ca_pem;
  options.pem_private_key = material.key_pem;
  options.pem_cert_chain = material.cert_pem;
  return grpc::SslCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(const std::string& ca_pem) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = ca_pem;
  return grpc::SslCredentials(options);
}

bool IsLoopbackAddress(const std::string& host_port) {
  if (absl::StartsWith(host_port, "localhost:") || absl::StartsWith(host_port, "[::1]:")) return true;
  // 127.A.B.C:PORT with decimal octets only: "127.example.com:80" is a DNS name.
  const std::size_t colon = host_port.rfind(':');
  if (colon == std::string::npos || !absl::StartsWith(host_port, "127.")) return false;
  int dots = 0;
  for (std::size_t i = 0; i < colon; ++i) {
    const char c = host_port[i];
    if (c == '.') {
      ++dots;
    } else if (c < '0' || c > '9') {
      return false;
    }
  }
  return dots == 3;
}

}  // namespace trainyard
